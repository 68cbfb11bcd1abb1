"""``deepcrew-episodic``: look inside an episodic memory, and make it forget.

Usage: ``deepcrew-episodic [--store STORE] [--namespace NS] COMMAND ...`` (``--store`` and
``--namespace`` may also follow the command). ``docs/cli.md`` is the user guide.

Exit status: 0 success, 2 usage error, 1 any other failure. A failure is one line on stderr,
never a traceback, whatever raised it.

What reaches the terminal is made safe in one place (:class:`Output`): every line of human output
is escaped (``_unicode.escape_hidden``: control, format and invisible characters, line breaks), so
stored text (ids included) can neither drive the terminal nor forge a line; JSON output escapes the
same characters as ``\\uXXXX``. Every stream (stdout, stderr, JSON, exports, argparse's own
messages, warnings) passes through :class:`Scrubber`, which removes the secrets of every store URL
the command was given: a password in any of its spellings, and the user name that goes with it.

This module imports only the standard library at start-up; the providers and anyio load when a
command needs them, and neither pydantic nor litellm ever does, so ``recall`` starts fast.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import os
import re
import stat
import sys
import time
import unicodedata
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from ._exceptions import EpisodicMemoryError, StorageError
from ._unicode import escape_hidden, is_hidden

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

    from ._episode import Episode
    from ._memory import EpisodicMemory
    from ._recall import Scored
    from .providers._base import MemoryProvider

__all__ = ["main"]

T = TypeVar("T")

PROG = "deepcrew-episodic"
STORE_ENV = "DEEPCREW_EPISODIC_STORE"
NAMESPACE_ENV = "DEEPCREW_EPISODIC_NAMESPACE"
MAX_EPISODES_ENV = "DEEPCREW_EPISODIC_MAX_EPISODES"
MAX_AGE_ENV = "DEEPCREW_EPISODIC_MAX_AGE"
DEFAULT_NAMESPACE = "default"
DEFAULT_MAX_EPISODES = 100
# Far above any real ring or result count, and small enough that every store keeps it exactly.
MAX_COUNT = 1_000_000_000
# The same values as _episode.OUTCOMES (a test keeps them equal); repeated here so that
# parsing the command line imports nothing of the library.
OUTCOMES = ("success", "failure", "partial", "unknown")
INTENTS = ("any", "what_failed", "what_worked")
HISTOGRAM_WIDTH = 30
# An export holds the store's data: it gets the JSON store file's permission bits, and these
# for a store that has none of its own (redis, sqlite, memory:).
EXPORT_MODE = 0o600

# ASCII digits only: re's \d, int() and float() also take "٣" (Arabic-Indic three).
_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*([smhdw])", re.ASCII)
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DATE_ONLY = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", re.ASCII)
_INTEGER = re.compile(r"\+?[0-9]+", re.ASCII)
_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", re.ASCII)
# Generic redaction, whatever the URL: userinfo (user:password@ or token@) and a password
# given as a query parameter.
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)([^\s/@:]*)(:?)[^\s/@]*@")
_QUERY_SECRET = re.compile(
    r"(?i)([?&;][a-z_]*(?:password|passwd|pwd|secret|token)=)[^&\s]*?"
    r"(?=$|[&\s]|[:,;)'\"]\s|[:,;)'\"]$)"
)
_SECRET_KEYS = ("password", "passwd", "pwd", "secret", "token")
_REDACTED = "***"


class CliError(Exception):
    """A failure reported as one line on stderr; exit status 1."""


class UsageError(CliError):
    """A command line that cannot be run as given; exit status 2."""


# --- secrets and output -----------------------------------------------------------------------


def url_secrets(spec: str) -> set[str]:
    """The secrets in a store URL, as written and as a client would decode them: the
    password in the userinfo or in a ``?password=`` parameter (read both the way
    ``urllib`` and redis-py parse it and naively, up to the last ``@``, since an unencoded
    ``#``, ``/`` or ``?`` in a password changes how a parser splits the URL), and the user
    name that goes with a password."""
    if "://" not in spec:
        return set()
    from urllib.parse import unquote, unquote_plus, urlsplit

    raw: set[str] = set()
    users: set[str] = set()
    rest = spec.partition("://")[2]
    if "@" in rest:
        _user, colon, password = rest.rpartition("@")[0].partition(":")
        # Not when the "@" is in a "?password=" value (redis://h:1/0?password=a@b).
        if colon and password and not re.search(r"(?i)[?&;]\w*password=", password):
            raw.add(password)
    if not ambiguous_url(spec):
        # (An ambiguous URL is refused before any client reads it: see Settings.)
        try:
            parts = urlsplit(spec)
            if parts.password:
                raw.add(parts.password)
                users.add(parts.username or "")
        except ValueError:  # a malformed URL (an unclosed "[") is still scrubbed naively
            pass
    query_user = ""
    for key, value in re.findall(r"[?&;#]([^=&;#?]*)=([^&;]*)", spec):
        name = unquote_plus(key).lower()
        if any(word in name for word in _SECRET_KEYS):
            raw.add(value)
            raw.add(value.partition("#")[0])
        elif name == "username":
            query_user = value
    if query_user and raw:
        users.add(query_user)
    secrets: set[str] = set()
    for value in raw | users:
        # redis-py percent-decodes a query value that parse_qs already decoded: both, and more.
        secrets |= {value, unquote(value), unquote_plus(value), unquote(unquote_plus(value))}
    # "default" is Redis's built-in user name, and what an empty user name means: no secret.
    return {s for s in secrets if s and s != "default"}


def ambiguous_url(spec: str) -> bool:
    """Whether *spec* has a password followed by an unencoded ``#``, ``/`` or ``?`` before its
    last ``@``: every URL parser then ends the userinfo early and reads a piece of the
    password as the host, port or path (redis-py would send it to a host in an error)."""
    rest = spec.partition("://")[2]
    userinfo = rest.rpartition("@")[0]
    return (
        ":" in userinfo
        and any(c in userinfo for c in "#/?")
        and not re.search(r"(?i)[?&;]\w*password=", userinfo)
    )


def secret_forms(secret: str) -> set[str]:
    """Every spelling of *secret* an output could carry: raw, Unicode-normalised, percent-
    encoded (either case of hex, ``+`` or ``%20`` for a space), and escaped the ways a
    ``repr``, JSON or :func:`escape_hidden` spell it."""
    from urllib.parse import quote, quote_plus

    bases = {secret, unicodedata.normalize("NFC", secret), unicodedata.normalize("NFD", secret)}
    forms: set[str] = set()
    for text in bases:
        encoded = {quote(text, safe=""), quote(text), quote_plus(text, safe=""), quote_plus(text)}
        encoded |= {re.sub("%[0-9A-F]{2}", lambda m: m.group().lower(), e) for e in encoded}
        slashed = text.replace("\\", "\\\\")
        escaped = {
            repr(text)[1:-1],
            text.encode("unicode_escape").decode("ascii"),
            json.dumps(text)[1:-1],
            json.dumps(text, ensure_ascii=False)[1:-1],
            _json_text(json.dumps(text, ensure_ascii=False))[1:-1],
            slashed.replace("'", "\\'"),
            slashed.replace('"', '\\"'),
        }
        forms |= {text} | encoded | escaped
    forms |= {escape_hidden(f) for f in forms}
    return {f for f in forms if f}


class Scrubber:
    """Removes every known spelling of the store's secrets from a text (see
    :func:`url_secrets` and :func:`secret_forms`), and with ``generic`` also any URL's userinfo
    and ``password=`` parameter. Counts what it removed from data."""

    def __init__(self) -> None:
        self._forms: set[str] = set()
        self._pattern: re.Pattern[str] | None = None
        self.removed_from_data = 0

    def learn(self, spec: str) -> None:
        for secret in url_secrets(spec):
            self._forms |= secret_forms(secret)
        if self._forms:
            # Longest first, so that no shorter form leaves a piece of a longer one behind.
            ordered = sorted(self._forms, key=lambda f: (-len(f), f))
            self._pattern = re.compile("|".join(map(re.escape, ordered)))

    def known(self, text: str) -> tuple[str, int]:
        if self._pattern is None:
            return text, 0
        # Repeated: a removal can join two pieces into another spelling ("hun" "***" ...).
        total = 0
        while True:
            text, count = self._pattern.subn(_REDACTED, text)
            total += count
            if not count:
                return text, total

    def __call__(self, text: str, *, generic: bool = True) -> str:
        text = self.known(text)[0]
        if generic:
            text = _USERINFO.sub(_redact_userinfo, text)
            text = _QUERY_SECRET.sub(rf"\1{_REDACTED}", text)
        return text

    def data(self, value: Any) -> Any:
        """*value* (JSON-like) with the known secrets removed from every string in it."""
        if isinstance(value, str):
            text, count = self.known(value)
            self.removed_from_data += count
            return text
        if isinstance(value, dict):
            return {self.data(k): self.data(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.data(v) for v in value]
        return value


def _redact_userinfo(match: re.Match[str]) -> str:
    scheme, user, colon = match.groups()
    if not colon:
        return f"{scheme}{_REDACTED}@"
    return f"{scheme}{_REDACTED if user else ''}:{_REDACTED}@"


class Output:
    """Where every byte the command prints goes through: escaped, scrubbed, and never failing
    on a character the stream cannot encode."""

    def __init__(self) -> None:
        self.scrub = Scrubber()

    def line(self, stream: SupportsWrite[str], text: str) -> None:
        """One line of human output: every hidden character spelled out, secrets removed."""
        safe = self.scrub(escape_hidden(self.scrub(text)))
        self.write(stream, safe + "\n")

    def text(self, stream: SupportsWrite[str], text: str) -> None:
        """Several lines of human output (argparse's help and messages)."""
        for piece in text.splitlines():
            self.line(stream, piece)

    def data(self, stream: SupportsWrite[str], text: str) -> None:
        """Machine output (JSON, JSONL), already escaped by :func:`to_json`."""
        text, count = self.scrub.known(text)
        self.scrub.removed_from_data += count
        self.write(stream, text)

    @staticmethod
    def write(stream: SupportsWrite[str], text: str) -> None:
        try:
            stream.write(text)
        except UnicodeEncodeError:
            # A stream that cannot carry a character (LANG=C, a Latin-1 terminal).
            encoding = getattr(stream, "encoding", None) or "ascii"
            stream.write(text.encode(encoding, "backslashreplace").decode(encoding))


OUTPUT = Output()


class _SafeFormatter(logging.Formatter):
    """The library's warnings, one escaped and scrubbed line each (never a traceback)."""

    def format(self, record: logging.LogRecord) -> str:
        text = f"{PROG}: {record.levelname.lower()}: {record.getMessage()}"
        return OUTPUT.scrub(escape_hidden(OUTPUT.scrub(text)))


class _Parser(argparse.ArgumentParser):
    """argparse, with its messages (which echo arguments, a ``--store`` URL included)
    escaped and scrubbed like every other output."""

    def _print_message(self, message: str, file: SupportsWrite[str] | None = None) -> None:
        if message:
            OUTPUT.text(file or sys.stderr, message)

    def error(self, message: str) -> NoReturn:
        """A usage error: one line (no usage block), exit status 2."""
        command = self.prog.removeprefix(PROG).strip()
        where = f"{command}: " if command else ""
        self.exit(2, f"{PROG}: error: {where}{' '.join(message.split())} (see --help)\n")


# --- values on the command line ---------------------------------------------------------------


def _shown(text: str) -> str:
    # Quoted as given (the output escapes it) and cut: a value may be megabytes long.
    return f"'{text[:60]}…'" if len(text) > 60 else f"'{text}'"


class _OutOfRange(argparse.ArgumentTypeError):
    """A value of the right form that no date or duration can hold."""


def parse_duration(text: str) -> timedelta:
    """``90s``, ``30m``, ``12h``, ``7d``, ``2w`` (or a combination: ``1d12h``)."""
    compact = text.strip().lower()
    parts = list(_DURATION.finditer(compact))
    if not parts or "".join(p.group(0) for p in parts).replace(" ", "") != compact.replace(" ", ""):
        raise argparse.ArgumentTypeError(
            f"{_shown(text)} is not a duration (use a number and a unit: 90s, 30m, 12h, 7d, 2w)"
        )
    try:
        value = timedelta(seconds=sum(float(p.group(1)) * _UNITS[p.group(2)] for p in parts))
    except (OverflowError, ValueError):
        raise _OutOfRange(
            f"{_shown(text)} is too long a duration (at most {timedelta.max.days} days)"
        ) from None
    if value <= timedelta(0):
        raise argparse.ArgumentTypeError(f"{_shown(text)}: a duration must be positive")
    return value


def _parse_iso(text: str) -> datetime:
    value = text.strip()
    if value.endswith(("Z", "z")):
        value = value[:-1] + "+00:00"
    if not value.isascii():
        raise ValueError("not ASCII")  # fromisoformat takes "٢٠٢٤-..." too
    moment = datetime.fromisoformat(value)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def parse_when(text: str, *, end_of_day: bool = False) -> datetime:
    """A point in time: a duration meaning "that long ago" (``7d``), or an ISO-8601 date or
    time (naive means UTC). With *end_of_day*, a bare date means the end of that day."""
    try:
        ago: timedelta | None = parse_duration(text)
    except _OutOfRange:
        raise
    except argparse.ArgumentTypeError:
        ago = None
    try:
        if ago is not None:
            return datetime.now(UTC) - ago
        try:
            moment = _parse_iso(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{_shown(text)} is neither a duration (7d, 12h) nor an ISO-8601 date or time"
            ) from None
        if end_of_day and _DATE_ONLY.fullmatch(text.strip()):
            moment += timedelta(days=1)
        moment.astimezone(UTC)  # a time every later comparison can use
        return moment
    except OverflowError:
        raise _OutOfRange(f"{_shown(text)} is out of range (years 1 to 9999)") from None


def parse_until(text: str) -> datetime:
    return parse_when(text, end_of_day=True)


def parse_forget_after(text: str) -> str:
    """When an episode expires: a duration from now (``30d``) or an ISO-8601 time."""
    try:
        try:
            moment = datetime.now(UTC) + parse_duration(text)
        except _OutOfRange:
            raise
        except argparse.ArgumentTypeError:
            try:
                moment = _parse_iso(text)
            except ValueError:
                raise argparse.ArgumentTypeError(
                    f"{_shown(text)} is neither a duration from now (30d) nor an ISO-8601 time"
                ) from None
        utc = moment.astimezone(UTC)
    except OverflowError:
        raise _OutOfRange(f"{_shown(text)} is out of range (years 1 to 9999)") from None
    # Not strftime: it writes year 5 as "5", not "0005".
    return (
        f"{utc.year:04d}-{utc.month:02d}-{utc.day:02d}T"
        f"{utc.hour:02d}:{utc.minute:02d}:{utc.second:02d}Z"
    )


def positive_int(text: str) -> int:
    if not _INTEGER.fullmatch(text.strip()):
        raise argparse.ArgumentTypeError(f"{_shown(text)} is not an integer")
    value = int(text.strip())
    if value < 1:
        raise argparse.ArgumentTypeError(f"{_shown(text)}: must be at least 1")
    if value > MAX_COUNT:
        raise argparse.ArgumentTypeError(f"{_shown(text)}: must be at most {MAX_COUNT}")
    return value


def score_value(text: str) -> float:
    if not _NUMBER.fullmatch(text.strip()):
        raise argparse.ArgumentTypeError(f"{_shown(text)} is not a number")
    value = float(text)
    if value != value or value in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"{_shown(text)} is not a finite number")
    return value


