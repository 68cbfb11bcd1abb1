"""The reading commands: ``recall``, ``timeline``, ``history``, ``stats``, ``export``.

None of them writes to the store (``export -o`` writes a file of its own). The listings show
stored text cleaned (:func:`~._output.clean`), in human and JSON output alike; ``export`` is a
backup and writes episodes as stored (only the store URL's own credentials are removed).
"""

from __future__ import annotations

import argparse
import os
import stat
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._unicode import search_form
from ._errors import CliError
from ._output import (
    OUTPUT,
    clean,
    dump,
    for_display,
    grade_json,
    history_summary,
    holds_secrets,
    note,
    number,
    out,
    outcome_label,
    outcome_width,
    quantity,
    recall_lines,
    short_id,
    shown,
    size_text,
    timeline_line,
    to_json,
    under_floor_lines,
    without_traceback,
)
from ._store import Settings, grades_of, hint_if_empty, off_the_loop

if TYPE_CHECKING:
    from .. import EpisodicMemory, Grade, MemoryStats, Ranking, Scored

HISTOGRAM_WIDTH = 30
# An export holds the store's data: it gets the JSON store file's permission bits, and these
# for a store that has none of its own (redis, sqlite, memory:).
EXPORT_MODE = 0o600


async def cmd_recall(args: argparse.Namespace, memory: EpisodicMemory) -> int:
    found = await memory.explain(
        args.query,
        args.top_k,
        intent=args.intent,
        tags=args.tags,
        outcome=args.outcome,
        since=args.since,
        until=args.until,
        min_relevance=args.min_relevance,
    )
    # An embedder that failed has already said so, in one warning line on stderr (the library
    # logs it): the ranking below is by keywords, and --json -v says so in "ranking".
    graded = await grades_of(memory, [s.episode for s in found])
    if args.json:
        items = []
        for s, grades in zip(found, graded, strict=True):
            item = for_display(s.episode)  # a whole episode, as recall returns it
            if args.verbose:
                item["recall"] = {
                    **_recall_json(s, found),
                    "grades": [grade_json(g) for g in grades],
                }
            items.append(item)
        dump(items)
    else:
        width = outcome_width(
            outcome_label(s.episode, g) for s, g in zip(found, graded, strict=True)
        )
        for rank, (s, grades) in enumerate(zip(found, graded, strict=True), 1):
            for line in recall_lines(rank, s, args.verbose, found.by, grades, width):
                out(line)
        if args.verbose:
            under = found.under_floor
            under_grades = await grades_of(memory, [s.episode for s in under]) if under else []
            for line in under_floor_lines(under, found.min_relevance, found.by, under_grades):
                out(line)
    if not found:
        if not args.json:
            period = (
                " in the period given" if args.since is not None or args.until is not None else ""
            )
            note(
                f"no episode in namespace '{memory.namespace}' is relevant to "
                f"{shown(args.query)}{period}"
            )
        await hint_if_empty(memory)
    return 0


def _recall_json(found: Scored, ranking: Ranking) -> dict[str, Any]:
    """The parts of one score, as numbers of 4 decimals (``similarity`` and ``meaning`` are
    ``null`` unless an embedder ranked and the episode has a vector)."""
    measured = ranking.by == "hybrid" and found.similarity is not None
    return {
        "score": number(found.score),
        "relevance": number(found.relevance),
        "keyword": number(found.keyword),
        "similarity": number(found.similarity) if measured else None,
        "meaning": number(found.meaning) if measured else None,
        "recency": number(found.recency),
        "outcome_weight": number(found.outcome_weight),
        "age_days": number(found.age_days),
        "matched": [clean(term) for term in found.matched],
        "uses": found.uses,
        "iterations": found.iterations,
        "why": clean(found.why()),
        "ranking": ranking.by,
        "min_relevance": number(ranking.min_relevance),
        "embedder_error": (
            clean(without_traceback(ranking.embedder_error)) if ranking.embedder_error else None
        ),
    }


async def cmd_timeline(args: argparse.Namespace, memory: EpisodicMemory) -> int:
    since, until = args.since, args.until  # POSIX seconds (see resolve_times)
    outcomes = set(args.outcome) if args.outcome else None
    tags = {t.casefold() for t in args.tags} if args.tags else None
    needle = _needle(args.text)
    shown = []
    for ep in await memory.load():
        when = memory.recorded_at(ep)  # as recall files it (an undated one included)
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
        if needle is not None and needle not in memory.searched_text(ep):
            continue
        shown.append(ep)
    if args.limit:
        shown = shown[-args.limit :]
    graded = await grades_of(memory, shown)
    if args.json:
        dump([_with_grades(for_display(e), g) for e, g in zip(shown, graded, strict=True)])
    else:
        width = outcome_width(outcome_label(e, g) for e, g in zip(shown, graded, strict=True))
        for ep, grades in zip(shown, graded, strict=True):
            out(timeline_line(ep, grades, width))
    if not shown:
        await hint_if_empty(memory)
    return 0


