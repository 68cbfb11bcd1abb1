"""The command line: its grammar (argparse), and the values it accepts, checked whole.

Durations, dates and counts take ASCII digits only and must fit what a date or duration can
hold; anything else is a usage error (status 2) in one line, like argparse's own.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, NoReturn

from ._errors import UsageError
from ._mcp import MCP_HELP, add_mcp_arguments, check_mcp_usage
from ._output import OUTPUT, PROG, shown
from ._serve import SERVE_HELP, add_serve_arguments

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

STORE_ENV = "DEEPCREW_EPISODIC_STORE"
NAMESPACE_ENV = "DEEPCREW_EPISODIC_NAMESPACE"
MAX_EPISODES_ENV = "DEEPCREW_EPISODIC_MAX_EPISODES"
MAX_AGE_ENV = "DEEPCREW_EPISODIC_MAX_AGE"
EMBEDDER_ENV = "DEEPCREW_EPISODIC_EMBEDDER"
EMBEDDER_API_BASE_ENV = "DEEPCREW_EPISODIC_EMBEDDER_API_BASE"
DISTILL_API_BASE_ENV = "DEEPCREW_EPISODIC_DISTILL_API_BASE"
DEFAULT_BATCH_SIZE = 64
# The most texts EpisodicMemory.backfill sends in one call.
MAX_BATCH_SIZE = 4096
DEFAULT_NAMESPACE = "default"
DEFAULT_MAX_EPISODES = 100
# Far above any real ring or result count, and small enough that every store keeps it exactly.
MAX_COUNT = 1_000_000_000
# The same values as Episode's outcomes (a test keeps them equal); repeated here so that
# parsing the command line imports nothing of the library.
OUTCOMES = ("success", "failure", "partial", "unknown", "claimed_success", "abandoned")
INTENTS = ("any", "what_failed", "what_worked")
SOURCE_CHOICES = ("verifier", "user", "agent", "judge")

# ASCII digits only: re's \d, int() and float() also take "٣" (Arabic-Indic three).
_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*([smhdw])", re.ASCII)
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_INTEGER = re.compile(r"\+?[0-9]+", re.ASCII)
_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", re.ASCII)


class Parser(argparse.ArgumentParser):
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


# --- values on the command line -------------------------------------------------------------


class _OutOfRange(argparse.ArgumentTypeError):
    """A value of the right form that no date or duration can hold."""


def parse_duration(text: str) -> timedelta:
    """``90s``, ``30m``, ``12h``, ``7d``, ``2w`` (or a combination: ``1d12h``)."""
    compact = text.strip().lower()
    parts = list(_DURATION.finditer(compact))
    if not parts or "".join(p.group(0) for p in parts).replace(" ", "") != compact.replace(" ", ""):
        raise argparse.ArgumentTypeError(
            f"{shown(text)} is not a duration (use a number and a unit: 90s, 30m, 12h, 7d, 2w)"
        )
    try:
        value = timedelta(seconds=sum(float(p.group(1)) * _UNITS[p.group(2)] for p in parts))
    except (OverflowError, ValueError):
        raise _OutOfRange(
            f"{shown(text)} is too long a duration (at most {timedelta.max.days} days)"
        ) from None
    if value <= timedelta(0):
        raise argparse.ArgumentTypeError(f"{shown(text)}: a duration must be positive")
    return value


def _parse_iso(text: str) -> datetime:
    value = text.strip()
    if value.endswith(("Z", "z")):
        value = value[:-1] + "+00:00"
    if not value.isascii():
        raise ValueError("not ASCII")  # fromisoformat takes "٢٠٢٤-..." too
    moment = datetime.fromisoformat(value)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


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
                    f"{shown(text)} is neither a duration from now (30d) nor an ISO-8601 time"
                ) from None
        utc = moment.astimezone(UTC)
    except OverflowError:
        raise _OutOfRange(f"{shown(text)} is out of range (years 1 to 9999)") from None
    # Not strftime: it writes year 5 as "5", not "0005".
    return (
        f"{utc.year:04d}-{utc.month:02d}-{utc.day:02d}T"
        f"{utc.hour:02d}:{utc.minute:02d}:{utc.second:02d}Z"
    )


def positive_int(text: str) -> int:
    if not _INTEGER.fullmatch(text.strip()):
        raise argparse.ArgumentTypeError(f"{shown(text)} is not an integer")
    value = int(text.strip())
    if value < 1:
        raise argparse.ArgumentTypeError(f"{shown(text)}: must be at least 1")
    if value > MAX_COUNT:
        raise argparse.ArgumentTypeError(f"{shown(text)}: must be at most {MAX_COUNT}")
    return value


def batch_size(text: str) -> int:
    value = positive_int(text)
    if value > MAX_BATCH_SIZE:
        raise argparse.ArgumentTypeError(f"{shown(text)}: must be at most {MAX_BATCH_SIZE}")
    return value


def score_value(text: str) -> float:
    """A score: a number from 0 to 1, as everywhere in the library (``outcome_for_score``)."""
    if not _NUMBER.fullmatch(text.strip()):
        raise argparse.ArgumentTypeError(f"{shown(text)} is not a number")
    value = float(text)
    if value != value or value in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"{shown(text)} is not a finite number")
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{shown(text)}: a score is from 0 to 1")
    return value


def relevance_value(text: str) -> float:
    """A relevance floor: a number from 0 to 1 (``recall --min-relevance``)."""
    if not _NUMBER.fullmatch(text.strip()):
        raise argparse.ArgumentTypeError(f"{shown(text)} is not a number")
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{shown(text)}: a relevance floor is from 0 to 1")
    return value


# --- the parser -------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    # The shared options are declared on the top parser and on every sub-parser, with
    # SUPPRESS as default, so they work before or after the command and a later absence
    # never overrides an earlier value.
    common = Parser(add_help=False)
    where = common.add_argument_group("store")
    where.add_argument(
        "--store",
        default=argparse.SUPPRESS,
        metavar="STORE",
        help=f"a .json file, a .db/.sqlite file, a redis://, rediss://, unix:// or "
        f"redis+cluster:// URL, or memory: (default: ${STORE_ENV})",
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
    where.add_argument(
        "--tz",
        default=argparse.SUPPRESS,
        metavar="ZONE",
        help="the time zone of dates and phrases given without one (Europe/Paris, UTC; "
        "default: $TZ when it names a zone, else UTC)",
    )
    meaning = common.add_argument_group("recall by meaning")
    meaning.add_argument(
        "--embedder",
        default=argparse.SUPPRESS,
        metavar="MODEL",
        help=f"a litellm embedding model (openai/text-embedding-3-small, ollama/nomic-embed-text, "
        f"...): recall ranks by keywords and meaning, record stores vectors (default: "
        f"${EMBEDDER_ENV}, else keywords only); the API key comes from the provider's usual "
        f"variable (OPENAI_API_KEY, ...)",
    )
    meaning.add_argument(
        "--embedder-api-base",
        default=argparse.SUPPRESS,
        metavar="URL",
        help=f"the embedding server's base URL (default: ${EMBEDDER_API_BASE_ENV}, else the "
        f"provider's own)",
    )

    parser = Parser(
        prog=PROG,
        parents=[common],
        description="Look inside an agent's episodic memory, and make it forget.",
        epilog="Run '%(prog)s COMMAND --help' for a command's options.",
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

    rec = command(
        "record",
        "record an episode: from flags, from a JSON or JSONL file of episodes (--file), or "
        "distilled from a run's transcript (TRANSCRIPT --distill-model MODEL)",
    )
    rec.add_argument(
        "transcript",
        nargs="?",
        metavar="TRANSCRIPT",
        help="a run's messages, one JSON object a line (as write_transcript writes them) or a "
        "JSON array ('-': stdin); needs --distill-model",
    )
    rec.add_argument("--query", "-q", help="what the agent was asked")
    rec.add_argument("--response", "-r", default="", help="what it answered")
    rec.add_argument(
        "--outcome",
        choices=OUTCOMES,
        help="what happened (default: unknown, or what --score stands for); with a transcript, "
        "a verified outcome that overrides the model's",
    )
    rec.add_argument(
        "--score",
        type=score_value,
        help="how well it went, from 0 to 1; without --outcome, >= 0.7 is success, < 0.3 "
        "failure, partial between",
    )
    rec.add_argument(
        "--source",
        choices=SOURCE_CHOICES,
        help="who says --outcome (or --score): verifier (a test, an exit code), user, agent "
        "(its own claim) or judge (a model); default: none named (a success or failure then "
        "reads as verified; claimed_success is the agent's)",
    )
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
    rec.add_argument(
        "--distill-model",
        metavar="MODEL",
        help="the litellm model that distils TRANSCRIPT into task / approach / outcome / "
        "lesson (the API key comes from the provider's usual variable: OPENAI_API_KEY, ...)",
    )
    rec.add_argument(
        "--api-base",
        metavar="URL",
        help=f"the distillation model's base URL (default: ${DISTILL_API_BASE_ENV}, else the "
        f"provider's own)",
    )
    rec.add_argument("--json", action="store_true", help="print the stored episodes as JSON")

    gr = command(
        "grade",
        "grade an episode after the fact (the grade is kept beside it; the episode is never "
        "rewritten)",
    )
    gr.add_argument(
        "id", metavar="ID", help="the episode's id, or a unique prefix of 4 or more characters"
    )
    gr.add_argument("--outcome", choices=OUTCOMES, help="what really happened")
    gr.add_argument(
        "--score",
        type=score_value,
        help="how well it went, from 0 to 1; without --outcome, >= 0.7 is success, < 0.3 "
        "failure, partial between",
    )
    gr.add_argument("--note", default="", metavar="TEXT", help="why (a test run, the user's words)")
    gr.add_argument(
        "--claimed",
        action="store_true",
        help="nothing checked this grade (the agent's own claim): a verified outcome beats it",
    )
    gr.add_argument(
        "--source",
        choices=SOURCE_CHOICES,
        help="who gave the grade: verifier (a test, an exit code), user, agent (a claim) or "
        "judge (a model grading the run); ranks in that order (default: verified, no source "
        "named; with --claimed: agent)",
    )
    gr.add_argument("--json", action="store_true", help="print the grade and the episode as JSON")

    rc = command("recall", "the episodes most relevant to a query, best first", reading=True)
    rc.add_argument("query", metavar="QUERY")
    rc.add_argument("-k", "--top-k", type=positive_int, default=3, metavar="N")
    rc.add_argument("--intent", choices=INTENTS, default="any")
    rc.add_argument("-v", "--verbose", action="store_true", help="show each score and why")
    rc.add_argument(
        "--min-relevance",
        type=relevance_value,
        metavar="X",
        help="the relevance floor, from 0 to 1 (default: the library's; 0: none); -v lists "
        "what fell under it",
    )
    filters(rc)
    period(rc)

    tl = command("timeline", "episodes in the order they were recorded", reading=True)
    tl.add_argument(
        "text",
        nargs="?",
        metavar="TEXT",
        help="only the episodes containing this text (case-insensitive, as forget --containing)",
    )
    period(tl)
    tl.add_argument("--limit", type=positive_int, metavar="N", help="only the newest N")
    filters(tl)

    hi = command(
        "history",
        "the outcomes of a task's past runs over time, oldest first, and when it started failing",
        reading=True,
    )
    hi.add_argument("task", metavar="TASK", help="the task, as an agent would be given it")
    period(hi)
    hi.add_argument(
        "--tag", action="append", dest="tags", metavar="TAG", help="keep this tag (repeatable)"
    )

    command(
        "stats", "counts by outcome, size, oldest and newest, expired and corrupt", reading=True
    )

    ex = command("export", "every episode as JSONL (oldest first)")
    ex.add_argument(
        "-o", "--output", metavar="PATH", help="write to a new or regular file ('-': stdout)"
    )

    im = command("import", "add episodes from JSONL, or from a log written by deepcrew-ai")
    im.add_argument("path", metavar="PATH", help="the file ('-': stdin)")
    deleting(im, "pushed out of the ring")
    im.add_argument(
        "--from-namespace",
        metavar="NS",
        help="the namespace to read in a deepcrew-ai file (default: --namespace if present, "
        "else its only one)",
    )

    fg = command("forget", "delete episodes for real: by --id, or by a filter")
    fg.add_argument(
        "--id",
        action="append",
        dest="ids",
        metavar="ID",
        help="an episode's id, or a unique prefix of 4 or more characters (repeatable)",
    )
    filters(fg)
    fg.add_argument(
        "--before", type=time_text, metavar="WHEN", help="recorded before this (as --since)"
    )
    fg.add_argument("--containing", metavar="TEXT", help="text in any field (case-insensitive)")
    fg.add_argument(
        "--corrupt",
        action="store_true",
        help="delete the stored records that cannot be decoded ('stats' counts them); alone",
    )
    deleting(fg)

    deleting(command("clear", "delete every episode of the namespace"))

    deleting(command("sweep", "delete expired episodes and stray keys for real"))

    def embedding(name: str, help: str) -> argparse.ArgumentParser:
        sub = command(name, help)
        sub.add_argument(
            "--batch-size",
            type=batch_size,
            default=DEFAULT_BATCH_SIZE,
            metavar="N",
            help=f"texts per call to the embedder (default {DEFAULT_BATCH_SIZE})",
        )
        sub.add_argument("--json", action="store_true", help='print {"written": N}')
        return sub

    embedding("backfill", "embed the episodes that have no vector yet (needs --embedder)")
    re_ = embedding(
        "reembed", "rebuild every vector with --embedder, after a change of model (replaces them)"
    )
    deleting(re_, "replaced")

    sh = command("shrink", "lower the log's ring size to N, deleting the older episodes for good")
    sh.add_argument("size", type=positive_int, metavar="N", help="the new ring size")
    deleting(sh)

    add_serve_arguments(command("serve", SERVE_HELP))
    add_mcp_arguments(command("mcp", MCP_HELP))
    return parser


def period(sub: argparse.ArgumentParser) -> None:
    """``--since`` and ``--until``, with the same forms everywhere (see :func:`resolve_times`)."""
    sub.add_argument(
        "--since",
        type=time_text,
        metavar="WHEN",
        help="recorded at or after this: 7d, 12h, a date or time, or a phrase ('yesterday', "
        "'last tuesday', '3 days ago', 'this week')",
    )
    sub.add_argument(
        "--until",
        type=time_text,
        metavar="WHEN",
        help="recorded before this (a date or a day's phrase includes the day: --until yesterday)",
    )


def time_text(text: str) -> str:
    """A time option as given: read after parsing, once ``--tz`` is known (see
    :func:`resolve_times`); only a text no time can be is refused here."""
    if len(text) > MAX_TIME_CHARS:
        raise argparse.ArgumentTypeError(f"{shown(text)} is too long to be a time")
    return text


# Longer than any time anyone types (ISO-8601 with a zone and microseconds is 32).
MAX_TIME_CHARS = 200
TIME_OPTIONS = {"since": "--since", "until": "--until", "before": "--before"}


def zone_name(args: argparse.Namespace) -> str | None:
    """The time zone dates and phrases are read in: ``--tz``, else ``$TZ`` when it names a
    zone the library knows (a warning says when it does not), else ``None`` (UTC)."""
    from .. import ConfigurationError, parse_time

    given = getattr(args, "tz", None)
    if given is not None:
        try:
            parse_time("2000-01-01", tz=given)
        except ConfigurationError as exc:
            raise UsageError(f"--tz: {str(exc).removeprefix('tz: ')}") from None
        return str(given)
    ambient = os.environ.get("TZ", "").strip()
    if not ambient:
        return None
    try:
        parse_time("2000-01-01", tz=ambient)
    except ConfigurationError:
        from ._output import note

        note(
            f"warning: TZ={shown(ambient)} is not a time zone name this library knows; times "
            f"are read in UTC (give --tz Europe/Paris or the like)"
        )
        return None
    return ambient


def resolve_times(args: argparse.Namespace) -> None:
    """Each time option given, as POSIX seconds: ``since`` and ``before`` the start of the
    span the value names, ``until`` its end (a date or "yesterday" includes the day), read in
    :func:`zone_name`'s zone. A value that is no time is a usage error naming it."""
    given = [name for name in TIME_OPTIONS if getattr(args, name, None) is not None]
    if not given:
        return
    from .. import ConfigurationError, parse_time

    tz = args.zone = zone_name(args)
    now = time.time()
    for name in given:
        try:
            start, end = parse_time(getattr(args, name), tz=tz, now=now)
        except ConfigurationError as exc:
            raise UsageError(
                f"{args.command} {TIME_OPTIONS[name]}: {str(exc).removeprefix('time: ')}"
            ) from None
        setattr(args, name, end if name == "until" else start)