def safe_label(store: str) -> str:
    """The store as shown in messages: no secret of a URL is ever printed."""
    scrub = Scrubber()
    scrub.learn(store)
    return scrub(store)


# --- the parser -------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    # The shared options are declared on the top parser and on every sub-parser, with
    # SUPPRESS as default, so they work before or after the command and a later absence
    # never overrides an earlier value.
    common = _Parser(add_help=False)
    where = common.add_argument_group("store")
    where.add_argument(
        "--store",
        default=argparse.SUPPRESS,
        metavar="STORE",
        help=f"a .json file, a .db/.sqlite file, a redis:// or rediss:// URL, or memory: "
        f"(default: ${STORE_ENV})",
    )
    where.add_argument(
        "-n",
        "--namespace",
        default=argparse.SUPPRESS,
        help=f"the log within the store (default: ${NAMESPACE_ENV}, else {DEFAULT_NAMESPACE!r})",
    )
    where.add_argument(
        "--max-episodes",
        type=positive_int,
        default=argparse.SUPPRESS,
        metavar="N",
        help=f"ring size to read with (default: ${MAX_EPISODES_ENV}, else the log's own, else "
        f"{DEFAULT_MAX_EPISODES}); a larger value grows the ring on a write, a smaller one never "
        f"shrinks it (see 'shrink')",
    )
    where.add_argument(
        "--max-age",
        type=parse_duration,
        default=argparse.SUPPRESS,
        metavar="AGE",
        help=f"retention: hide (and let sweep delete) episodes older than this, e.g. 90d "
        f"(default: ${MAX_AGE_ENV}, else none)",
    )

    parser = _Parser(
        prog=PROG,
        parents=[common],
        description="Look inside an agent's episodic memory, and make it forget.",
        epilog="Run '%(prog)s COMMAND --help' for a command's options. Guide: docs/cli.md",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, help: str, *, reading: bool = False) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, parents=[common], help=help, description=help)
        if reading:
            sub.add_argument("--json", action="store_true", help="machine-readable output")
        return sub

    def filters(sub: argparse.ArgumentParser) -> None:
        sub.add_argument(
            "--outcome", action="append", choices=OUTCOMES, help="keep this outcome (repeatable)"
        )
        sub.add_argument(
            "--tag", action="append", dest="tags", metavar="TAG", help="keep this tag (repeatable)"
        )

    rec = command("record", "record an episode (from flags, or from a JSON or JSONL file)")
    rec.add_argument("--query", "-q", help="what the agent was asked")
    rec.add_argument("--response", "-r", default="", help="what it answered")
    rec.add_argument("--outcome", choices=OUTCOMES, default="unknown")
    rec.add_argument("--score", type=score_value, help="how well it went (a number)")
    rec.add_argument("--tool", action="append", dest="tools", default=[], metavar="TOOL")
    rec.add_argument("--tag", action="append", dest="tags", default=[], metavar="TAG")
    rec.add_argument("--reflection", help="a one-line lesson")
    rec.add_argument("--agent-id", default="")
    rec.add_argument(
        "--forget-after",
        type=parse_forget_after,
        metavar="WHEN",
        help="expire the episode: a duration from now (30d) or an ISO-8601 time",
    )
    rec.add_argument(
        "--file",
        "-f",
        metavar="PATH",
        help="read episodes from a JSON object, a JSON array or JSONL ('-': stdin)",
    )
    rec.add_argument("--json", action="store_true", help="print the stored episodes as JSON")

    rc = command("recall", "the episodes most relevant to a query, best first", reading=True)
    rc.add_argument("query", metavar="QUERY")
    rc.add_argument("-k", "--top-k", type=positive_int, default=3, metavar="N")
    rc.add_argument("--intent", choices=INTENTS, default="any")
    rc.add_argument("-v", "--verbose", action="store_true", help="show each score and why")
    filters(rc)

    tl = command("timeline", "episodes in the order they were recorded", reading=True)
    tl.add_argument("--since", type=parse_when, metavar="WHEN", help="7d, 12h, or a date/time")
    tl.add_argument(
        "--until", type=parse_until, metavar="WHEN", help="before this (a date includes the day)"
    )
    tl.add_argument("--limit", type=positive_int, metavar="N", help="only the newest N")
    filters(tl)

    command(
        "stats", "counts by outcome, size, oldest and newest, expired and corrupt", reading=True
    )

    ex = command("export", "every episode as JSONL (oldest first)")
    ex.add_argument("-o", "--output", metavar="PATH", help="write to a file, not stdout")

    im = command("import", "add episodes from JSONL, or from a log written by deepcrew-ai")
    im.add_argument("path", metavar="PATH", help="the file ('-': stdin)")
    im.add_argument(
        "--from-namespace",
        metavar="NS",
        help="the namespace to read in a deepcrew-ai file (default: --namespace if present, "
        "else its only one)",
    )

    fg = command("forget", "delete episodes for real: by --id, or by a filter")
    fg.add_argument("--id", action="append", dest="ids", metavar="ID", help="(repeatable)")
    filters(fg)
    fg.add_argument("--before", type=parse_when, metavar="WHEN", help="recorded before this")
    fg.add_argument("--containing", metavar="TEXT", help="text in any field (case-insensitive)")
    fg.add_argument(
        "--corrupt",
        action="store_true",
        help="delete the stored records that cannot be decoded ('stats' counts them); alone",
    )
    fg.add_argument("--dry-run", action="store_true", help="list what would be deleted")
    fg.add_argument("-y", "--yes", action="store_true", help="do not ask (filter deletions)")

    cl = command("clear", "delete every episode of the namespace")
    cl.add_argument("-y", "--yes", action="store_true", help="do not ask")

    command("sweep", "delete expired episodes and stray keys for real")

    sh = command("shrink", "lower the log's ring size to N, deleting the older episodes for good")
    sh.add_argument("size", type=positive_int, metavar="N", help="the new ring size")
    sh.add_argument("-y", "--yes", action="store_true", help="do not ask")
    return parser


