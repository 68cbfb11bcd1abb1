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
from typing import Any

import pytest
from llm_server import Reply, ScriptedLLM

from deepcrew_episodic import (
    ConfigurationError,
    Episode,
    EpisodicMemory,
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
        assert time.perf_counter() - start < 2.0


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
    stored = await memory.record(episode)
    raw = await raw_dump(provider)
    for key in keys:
        assert key not in raw
        assert key not in stored.to_json()
    assert stored.query == "Why does [REDACTED:openai-key] fail?"
    assert stored.tags == ["billing", "[REDACTED:openai-key]"]
    assert stored.tools_used[0] == "vault"
    assert stored.tools_used[2] == "[REDACTED:anthropic-key]"
    assert stored.reflection == "Never paste keys like [REDACTED:openai-key]"
    (loaded,) = await memory.load()
    assert loaded == stored
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
    stored = await custom.record(Episode(query=f"ORD-77 with {key}"))
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