def deleting(sub: argparse.ArgumentParser, what: str = "deleted") -> None:
    """The two options every command that deletes takes, with the same meaning everywhere:
    it asks on a terminal, and without one it deletes nothing unless given ``--yes``."""
    sub.add_argument(
        "--dry-run", action="store_true", help=f"list what would be {what}; change nothing"
    )
    sub.add_argument(
        "-y",
        "--yes",
        action="store_true",
        help="do not ask (without a terminal, nothing is deleted unless this is given)",
    )


def _version() -> str:
    from .. import __version__

    return __version__


def has_filter(args: argparse.Namespace) -> bool:
    return any(
        value is not None for value in (args.outcome, args.tags, args.before, args.containing)
    )


def check_usage(args: argparse.Namespace) -> None:
    """Combinations argparse cannot express, checked before any store is opened."""
    resolve_times(args)
    if args.command == "record":
        _check_record(args)
    if args.command == "mcp":
        check_mcp_usage(args)
    if args.command == "grade" and args.outcome is None and args.score is None:
        raise UsageError("grade: give --outcome, --score or both")
    if args.command == "forget":
        if args.corrupt and (args.ids or has_filter(args)):
            raise UsageError("forget: --corrupt selects undecodable records; give it alone")
        if not args.corrupt and not args.ids and not has_filter(args):
            raise UsageError(
                "forget: give --id, a filter (--outcome, --tag, --before, --containing) or "
                "--corrupt; 'clear' deletes everything"
            )