def _version() -> str:
    from . import __version__

    return __version__


# --- the store ------------------------------------------------------------------------------


class Settings:
    """The resolved shared options."""

    def __init__(self, args: argparse.Namespace) -> None:
        env = os.environ
        store = getattr(args, "store", None) or env.get(STORE_ENV, "")
        if not store:
            raise UsageError(f"no store given: pass --store or set {STORE_ENV}")
        self.store: str = store
        OUTPUT.scrub.learn(store)
        if store_kind(store) == "redis" and ambiguous_url(store):
            raise UsageError(
                f"--store {OUTPUT.scrub(store)}: the URL is ambiguous; percent-encode '@', '#', "
                f"'/' and '?' in a user name, password or parameter (%40, %23, %2F, %3F)"
            )
        self.namespace: str = (
            getattr(args, "namespace", None) or env.get(NAMESPACE_ENV) or DEFAULT_NAMESPACE
        )
        max_episodes = getattr(args, "max_episodes", None)
        if max_episodes is None and env.get(MAX_EPISODES_ENV):
            max_episodes = _from_env(MAX_EPISODES_ENV, positive_int)
        # None: the ring size the log was last written with (see stored_ring)
        self.max_episodes: int | None = max_episodes
        max_age = getattr(args, "max_age", None)
        if max_age is None and env.get(MAX_AGE_ENV):
            max_age = _from_env(MAX_AGE_ENV, parse_duration)
        self.max_age: timedelta | None = max_age
        self.label = OUTPUT.scrub(store)
        # A reading command over a JSON file runs without an event loop (see run_now).
        self.loop_free = False


