"""``deepcrew-episodic``: look inside an episodic memory, and make it forget.

Usage: ``deepcrew-episodic [--store STORE] [--namespace NS] COMMAND ...`` (``--store`` and
``--namespace`` may also follow the command). ``docs/cli.md`` is the user guide.

Exit status: 0 success, 2 usage error, 1 any other failure. A failure the user can fix (a
missing or corrupt store, a bad URL, an unreachable server, invalid input) is one line on
stderr, never a traceback.

This module imports only the standard library at start-up; the providers and anyio load when a
command needs them, and neither pydantic nor litellm ever does, so ``recall`` starts fast.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import re
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ._exceptions import EpisodicMemoryError, StorageError

if TYPE_CHECKING:
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
# The same values as _episode.OUTCOMES (a test keeps them equal); repeated here so that
# parsing the command line imports nothing of the library.
OUTCOMES = ("success", "failure", "partial", "unknown")
INTENTS = ("any", "what_failed", "what_worked")
HISTOGRAM_WIDTH = 30

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])")
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DATE_ONLY = re.compile(r"\d{4}-\d{2}-\d{2}")
_URL_PASSWORD = re.compile(r"(://[^\s:/@]*:)[^\s/@]+@")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_C1 = re.compile(r"[\x7f-\x9f]")


class CliError(Exception):
    """A failure reported as one line on stderr; exit status 1."""


class UsageError(CliError):
    """A command line that cannot be run as given; exit status 2."""


# --- values on the command line ---------------------------------------------------------------


def parse_duration(text: str) -> timedelta:
    """``90s``, ``30m``, ``12h``, ``7d``, ``2w`` (or a combination: ``1d12h``)."""
    compact = text.strip().lower()
    parts = list(_DURATION.finditer(compact))
    if not parts or "".join(p.group(0) for p in parts).replace(" ", "") != compact.replace(" ", ""):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration (use a number and a unit: 90s, 30m, 12h, 7d, 2w)"
        )
    seconds = sum(float(p.group(1)) * _UNITS[p.group(2)] for p in parts)
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a duration must be positive")
    return timedelta(seconds=seconds)


def _parse_iso(text: str) -> datetime:
    value = text.strip()
    if value.endswith(("Z", "z")):
        value = value[:-1] + "+00:00"
    moment = datetime.fromisoformat(value)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def parse_when(text: str, *, end_of_day: bool = False) -> datetime:
    """A point in time: a duration meaning "that long ago" (``7d``), or an ISO-8601 date or
    time (naive means UTC). With *end_of_day*, a bare date means the end of that day."""
    try:
        return datetime.now(UTC) - parse_duration(text)
    except argparse.ArgumentTypeError:
        pass
    try:
        moment = _parse_iso(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither a duration (7d, 12h) nor an ISO-8601 date or time"
        ) from None
    if end_of_day and _DATE_ONLY.fullmatch(text.strip()):
        moment += timedelta(days=1)
    return moment


def parse_until(text: str) -> datetime:
    return parse_when(text, end_of_day=True)


def parse_forget_after(text: str) -> str:
    """When an episode expires: a duration from now (``30d``) or an ISO-8601 time."""
    try:
        moment = datetime.now(UTC) + parse_duration(text)
    except argparse.ArgumentTypeError:
        try:
            moment = _parse_iso(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is neither a duration from now (30d) nor an ISO-8601 time"
            ) from None
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: must be at least 1")
    return value


def score_value(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def safe_label(store: str) -> str:
    """The store as shown in messages: a password in a URL is never printed."""
    return _URL_PASSWORD.sub(r"\1***@", store)


# --- the parser -------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    # The shared options are declared on the top parser and on every sub-parser, with
    # SUPPRESS as default, so they work before or after the command and a later absence
    # never overrides an earlier value.
    common = argparse.ArgumentParser(add_help=False)
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
        help=f"ring size (default: ${MAX_EPISODES_ENV}, else the size the log was last "
        f"written with, else {DEFAULT_MAX_EPISODES})",
    )
    where.add_argument(
        "--max-age",
        type=parse_duration,
        default=argparse.SUPPRESS,
        metavar="AGE",
        help=f"retention: hide (and let sweep delete) episodes older than this, e.g. 90d "
        f"(default: ${MAX_AGE_ENV}, else none)",
    )

    parser = argparse.ArgumentParser(
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
    fg.add_argument("--dry-run", action="store_true", help="list what would be deleted")
    fg.add_argument("-y", "--yes", action="store_true", help="do not ask (filter deletions)")

    cl = command("clear", "delete every episode of the namespace")
    cl.add_argument("-y", "--yes", action="store_true", help="do not ask")

    command("sweep", "delete expired episodes and stray keys for real")
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
        self.label = safe_label(store)


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
        f"--store {safe_label(spec)!r}: expected a path ending in .json, .db or .sqlite, "
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


async def make_memory(provider: MemoryProvider, settings: Settings) -> EpisodicMemory:
    from ._memory import EpisodicMemory

    return EpisodicMemory(
        provider,
        namespace=settings.namespace,
        max_episodes=settings.max_episodes or await stored_ring(provider, settings.namespace),
        max_age=settings.max_age,
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
    sys.stdout.write(text + "\n")


def note(text: str) -> None:
    sys.stderr.write(f"{PROG}: {text}\n")


def to_json(value: Any, indent: int | None = None) -> str:
    """JSON that keeps non-ASCII text readable but escapes every control character, the C1
    range included (json.dumps leaves U+0080-U+009F raw; some terminals obey them)."""
    text = json.dumps(value, ensure_ascii=False, indent=indent)
    return _C1.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def dump(value: Any) -> None:
    out(to_json(value, indent=2))


def episode_dict(episode: Episode) -> dict[str, Any]:
    return episode.to_dict()


def _one_line(text: str, limit: int) -> str:
    # Stored text is untrusted: no control character (a terminal escape sequence) reaches the
    # terminal, and no line break splits an item.
    flat = _CONTROL.sub("\ufffd", " ".join(text.split()))
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
    keys = await memory.backend.keys("episodic:")
    own = f"episodic:{memory.namespace}:"
    if any(k.startswith(own) for k in keys):
        return
    names = sorted({k.split(":", 2)[1] for k in keys if k.count(":") >= 2})
    where = f"; namespaces in this store: {', '.join(names)}" if names else ""
    note(f"namespace {memory.namespace!r} holds no episodes{where}")


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
    sys.stderr.write(f"{question} [y/N] ")
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
                f"an episode with id {episode.id!r} is already stored (or given twice): nothing "
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
            note(f"no episode in namespace {memory.namespace!r} is relevant to {args.query!r}")
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
                f"{stats.corrupt}" + (" (skipped and left in place)" * bool(stats.corrupt)),
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


async def cmd_export(args: argparse.Namespace, memory: EpisodicMemory) -> int:
    episodes = await memory.load()
    lines = "".join(to_json(episode_dict(e)) + "\n" for e in episodes)
    if args.output:
        target = Path(args.output)
        tmp = target.with_name(f".{target.name}.tmp")
        # Replace, not overwrite in place: an interrupted export leaves the old file whole.
        tmp.write_text(lines, encoding="utf-8")
        os.replace(tmp, target)
        note(f"exported {len(episodes)} episodes to {args.output}")
    else:
        sys.stdout.write(lines)
    if not episodes:
        await _hint_if_empty(memory)
    return 0


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
            raise CliError(f"{name} has no namespace {chosen!r} (it has: {', '.join(found)})")
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
            f"Forget {len(selected)} episodes of namespace {memory.namespace!r} for good?"
        )
        if not asked:
            raise CliError(
                f"not confirmed: nothing was deleted ({len(selected)} episodes match; "
                f"pass --yes to delete without asking, --dry-run to list them)"
            )
    count = await memory.forget([ep.id for _, ep in selected])
    out(f"forgot {count} episodes")
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
    if args.command == "forget" and not args.ids and not _has_filter(args):
        raise UsageError(
            "forget: give --id or a filter (--outcome, --tag, --before, --containing); "
            "'clear' deletes everything"
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
            raise CliError(f"id prefix {wanted!r} is ambiguous ({len(matches)} episodes)")
        else:
            raise CliError(f"no episode with id {wanted!r}: nothing was deleted")
    return resolved


async def cmd_clear(args: argparse.Namespace, memory: EpisodicMemory, label: str) -> int:
    if not args.yes and not _confirm(
        f"Delete every episode of namespace {memory.namespace!r} in {label}?"
    ):
        raise CliError("not confirmed: nothing was deleted (pass --yes to clear without asking)")
    await memory.clear()
    out(f"cleared namespace {memory.namespace!r}")
    return 0


async def cmd_sweep(args: argparse.Namespace, memory: EpisodicMemory) -> int:
    if memory.max_age is None:
        note("no --max-age: only episodes past their own forget_after expire")
    deleted = await memory.sweep()
    out(f"swept {deleted} keys (expired episodes and strays)")
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
        memory = await make_memory(provider, settings)
        handlers: dict[str, Callable[[], Awaitable[int]]] = {
            "record": lambda: cmd_record(args, memory),
            "recall": lambda: cmd_recall(args, memory),
            "timeline": lambda: cmd_timeline(args, memory),
            "stats": lambda: cmd_stats(args, memory, settings.label),
            "export": lambda: cmd_export(args, memory),
            "import": lambda: cmd_import(args, memory),
            "forget": lambda: cmd_forget(args, memory),
            "clear": lambda: cmd_clear(args, memory, settings.label),
            "sweep": lambda: cmd_sweep(args, memory),
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
    """One line for a failure the user can act on (a password in a URL never printed)."""
    return safe_label(_describe(exc, settings))


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
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a usage error argparse reported
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"{PROG}: warning: %(message)s"))
    logger = logging.getLogger("deepcrew_episodic")
    logger.addHandler(handler)
    settings: Settings | None = None
    try:
        check_usage(args)
        settings = Settings(args)
        if _reads_a_file(args, settings):
            return run_now(_run(args, settings, snapshot=True))
        import anyio

        return anyio.run(_run, args, settings, backend="asyncio")
    except UsageError as exc:
        sys.stderr.write(f"{PROG}: error: {exc}\n")
        return 2
    except (CliError, EpisodicMemoryError, OSError) as exc:
        if isinstance(exc, BrokenPipeError):
            return _stdout_gone()
        sys.stderr.write(f"{PROG}: error: {_explain(exc, settings)}\n")
        return 1
    except KeyboardInterrupt:
        sys.stderr.write(f"{PROG}: interrupted\n")
        return 130
    finally:
        logger.removeHandler(handler)


def _stdout_gone() -> int:
    # The reader of our output went away (`export | head`): stop quietly, and keep Python
    # from reporting the failed flush of stdout at exit.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 0