def _check_record(args: argparse.Namespace) -> None:
    """The three ways to record are exclusive: flags, ``--file``, or a transcript."""
    flags = args.query is not None or args.response or args.reflection or args.tools
    if args.transcript is not None:
        if args.file is not None or flags:
            raise UsageError(
                "record: a transcript is distilled into one episode; give no --file, --query, "
                "--response, --reflection or --tool with it"
            )
        if not args.distill_model or not args.distill_model.strip():
            raise UsageError(
                f"record: distilling {shown(args.transcript)} needs --distill-model MODEL (to "
                f"record episodes from a file, use --file)"
            )
        if args.source is not None and args.outcome is None and args.score is None:
            raise UsageError(
                "record: --source says who gave --outcome or --score; the model's own reading "
                "of a transcript is recorded as a judge's"
            )
        return
    for option, value in (("--distill-model", args.distill_model), ("--api-base", args.api_base)):
        if value is not None:
            raise UsageError(f"record: {option} applies to a transcript (record TRANSCRIPT ...)")
    given = (
        args.tags or args.outcome is not None or args.score is not None or args.source is not None
    )
    if args.file is not None and (flags or given):
        raise UsageError("record: give either --file or the episode's flags, not both")
    if args.file is None and args.query is None:
        raise UsageError("record: --query, --file or a transcript is required")
