"""Redaction: secrets never reach the store or the reflection model; look-alikes survive.

Secret-shaped test values are generated from a seeded random source, so no token-shaped
literal sits in the repository (and a secret scanner has nothing to flag).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import random
import string
import time
import uuid
from typing import Any

import pytest
from llm_server import Reply, ScriptedLLM

from deepcrew_episodic import (
    ConfigurationError,
    Episode,
    EpisodicHook,
    EpisodicMemory,
    InvalidEpisodeError,
    Redactor,
)
from deepcrew_episodic.providers import InMemoryProvider, MemoryProvider

pytestmark = pytest.mark.anyio

RNG = random.Random(20260101)
ALNUM = string.ascii_letters + string.digits
B64URL = ALNUM + "-_"
UPPER_DIGITS = string.ascii_uppercase + string.digits


def rand(alphabet: str, n: int) -> str:
    """Random key material; always holds a digit, a lower- and an upper-case letter when the
    alphabet has them (as real keys of that length do)."""
    while True:
        value = "".join(RNG.choice(alphabet) for _ in range(n))
        classes = [string.digits, string.ascii_lowercase, string.ascii_uppercase]
        if all(any(c in cls for c in value) for cls in classes if any(a in cls for a in alphabet)):
            return value


def jwt() -> str:
    def part(obj: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

    sig = base64.urlsafe_b64encode(RNG.randbytes(32)).rstrip(b"=").decode()
    return (
        f"{part({'alg': 'HS256', 'typ': 'JWT'})}.{part({'sub': '1234', 'exp': 1999999999})}.{sig}"
    )


def pem(kind: str) -> str:
    body = "\n".join(base64.b64encode(RNG.randbytes(48)).decode() for _ in range(4))
    return f"-----BEGIN {kind}-----\n{body}\n-----END {kind}-----"


# (kind, secret): each is embedded in prose below and must come out as [REDACTED:kind].
SECRETS: list[tuple[str, str]] = [
    ("openai-key", "sk-" + rand(ALNUM, 48)),
    ("openai-key", "sk-proj-" + rand(B64URL, 120)),
    ("openai-key", "sk-svcacct-" + rand(B64URL, 80)),
    ("openai-key", "sk-" + "".join(RNG.choice("0123456789abcdef") for _ in range(32))),
    ("anthropic-key", "sk-ant-api03-" + rand(B64URL, 93) + "AA"),
    ("anthropic-key", "sk-ant-admin01-" + rand(B64URL, 60)),
    ("aws-access-key", "AKIA" + rand(UPPER_DIGITS, 16)),
    ("aws-access-key", "ASIA" + rand(UPPER_DIGITS, 16)),
    ("github-token", "ghp_" + rand(ALNUM, 36)),
    ("github-token", "gho_" + rand(ALNUM, 36)),
    ("github-token", "github_pat_" + rand(ALNUM, 22) + "_" + rand(ALNUM, 59)),
    ("slack-token", "xoxb-" + "".join(RNG.choices(string.digits, k=12)) + "-" + rand(ALNUM, 24)),
    ("slack-token", "xoxp-" + "".join(RNG.choices(string.digits, k=11)) + "-" + rand(ALNUM, 32)),
    ("slack-webhook", "https://hooks.slack.com/services/T0" + rand(UPPER_DIGITS, 8) + "/B0"
     + rand(UPPER_DIGITS, 8) + "/" + rand(ALNUM, 24)),
    ("google-api-key", "AIza" + rand(B64URL, 35)),
    ("stripe-key", "sk_live_" + rand(ALNUM, 24)),
    ("huggingface-token", "hf_" + rand(string.ascii_letters, 34)),
    ("jwt", jwt()),
    ("private-key", pem("RSA PRIVATE KEY")),
    ("private-key", pem("OPENSSH PRIVATE KEY")),
    ("private-key", pem("PRIVATE KEY")),
    ("private-key", pem("PGP PRIVATE KEY BLOCK")),
]  # fmt: skip

# (kind, text, the secret part): a secret with context that must be kept.
IN_CONTEXT: list[tuple[str, str, str]] = [
    ("bearer-token", "curl -H 'Authorization: Bearer {s}' https://api.example.com", rand(B64URL, 40)),
    ("url-password", "connect to postgres://app_user:{s}@db.internal:5432/orders", rand(ALNUM, 16)),
    ("url-password", "REDIS_URL=rediss://default:{s}@cache.example.com:6380/0", rand(ALNUM, 24)),
    ("url-password", "mongodb+srv://admin:{s}@cluster0.mongodb.net/app", "p@ss" + rand(ALNUM, 8)),
    ("url-password", "fetch https://deploy:{s}@git.example.com/repo.git", rand(ALNUM, 12)),
    ("aws-secret-key", "aws_secret_access_key = {s}", rand(ALNUM + "/+", 40)),
    ("secret-assignment", "export DB_PASSWORD={s} before starting", rand(ALNUM, 14)),
    ("secret-assignment", 'config: {{"api_key": "{s}", "region": "eu"}}', rand(ALNUM, 20)),
    ("secret-assignment", "login failed with password: {s} for bob", "hunter" + "".join(RNG.choices(string.digits, k=4))),
    ("basic-auth", "Authorization: Basic {s}", base64.b64encode(b"admin:" + RNG.randbytes(9)).decode()),
    ("jwt", "Authorization: Bearer {s}", jwt()),
]  # fmt: skip

# Text that looks like a secret at a glance and must survive byte for byte.
HARMLESS: list[str] = [
    "Ticket 123e4567-e89b-12d3-a456-426614174000 was closed.",
    "Fixed in commit 9fceb02d0ae598e95dc970b74767f19372d61af8 (short: 9fceb02).",
    "sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "The logo is data:image/png;base64,"
    + base64.b64encode(RNG.randbytes(240)).decode()
    + " inline in the page.",
    "Docs at https://docs.example.com/guide?section=auth#tokens",
    "Clone https://github.com/org/repo.git or git@github.com:org/repo.git",
    "Listening on http://localhost:8080/health and http://[::1]:8080/",
    "ssh://git@example.com:22/srv/repo and mailto:alice@example.com",
    "postgres://localhost:5432/orders has no password in it",
    "redis://127.0.0.1:6379/0",
    "https://alice@example.com/profile",
    "We use sk-learn for the classifier (sk-learn-compatible-estimators-v2).",
    "The task-sk-2024-release-notes page and the desk-phone.",
    "Bearer tokens expire after one hour; send 'Authorization: Bearer <token>'.",
    "Bearer authentication-scheme is described in RFC 6750.",
    "The password: must be at least twelve characters.",
    "The secret: patience and good tests.",
    "api_key=os.environ['OPENAI_API_KEY'] and password=${DB_PASSWORD}",
    "Set API_KEY=$OPENAI_API_KEY, private_key=/etc/ssl/private/key.pem",
    "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA\n-----END PUBLIC KEY-----",
    "-----BEGIN CERTIFICATE-----\nMIIDdzCCAl+gAwIBAgIEAgAAuTANBgkqhkiG9w0BAQUFADBa\n-----END CERTIFICATE-----",
    "AKIA is the prefix of an AWS access key id; AKIASHORT is too short.",
    "ghp_ tokens are GitHub's; xoxb- tokens are Slack's; AIza starts Google keys.",
    "Use max_tokens=4096 and temperature=0.2; tokens=128.",
    "Release v1.2.3-beta.4+build.5 and 10.0.0.1/24",
    "A JWT header starts with eyJ because that is base64 for the brace and quote.",
    "Email bob@example.com about order 1182; his phone is +1 555 0100.",
    "The hex colour #a1b2c3 and the id 0x7fffffff.",
    "[REDACTED:openai-key] is what a redacted key looks like.",
]


@pytest.fixture
def redactor() -> Redactor:
    return Redactor()


def test_there_are_at_least_twenty_secret_shapes_and_twenty_look_alikes() -> None:
    assert len(SECRETS) + len(IN_CONTEXT) >= 20
    assert len(HARMLESS) >= 20


@pytest.mark.parametrize(
    ("kind", "secret"), SECRETS, ids=[f"{k}-{i}" for i, (k, _) in enumerate(SECRETS)]
)
def test_secret_is_replaced_by_its_marker_and_the_prose_is_kept(
    redactor: Redactor, kind: str, secret: str
) -> None:
    text = f"Before the call I used {secret} and then it worked."
    cleaned = redactor.redact(text)
    assert cleaned == f"Before the call I used [REDACTED:{kind}] and then it worked."


@pytest.mark.parametrize(
    ("kind", "template", "secret"),
    IN_CONTEXT,
    ids=[f"{k}-{i}" for i, (k, _, _) in enumerate(IN_CONTEXT)],
)
def test_secret_in_context_keeps_its_context(
    redactor: Redactor, kind: str, template: str, secret: str
) -> None:
    cleaned = redactor.redact(template.format(s=secret))
    assert secret not in cleaned
    assert cleaned == template.format(s=f"[REDACTED:{kind}]")


@pytest.mark.parametrize("text", HARMLESS, ids=range(len(HARMLESS)))
def test_look_alike_survives_unchanged(redactor: Redactor, text: str) -> None:
    assert redactor.redact(text) == text


def test_truncated_private_key_is_redacted_to_the_end() -> None:
    block = pem("EC PRIVATE KEY")
    cut = block[: len(block) // 2]
    assert Redactor().redact("key follows: " + cut) == "key follows: [REDACTED:private-key]"


def test_several_secrets_in_one_text_and_redaction_is_idempotent(redactor: Redactor) -> None:
    text = " ".join(f"({s})" for _, s in SECRETS)
    once = redactor.redact(text)
    for _, secret in SECRETS:
        assert secret not in once
    assert redactor.redact(once) == once
    assert once.count("[REDACTED:") == len(SECRETS)


def test_pathological_input_is_linear_enough(redactor: Redactor) -> None:
    # Long runs that could make a careless pattern backtrack: each must stay fast.
    for text in ("a_" * 50_000, "a." * 50_000, "sk-" + "a-" * 30_000, "x://" + "a:" * 30_000):
        start = time.perf_counter()
        redactor.redact(text)
        assert time.perf_counter() - start < 10.0


# --- configuration ----------------------------------------------------------------------------


def test_extra_patterns_and_defaults_off() -> None:
    extra = Redactor(extra={"employee-id": r"\bEMP-\d{6}\b"})
    key = "AKIA" + rand(UPPER_DIGITS, 16)
    assert extra.redact(f"EMP-004211 used {key}") == (
        "[REDACTED:employee-id] used [REDACTED:aws-access-key]"
    )
    only = Redactor(extra={"ticket": r"(?P<secret>T-\d+)"}, defaults=False)
    assert only.kinds == ("ticket",)
    assert only.redact(f"T-12 used {key}") == f"[REDACTED:ticket] used {key}"
    grouped = Redactor(extra={"pin": r"pin=(?P<secret>\d{4})"}, defaults=False)
    assert grouped.redact("card pin=1234 ok") == "card pin=[REDACTED:pin] ok"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"Bad Name": "x"}, "kind"),
        ({"ok": "("}, "invalid"),
        ({"empty": "a*"}, "empty string"),
    ],
)
def test_bad_configuration_is_a_configuration_error(extra: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        Redactor(extra=extra)


def test_memory_rejects_a_bad_redact_value() -> None:
    with pytest.raises(ConfigurationError, match="redact"):
        EpisodicMemory(InMemoryProvider(), redact="yes")  # type: ignore[arg-type]


# --- through EpisodicMemory -----------------------------------------------------------------


def secret_episode() -> tuple[Episode, list[str]]:
    keys = [s for _, s in SECRETS[:6]]
    episode = Episode(
        query=f"Why does {keys[0]} fail?",
        response=f"Rotated it; the new key is {keys[1]}",
        reflection=f"Never paste keys like {keys[2]}",
        tags=["billing", keys[3]],
        tools_used=["vault", f"curl -H 'x-api-key: {keys[4]}'", keys[5]],
        outcome="failure",
    )
    return episode, keys


async def raw_dump(provider: MemoryProvider) -> str:
    keys = await provider.keys("")
    values = await provider.retrieve_many(keys)
    return "\n".join(keys + [v or "" for v in values])


async def test_every_text_field_is_redacted_before_it_is_stored(provider: MemoryProvider) -> None:
    memory = EpisodicMemory(provider, namespace="sec")
    episode, keys = secret_episode()
    await memory.record(episode)
    (stored,) = await memory.load()
    raw = await raw_dump(provider)
    for key in keys:
        assert key not in raw
        assert key not in stored.to_json()
    assert stored.query == "Why does [REDACTED:openai-key] fail?"
    assert stored.tags == ["billing", "[REDACTED:openai-key]"]
    assert stored.tools_used[0] == "vault"
    assert stored.tools_used[2] == "[REDACTED:anthropic-key]"
    assert stored.reflection == "Never paste keys like [REDACTED:openai-key]"
    assert keys[0] in episode.query  # the caller's copy is left as it was


async def test_redaction_off_and_custom() -> None:
    provider = InMemoryProvider()
    plain = EpisodicMemory(provider, namespace="plain", redact=False)
    key = SECRETS[0][1]
    await plain.record(Episode(query=f"use {key}"))
    assert key in await raw_dump(provider)
    custom = EpisodicMemory(
        provider, namespace="custom", redact=Redactor(extra={"order": r"ORD-\d+"})
    )
    await custom.record(Episode(query=f"ORD-77 with {key}"))
    (stored,) = await custom.load()
    assert stored.query == "[REDACTED:order] with [REDACTED:openai-key]"
    assert custom.redactor is not None
    assert "order" in custom.redactor.kinds
    assert plain.redactor is None


async def test_reflection_model_never_sees_a_secret(llm: ScriptedLLM) -> None:
    """The reflection call goes over litellm's real HTTP path to the scripted server; the
    request it receives holds no secret, and a secret the model echoes is redacted too."""
    echoed = SECRETS[8][1]  # a GitHub token the model "remembers" from its own context
    llm.script(Reply.text(f"Rotate keys before {echoed} leaks again."))
    provider = InMemoryProvider()
    memory = EpisodicMemory(
        provider, namespace="refl", reflect_model="openai/scripted", reflect_params=llm.params
    )
    episode, keys = secret_episode()
    stored = await memory.record(dataclasses.replace(episode, reflection=None))
    [request] = llm.requests
    sent = json.dumps(request.body)
    for key in keys:
        assert key not in sent
    assert "[REDACTED:openai-key]" in request.last_user_text
    assert stored.reflection == "Rotate keys before [REDACTED:github-token] leaks again."
    assert echoed not in await raw_dump(provider)


async def test_reflect_called_directly_redacts_its_input(llm: ScriptedLLM) -> None:
    # The runner hook may call reflect() on an episode that was never recorded.
    llm.script(Reply.text("NONE"))
    memory = EpisodicMemory(
        InMemoryProvider(), reflect_model="openai/scripted", reflect_params=llm.params
    )
    episode, keys = secret_episode()
    assert await memory.reflect(episode) is None
    sent = json.dumps(llm.requests[0].body)
    for key in keys:
        assert key not in sent


# --- gaps of issue 11, each with its family ---------------------------------------------------

HEX = "0123456789abcdef"
AWS_SECRET = rand(ALNUM + "/+", 40)
SESSION = rand(ALNUM, 60) + "/" + rand(ALNUM, 40) + "+" + rand(ALNUM, 30) + "=="
AZURE = base64.b64encode(RNG.randbytes(64)).decode()

# (kind, template, secret): the secret must go, the context must stay.
GAPS: list[tuple[str, str, str]] = [
    ("aws-secret-key", '{{"AccessKeyId": "x", "SecretAccessKey": "{s}", "Expiration": "z"}}', AWS_SECRET),
    ("aws-secret-key", "AWS_SECRET_ACCESS_KEY={s}", AWS_SECRET),
    ("aws-session-token", '{{"SessionToken": "{s}"}}', SESSION),
    ("aws-session-token", "export AWS_SESSION_TOKEN={s}", SESSION),
    ("aws-session-token", "aws_session_token = {s}", SESSION),
    ("secret-assignment", "DB_PASSWORD={s}", "abc123"),
    ("secret-assignment", "export REDIS_PASS={s} && run", "x9"),
    ("secret-assignment", "GITHUB_TOKEN={s}", "tok"),
    ("secret-assignment", "STRIPE_KEY='{s}'", "k1"),
    ("secret-assignment", "Server=db;User Id=sa;Password={s};Encrypt=yes", "Pa55"),
    ("secret-assignment", 'db_password := "{s}"', "go"),
    ("secret-assignment", '{{\\"password\\": \\"{s}\\"}}', "hunter2x"),
    ("secret-assignment", '{{\\\\\\"password\\\\\\": \\\\\\"{s}\\\\\\"}}', "hunter2x"),
    ("secret-assignment", '{{"body": "{{\\"api_key\\": \\"{s}\\", \\"n\\": 1}}"}}', "abc"),
    ("url-password", "postgres://app:{s}@db.internal:5432/orders", "pa#ss/w0rd"),
    ("url-password", "redis://default:{s}@cache:6379/0", "a/b#c?d@e"),
    ("url-password", '"DATABASE_URL": "mysql://root:{s}@127.0.0.1/app"', "s3cr#t"),
    ("openrouter-key", "key {s} ok", "sk-or-v1-" + "".join(RNG.choices(HEX, k=64))),
    ("openai-key", "key {s} ok", "sk-" + "".join(RNG.choices(string.ascii_lowercase + string.digits, k=32))),
    ("openai-key", "key {s} ok", "sk-" + "".join(RNG.choices(string.ascii_lowercase, k=20)) + "7"),
    ("private-key", "key: {s}", pem("RSA PRIVATE KEY").lower()),
    ("private-key", "key: {s}", pem("OPENSSH PRIVATE KEY")),
    ("private-key", "key: {s}", pem("Encrypted Private Key")),
    ("azure-key", "DefaultEndpointsProtocol=https;AccountName=a;AccountKey={s};EndpointSuffix=core.windows.net", AZURE),
    ("azure-key", "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=Root;SharedAccessKey={s}", AZURE[:44]),
    ("azure-key", "https://a.blob.core.windows.net/c/b?sv=2022-11-02&sr=b&sig={s}", AZURE[:43].replace("/", "%2F")),
    ("gitlab-token", "token {s}.", "glpat-" + rand(B64URL, 20)),
    ("npm-token", "//registry.npmjs.org/:_authToken={s}", "npm_" + rand(ALNUM, 36)),
    ("sendgrid-key", "key {s}", "SG." + rand(B64URL, 22) + "." + rand(B64URL, 43)),
]  # fmt: skip


@pytest.mark.parametrize(
    ("kind", "template", "secret"), GAPS, ids=[f"{k}-{i}" for i, (k, _, _) in enumerate(GAPS)]
)
def test_each_gap_is_closed_and_keeps_its_context(
    redactor: Redactor, kind: str, template: str, secret: str
) -> None:
    text = template.format(s=secret)
    cleaned = redactor.redact(text)
    assert secret not in cleaned
    assert cleaned == template.format(s=f"[REDACTED:{kind}]")
    assert redactor.find(text) is not None


MORE_HARMLESS: list[str] = [
    "password: hunter is a word",
    "Read $DB_PASSWORD from the environment, never <password> in the file.",
    "token = os.environ['X'] and secret_key=settings.SECRET_KEY",
    "password = None; api_token=null; DB_PASSWORD=",
    "if password == stored: return True",
    "sort_key=created_at, primary_key=id, cache_key=user:42",
    "See http://host:8080/users/bob@example.com for the profile.",
    "client.get_token() and password=get_password()",
    "The credentials: see the vault page.",
    "The line ends here\nand the next begins; max_tokens=4096\ntokens=128",
    "I love it \u2764\ufe0f and the family \U0001f468\u200d\U0001f469\u200d\U0001f467 too",
    "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA\n-----END PUBLIC KEY-----",
    "A long identifier test_redaction_covers_every_field_of_an_episode stays.",
    "Sign with HMAC; the ?sig= parameter is documented on the SAS page.",
]


@pytest.mark.parametrize("text", MORE_HARMLESS, ids=range(len(MORE_HARMLESS)))
def test_more_look_alikes_survive_unchanged(redactor: Redactor, text: str) -> None:
    assert redactor.redact(text) == text
    assert redactor.find(text) is None


# Every character that can split a token without being seen, and the line breaks.
SPLITTERS = [
    "\n", "\r\n", "\r", "\u2028", "\u200b", "\u200c", "\u200d", "\u00ad", "\u2060", "\ufeff",
    "\ufe0f", "\U000e0101", "\U000e0041", "\u180e", "\u202e", "\x00", "\x1b", "\ue000",
    "\u200b\u200b\n\u2060",
]  # fmt: skip
SPLIT_SECRETS: list[tuple[str, str]] = [
    ("openai-key", "sk-proj-" + rand(B64URL, 60)),
    ("anthropic-key", "sk-ant-api03-" + rand(B64URL, 60)),
    ("github-token", "ghp_" + rand(ALNUM, 36)),
    ("aws-access-key", "AKIA" + rand(UPPER_DIGITS, 16)),
    ("jwt", jwt()),
]


@pytest.mark.parametrize("splitter", SPLITTERS, ids=[ascii(s) for s in SPLITTERS])
@pytest.mark.parametrize(("kind", "secret"), SPLIT_SECRETS, ids=[k for k, _ in SPLIT_SECRETS])
def test_a_split_secret_is_redacted_whole(
    redactor: Redactor, kind: str, secret: str, splitter: str
) -> None:
    half = len(secret) // 2
    text = f"Use {secret[:half]}{splitter}{secret[half:]} now.\nNext line."
    cleaned = redactor.redact(text)
    assert cleaned == f"Use [REDACTED:{kind}] now.\nNext line."
    assert redactor.find(text) == kind


@pytest.mark.parametrize("splitter", ["\u200b", "\u00ad", "\u2060", "\ufe0f"])
def test_a_keyword_split_by_a_hidden_character_still_names_a_secret(
    redactor: Redactor, splitter: str
) -> None:
    text = f"DB_PASS{splitter}WORD=abc123 and AWS_SESSION{splitter}_TOKEN={SESSION}"
    cleaned = redactor.redact(text)
    assert "abc123" not in cleaned
    assert SESSION not in cleaned


def test_a_key_at_the_end_of_a_line_keeps_the_next_assignment(redactor: Redactor) -> None:
    key = "sk-proj-" + rand(B64URL, 40)
    text = f"OPENAI_API_KEY={key}\nREGION=eu\nmodel: gpt\n"
    assert redactor.redact(text) == "OPENAI_API_KEY=[REDACTED:openai-key]\nREGION=eu\nmodel: gpt\n"


def test_text_without_a_secret_keeps_its_hidden_characters(redactor: Redactor) -> None:
    text = "flag \U0001f3f4\U000e0067\U000e0062\U000e007f and zero\u200bwidth\nline"
    assert redactor.redact(text) == text


async def test_every_text_field_but_the_id_is_redacted_agent_id_included() -> None:
    key = "AKIA" + rand(UPPER_DIGITS, 16)
    redactor = Redactor()
    values: dict[str, Any] = {}
    for field in dataclasses.fields(Episode):
        if field.name in ("outcome", "score", "timestamp", "forget_after", "outcome_source"):
            continue  # labels and times: checked against their forms, not text
        if field.name in ("id", "conversation_id"):
            continue  # an id is refused when it holds a secret, never redacted
        values[field.name] = [f"x {key}"] if "list" in str(field.type) else f"x {key}"
    episode = Episode(**values)
    cleaned = redactor.redact_episode(episode)
    for name in values:
        assert key not in json.dumps(getattr(cleaned, name)), name
    assert cleaned.agent_id == "x [REDACTED:aws-access-key]"
    assert redactor.find(f"id-{key}") == "aws-access-key"
    assert redactor.find("9f4422aa27bb435bb3bf14c5e9799f98") is None


async def test_a_conversation_id_holding_a_key_is_refused_never_stored() -> None:
    key = "ghp_" + rand(ALNUM, 36)
    provider = InMemoryProvider()
    memory = EpisodicMemory(provider)
    with pytest.raises(InvalidEpisodeError, match=r"conversation_id: it looks like a secret"):
        await memory.record(Episode(query="q", conversation_id=key))
    hook = EpisodicHook(memory)
    recorded = await hook.after_run("q", "a", conversation_id=key)
    assert recorded.episode is None
    assert "looks like a secret" in (recorded.error or "")
    assert key not in (recorded.error or "")
    assert key not in await raw_dump(provider)


async def test_agent_id_holding_a_key_is_never_stored(provider: MemoryProvider) -> None:
    key = "ghp_" + rand(ALNUM, 36)
    memory = EpisodicMemory(provider, namespace="agent")
    await memory.record(Episode(query="q", agent_id=key))
    assert key not in await raw_dump(provider)


# --- detect-secrets as an oracle ----------------------------------------------------------------


def test_every_secret_detect_secrets_finds_is_redacted(redactor: Redactor) -> None:
    """Yelp's detect-secrets (a dev-only dependency) scans the corpus with all its plugins;
    whatever it finds, our redactor must have removed. Our own look-alikes, it is not asked
    about: its entropy plugins flag hashes and base64 on purpose."""
    pytest.importorskip("detect_secrets", reason="detect-secrets is in the dev extra")
    from detect_secrets.core.scan import scan_line
    from detect_secrets.settings import default_settings

    corpus = [f"value = '{s}'" for _, s in SECRETS]
    corpus += [t.format(s=s) for _, t, s in IN_CONTEXT + GAPS]
    corpus += [
        "twilio SK" + "".join(RNG.choices(HEX, k=32)),
        "mailchimp " + "".join(RNG.choices(HEX, k=32)) + "-us14",
        "square sq0csp-" + rand(B64URL, 43),
        "telegram 123456789:AA" + rand(B64URL, 33),
        "discord M" + rand(B64URL, 23) + "." + rand(B64URL, 6) + "." + rand(B64URL, 27),
        "artifactory AKCp" + rand(ALNUM, 69),
        "pypi pypi-AgEIcHlwaS5vcmc" + rand(B64URL, 70),
        "stripe rk_live_" + rand(ALNUM, 24),
    ]
    found = 0
    with default_settings():
        for text in corpus:
            cleaned = redactor.redact(text)
            for line in text.splitlines():
                # Its keyword plugin guesses, and scan_line hands every word to its entropy
                # plugins ("curl", "example"): those count for a quoted value only.
                secrets = {
                    s.secret_value
                    for s in scan_line(line)
                    if s.secret_value
                    and s.type != "Secret Keyword"
                    and ("Entropy" not in s.type or f"'{s.secret_value}'" in line)
                }
                found += len(secrets)
                for secret in secrets:
                    core = secret.strip("'\"")
                    if len(core) >= 6:
                        assert core not in cleaned, (text, secret)
                    else:  # too short to look for (its keyword plugin reports "ac" and such)
                        assert cleaned != text, (text, secret)
    assert found >= len(corpus) // 2  # the oracle did look


# --- issue 11, second round: each leak an attacker found, with its family ---------------------

PW = rand(ALNUM, 12)  # a password-shaped value; each case below replaces it whole


def _uuid() -> str:
    return str(uuid.UUID(int=RNG.getrandbits(128), version=4))


# (kind, template, secret): as GAPS, the secret must go and the context stay.
ROUND_TWO: list[tuple[str, str, str]] = [
    # A name with no separator before PASSWORD / PWD / PASS / SECRET / TOKEN.
    ("secret-assignment", "PGPASSWORD={s}", PW),
    ("secret-assignment", "PGPASSWORD={s}", "x"),
    ("secret-assignment", "export PGPASSWORD={s} && psql", PW),
    ("secret-assignment", "MYSQL_PWD={s}", PW),
    ("secret-assignment", "MYSQLPWD={s}", PW),
    ("secret-assignment", "REDIS_PASSWORD={s}", PW),
    ("secret-assignment", "PASSWD={s}", PW),
    ("secret-assignment", "REDISPASS={s}", PW),
    ("secret-assignment", "APPSECRET={s}", PW),
    ("secret-assignment", "mytoken={s}", PW),
    ("secret-assignment", "set PASSWORD={s}", PW),
    ("secret-assignment", "$env:PASSWORD = '{s}'", PW),
    # A value that starts with punctuation is a value, not a reference.
    ("secret-assignment", "MYSQL_ROOT_PASSWORD={s}", "!" + PW),
    ("secret-assignment", "DB_PASSWORD={s}", "*" + PW),
    ("secret-assignment", "DB_PASSWORD={s}", "&" + PW),
    ("secret-assignment", "DB_PASSWORD={s}", "." + PW),
    ("secret-assignment", "DB_PASSWORD={s}", "%" + PW),
    ("secret-assignment", "DB_PASSWORD={s}", "=" + PW),
    ("secret-assignment", "DB_PASSWORD={s}", "$ecr3t" + PW),
    ("secret-assignment", "DB_PASSWORD={s}", "(" + PW),
    ("secret-assignment", "DB_PASSWORD={s}", "true" + PW),
    ("secret-assignment", "DB_PASSWORD={s}", "/" + PW),
    # A quoted value runs to its closing quote; an unquoted one to the end of its token.
    ("secret-assignment", 'password = "{s}"', "correct horse battery staple"),
    ("secret-assignment", "password: '{s}' then", "two words"),
    ("secret-assignment", 'password = "{s}" rest', 'a \\"quoted\\" b'),
    ("secret-assignment", '{{"password": "{s}", "user": "bob"}}', "with space, comma"),
    ("secret-assignment", '{{\\"password\\": \\"{s}\\"}}', "x y \\\\\\\"z\\\\\\\" w"),
    ("secret-assignment", "DB_PASSWORD={s}", "abc,defghi"),
    ("secret-assignment", "DB_PASSWORD={s} next", "abc;defghi"),
    ("secret-assignment", "DB_PASSWORD={s}", "a&b;c,d"),
    ("secret-assignment", "DB_PASSWORD={s}\nNEXT=1", "abc;def,ghi"),
    ("secret-assignment", "Server=db;Password={s};User Id=sa", PW),
    ("secret-assignment", "https://example.com/login?password={s}&user=bob", PW),
    ("secret-assignment", "{{'password': {s}, 'user': 'bob'}}", "123456"),
    # A URL password, whatever the host looks like.
    ("url-password", "postgres://app:{s}@db_host:5432/app", PW),
    ("url-password", "postgres://app:{s}@\u043f\u0440\u0438\u043c\u0435\u0440.\u0440\u0444/app", PW),
    ("url-password", "postgres://app:{s}@xn--e1afmkfd.xn--p1ai/app", PW),
    ("url-password", "https://u:{s}@example.com./x", PW),
    ("url-password", "redis://u:{s}@[::1]:6379/0", PW),
    ("url-password", "see (https://u:{s}@example.com), ok", PW),
    ("url-password", "redis://:{s}@cache:6379", PW),
    ("url-password", "redis://u:{s}@cache.internal:6379/0", "p#a/s@s?w"),
    ("url-password", "https://u:{s}@example.com/path/to@file", PW),
    ("url-password", "redis://u:{s}@cache", "12345"),
    # The sk- family: any service's keys, hyphens and underscores included.
    ("openai-key", "key {s} ok", "sk-lf-" + _uuid()),
    ("openai-key", "key {s} ok", "sk-" + "".join(RNG.choices(string.ascii_lowercase, k=3)) + "_" + "".join(RNG.choices(HEX, k=24))),
    ("openai-key", "key {s} ok", "sk-" + "".join(RNG.choices(UPPER_DIGITS, k=26)) + "7"),
    ("openai-key", "key {s} ok", "sk-proj-" + "".join(RNG.choices(HEX, k=32))),
    ("openai-key", "key {s} ok", "sk-" + "-".join("".join(RNG.choices(HEX, k=8)) for _ in range(4))),
    # Shapes the first round missed around other kinds.
    ("private-key", "key: {s}", pem("PRIVATE KEY").replace("-----BEGIN ", "----- BEGIN ").replace("KEY-----", "KEY -----")),
    ("bearer-token", "Authorization: Bearer {s}", "".join(RNG.choices(string.ascii_letters, k=32))),
    ("bearer-token", '{{"authorization": "bearer {s}"}}', "".join(RNG.choices(string.ascii_letters, k=32))),
]  # fmt: skip


@pytest.mark.parametrize(
    ("kind", "template", "secret"),
    ROUND_TWO,
    ids=[f"{k}-{i}" for i, (k, _, _) in enumerate(ROUND_TWO)],
)
def test_round_two_leak_is_closed_and_keeps_its_context(
    redactor: Redactor, kind: str, template: str, secret: str
) -> None:
    text = template.format(s=secret)
    cleaned = redactor.redact(text)
    assert cleaned == template.format(s=f"[REDACTED:{kind}]")
    assert redactor.find(text) == kind
    assert redactor.redact(cleaned) == cleaned


# Look-alikes of the round-two families: references, comparisons, ports, hyphenated words.
ROUND_TWO_HARMLESS: list[str] = [
    # Real references stay, whatever the name.
    "PGPASSWORD=$PGPASSWORD psql and MYSQL_PWD=${MYSQL_PWD}",
    "set PASSWORD=%DB_PASSWORD% and APPSECRET=<your secret here>",
    'password=os.environ["DB_PASSWORD"] token=os.getenv("TOKEN", "none set")',
    "password=getpass() secret=settings.APP_SECRET pw_token=self.token",
    "DB_PASSWORD=/run/secrets/db_password and PGPASSWORD=~/.pgpass",
    "password={{ vault_db_password }} and secret={secret}",
    "DB_PASSWORD=$(cat /run/secrets/db) and TOKEN=$token",
    "password=[REDACTED:secret-assignment] and password=None, token=null;",
    # Comparisons and empty values.
    "if password == stored or token === other or secret != x: return",
    "PASSWORD=\nSECRET=\n",
    # Words that end like a name but are none.
    "bypass=on123 compass=N45deg passport: G12345678 monkey: banana12",
    # host:port@... has no password.
    "http://localhost:8080@x and http://127.0.0.1:8080@y",
    "http://[::1]:8080@x and http://db.example.com:5432@x",
    "see http://host:8080/users/bob@example.com and https://user@example.com:8443/p",
    # sk- followed by words.
    "sk-learn and sk-2024-release-notes and sk-learn-compatible-estimators-v2",
    "sk-release-notes-2024-and-2025 and sk-py311-compatible-wheels",
    # Combining marks inside words are no split key.
    "cafe\u0301 and nai\u0308ve and \u0915\u093f\u0924\u093e\u092c and A\u20dd",
]


@pytest.mark.parametrize("text", ROUND_TWO_HARMLESS, ids=range(len(ROUND_TWO_HARMLESS)))
def test_round_two_look_alike_survives(redactor: Redactor, text: str) -> None:
    assert redactor.redact(text) == text
    assert redactor.find(text) is None


@pytest.mark.parametrize("mark", ["\u0301", "\u0308\u0301", "\u20dd", "\u0301\u200b"])
@pytest.mark.parametrize(("kind", "secret"), SPLIT_SECRETS, ids=[k for k, _ in SPLIT_SECRETS])
@pytest.mark.parametrize("after", ["", "\nNext line."])
def test_a_key_split_by_a_combining_mark_is_redacted_whole(
    redactor: Redactor, kind: str, secret: str, mark: str, after: str
) -> None:
    half = len(secret) // 2
    text = f"Use {secret[:half]}{mark}{secret[half:]} now.{after}"
    assert redactor.redact(text) == f"Use [REDACTED:{kind}] now.{after}"
    assert redactor.find(text) == kind


def test_a_combining_mark_in_a_name_is_no_key_but_keeps_an_assignment(
    redactor: Redactor,
) -> None:
    # Marks are dropped for the key rules only: a value beside accented prose keeps the prose.
    text = f"Cafe\u0301 login: DB_PASSWORD={PW} for nai\u0308ve users"
    assert redactor.redact(text) == (
        "Cafe\u0301 login: DB_PASSWORD=[REDACTED:secret-assignment] for nai\u0308ve users"
    )


def test_round_two_pathological_input_never_backtracks_catastrophically(
    redactor: Redactor,
) -> None:
    """Inputs shaped to make a regex backtrack: each must finish, and in the time a linear
    scan takes (a quadratic one on 200,000 characters takes minutes, not seconds)."""
    texts = (
        "PASS" * 50_000,
        "password=" + "a," * 50_000,
        "password=a" + ";b" * 50_000,
        'password="' + "\\" * 100_000,
        "https://u:" + "a@" * 50_000,
        "https://" + ":@a" * 30_000,
        "sk-" + "ab12-" * 20_000,
        "sk-" + "a\u0301" * 50_000,
        "authorization: bearer " * 10_000,
    )
    for text in texts:
        start = time.perf_counter()
        redactor.redact(text)
        assert time.perf_counter() - start < 10.0


def test_a_clean_episode_is_returned_unchanged(redactor: Redactor) -> None:
    """A clean episode is what nearly every record holds: words such as "password" in prose
    are no assignment. (Its cost is measured by bench, not here.)"""
    episode = Episode(
        query="Why does checkout return 502 after the deploy of release 1.4.2 on Tuesday?",
        response="The pool was exhausted; raised max_connections to 200. Errors stopped at 14:05.",
        reflection="Check the pool size before scaling; the password reset flow uses the same pool.",
        tags=["checkout", "incident"],
        tools_used=["kubectl", "psql"],
        outcome="success",
    )
    assert redactor.redact_episode(episode) is episode