def _from_env(name: str, parse: Callable[[str], Any]) -> Any:
    try:
        return parse(os.environ[name])
    except argparse.ArgumentTypeError as exc:
        raise UsageError(f"${name}: {exc}") from None


def store_kind(spec: str) -> str | None:
    """``"memory"``, ``"redis"``, ``"json"`` or ``"sqlite"``: what *spec* names, if anything."""
    lowered = spec.lower()
    if spec == "memory:":
        return "memory"
    if lowered.startswith(("redis://", "rediss://")):
        return "redis"  # checked first: a URL may well end in ".json"
    if lowered.endswith(".json"):
        return "json"
    if lowered.endswith((".db", ".sqlite", ".sqlite3")):
        return "sqlite"
    return None


def open_store(spec: str, *, create: bool) -> MemoryProvider:
    """The provider *spec* names. A file store that does not exist is an error unless the
    command creates it (``record``, ``import``): a typo must not look like an empty memory."""
    kind = store_kind(spec)
    if kind == "memory":
        from .providers._dict import InMemoryProvider

        return InMemoryProvider()
    if kind == "redis":
        from .providers._redis import RedisMemoryProvider

        return RedisMemoryProvider(spec)
    if kind == "json":
        _check_file(spec, create, "JSON")
        from .providers._file import FileMemoryProvider

        return FileMemoryProvider(spec)
    if kind == "sqlite":
        _check_file(spec, create, "SQLite")
        try:
            from .providers._sqlite import SQLiteMemoryProvider
        except ModuleNotFoundError as exc:
            if exc.name != f"{__package__}.providers._sqlite":
                raise
            raise CliError(
                f"{spec}: this version of deepcrew-episodic has no SQLite store; "
                f"use a .json file or a redis:// URL"
            ) from None
        return SQLiteMemoryProvider(spec)
    raise UsageError(
        f"--store '{safe_label(spec)}': expected a path ending in .json, .db or .sqlite, "
        f"a redis:// or rediss:// URL, or memory:"
    )


def _check_file(spec: str, create: bool, kind: str) -> None:
    path = Path(spec)
    if path.is_dir():
        raise CliError(f"{spec} is a directory, not a {kind} store")
    if not create and not path.exists():
        raise CliError(
            f"no store at {spec}: the file does not exist (check the path; "
            f"'record' and 'import' create it)"
        )


async def make_memory(
    provider: MemoryProvider, settings: Settings, command: str = "stats"
) -> EpisodicMemory:
    """The memory a command works on. Its ring is the log's own unless ``--max-episodes``
    says otherwise; a smaller ``--max-episodes`` only narrows what a reading command shows:
    a writing command keeps the log's ring, since only ``shrink`` deletes by ring size."""
    from ._memory import EpisodicMemory

    ring = await stored_ring(provider, settings.namespace)
    given = settings.max_episodes
    if given is not None and (command in _READS or given >= ring):
        ring = given
    elif given is not None:
        note(
            f"--max-episodes {given} is smaller than the log's ring ({ring}): '{command}' keeps "
            f"{ring}; 'shrink {given}' deletes what falls outside a smaller ring"
        )
    return EpisodicMemory(
        provider, namespace=settings.namespace, max_episodes=ring, max_age=settings.max_age
    )


async def stored_ring(provider: MemoryProvider, namespace: str) -> int:
    """The ring size the log was last written with (deepcrew-ai's slot count for its logs),
    else the library's default. A command with a smaller ring than the application's would
    show too little, and a ``record`` with it would delete what falls out of *its* ring."""
    from ._log import EpisodeLog

    head = await EpisodeLog(provider, namespace, DEFAULT_MAX_EPISODES).read_head()
    if head.ring:
        return head.ring
    if head.legacy is not None:
        return max(head.legacy.count, DEFAULT_MAX_EPISODES)
    return DEFAULT_MAX_EPISODES


# --- output helpers ---------------------------------------------------------------------------


def out(text: str = "") -> None:
    """One line of human output on stdout (escaped and scrubbed: see :class:`Output`)."""
    OUTPUT.line(sys.stdout, text)


def note(text: str) -> None:
    OUTPUT.line(sys.stderr, f"{PROG}: {text}")


_NOT_PLAIN = re.compile(r"[^\x20-\x7e\n]")


