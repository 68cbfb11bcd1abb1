"""Redaction: text that looks like a secret is replaced by a marker before it is stored.

An agent's runs carry whatever its users and tools handed it: API keys pasted into a question,
a connection URL echoed in an answer, a token in a tool's output. An episodic memory keeps that
text for months and shows it to later runs, so :class:`EpisodicMemory` passes every text field
of an episode (``query``, ``response``, ``reflection``, ``tags``, ``tools_used``) through a
:class:`Redactor` before it is stored or sent to the reflection model. A secret becomes
``[REDACTED:<kind>]``; the rest of the text is kept as written.

The default rules aim at shapes that are secrets with near certainty (a provider's key prefix,
a JWT's three base64url parts, the password slot of a URL, a PEM private key block) and leave
alone the look-alikes that fill ordinary agent text: UUIDs, git SHAs, hashes, base64 payloads,
URLs without a password, words such as "sk-learn".
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ._exceptions import ConfigurationError

if TYPE_CHECKING:
    from ._episode import Episode

__all__ = ["Redactor", "default_rules", "marker"]

_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,39}")
# Characters that continue a token: a key must not start or end inside a longer word.
_B64URL = "A-Za-z0-9_-"


def marker(kind: str) -> str:
    """The text that replaces a secret of *kind*: ``[REDACTED:<kind>]``."""
    return f"[REDACTED:{kind}]"


class Rule:
    """A named pattern. When the pattern has a group named ``secret``, only that group is
    replaced (``password=[REDACTED:...]`` keeps ``password=``); otherwise the whole match."""

    __slots__ = ("hints", "name", "pattern")

    def __init__(self, name: str, pattern: re.Pattern[str], hints: tuple[str, ...] = ()) -> None:
        self.name = name
        self.pattern = pattern
        # Lower-case substrings of which every match contains at least one: a text without
        # any of them is skipped without running the regex. Empty: always run it.
        self.hints = hints

    def may_match(self, lowered: str) -> bool:
        return not self.hints or any(hint in lowered for hint in self.hints)

    def apply(self, text: str) -> str:
        replacement = marker(self.name)
        if "secret" not in self.pattern.groupindex:
            return self.pattern.sub(replacement, text)

        def keep_context(match: re.Match[str]) -> str:
            start, end = match.span("secret")
            if start < 0:
                return match.group(0)
            whole = match.group(0)
            offset = match.start()
            return whole[: start - offset] + replacement + whole[end - offset :]

        return self.pattern.sub(keep_context, text)


def _rule(name: str, pattern: str, flags: int = 0) -> tuple[str, str, int]:
    return (name, pattern, flags)


# Order matters: a specific rule runs before a generic one that would also match (an Anthropic
# key before the "sk-" rule, a JWT before "Bearer <token>"), and a marker never matches a rule.
# Compiled on first use (default_rules), not at import: reading a memory never pays for it.
_DEFAULT_PATTERNS: tuple[tuple[str, str, int], ...] = (
    _rule(
        "private-key",
        r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"
        # An unterminated block (a truncated answer) is redacted to the end of the text.
        r".*?(?:-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\Z)",
        re.DOTALL,
    ),
    _rule("anthropic-key", rf"(?<![{_B64URL}])sk-ant-[{_B64URL}]{{20,}}"),
    _rule(
        "openai-key",
        # Random key material mixes digits, lower and upper case; "sk-learn-compatible" or
        # "sk-2024-release-notes" do not. Hex keys of OpenAI-compatible services are lower case.
        rf"(?<![{_B64URL}])sk-(?:proj-|svcacct-|admin-)?"
        rf"(?:(?=[{_B64URL}]*[0-9])(?=[{_B64URL}]*[a-z])(?=[{_B64URL}]*[A-Z])[{_B64URL}]{{20,}}"
        rf"|[0-9a-f]{{32,}}(?![{_B64URL}]))",
    ),
    _rule("stripe-key", r"(?<![A-Za-z0-9_])[rs]k_(?:live|test)_[A-Za-z0-9]{16,}"),
    _rule(
        "aws-access-key",
        r"(?<![A-Za-z0-9])(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AIPA|ANPA|ANVA|AROA|APKA|ASCA)"
        r"[A-Z0-9]{16}(?![A-Za-z0-9])",
    ),
    _rule(
        "aws-secret-key",
        r"(?i)aws[_\- ]?secret[_\- ]?(?:access[_\- ]?)?key[\"']?\s*[:=]\s*[\"']?"
        r"(?P<secret>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])",
    ),
    _rule(
        "github-token",
        r"(?<![A-Za-z0-9_])(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})"
        r"(?![A-Za-z0-9_])",
    ),
    _rule(
        "slack-token",
        r"(?<![A-Za-z0-9])(?:xox[abposre]-[A-Za-z0-9-]{10,}|xapp-\d-[A-Za-z0-9-]{10,})",
    ),
    _rule(
        "slack-webhook",
        r"https://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/-]{8,}",
    ),
    _rule("google-api-key", rf"(?<![{_B64URL}])AIza[{_B64URL}]{{35}}(?![{_B64URL}])"),
    _rule("huggingface-token", r"(?<![A-Za-z0-9_])hf_[A-Za-z0-9]{30,}(?![A-Za-z0-9_])"),
    _rule(
        "jwt",
        rf"(?<![{_B64URL}])eyJ[{_B64URL}]{{8,}}\.eyJ[{_B64URL}]{{8,}}\.[{_B64URL}]*",
    ),
    _rule(
        "bearer-token",
        # A digit is required: "Bearer authentication-scheme" is prose, not a token.
        r"(?i)(?<![A-Za-z0-9])bearer\s+"
        r"(?P<secret>(?=[A-Za-z0-9._~+/-]*[0-9])[A-Za-z0-9._~+/-]{16,}=*)",
    ),
    _rule(
        "basic-auth",
        r"(?i)authorization[\"']?\s*[:=]\s*[\"']?basic\s+(?P<secret>[A-Za-z0-9+/]{8,}=*)",
    ),
    _rule(
        "url-password",
        # scheme://user:password@host - the password runs to the authority's last "@".
        r"(?i)\b[a-z][a-z0-9+.-]{0,31}://[^\s:/@?#]*:(?P<secret>[^\s/?#]+)@",
    ),
    _rule(
        "secret-assignment",
        # PASSWORD=..., "api_key": "...", password: hunter22 - but not prose ("the secret:
        # patience", an unquoted value after ":" needs a digit) and not a reference to where the
        # secret lives ($VAR, ${VAR}, %VAR%, <placeholder>, a path, os.environ[...], getenv()).
        r"(?i)(?<![A-Za-z0-9])(?:[A-Za-z0-9]{1,32}[_-]){0,4}"
        r"(?:password|passwd|passphrase|secret|secret[_-]key|api[_-]?key|access[_-]token"
        r"|auth[_-]token|private[_-]key)[\"']?"
        r"(?:\s*=\s*[\"']?|\s*:\s*[\"']|\s*:\s*(?=[^\s\"',;]*[0-9]))"
        r"(?P<secret>(?![$%<{(\[*/~.]|os\.|process\.env|env\.|getenv)[^\s\"',;]{8,})",
    ),
)


# For each built-in rule, substrings (lower case) that every match contains at least one of.
# Most text holds none, so most regexes never run: redaction stays cheap on every record.
_HINTS: dict[str, tuple[str, ...]] = {
    "private-key": ("private key",),
    "anthropic-key": ("sk-ant-",),
    "openai-key": ("sk-",),
    "stripe-key": ("k_live_", "k_test_"),
    "aws-access-key": (
        "akia",
        "asia",
        "abia",
        "acca",
        "agpa",
        "aida",
        "aipa",
        "anpa",
        "anva",
        "aroa",
        "apka",
        "asca",
    ),
    "aws-secret-key": ("secret",),
    "github-token": ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    "slack-token": ("xox", "xapp-"),
    "slack-webhook": ("hooks.slack.com",),
    "google-api-key": ("aiza",),
    "huggingface-token": ("hf_",),
    "jwt": ("eyj",),
    "bearer-token": ("bearer",),
    "basic-auth": ("authorization",),
    "url-password": ("://",),
    "secret-assignment": ("pass", "secret", "key", "token"),
}


@functools.cache
def default_rules() -> tuple[Rule, ...]:
    """The built-in rules, compiled once."""
    return tuple(
        Rule(name, re.compile(p, flags), _HINTS[name]) for name, p, flags in _DEFAULT_PATTERNS
    )


class Redactor:
    """Replaces secrets in text with ``[REDACTED:<kind>]``.

    Parameters
    ----------
    extra:
        More rules, as ``{kind: regex}``. A regex with a group named ``secret`` has only that
        group replaced. Kinds are lower-case letters, digits and ``-``.
    defaults:
        Apply the built-in rules (:func:`default_rules`) before the extra ones.

    Example::

        redactor = Redactor(extra={"employee-id": r"\\bEMP-\\d{6}\\b"})
        redactor.redact("ask EMP-004211 with key AKIAIOSFODNN7EXAMPLE")
        # 'ask [REDACTED:employee-id] with key [REDACTED:aws-access-key]'
        memory = EpisodicMemory(backend, redact=redactor)   # redact=False turns it off
    """

    def __init__(
        self, extra: Mapping[str, str | re.Pattern[str]] | None = None, *, defaults: bool = True
    ) -> None:
        self._defaults = defaults
        rules: list[Rule] = []
        for name, pattern in (extra or {}).items():
            if not isinstance(name, str) or not _NAME.fullmatch(name):
                raise ConfigurationError(
                    f"redaction kind {name!r}: use lower-case letters, digits and '-'"
                )
            try:
                compiled = pattern if isinstance(pattern, re.Pattern) else re.compile(pattern)
            except (re.error, TypeError) as exc:
                raise ConfigurationError(f"redaction pattern {name!r} is invalid: {exc}") from None
            if compiled.search("") is not None:
                raise ConfigurationError(
                    f"redaction pattern {name!r} matches the empty string; it would mark every "
                    f"position of every text"
                )
            rules.append(Rule(name, compiled))
        self._extra = tuple(rules)

    @property
    def rules(self) -> tuple[Rule, ...]:
        return (default_rules() if self._defaults else ()) + self._extra

    @property
    def kinds(self) -> tuple[str, ...]:
        """The kinds of secret this redactor replaces, in the order its rules run."""
        return tuple(rule.name for rule in self.rules)

    def redact(self, text: str) -> str:
        """*text* with every secret replaced by its marker (unchanged when there is none)."""
        lowered = text.lower()
        for rule in self.rules:
            if rule.may_match(lowered):
                text = rule.apply(text)
        return text

    def redact_episode(self, episode: Episode) -> Episode:
        """A copy of *episode* with every text field redacted (the same object when nothing
        changed)."""
        if not self._extra:
            # Fast path for the built-in rules: one search per rule over all the fields at once
            # (joined by newlines, which every default rule treats as a token boundary, so a
            # secret in any field is found). Most episodes hold no secret and stop here.
            fields = [episode.query, episode.response, episode.reflection or ""]
            joined = "\n".join([*fields, *episode.tags, *episode.tools_used])
            lowered = joined.lower()
            if not any(r.may_match(lowered) and r.pattern.search(joined) for r in self.rules):
                return episode
        changes: dict[str, Any] = {}
        for name in ("query", "response"):
            value: str = getattr(episode, name)
            cleaned = self.redact(value)
            if cleaned != value:
                changes[name] = cleaned
        if episode.reflection:
            cleaned = self.redact(episode.reflection)
            if cleaned != episode.reflection:
                changes["reflection"] = cleaned
        for name in ("tags", "tools_used"):
            values: list[str] = getattr(episode, name)
            redacted = [self.redact(v) for v in values]
            if redacted != values:
                changes[name] = redacted
        return dataclasses.replace(episode, **changes) if changes else episode

    def __repr__(self) -> str:
        return f"Redactor(kinds={list(self.kinds)!r})"


def as_redactor(value: object) -> Redactor | None:
    """``EpisodicMemory(redact=...)``: ``True`` the default rules, ``False``/``None`` none."""
    if isinstance(value, Redactor):
        return value
    if value is True:
        return _default()
    if value is False or value is None:
        return None
    raise ConfigurationError(f"redact must be True, False or a Redactor, not {value!r}")


_DEFAULT: Redactor | None = None


def _default() -> Redactor:
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = Redactor()
    return _DEFAULT
