"""Redaction: text that looks like a secret is replaced by a marker before it is stored.

An agent's runs carry whatever its users and tools handed it: API keys pasted into a question,
a connection URL echoed in an answer, a token in a tool's output. An episodic memory keeps that
text for months and shows it to later runs, so :class:`EpisodicMemory` passes every text field
of an episode (every field but ``id``, which the memory refuses instead when it holds a secret,
see :meth:`Redactor.find`) through a :class:`Redactor` before it is stored or sent to the
reflection model. A secret becomes ``[REDACTED:<kind>]``; the rest of the text is kept as
written.

The default rules aim at shapes that are secrets with near certainty (a provider's key prefix,
a JWT's three base64url parts, the password slot of a URL, a PEM private key block, the value of
``DB_PASSWORD=``) and leave alone the look-alikes that fill ordinary agent text: UUIDs, git SHAs,
hashes, base64 payloads, URLs without a password (``localhost:8080@x`` is a port), words such
as "sk-learn", references such as ``$DB_PASSWORD`` or ``getenv("X")``.

A secret cannot hide by being split. Matching runs on a view of the text without its hidden
characters (zero-width spaces and joiners, soft hyphens, variation selectors, tag characters:
:func:`~deepcrew_episodic._unicode.is_hidden`), and, for the rules whose tokens are
self-delimiting (provider keys, JWTs, AWS keys), once more on a view without line breaks and
combining marks (U+0301 shows on the letter before it), so a key wrapped over two lines or split
by a mark is found whole. A match is mapped back to the text as written and
replaced there, hidden characters and line break included; text around it keeps them. Because
a wrapped key cannot be told from a key at the end of a line followed directly by a word, such
a word is redacted with the key (unless it opens an assignment, ``NAME=`` or ``name:``).
Values of assignments, URL passwords and bearer tokens end at a line break.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import re
import unicodedata
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from ._exceptions import ConfigurationError
from ._unicode import is_hidden

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    _Record = TypeVar("_Record", bound=DataclassInstance)

__all__ = ["Redactor", "default_rules", "marker"]

_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,39}")
# Characters that continue a token: a key must not start or end inside a longer word.
_B64URL = "A-Za-z0-9_-"
# An optional quote, escaped any number of times: "k": "v" in JSON, \"k\": \"v\" in JSON held
# in a JSON string, \\\"k\\\" one level deeper.
_Q = r"""(?:\\*["'])?"""
# Line breaks that may split a token (str.splitlines' set, less the separators \x1c-\x1e).
_BREAKS = "\n\r\x0b\x0c\x85\u2028\u2029"
_BREAK_SET = frozenset(_BREAKS)
# What every match of a key rule (joins_lines) holds; one scan spares most texts ~20 hint tests.
_TOKEN_RUN = re.compile(r"[A-Za-z0-9_-]{14}")


def marker(kind: str) -> str:
    """The text that replaces a secret of *kind*: ``[REDACTED:<kind>]``."""
    return f"[REDACTED:{kind}]"


class Rule:
    """A named pattern. When the pattern has a group named ``secret``, only that group is
    replaced (``password=[REDACTED:...]`` keeps ``password=``); otherwise the whole match.

    *joins_lines*: the pattern also runs on the text with its line breaks removed, for tokens
    that a line break never ends (a wrapped key); see the module docstring. Such a rule's
    every match holds a run of 14 or more of ``A-Z a-z 0-9 _ -`` (a key's random part): a text
    without one skips it."""

    __slots__ = ("_compiled", "_flags", "_source", "gate", "hints", "joins_lines", "name")

    def __init__(
        self,
        name: str,
        pattern: re.Pattern[str] | str,
        hints: tuple[str, ...] = (),
        *,
        joins_lines: bool = False,
        gate: re.Pattern[str] | None = None,
        flags: int = 0,
    ) -> None:
        self.name = name
        # A pattern given as source is compiled when a text first gets past the hints: most
        # texts hold none of a rule's hints, so most rules of a short-lived process (the CLI)
        # are never compiled.
        self._compiled = pattern if isinstance(pattern, re.Pattern) else None
        self._source = pattern if isinstance(pattern, str) else pattern.pattern
        self._flags = flags
        # Lower-case substrings of which every match contains at least one: a text without
        # any of them is skipped without running the regex. Empty: always run it.
        self.hints = hints
        self.joins_lines = joins_lines
        # A cheap pattern that every match's text, lower-cased, also matches: a text without
        # a match of it is skipped (the full pattern costs more per character than hints).
        self.gate = gate

    @property
    def pattern(self) -> re.Pattern[str]:
        if self._compiled is None:
            self._compiled = re.compile(self._source, self._flags)
        return self._compiled

    def may_match(self, lowered: str, token_run: bool = True) -> bool:
        if self.joins_lines and not token_run:
            return False
        if self.hints and not any(hint in lowered for hint in self.hints):
            return False
        return self.gate is None or self.gate.search(lowered) is not None

    def spans(self, text: str) -> list[tuple[int, int, int]]:
        """``(start, end, match_end)`` of each part to replace, in order."""
        grouped = "secret" in self.pattern.groupindex
        found: list[tuple[int, int, int]] = []
        for match in self.pattern.finditer(text):
            start, end = match.span("secret") if grouped else match.span()
            if start < end:  # an unset group (-1, -1) or an empty match replaces nothing
                found.append((start, end, match.end()))
        return found

    def apply(self, text: str) -> str:
        """*text* with this rule's matches replaced (as written: no view, see Redactor)."""
        return _splice(text, [(s, e) for s, e, _ in self.spans(text)], marker(self.name))


def _rule(name: str, pattern: str, flags: int = 0, *, joins: bool = False) -> tuple[Any, ...]:
    return (name, pattern, flags, joins)


# Where an unquoted reference ends: it must fill the value, so "$ecr3t" or "None1" are values.
_REF_END = r"""(?=[\s"'`,;&)\]}]|\\|$)"""
# A value that names where a secret lives rather than holding it: $VAR, ${VAR}, $(command),
# %VAR%, <placeholder>, {{ template }}, a path, os.environ[...], getenv(...) or any other call,
# settings.X, a literal such as None, a marker. Anything else is a secret, whatever its first
# character ("!Secr3t", "*x", ".x", "=x" are passwords).
_REFERENCE = (
    r"(?!(?:"
    # Shell and PowerShell variables: $UPPER_CASE or $lower_case_words, not "$ecr3tpw".
    rf"\$(?:\{{[^}}\s]*\}}|\(|env:[A-Za-z_]\w*{_REF_END}|[A-Z_][A-Z0-9_]*{_REF_END}|[a-z_]+{_REF_END})"
    rf"|%[A-Za-z_]\w*%{_REF_END}|<[^<>\n]{{1,64}}>|\{{\{{[^}}\n]*\}}\}}|\{{[A-Za-z_]\w*\}}{_REF_END}"
    # A path with a directory: /etc/ssl/private/key.pem, ~/.pgpass, ../secrets/db.
    rf"|(?:(?:~|\.\.?)/|/(?:[\w.-]+/)+)[\w./-]*{_REF_END}"
    # A call (getenv("X"), get_password()), a subscript (os.environ['X']), an attribute of an
    # object that holds configuration (settings.SECRET_KEY, self.password, process.env.X).
    r"|[A-Za-z_][\w.]*\([^()\n]*\)|[A-Za-z_][\w.]*\["
    r"|(?:settings|config|conf|cfg|secrets|vault|self|this|cls|app|env|os|process)"
    rf"\.[A-Za-z_][\w.]*{_REF_END}"
    r"|(?i:none|null|nil|true|false|undefined)(?![\w-])"
    r"|\[REDACTED:[a-z0-9-]+\]"
    r"))"
)
# An unquoted value runs to the end of its token (a space, a quote, the end of the line). A
# backslash belongs to it unless it escapes a quote. "," ";" "&" belong to it too, except
# where they end it: before the next name=value of a connection string or a query
# ("Password=x;Encrypt=yes", "password=x&user=bob"), before a quoted item, at its end.
_VALUE = r"""(?:[^\s"',;&\\]|\\(?!\\*["']))"""
_UNQUOTED = (
    r"""(?:[^\s"'`,;&\\]|\\(?!\\*["'])"""
    r"""|[,;&](?![\s,;&]|$|\\*["']|[A-Za-z_][\w.-]*(?: [A-Za-z_][\w.-]*){0,3}[ \t]*=))+"""
)
# A quoted value runs to its closing quote, written as it was opened ('"', '\\"' in JSON held
# in a string, ...), spaces and escaped quotes included; unclosed, to the end of the line.
_QUOTED = rf"(?:(?!(?<!\\)(?P=q))[^{_BREAKS}])+"
# The operator between a name and its value. "==" and "===" compare ("if password == x"), but
# "PASSWORD==x" assigns "=x". The value's opening quote, if any, is the group q.
_ASSIGN = (
    rf"{_Q}(?:[ \t]*(?:=>|:=|=(?!=(?:[\s=]|$)))[ \t]*"  # = / := / =>, quoted or not
    r"""|[ \t]*:[ \t]*(?=\\*["'])"""  # "key": "value"
    # key: value unquoted is also prose ("the password: hunter is a word"): 6+ characters
    # with a digit.
    rf"""|[ \t]*:[ \t]*(?={_VALUE}{{6}})(?=[^\s"',;]*[0-9]))"""
    r"""(?P<q>\\*["'])?"""
)

# Order matters: a specific rule runs before a generic one that would also match (an Anthropic
# key before the "sk-" rule, a JWT before "Bearer <token>"), and a marker never matches a rule.
# Compiled on first use (default_rules), not at import: reading a memory never pays for it.
_DEFAULT_PATTERNS: tuple[tuple[Any, ...], ...] = (
    _rule(
        "private-key",
        r"(?:-----[ \t]*BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?[ \t]*-----"
        # An unterminated block (a truncated answer) is redacted to the end of the text.
        r".*?(?:-----[ \t]*END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?[ \t]*-----|\Z)"
        r"|PuTTY-User-Key-File-\d+:.*?(?:Private-MAC:[ \t]*[0-9a-f]+|\Z))",
        re.DOTALL | re.IGNORECASE,
    ),
    _rule("anthropic-key", rf"(?<![{_B64URL}])sk-ant-[{_B64URL}]{{20,}}", joins=True),
    _rule(
        "openrouter-key",
        rf"(?<![{_B64URL}])sk-or-(?:v\d+-)?[A-Za-z0-9]{{20,}}(?![{_B64URL}])",
        joins=True,
    ),
    _rule(
        "openai-key",
        # OpenAI's keys and those of the many services that copied the "sk-" prefix (Langfuse's
        # sk-lf-<uuid>, DeepSeek's, ...): 20 or more key characters with digits and letters.
        # Words joined by hyphens have those too ("sk-learn-compatible-estimators-v2"), so
        # the material must look random: mixed case with a digit; or one run of 20+ letters
        # and digits with a digit; or, split by "-" or "_", a piece of 8+ letters and digits
        # holding at least two of each (a hex or UUID part).
        rf"(?<![{_B64URL}])sk-(?:proj-|svcacct-|admin-)?"
        rf"(?:(?=[{_B64URL}]*[0-9])(?=[{_B64URL}]*[a-z])(?=[{_B64URL}]*[A-Z])[{_B64URL}]{{20,}}"
        rf"|(?=[A-Za-z0-9]*[0-9])(?=[A-Za-z0-9]*[A-Za-z])[A-Za-z0-9]{{20,}}(?![{_B64URL}])"
        rf"|(?=(?:[A-Za-z0-9]*[_-])*?(?<![A-Za-z0-9])(?=[A-Za-z0-9]{{8}})"
        r"(?=(?:[A-Za-z]*[0-9]){2})(?=(?:[0-9]*[A-Za-z]){2}))"
        rf"[{_B64URL}]{{20,}}(?![{_B64URL}]))",
        joins=True,
    ),
    _rule(
        "stripe-key",
        r"(?<![A-Za-z0-9_])(?:[rs]k|whsec)_(?:(?:live|test)_)?[A-Za-z0-9]{16,}",
        joins=True,
    ),
    _rule(
        "aws-access-key",
        r"(?<![A-Za-z0-9])(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AIPA|ANPA|ANVA|AROA|APKA|ASCA|A3T[A-Z0-9])"
        r"[A-Z0-9]{16}(?![A-Za-z0-9])",
        joins=True,
    ),
    _rule(
        "aws-secret-key",
        # aws_secret_access_key = ..., AWS_SECRET_KEY=..., "SecretAccessKey": "..." (STS).
        rf"(?i)(?<![A-Za-z0-9])(?:aws[_\- ]?secret[_\- ]?(?:access[_\- ]?)?key"
        rf"|secret[_\- ]?access[_\- ]?key){_Q}\s*(?:=>|:=|[:=])\s*{_Q}"
        r"(?P<secret>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])",
        joins=True,
    ),
    _rule(
        "aws-session-token",
        # "SessionToken": "..." (STS), aws_session_token = ..., X-Amz-Security-Token=...
        rf"(?i)(?<![A-Za-z0-9])(?:(?:aws[_\- ]?)?session[_\- ]?token|x-amz-security-token"
        rf"|security[_\- ]?token){_Q}\s*(?:=>|:=|[:=])\s*{_Q}"
        r"(?P<secret>[A-Za-z0-9/+=%]{16,})",
    ),
    _rule(
        "azure-key",
        # Storage AccountKey=..., Service Bus / Event Hubs SharedAccessKey=..., and the
        # signature of a shared access signature URL (?sv=...&sig=...).
        r"(?i)(?:(?<![A-Za-z0-9])(?:AccountKey|SharedAccessKey|SharedSecret)\s*=\s*|[?&;]sig=)"
        r"(?P<secret>[A-Za-z0-9+/%]{16,}={0,2})",
    ),
    _rule(
        "github-token",
        r"(?<![A-Za-z0-9_])(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})"
        r"(?![A-Za-z0-9_])",
        joins=True,
    ),
    _rule(
        "gitlab-token",
        r"(?<![A-Za-z0-9_-])(?:(?:glpat|gldt|glft|glsoat|glrt|glcbt|glimt|glptt|glagent|gloas)-"
        r"|GR1348941)[A-Za-z0-9_-]{20,1024}(?![A-Za-z0-9_-])",
        joins=True,
    ),
    _rule(
        "slack-token",
        r"(?<![A-Za-z0-9])(?:xox[abposre]-[A-Za-z0-9-]{10,}|xapp-\d-[A-Za-z0-9-]{10,})",
        joins=True,
    ),
    _rule(
        "provider-key",
        # Model and embedding providers' keys: Groq gsk_, Jina jina_, Voyage pa-, NVIDIA nvapi-,
        # xAI xai-, Replicate r8_, Fireworks fw_, Perplexity pplx-, Together tgp_v1_, Mistral
        # and Cohere keys have no prefix (see refused-key). 20+ key characters with a digit.
        r"(?<![A-Za-z0-9_-])(?:gsk_|jina_|pa-|nvapi-|xai-|r8_|fw_|pplx-|tgp_v1_)"
        r"(?=[A-Za-z0-9_-]*[0-9])(?=[A-Za-z0-9_-]*[A-Za-z])[A-Za-z0-9_-]{20,}(?![A-Za-z0-9_-])",
        joins=True,
    ),
    _rule(
        "slack-webhook",
        r"https://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/-]{8,}",
    ),
    _rule(
        "google-api-key",
        rf"(?<![{_B64URL}])AIza[{_B64URL}]{{35}}(?![{_B64URL}])",
        joins=True,
    ),
    _rule(
        "huggingface-token",
        r"(?<![A-Za-z0-9_])hf_[A-Za-z0-9]{30,}(?![A-Za-z0-9_])",
        joins=True,
    ),
    _rule(
        "npm-token",
        r"(?<![A-Za-z0-9_])npm_[A-Za-z0-9]{36}(?![A-Za-z0-9_])",
        joins=True,
    ),
    _rule(
        "pypi-token",
        r"(?<![A-Za-z0-9_-])pypi-AgE[A-Za-z0-9_-]{50,}",
        joins=True,
    ),
    _rule(
        "sendgrid-key",
        r"(?<![A-Za-z0-9_-])SG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}(?![A-Za-z0-9_-])",
        joins=True,
    ),
    _rule(
        "twilio-key",
        r"(?<![A-Za-z0-9])(?:AC|SK)[0-9a-f]{32}(?![A-Za-z0-9])",
        joins=True,
    ),
    _rule(
        "mailchimp-key",
        r"(?<![A-Za-z0-9])[0-9a-f]{32}-us[0-9]{1,2}(?![A-Za-z0-9])",
        joins=True,
    ),
    _rule(
        "square-token",
        r"(?<![A-Za-z0-9_-])sq0(?:atp|csp|idp)-[A-Za-z0-9_\\-]{22,43}(?![A-Za-z0-9_-])",
        joins=True,
    ),
    _rule(
        "telegram-token",
        r"(?<![A-Za-z0-9])\d{8,10}:AA[A-Za-z0-9_-]{33}(?![A-Za-z0-9_-])",
        joins=True,
    ),
    _rule(
        "discord-token",
        r"(?<![A-Za-z0-9_-])[MNO][A-Za-z0-9_-]{23,25}\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,38}"
        r"(?![A-Za-z0-9_-])",
        joins=True,
    ),
    _rule(
        "artifactory-key",
        r"(?<![A-Za-z0-9])AKCp[A-Za-z0-9]{10,}(?![A-Za-z0-9])",
        joins=True,
    ),
    _rule(
        "jwt",
        rf"(?<![{_B64URL}])eyJ[{_B64URL}]{{8,}}\.eyJ[{_B64URL}]{{8,}}\.[{_B64URL}]*",
        joins=True,
    ),
    _rule(
        "bearer-token",
        # In prose a digit is required ("Bearer authentication-scheme" is no token); after
        # "Authorization:" it is not.
        rf"(?i)(?<![A-Za-z0-9])(?P<auth>authorization{_Q}[ \t]*[:=][ \t]*{_Q})?bearer\s+"
        r"(?P<secret>(?(auth)|(?=[A-Za-z0-9._~+/-]*[0-9]))[A-Za-z0-9._~+/-]{16,}=*)",
    ),
    _rule(
        "basic-auth",
        rf"(?i)authorization{_Q}\s*[:=]\s*{_Q}basic\s+(?P<secret>[A-Za-z0-9+/]{{8,}}=*)",
    ),
    _rule(
        "url-password",
        # scheme://user:password@host. The password is everything from the first ":" after
        # "//" to the last "@" of the authority, whatever the host looks like (db_host,
        # an IDN, [::1], "example.com."). It may hold any character but a space ("#", "/",
        # "@" included): the last "@" before the first "/", "?" or "#" if there is one, else
        # the last "@" of the token. Not a password: a port (host:8080/path), nor
        # "host:8080@x" where a host name (localhost, a dotted name, [v6]) precedes the colon.
        r"(?i)\b[a-z][a-z0-9+.-]{0,31}://"
        r"(?>(?P<host>localhost(?=:)|[^\s:/@?#]*\.[^\s:/@?#]*(?=:)|\[[^\]\s/@]*\](?=:))"
        r"|[^\s:/@?#]*):"
        r"(?P<secret>(?!\d*(?:[/?#\s]|$))(?(host)(?!\d{1,5}@))"
        r"(?:[^\s/?#]{1,256}|\S{1,256}))"
        r"@[^\s/?#@]",
    ),
    _rule(
        "refused-key",
        # The key a provider echoes in its error ("Incorrect API key provided: X", "invalid
        # api key: X", "API key X is invalid"): whatever its shape, 16+ key characters.
        r"(?i)(?<![A-Za-z0-9])(?:api|access|secret|auth)[ _-]?(?:key|token)"
        r"(?:\s+(?:provided|given|supplied|used))?\s*(?:[:=]|\bis\b)?\s*[\"'`]?"
        r"(?P<secret>(?=[A-Za-z0-9._*+/=-]*[0-9])[A-Za-z0-9._*+/=-]{16,})",
    ),
    _rule(
        "secret-assignment",
        # PASSWORD=..., PGPASSWORD=x, DB_PASSWORD=x, "api_key": "...", password: hunter22,
        # Password=...; in a connection string - but not prose ("the secret: patience") and not
        # a reference to where the secret lives (see _REFERENCE).
        r"(?:"
        # Words that name a secret whatever precedes them: PGPASSWORD, APPSECRET, GHTOKEN.
        r"(?i:passw(?:or)?d|passphrase|secret|token|credentials?)"
        # Words that need a separator before them, or "bypass" and "monkey" would be names.
        r"|(?<![A-Za-z0-9])(?i:(?:[A-Za-z0-9]{1,32}[_-]){0,4}(?:pass|pwd"
        r"|(?:api|secret|private|access|master|encryption|signing|account|client)[_-]?key))"
        # Environment-variable names in capitals: REDISPASS=, MYSQLPWD=, FOO_KEY=, FOO_AUTH=.
        r"|(?<![A-Za-z0-9])[A-Z0-9]{0,32}(?:PASS|PWD)"
        r"|(?<![A-Za-z0-9])(?:[A-Z0-9]{1,32}_){1,4}(?:KEY|CREDENTIAL|CREDENTIALS|AUTH))"
        rf"{_ASSIGN}(?P<secret>{_REFERENCE}(?(q){_QUOTED}|{_UNQUOTED}))",
    ),
)


# For each built-in rule, substrings (lower case) that every match contains at least one of.
# Most text holds none, so most regexes never run: redaction stays cheap on every record.
_HINTS: dict[str, tuple[str, ...]] = {
    "private-key": ("private key", "putty-user-key-file"),
    "anthropic-key": ("sk-ant-",),
    "openrouter-key": ("sk-or-",),
    "openai-key": ("sk-",),
    "stripe-key": ("k_live_", "k_test_", "whsec_"),
    "aws-access-key": (
        *("akia", "asia", "abia", "acca", "agpa", "aida", "aipa", "anpa", "anva", "aroa"),
        *("apka", "asca", "a3t"),
    ),
    "aws-secret-key": ("secret",),
    "aws-session-token": ("token",),
    "azure-key": ("accountkey", "sharedaccesskey", "sharedsecret", "sig="),
    "github-token": ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    "gitlab-token": ("gl", "gr1348941"),
    "slack-token": ("xox", "xapp-"),
    "provider-key": ("gsk_", "jina_", "pa-", "nvapi-", "xai-", "r8_", "fw_", "pplx-", "tgp_v1_"),
    "refused-key": ("key", "token"),
    "slack-webhook": ("hooks.slack.com",),
    "google-api-key": ("aiza",),
    "huggingface-token": ("hf_",),
    "npm-token": ("npm_",),
    "pypi-token": ("pypi-age",),
    "sendgrid-key": ("sg.",),
    "twilio-key": ("ac", "sk"),
    "mailchimp-key": ("-us",),
    "square-token": ("sq0",),
    "telegram-token": (":aa",),
    "discord-token": (),  # starts with M, N or O: no substring worth testing first
    "artifactory-key": ("akcp",),
    "jwt": ("eyj",),
    "bearer-token": ("bearer",),
    "basic-auth": ("authorization",),
    "url-password": ("@",),  # rarer than "://" in ordinary text; every match has both
    "secret-assignment": ("pass", "pwd", "secret", "key", "token", "credential", "auth"),
}


def _gate(name: str) -> re.Pattern[str] | None:
    if name != "secret-assignment":
        return None
    # Every name this rule knows ends with one of these words (PASSWORD, db_pwd, api-key,
    # CLIENT_SECRET, GHTOKEN, credentials, FOO_AUTH), then an optional quote and the operator.
    return re.compile(
        r"""(?:pass|pwd|secret|token|credential|key|auth)[a-z]{0,6}\\*["']?[ \t]*[:=]"""
    )


@functools.cache
def default_rules() -> tuple[Rule, ...]:
    """The built-in rules, compiled once."""
    return tuple(
        Rule(name, p, _HINTS[name], joins_lines=joins, gate=_gate(name), flags=flags)
        for name, p, flags, joins in _DEFAULT_PATTERNS
    )


# --- views: the text as matched, without what could split a secret ---------------------------


@functools.lru_cache(maxsize=8192)
def _removable(char: str) -> bool:
    # Whitespace controls (\t, \n, ...) separate tokens; every other hidden character may sit
    # inside one.
    return is_hidden(char) and not char.isspace()


@functools.lru_cache(maxsize=8192)
def _mark(char: str) -> bool:
    # A combining mark (U+0301 ...) shows on the character before it, so it can sit inside
    # a key and leave it looking whole. Only the key rules' view drops marks: elsewhere they
    # belong to words ("cafe\u0301").
    return unicodedata.category(char) in ("Mn", "Me")


@functools.lru_cache(maxsize=256)
def _class(chars: frozenset[str]) -> re.Pattern[str]:
    return re.compile("[" + "".join(re.escape(c) for c in sorted(chars)) + "]+")


class _View:
    """*text* without some characters, and the way back from a position in the view to one in
    *text*. ``gaps[i]`` is a view position where ``shift[i]`` characters in all have been
    removed before it."""

    __slots__ = ("gaps", "shift", "text")

    def __init__(self, text: str, remove: re.Pattern[str] | None) -> None:
        self.gaps: list[int] = []
        self.shift: list[int] = []
        if remove is None:
            self.text = text
            return
        pieces: list[str] = []
        removed = last = 0
        for run in remove.finditer(text):
            pieces.append(text[last : run.start()])
            removed += run.end() - run.start()
            self.gaps.append(run.start() - (removed - (run.end() - run.start())))
            self.shift.append(removed)
            last = run.end()
        pieces.append(text[last:])
        self.text = "".join(pieces)

    def original(self, start: int, end: int) -> tuple[int, int]:
        """The span of *text* that the view's ``[start, end)`` (non-empty) came from: from
        its first kept character to its last, with what was removed between them."""
        if not self.gaps:
            return start, end
        i = bisect.bisect_right(self.gaps, start) - 1
        j = bisect.bisect_right(self.gaps, end - 1) - 1
        return (
            start + (self.shift[i] if i >= 0 else 0),
            end + (self.shift[j] if j >= 0 else 0),
        )


def _view(text: str, *, join_lines: bool) -> _View:
    if text.isascii() and text.isprintable():
        return _View(text, None)
    present = set(text)
    chars = {c for c in present if _removable(c)}
    if join_lines:
        chars |= _BREAK_SET.intersection(present)
        chars |= {c for c in present if _mark(c)}
    return _View(text, _class(frozenset(chars)) if chars else None)


def _splice(text: str, spans: list[tuple[int, int]], replacement: str) -> str:
    if not spans:
        return text
    pieces: list[str] = []
    last = 0
    for start, end in spans:
        pieces.append(text[last:start])
        pieces.append(replacement)
        last = end
    pieces.append(text[last:])
    return "".join(pieces)


def _run(text: str, rules: tuple[Rule, ...], *, join_lines: bool, found: list[str]) -> str:
    """One pass of *rules* over *text*'s view; each rule's matches are replaced in *text* as
    written before the next rule runs. Kinds replaced are appended to *found*."""
    view = _view(text, join_lines=join_lines)
    lowered = view.text.lower()
    token_run = _TOKEN_RUN.search(view.text) is not None
    for rule in rules:
        if join_lines and not rule.joins_lines:
            continue
        if not rule.may_match(lowered, token_run):
            continue
        spans: list[tuple[int, int]] = []
        for start, end, match_end in rule.spans(view.text):
            first, last = view.original(start, end)
            if join_lines:
                # Only a match across a line break or a combining mark is this pass's
                # business (the other pass sees the rest with the break as a boundary), and
                # not when the next line opens an assignment: "KEY=sk-...\nOTHER_KEY=..." is
                # two lines, not a key.
                if not any(_joins(c) for c in text[first:last]):
                    continue
                if view.text[match_end : match_end + 1] in ("=", ":"):
                    continue
            spans.append((first, last))
        if spans:
            text = _splice(text, spans, marker(rule.name))
            found.append(rule.name)
            view = _view(text, join_lines=join_lines)
            lowered = view.text.lower()
            token_run = _TOKEN_RUN.search(view.text) is not None
    return text


def register_text_fields(names: tuple[str, ...], limits: Mapping[str, int] | None = None) -> None:
    """The free-text fields of an Episode, which :meth:`Redactor.redact_episode` redacts:
    given by ``_episode`` when it is imported (found from its checks, so a field added later
    is redacted without a change here), so that this module, which the messages of every
    lower layer use, depends on none of them. *limits*: the fields of a bounded length, cut
    back to it after redaction (a marker can be longer than the secret it replaces)."""
    global _TEXT_FIELDS, _FIELD_LIMITS
    _TEXT_FIELDS = names
    _FIELD_LIMITS = dict(limits or {})


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
        """*text* with every secret replaced by its marker (unchanged when there is none).

        A secret split by hidden characters or wrapped over lines is replaced whole, with what
        split it; see the module docstring."""
        return self._redact(text, [])

    def find(self, text: str) -> str | None:
        """The kind of the first secret in *text*, or ``None`` when it holds none: for a value
        that must be refused rather than stored redacted (an episode's ``id``).

        Example::

            Redactor().find("run-42")                     # None
            Redactor().find("AKIAIOSFODNN7EXAMPLE")       # 'aws-access-key'
        """
        found: list[str] = []
        self._redact(text, found)
        return found[0] if found else None

    def _redact(self, text: str, found: list[str]) -> str:
        rules = self.rules
        if _has_break(text) if text.isascii() else any(_joins(c) for c in set(text)):
            # Wrapped tokens first: the other pass would replace only a key's first line.
            text = _run(text, rules, join_lines=True, found=found)
        return _run(text, rules, join_lines=False, found=found)

    def redact_episode(self, episode: _Record) -> _Record:
        """A copy of *episode* with every text field redacted (the same object when nothing
        changed): every field but ``id`` (refuse an id holding a secret with :meth:`find`)
        and the validated ones (``outcome``, ``score``, the times)."""
        fields = _TEXT_FIELDS
        if not self._extra:
            # Fast path for the built-in rules over the plain fields (printable ASCII on one
            # line, the usual case): one search per rule over all of them at once, joined by
            # newlines, which every rule treats as a boundary in this view. Other fields take
            # the full path.
            plain: list[str] = []
            other = False
            for name in fields:
                value = getattr(episode, name)
                for text in value if isinstance(value, list) else (value,):
                    if not text:
                        continue
                    if text.isascii() and text.isprintable():
                        plain.append(text)
                    else:
                        other = True
                        break
                if other:
                    break
            if not other:
                joined = "\n".join(plain)
                lowered = joined.lower()
                run = _TOKEN_RUN.search(joined) is not None
                if not any(
                    r.may_match(lowered, run) and r.pattern.search(joined) for r in self.rules
                ):
                    return episode
        changes: dict[str, Any] = {}
        for name in fields:
            value = getattr(episode, name)
            if isinstance(value, list):
                redacted = [self.redact(v) for v in value]
                if redacted != value:
                    changes[name] = redacted
            elif value:
                cleaned = self.redact(value)
                limit = _FIELD_LIMITS.get(name)
                if limit is not None and len(cleaned) > limit:
                    cleaned = redact_then_cut(value, limit, self)
                if cleaned != value:
                    changes[name] = cleaned
        return dataclasses.replace(episode, **changes) if changes else episode

    def __repr__(self) -> str:
        return f"Redactor(kinds={list(self.kinds)!r})"


_ASCII_BREAK = re.compile(r"[\n\r\x0b\x0c]")


def _has_break(text: str) -> bool:
    return _ASCII_BREAK.search(text) is not None


def _joins(char: str) -> bool:
    """Whether the key rules' view drops *char* where the other view keeps it."""
    return char in _BREAK_SET or _mark(char)


_TEXT_FIELDS: tuple[str, ...] = ()
_FIELD_LIMITS: dict[str, int] = {}


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


def safe_message(text: str, limit: int = 500) -> str:
    """*text* (an error message from a model, a provider, an embedder) fit to be logged, shown
    or emitted: secrets redacted with the built-in rules (a provider may echo the API key it
    refused), hidden and control characters escaped, cut to *limit* characters."""
    from ._unicode import escape_hidden

    cleaned = escape_hidden(_default().redact(" ".join(text.split())))
    return redact_then_cut(cleaned, limit, None)  # the cut never splits a marker


_MARKER = re.compile(r"\[REDACTED:[a-z0-9-]*\]")


def redact_then_cut(
    text: str, limit: int, redactor: Redactor | None, *, ellipsis: str = "…"
) -> str:
    """*text* redacted with *redactor* (``None``: as it is), then cut to at most *limit*
    characters ending with *ellipsis*: the one order that never leaves the head of a secret
    the cut made unrecognisable. A cut never splits a marker either (it goes before it)."""
    if redactor is not None:
        text = redactor.redact(text)
    if len(text) <= limit:
        return text
    end = max(0, limit - len(ellipsis))
    for marker in _MARKER.finditer(text, max(0, end - 64), end + 64):
        if marker.start() < end < marker.end():
            end = marker.start()
    return text[:end].rstrip() + ellipsis