def _needle(text: str | None) -> str | None:
    """*text* in the form ``searched_text`` holds (the rule of ``forget --containing``)."""
    if text is None:
        return None
    needle = search_form(text)
    if not needle:
        # White space or hidden characters only would match every episode.
        raise CliError(f"timeline: {shown(text)} holds no visible text")
    return needle


async def cmd_history(args: argparse.Namespace, memory: EpisodicMemory) -> int:
    found = await memory.history(args.task, since=args.since, until=args.until, tags=args.tags)
    period = args.since is not None or args.until is not None
    graded = await grades_of(memory, [s.episode for s in found])
    if args.json:
        dump(
            {
                "task": clean(args.task),
                "runs": [
                    {**_with_grades(for_display(s.episode), g), "iterations": s.iterations}
                    for s, g in zip(found, graded, strict=True)
                ],
                "broke": _point(found.broke),
                "last_success": _point(found.last_success),
                "failing": found.failing,
                "failures_since": found.failures_since,
            }
        )
    else:
        width = outcome_width(
            outcome_label(s.episode, g) for s, g in zip(found, graded, strict=True)
        )
        for s, grades in zip(found, graded, strict=True):
            tries = f"  ({s.iterations} iterations)" if s.iterations > 1 else ""
            out(timeline_line(s.episode, grades, width) + tries)
        if found:
            out()
            out(history_summary(found, period=period))
    if not found:
        if not args.json:
            note(
                f"no past run in namespace '{memory.namespace}' matches {shown(args.task)}"
                f"{' in the period given' if period else ''}"
            )
        await hint_if_empty(memory)
    return 0


def _point(item: Scored | None) -> dict[str, Any] | None:
    if item is None:
        return None
    return {"id": clean(item.episode.id), "timestamp": clean(item.episode.timestamp)}


def _with_grades(
    item: dict[str, Any], grades: Sequence[Grade], *, as_stored: bool = False
) -> dict[str, Any]:
    return {**item, "grades": [grade_json(g, as_stored=as_stored) for g in grades]}