def _json_escape(char: str) -> str:
    code = ord(char)
    if code > 0xFFFF:  # a surrogate pair, as JSON spells a code point beyond the BMP
        high, low = divmod(code - 0x10000, 0x400)
        return f"\\u{0xD800 + high:04x}\\u{0xDC00 + low:04x}"
    return f"\\u{code:04x}"


def _json_text(text: str) -> str:
    # Outside strings json.dumps writes only printable ASCII and (with indent) line breaks,
    # so every other hidden character found here is inside a string, where \uXXXX is exact.
    return _NOT_PLAIN.sub(
        lambda m: (
            _json_escape(m.group())
            if is_hidden(m.group()) or unicodedata.category(m.group()) in ("Zl", "Zp")
            else m.group()
        ),
        text,
    )


def to_json(value: Any, indent: int | None = None) -> str:
    """JSON that keeps readable text readable and spells every hidden character (controls,
    the C1 range json.dumps leaves raw, bidi and zero-width characters, lone surrogates from
    undecodable bytes, line separators) as ``\\uXXXX``: the data is exact, the terminal safe."""
    return _json_text(json.dumps(OUTPUT.scrub.data(value), ensure_ascii=False, indent=indent))


def dump(value: Any) -> None:
    OUTPUT.data(sys.stdout, to_json(value, indent=2) + "\n")


def episode_dict(episode: Episode) -> dict[str, Any]:
    return episode.to_dict()


def _one_line(text: str, limit: int) -> str:
    # No line break splits an item; the other hidden characters are escaped by out().
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def _when(episode: Episode) -> str:
    stamp = episode.timestamp
    return f"{stamp[:10]} {stamp[11:16]}" if len(stamp) >= 16 else (stamp or "undated").ljust(16)


def _score(episode: Episode) -> str:
    return f"{episode.score:.2f}" if episode.score is not None else "  - "


def _timeline_line(episode: Episode) -> str:
    tags = "  " + _one_line(" ".join(f"#{t}" for t in episode.tags), 80) if episode.tags else ""
    return (
        f"{_when(episode)}  {episode.outcome:<8} {_score(episode)}  "
        f"{_one_line(episode.query, 70)}{tags}  [{episode.id[:12]}]"
    )


def _recall_lines(rank: int, found: Scored, verbose: bool) -> list[str]:
    ep = found.episode
    lines = [f"{rank}. {_when(ep)}  {ep.outcome:<8} {_score(ep)}  {_one_line(ep.query, 90)}"]
    if ep.reflection:
        lines.append(f"   lesson: {_one_line(ep.reflection, 160)}")
    elif ep.response:
        lines.append(f"   answer: {_one_line(ep.response, 160)}")
    if verbose:
        lines.append(f"   score {found.score:.3f}: {found.why()}")
        extra = [f"id {ep.id}"]
        if ep.tags:
            extra.append("tags " + ", ".join(ep.tags))
        if ep.tools_used:
            extra.append("tools " + ", ".join(ep.tools_used))
        lines.append("   " + _one_line("  ".join(extra), 200))
    return lines


async def _hint_if_empty(memory: EpisodicMemory) -> None:
    """A namespace with no key at all is more often a typo than an empty memory: say so."""
    from urllib.parse import unquote

    from ._log import encode_namespace

    keys = await memory.backend.keys("episodic:")
    own = f"episodic:{encode_namespace(memory.namespace)}:"
    if any(k.startswith(own) for k in keys):
        return
    names = sorted({unquote(k.split(":", 2)[1]) for k in keys if k.count(":") >= 2})
    where = f"; namespaces in this store: {', '.join(names)}" if names else ""
    note(f"namespace '{memory.namespace}' holds no episodes{where}")


async def _stored(memory: EpisodicMemory) -> list[tuple[int, Episode]]:
    """Every stored episode, expired ones included (for ids, imports and deletions)."""
    await memory._sync()
    return list(memory._log.cached())


def _confirm(question: str) -> bool:
    """Ask on the terminal. Without one (a pipe, /dev/null, a closed stdin) the answer is no:
    a script must say --yes, and nothing ever waits on a stdin that will never answer."""
    stdin = sys.stdin
    try:
        interactive = stdin is not None and stdin.isatty()
    except (ValueError, OSError):
        interactive = False
    if not interactive:
        return False
    OUTPUT.write(sys.stderr, OUTPUT.scrub(escape_hidden(f"{question} [y/N] ")))
    sys.stderr.flush()
    answer = stdin.readline()
    return answer.strip().lower() in {"y", "yes"}


# --- commands ---------------------------------------------------------------------------------


async def cmd_record(args: argparse.Namespace, memory: EpisodicMemory) -> int:
    from ._episode import Episode

    if args.file is not None:
        records = _read_records(args.file)
        episodes = [_validated(Episode, item, where) for where, item in records]
        if args.forget_after:
            episodes = [
                e if e.forget_after else dataclasses.replace(e, forget_after=args.forget_after)
                for e in episodes
            ]
    else:
        fields: dict[str, Any] = {
            "query": args.query,
            "response": args.response,
            "outcome": args.outcome,
            "tools_used": args.tools,
            "tags": args.tags,
            "agent_id": args.agent_id,
        }
        if args.score is not None:
            fields["score"] = args.score
        if args.reflection is not None:
            fields["reflection"] = args.reflection
        if args.forget_after is not None:
            fields["forget_after"] = args.forget_after
        episodes = [_validated(Episode, fields, "the episode")]
    if args.file is not None:
        _refuse_stored_ids(episodes, {ep.id for _, ep in await _stored(memory)})
    stored = [await memory.record(episode) for episode in episodes]
    _report_redactions(episodes, stored)
    if args.json:
        dump([episode_dict(e) for e in stored])
    else:
        for episode in stored:
            out(f"recorded {episode.id} ({episode.outcome})")
    return 0


def _refuse_stored_ids(episodes: Sequence[Episode], present: set[str]) -> None:
    """All or nothing: an id already stored (or given twice) is refused before any write."""
    seen: set[str] = set()
    for episode in episodes:
        if episode.id and (episode.id in present or episode.id in seen):
            raise CliError(
                f"an episode with id '{episode.id}' is already stored (or given twice): nothing "
                f"was recorded; 'import' skips episodes that are already present"
            )
        seen.add(episode.id)


def _validated(cls: type[Episode], item: Any, where: str) -> Episode:
    from ._exceptions import InvalidEpisodeError

    try:
        return cls.coerce(item)
    except InvalidEpisodeError as exc:
        raise CliError(f"{where}: {exc}") from None


def _report_redactions(before: Sequence[Episode], after: Sequence[Episode]) -> None:
    kinds: dict[str, int] = {}
    for old, new in zip(before, after, strict=True):
        was, now = old.to_json(), new.to_json()
        for kind in re.findall(r"\[REDACTED:([a-z0-9-]+)\]", now):
            kinds[kind] = kinds.get(kind, 0) + 1
        for kind in re.findall(r"\[REDACTED:([a-z0-9-]+)\]", was):
            kinds[kind] -= 1
    found = {k: n for k, n in kinds.items() if n > 0}
    if found:
        listed = ", ".join(f"{n} {k}" for k, n in sorted(found.items()))
        note(f"redacted before storing: {listed}")