async def cmd_stats(args: argparse.Namespace, memory: EpisodicMemory, label: str) -> int:
    stats = await memory.stats()
    # What looks wrong goes to stderr as well as into --json: a script reading only the
    # numbers would otherwise never hear that its outcome labels carry no signal.
    for warning in stats.warnings:
        note(f"warning: {warning}")
    if args.json:
        dump(
            {
                "store": label,
                "namespace": memory.namespace,
                "total": stats.total,
                "by_outcome": {clean(k): v for k, v in stats.by_outcome.items()},
                "by_source": {clean(k): v for k, v in stats.by_source.items()},
                "unknown_sources": stats.unknown_sources,
                "expired": stats.expired,
                "corrupt": stats.corrupt,
                "oldest": clean(stats.oldest) if stats.oldest else stats.oldest,
                "newest": clean(stats.newest) if stats.newest else stats.newest,
                "capacity": stats.capacity,
                "size_bytes": stats.stored_bytes,
                "vectors": _vectors_counted(memory, stats),
                "embedder": clean(stats.embedder) if stats.embedder else None,
                "grades": stats.grades,
                "most_used": [{"id": clean(i), "uses": n} for i, n in stats.most_used],
                "warnings": [clean(w) for w in stats.warnings],
            }
        )
    else:
        rows = [
            ("store", label),
            ("namespace", memory.namespace),
            ("episodes", f"{stats.total} (the ring keeps the newest {stats.capacity})"),
            ("size", size_text(stats.stored_bytes)),
            ("oldest", shown_value(stats.oldest)),
            ("newest", shown_value(stats.newest)),
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
        rows += _vector_rows(memory, stats)
        rows.append(("grades", f"{stats.grades}" + " (given later: 'grade')" * bool(stats.grades)))
        used = [f"{short_id(i)} {n}x" for i, n in stats.most_used]
        rows.append(("most used", ", ".join(used) if used else "-"))
        rows.append(("sources", _sources_text(stats)))
        for name, value in rows:
            out(f"{name:<10} {value}")
        out()
        top = max(stats.by_outcome.values(), default=0)
        width = outcome_width(shown_value(o) for o in stats.by_outcome)
        for outcome, count in stats.by_outcome.items():
            bar = "#" * (round(count / top * HISTOGRAM_WIDTH) if top else 0)
            if count and not bar:
                bar = "#"
            out(f"{shown_value(outcome):<{width}} {count:>6}  {bar}".rstrip())
    if not stats.total and not stats.expired and not stats.corrupt:
        await hint_if_empty(memory)
    return 0


# Best to worst, as recall ranks them; "" is no source recorded (or an unknown outcome).
_SOURCE_ORDER = ("verifier", "user", "agent", "judge", "")


def _sources_text(stats: MemoryStats) -> str:
    """Where the outcomes came from, on one line: ``verifier 3, user 1, agent 5, none 2``."""
    counts = stats.by_source
    parts = [f"{name or 'none'} {counts.get(name, 0)}" for name in _SOURCE_ORDER]
    if stats.unknown_sources:
        parts.append(f"({stats.unknown_sources} name a source this version does not know)")
    return ", ".join(parts)


def _vectors_counted(memory: EpisodicMemory, stats: MemoryStats) -> int | None:
    """How many shown episodes have a usable vector: counted only with the log's own embedder
    (``None`` otherwise: no other memory can tell a usable vector from a stale one)."""
    embedder = memory.embedder
    if embedder is None:
        return None
    if stats.embedder is not None and not stats.embedder.startswith(f"{memory.embedder_name} ("):
        return None  # the log's vectors are another embedder's
    return stats.vectors


def _vector_rows(memory: EpisodicMemory, stats: MemoryStats) -> list[tuple[str, str]]:
    """The ``vectors`` and ``embedder`` rows, when the log has vectors or --embedder is given."""
    embedder = memory.embedder
    if embedder is None and stats.embedder is None:
        return []
    counted = _vectors_counted(memory, stats)
    if embedder is None:
        vectors = "not counted (pass --embedder with the log's model to count them)"
    elif counted is None:
        vectors = (
            f"not counted: the log's vectors are another embedder's, not "
            f"{shown(memory.embedder_name or '')}'s ('reembed' replaces them)"
        )
    else:
        vectors = f"{counted} of {quantity(stats.total, 'episode')}"
        if counted < stats.total:
            vectors += " ('backfill' embeds the others; until then they are found by keywords)"
    return [
        ("vectors", vectors),
        ("embedder", shown_value(stats.embedder) if stats.embedder else "none yet"),
    ]


def shown_value(value: str | None) -> str:
    """A stored value in the ``stats`` table, cleaned and on one line (``-`` for none)."""
    return " ".join(clean(value).split()) if value else "-"


async def cmd_export(args: argparse.Namespace, memory: EpisodicMemory, settings: Settings) -> int:
    """Every visible episode as JSONL, as stored, with its grades and use count: a backup that
    ``import`` restores as it reads, protected like the store (see
    :func:`write_export`); ``-o -`` is stdout. Says on stderr how many episodes hold text the
    default redactor would replace (stored by deepcrew-ai or with ``redact=False``)."""
    episodes = await memory.load(graded=False)  # as recorded: the grades travel beside them
    graded = await grades_of(memory, episodes)
    uses = await memory.uses()
    lines = "".join(
        to_json(_with_grades(e.to_dict(), g, as_stored=True) | _uses(uses.get(e.id, 0))) + "\n"
        for e, g in zip(episodes, graded, strict=True)
    )
    if args.output and args.output != "-":
        mode = export_mode(settings.file)
        await off_the_loop(settings, lambda: write_export(args.output, lines, mode))
        note(f"exported {quantity(len(episodes), 'episode')} to {args.output}")
    else:
        OUTPUT.data(sys.stdout, lines)
    unredacted = sum(holds_secrets(e) for e in episodes)
    if unredacted:
        note(
            f"{quantity(unredacted, 'exported episode')} "
            f"{'holds' if unredacted == 1 else 'hold'} text that looks like a secret, stored "
            f"unredacted (by deepcrew-ai or with redact=False): the export keeps it as stored; "
            f"'import' redacts it"
        )
    if not episodes:
        await hint_if_empty(memory)
    return 0


def _uses(count: int) -> dict[str, int]:
    # How often the episode was injected into a run: it ranks higher for it (reinforcement).
    return {"uses": count} if count else {}


def export_mode(store_file: Path | None) -> int:
    """The permission bits of an export: the JSON store file's own (an export holds the same
    data; never an executable bit), else :data:`EXPORT_MODE`."""
    if store_file is not None:
        try:
            return stat.S_IMODE(os.stat(store_file).st_mode) & 0o666
        except OSError:
            pass
    return EXPORT_MODE


def write_export(target: str, text: str, mode: int) -> None:
    """Write *text* to *target* whole or not at all, following no symlink planted anywhere.

    The data goes to a new file with an unpredictable name next to *target*, created by
    ``tempfile.mkstemp`` (``O_CREAT | O_EXCL | O_NOFOLLOW``, mode 0600), given *mode*, synced,
    then renamed over *target*. A symlink at *target* is replaced by the file, never followed
    (whatever it points to); anything else at *target* that is not a regular file (a
    directory, a FIFO, a socket, a device) is refused, since the rename would replace it. An
    existing file's mode is not kept (the export gets the store's). An interrupted export
    leaves the old file as it was."""
    import tempfile

    path = Path(target)
    try:
        kind = os.lstat(path).st_mode
    except FileNotFoundError:
        kind = None
    except OSError as exc:
        raise CliError(f"{target}: cannot export there ({exc.strerror})") from None
    if kind is not None and not (stat.S_ISREG(kind) or stat.S_ISLNK(kind)):
        raise CliError(
            f"{target} is {_file_kind(kind)}, not a regular file: nothing was written; give a "
            f"file name to export to, or '-o -' for stdout"
        )
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


def _file_kind(mode: int) -> str:
    kinds = [
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ]
    return next((name for test, name in kinds if test(mode)), "a special file")