def _read_text(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CliError(f"{path}: no such file") from None
    except UnicodeDecodeError as exc:
        raise CliError(f"{path}: not UTF-8 text ({exc.reason})") from None


def _read_records(path: str) -> list[tuple[str, Any]]:
    """(where, item) for each record in a JSON object, a JSON array or a JSONL file."""
    text = _read_text(path)
    name = "stdin" if path == "-" else path
    try:
        whole = json.loads(text)
    except json.JSONDecodeError:
        whole = None
    else:
        if isinstance(whole, dict):
            return [(name, whole)]
        if isinstance(whole, list):
            return [(f"{name}: item {i}", item) for i, item in enumerate(whole, 1)]
        raise CliError(f"{name}: expected a JSON object, an array of objects, or JSONL")
    records: list[tuple[str, Any]] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            records.append((f"{name}: line {number}", json.loads(line)))
        except json.JSONDecodeError as exc:
            raise CliError(f"{name}: line {number} is not JSON ({exc.msg})") from None
    return records


async def cmd_recall(args: argparse.Namespace, memory: EpisodicMemory) -> int:
    found = await memory.explain(
        args.query, args.top_k, intent=args.intent, tags=args.tags, outcome=args.outcome
    )
    if args.json:
        items = []
        for s in found:
            item = episode_dict(s.episode)
            if args.verbose:
                item["recall"] = {
                    "score": s.score,
                    "relevance": s.relevance,
                    "recency": s.recency,
                    "outcome_weight": s.outcome_weight,
                    "matched": list(s.matched),
                    "why": s.why(),
                }
            items.append(item)
        dump(items)
    else:
        for rank, s in enumerate(found, 1):
            for line in _recall_lines(rank, s, args.verbose):
                out(line)
    if not found:
        if not args.json:
            note(
                f"no episode in namespace '{memory.namespace}' is relevant to {_shown(args.query)}"
            )
        await _hint_if_empty(memory)
    return 0


async def cmd_timeline(args: argparse.Namespace, memory: EpisodicMemory) -> int:
    since = args.since.timestamp() if args.since else None
    until = args.until.timestamp() if args.until else None
    outcomes = set(args.outcome) if args.outcome else None
    tags = {t.casefold() for t in args.tags} if args.tags else None
    shown = []
    for ep in await memory.load():
        when = ep.time()
        if (since is not None or until is not None) and when is None:
            continue
        if since is not None and when is not None and when < since:
            continue
        if until is not None and when is not None and when >= until:
            continue
        if outcomes is not None and ep.outcome not in outcomes:
            continue
        if tags is not None and not tags & {t.casefold() for t in ep.tags}:
            continue
        shown.append(ep)
    if args.limit:
        shown = shown[-args.limit :]
    if args.json:
        dump([episode_dict(e) for e in shown])
    else:
        for ep in shown:
            out(_timeline_line(ep))
    if not shown:
        await _hint_if_empty(memory)
    return 0


async def cmd_stats(args: argparse.Namespace, memory: EpisodicMemory, label: str) -> int:
    stats = await memory.stats()
    if args.json:
        dump(
            {
                "store": label,
                "namespace": memory.namespace,
                "total": stats.total,
                "by_outcome": stats.by_outcome,
                "expired": stats.expired,
                "corrupt": stats.corrupt,
                "oldest": stats.oldest,
                "newest": stats.newest,
                "capacity": stats.capacity,
                "size_bytes": stats.stored_bytes,
            }
        )
    else:
        rows = [
            ("store", label),
            ("namespace", memory.namespace),
            ("episodes", f"{stats.total} (the ring keeps the newest {stats.capacity})"),
            ("size", _size(stats.stored_bytes)),
            ("oldest", stats.oldest or "-"),
            ("newest", stats.newest or "-"),
            (
                "expired",
                f"{stats.expired}" + (" (hidden; 'sweep' deletes them)" * bool(stats.expired)),
            ),
            (
                "corrupt",
                f"{stats.corrupt}"
                + (
                    " (skipped and left in place; 'forget --corrupt' deletes them)"
                    * bool(stats.corrupt)
                ),
            ),
        ]
        for name, value in rows:
            out(f"{name:<10} {value}")
        out()
        top = max(stats.by_outcome.values(), default=0)
        for outcome, count in stats.by_outcome.items():
            bar = "#" * (round(count / top * HISTOGRAM_WIDTH) if top else 0)
            if count and not bar:
                bar = "#"
            out(f"{outcome:<8} {count:>6}  {bar}".rstrip())
    if not stats.total and not stats.expired and not stats.corrupt:
        await _hint_if_empty(memory)
    return 0


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{n / 1024 / 1024:.1f} MiB"


async def cmd_export(args: argparse.Namespace, memory: EpisodicMemory, settings: Settings) -> int:
    episodes = await memory.load()
    lines = "".join(to_json(episode_dict(e)) + "\n" for e in episodes)
    if args.output:
        mode = export_mode(settings.store)
        await _off_the_loop(settings, lambda: write_export(args.output, lines, mode))
        note(f"exported {len(episodes)} episodes to {args.output}")
    else:
        OUTPUT.data(sys.stdout, lines)
    if not episodes:
        await _hint_if_empty(memory)
    return 0


def export_mode(store: str) -> int:
    """The permission bits of an export: the JSON store file's own (an export holds the same
    data; never an executable bit), else :data:`EXPORT_MODE`."""
    if store_kind(store) == "json":
        try:
            return stat.S_IMODE(os.stat(store).st_mode) & 0o666
        except OSError:
            pass
    return EXPORT_MODE


def write_export(target: str, text: str, mode: int) -> None:
    """Write *text* to *target* whole or not at all, following no symlink planted anywhere.

    The data goes to a new file with an unpredictable name next to *target*, created by
    ``tempfile.mkstemp`` (``O_CREAT | O_EXCL | O_NOFOLLOW``, mode 0600), given *mode*, synced,
    then renamed over *target*. A symlink at *target* is replaced by the file, never followed;
    an existing file's mode is not kept (the export gets the store's). An interrupted export
    leaves the old file as it was."""
    import tempfile

    path = Path(target)
    if path.is_dir() and not path.is_symlink():
        raise CliError(f"{target} is a directory: give a file name to export to")
    directory = path.parent
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as file:
            file.write(text)
            file.flush()
            os.fchmod(file.fileno(), mode)
            os.fsync(file.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    try:  # make the rename itself durable
        dir_fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass  # some file systems cannot sync a directory; the data itself is synced
    finally:
        os.close(dir_fd)


async def _off_the_loop(settings: Settings, work: Callable[[], None]) -> None:
    """Run blocking file work in a worker thread when an event loop is running; a loop-free
    command (see run_now) has no loop to block, and no anyio to ask."""
    if settings.loop_free:
        work()
        return
    import anyio.to_thread

    await anyio.to_thread.run_sync(work)


async def cmd_import(args: argparse.Namespace, memory: EpisodicMemory) -> int:
    from ._episode import Episode

    text = _read_text(args.path)
    name = "stdin" if args.path == "-" else args.path
    legacy = _as_deepcrew_log(text)
    if legacy is not None:
        source = _pick_namespace(legacy, args.from_namespace, memory.namespace, name)
        episodes = await _read_deepcrew_log(legacy, source)
    else:
        if args.from_namespace:
            raise UsageError("import: --from-namespace applies to a deepcrew-ai log only")
        episodes = [_validated(Episode, item, where) for where, item in _read_records(args.path)]
    present = {ep.id for _, ep in await _stored(memory)}
    added = skipped = 0
    fresh: list[Episode] = []
    stored: list[Episode] = []
    for episode in episodes:
        if episode.id and episode.id in present:
            skipped += 1
            continue
        fresh.append(episode)
        stored.append(await memory.record(episode))
        present.add(stored[-1].id)
        added += 1
    _report_redactions(fresh, stored)
    kept = f", {skipped} already present" if skipped else ""
    out(f"imported {added} episodes from {name}{kept}")
    if added > memory.max_episodes:
        note(
            f"the ring keeps the newest {memory.max_episodes}: "
            f"{added - memory.max_episodes} of the imported episodes fell out "
            f"(pass --max-episodes to keep more)"
        )
    return 0


def _as_deepcrew_log(text: str) -> dict[str, str] | None:
    """The key/value dict of a file written by deepcrew-ai's FileMemoryProvider (or ours), or
    ``None`` when *text* is not one."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict) or not any(
        isinstance(k, str) and k.startswith("episodic:") for k in data
    ):
        return None
    return {k: v for k, v in data.items() if k.startswith("episodic:") and isinstance(v, str)}


def _pick_namespace(log: dict[str, str], chosen: str | None, target: str, name: str) -> str:
    found = sorted({k.split(":", 2)[1] for k in log if k.count(":") >= 2})
    if chosen is not None:
        if chosen not in found:
            raise CliError(f"{name} has no namespace '{chosen}' (it has: {', '.join(found)})")
        return chosen
    if target in found:
        return target
    if len(found) == 1:
        return found[0]
    raise CliError(
        f"{name} holds several namespaces ({', '.join(found)}): choose one with --from-namespace"
    )


async def _read_deepcrew_log(log: dict[str, str], namespace: str) -> list[Episode]:
    from ._memory import EpisodicMemory
    from .providers._dict import InMemoryProvider

    source = InMemoryProvider()
    prefix = f"episodic:{namespace}:"
    own = {k: v for k, v in log.items() if k.startswith(prefix)}
    await source.write(own)
    # Large enough a ring to see every slot the file holds; redaction happens on the way in.
    reader = EpisodicMemory(
        source, namespace=namespace, max_episodes=max(1, len(own)), redact=False
    )
    return await reader.load()


async def cmd_forget(args: argparse.Namespace, memory: EpisodicMemory) -> int:
    if args.corrupt:
        return await _forget_corrupt(args, memory)
    has_filter = _has_filter(args)
    stored = await _stored(memory)
    ids = _resolve_ids(args.ids, stored) if args.ids else None
    selected = await memory._select(
        ids=ids,
        outcome=args.outcome,
        tags=args.tags,
        before=args.before,
        containing=args.containing,
    )
    if args.dry_run:
        now = time.time()
        for seq, ep in selected:
            # An expired episode is listed by id only: its text must not reach any output.
            expired = memory._expired(seq, now)
            out(f"{ep.id}  (expired)" if expired else _timeline_line(ep))
        note(f"{len(selected)} episodes would be forgotten (dry run: nothing was deleted)")
        return 0
    if not selected:
        out("forgot 0 episodes (none matched)")
        return 0
    if has_filter and not args.yes:
        asked = _confirm(
            f"Forget {len(selected)} episodes of namespace '{memory.namespace}' for good?"
        )
        if not asked:
            raise CliError(
                f"not confirmed: nothing was deleted ({len(selected)} episodes match; "
                f"pass --yes to delete without asking, --dry-run to list them)"
            )
    count = await memory.forget([ep.id for _, ep in selected])
    out(f"forgot {count} episodes")
    return 0


async def _forget_corrupt(args: argparse.Namespace, memory: EpisodicMemory) -> int:
    """``forget --corrupt``: delete the records that cannot be decoded (which every other
    command skips, counts and leaves in place)."""
    found = (await memory.stats()).corrupt
    if args.dry_run:
        note(f"{found} corrupt records would be deleted (dry run: nothing was deleted)")
        return 0
    if not found:
        out("forgot 0 corrupt records (none found)")
        return 0
    if not args.yes and not _confirm(
        f"Delete {found} corrupt records of namespace '{memory.namespace}' for good?"
    ):
        raise CliError(
            f"not confirmed: nothing was deleted ({found} corrupt records; pass --yes to "
            f"delete without asking)"
        )
    count = await memory.forget(corrupt=True)
    out(f"forgot {count} corrupt records")
    return 0


def _has_filter(args: argparse.Namespace) -> bool:
    return any(
        value is not None for value in (args.outcome, args.tags, args.before, args.containing)
    )


def check_usage(args: argparse.Namespace) -> None:
    """Combinations argparse cannot express, checked before any store is opened."""
    if args.command == "record":
        flags = (
            args.query is not None or args.response or args.reflection or args.tools or args.tags
        )
        if args.file is not None and flags:
            raise UsageError("record: give either --file or the episode's flags, not both")
        if args.file is None and args.query is None:
            raise UsageError("record: --query (or --file) is required")
    if args.command == "forget":
        if args.corrupt and (args.ids or _has_filter(args)):
            raise UsageError("forget: --corrupt selects undecodable records; give it alone")
        if not args.corrupt and not args.ids and not _has_filter(args):
            raise UsageError(
                "forget: give --id, a filter (--outcome, --tag, --before, --containing) or "
                "--corrupt; 'clear' deletes everything"
            )


def _resolve_ids(given: Sequence[str], stored: Sequence[tuple[int, Episode]]) -> set[str]:
    """Full ids, or unique prefixes of at least 6 characters (as ``timeline`` shows them)."""
    known = {ep.id for _, ep in stored}
    resolved: set[str] = set()
    for wanted in given:
        if wanted in known:
            resolved.add(wanted)
            continue
        matches = {i for i in known if len(wanted) >= 6 and i.startswith(wanted)}
        if len(matches) == 1:
            resolved |= matches
        elif matches:
            raise CliError(f"id prefix '{wanted}' is ambiguous ({len(matches)} episodes)")
        else:
            raise CliError(f"no episode with id '{wanted}': nothing was deleted")
    return resolved


async def cmd_clear(args: argparse.Namespace, memory: EpisodicMemory, label: str) -> int:
    if not args.yes and not _confirm(
        f"Delete every episode of namespace '{memory.namespace}' in {label}?"
    ):
        raise CliError("not confirmed: nothing was deleted (pass --yes to clear without asking)")
    await memory.clear()
    out(f"cleared namespace '{memory.namespace}'")
    return 0


async def cmd_sweep(args: argparse.Namespace, memory: EpisodicMemory) -> int:
    if memory.max_age is None:
        note("no --max-age: only episodes past their own forget_after expire")
    deleted = await memory.sweep()
    out(f"swept {deleted} keys (expired episodes and strays)")
    return 0


async def cmd_shrink(args: argparse.Namespace, memory: EpisodicMemory, label: str) -> int:
    """Lower the log's ring size: the one command that deletes by ring size."""
    held = len(await _stored(memory))
    doomed = max(0, held - args.size)
    if not args.yes and not _confirm(
        f"Shrink namespace '{memory.namespace}' in {label} to the newest {args.size} "
        f"episodes, deleting {doomed} for good?"
    ):
        raise CliError("not confirmed: nothing was deleted (pass --yes to shrink without asking)")
    deleted = await memory.shrink(args.size)
    out(f"shrank namespace '{memory.namespace}' to {args.size} episodes: deleted {deleted}")
    return 0


# --- main -------------------------------------------------------------------------------------

_CREATES = {"record", "import"}
_READS = {"recall", "timeline", "stats", "export"}


async def _run(args: argparse.Namespace, settings: Settings, *, snapshot: bool = False) -> int:
    if snapshot:
        provider = await _file_snapshot(settings.store)
    else:
        provider = open_store(settings.store, create=args.command in _CREATES)
    async with provider:
        memory = await make_memory(provider, settings, args.command)
        handlers: dict[str, Callable[[], Awaitable[int]]] = {
            "record": lambda: cmd_record(args, memory),
            "recall": lambda: cmd_recall(args, memory),
            "timeline": lambda: cmd_timeline(args, memory),
            "stats": lambda: cmd_stats(args, memory, settings.label),
            "export": lambda: cmd_export(args, memory, settings),
            "import": lambda: cmd_import(args, memory),
            "forget": lambda: cmd_forget(args, memory),
            "clear": lambda: cmd_clear(args, memory, settings.label),
            "sweep": lambda: cmd_sweep(args, memory),
            "shrink": lambda: cmd_shrink(args, memory, settings.label),
        }
        return await handlers[args.command]()


def _reads_a_file(args: argparse.Namespace, settings: Settings) -> bool:
    return args.command in _READS and store_kind(settings.store) == "json"


async def _file_snapshot(spec: str) -> MemoryProvider:
    """The JSON store at *spec*, read once into memory. A reading command then runs the same
    code as always over this copy, and nothing it awaits ever waits, so it needs no event
    loop (see run_now)."""
    from .providers._dict import InMemoryProvider
    from .providers._file import read_file_store

    _check_file(spec, False, "JSON")
    copy = InMemoryProvider()
    await copy.write(read_file_store(spec))
    return copy


def run_now(coro: Coroutine[Any, Any, T]) -> T:
    """Run *coro* to completion on this thread, without an event loop.

    Only for a coroutine that never suspends: every await in it must complete at once, as
    an in-memory provider's and an uncontended lock's do. Importing asyncio and anyio is
    most of a command's start-up time, and a reading command over a file needs neither.
    """
    try:
        coro.send(None)
    except StopIteration as done:
        result: T = done.value
        return result
    coro.close()
    raise RuntimeError(f"{coro!r} suspended: it cannot run without an event loop")


def _explain(exc: BaseException, settings: Settings | None) -> str:
    """One line for a failure the user can act on (escaped and scrubbed on the way out)."""
    return _describe(exc, settings)


def _describe(exc: BaseException, settings: Settings | None) -> str:
    message = " ".join(str(exc).split()) or type(exc).__name__
    cause = exc.__cause__
    is_redis = settings is not None and settings.label.lower().startswith(("redis://", "rediss://"))
    unreachable = cause is not None and (
        isinstance(cause, OSError) or type(cause).__name__ in {"ConnectionError", "TimeoutError"}
    )
    if is_redis and unreachable and settings is not None:
        return f"cannot reach redis at {settings.label}: {' '.join(str(cause).split())}"
    if isinstance(exc, StorageError) and settings is not None and settings.label not in message:
        return f"{settings.label}: {message}"
    return message


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line *argv* (default ``sys.argv[1:]``); return the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    # The secrets are known before anything can print: argparse echoes arguments in errors.
    OUTPUT.scrub = Scrubber()
    for given in (*argv, os.environ.get(STORE_ENV, "")):
        OUTPUT.scrub.learn(given)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_SafeFormatter())
    logger = logging.getLogger("deepcrew_episodic")
    logger.addHandler(handler)
    try:
        return _main(argv)
    finally:
        logger.removeHandler(handler)
        if OUTPUT.scrub.removed_from_data:
            _last_words(
                f"{PROG}: replaced {OUTPUT.scrub.removed_from_data} occurrences of the store "
                f"URL's credentials in the output with {_REDACTED}"
            )


def _main(argv: list[str]) -> int:
    settings: Settings | None = None
    try:
        try:
            args = build_parser().parse_args(argv)
        except SystemExit as exc:  # --help, --version, or a usage error argparse reported
            return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
        check_usage(args)
        settings = Settings(args)
        if _reads_a_file(args, settings):
            settings.loop_free = True
            return run_now(_run(args, settings, snapshot=True))
        import anyio

        return anyio.run(_run, args, settings, backend="asyncio")
    except UsageError as exc:
        _last_words(f"{PROG}: error: {exc}")
        return 2
    except (CliError, EpisodicMemoryError, OSError) as exc:
        if isinstance(exc, BrokenPipeError):
            return _stdout_gone()
        _last_words(f"{PROG}: error: {_explain(exc, settings)}")
        return 1
    except KeyboardInterrupt:
        _last_words(f"{PROG}: interrupted")
        return 130
    except Exception as exc:
        # Not one of ours (a bug, or a library's error nobody translated): still one line,
        # escaped and scrubbed like everything else, never a traceback.
        message = " ".join(str(exc).split())
        _last_words(
            f"{PROG}: error: unexpected {type(exc).__name__}" + f": {message}" * bool(message)
        )
        return 1


def _last_words(line: str) -> None:
    """One line on stderr, unless stderr itself is gone (then there is no one to tell)."""
    with contextlib.suppress(OSError, ValueError):
        OUTPUT.line(sys.stderr, line)


def _stdout_gone() -> int:
    # The reader of our output went away (`export | head`): stop quietly, and keep Python
    # from reporting the failed flush of stdout at exit.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 0
