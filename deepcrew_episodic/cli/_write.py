"""The writing commands: ``record``, ``import``, ``forget``, ``clear``, ``sweep``, ``shrink``,
and ``backfill`` and ``reembed``, which write vectors (recall by meaning).

A command that deletes asks first on a terminal (and takes no for an answer without one), and
checks everything it was given before it writes anything: every record of a file passes
``EpisodicMemory.check`` (every check ``record`` runs) before the first is stored, and a bad one
is named by its line or item.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._errors import CliError, UsageError
from ._ids import resolve_id
from ._output import (
    clean,
    confirm,
    dump,
    for_display,
    note,
    one_line,
    out,
    quantity,
    timeline_line,
    without_traceback,
)
from ._store import load_litellm_quietly, stored, stored_namespaces

if TYPE_CHECKING:
    from .. import Episode, EpisodicMemory, Grade
    from ..providers import MemoryProvider


async def cmd_record(
    args: argparse.Namespace, memory: EpisodicMemory, distill_params: dict[str, Any]
) -> int:
    from .. import Episode

    if args.transcript is not None:
        return await _record_transcript(args, memory, distill_params)
    if args.file is not None:
        records = _without_grades(await _read_records(args.file), "record")
        episodes = [_validated(Episode, item, where) for where, item in records]
        if args.forget_after:
            episodes = [
                e if e.forget_after else dataclasses.replace(e, forget_after=args.forget_after)
                for e in episodes
            ]
        _check_all(memory, episodes, [where for where, _item in records])
    else:
        fields: dict[str, Any] = {
            "query": args.query,
            "response": args.response,
            # unknown with a score: the library gives it the outcome the score stands for
            "outcome": args.outcome or "unknown",
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
        if args.source is not None:
            fields["outcome_source"] = args.source
        episodes = [_validated(Episode, fields, "the episode")]
    if args.file is not None:
        _refuse_stored_ids(episodes, {ep.id for ep in await stored(memory)})
    recorded = [await memory.record(episode) for episode in episodes]
    _report_redactions(episodes, recorded)
    _show_recorded(args, memory, recorded)
    return 0


def _show_recorded(
    args: argparse.Namespace, memory: EpisodicMemory, recorded: Sequence[Episode]
) -> None:
    """What ``record`` stored; an episode recorded already expired (a past ``forget_after``,
    or older than ``--max-age``) by its id only: no output shows an expired episode's text."""
    if args.json:
        dump(
            [
                {"id": clean(e.id), "expired": True} if memory.is_expired(e) else for_display(e)
                for e in recorded
            ]
        )
        return
    for episode in recorded:
        expired = ", expired at once" if memory.is_expired(episode) else ""
        source = f" from {one_line(episode.source_label(), 60)}" if episode.source_label() else ""
        out(f"recorded {clean(episode.id)} ({episode.outcome}{source}{expired})")


async def _record_transcript(
    args: argparse.Namespace, memory: EpisodicMemory, params: dict[str, Any]
) -> int:
    """``record TRANSCRIPT --distill-model MODEL``: one model call distils the run into an
    episode (``deepcrew_episodic.distill``), recorded with ``transcript_ref`` = the file."""
    import os

    import anyio.to_thread

    from .. import DistillationError, distill, outcome_for_score

    name = "stdin" if args.transcript == "-" else args.transcript
    messages = _messages(await _read_text(args.transcript), name)
    # A verified outcome: given here, it beats whatever the model says. A score alone stands
    # for the outcome the one rule gives it.
    verified = args.outcome
    if verified is None and args.score is not None:
        verified = outcome_for_score(args.score)
    await load_litellm_quietly()
    try:
        episode = await distill(
            args.distill_model.strip(),
            messages,
            verified=verified,
            params=params,
            redactor=memory.redactor or False,
        )
    except DistillationError as exc:
        message = " ".join(clean(without_traceback(str(exc))).split())
        raise CliError(f"{name}: {message}; nothing was recorded") from None
    if episode is None:
        out(
            f"not recorded: {name} is a trivial run (fewer than 2 messages besides system "
            f"ones, or no user message with text)"
        )
        return 0
    extra: dict[str, Any] = {"tags": [*episode.tags, *args.tags], "agent_id": args.agent_id}
    if args.transcript != "-":
        # (getcwd is a system call: off the loop like the read)
        extra["transcript_ref"] = await anyio.to_thread.run_sync(os.path.abspath, args.transcript)
    if args.score is not None:
        extra["score"] = args.score
    if args.forget_after is not None:
        extra["forget_after"] = args.forget_after
    if verified is not None:
        # The outcome given here is the caller's, not the model's reading of the transcript.
        extra["outcome_source"] = args.source or ""
    episode = dataclasses.replace(episode, **extra)
    recorded = await memory.record(episode)
    _report_redactions([episode], [recorded])
    _show_recorded(args, memory, [recorded])
    return 0


def _messages(text: str, name: str) -> list[dict[str, Any]]:
    """A run's messages: JSONL, one message a line (as ``write_transcript`` writes them), or
    one JSON array of them. Each must be an object with a ``role``; a bad one is named."""
    stripped = text.lstrip()
    items: list[tuple[str, Any]]
    if stripped.startswith("["):
        try:
            whole = json.loads(text)
        except json.JSONDecodeError as exc:
            raise CliError(f"{name}: not a JSON array of messages ({exc.msg})") from None
        except RecursionError:
            raise CliError(f"{name}: nested too deeply to be a list of messages") from None
        except ValueError:
            raise CliError(f"{name}: {_TOO_LONG}; nothing was recorded") from None
        items = [(f"{name}: item {i}", m) for i, m in enumerate(whole, 1)]
    else:
        items = _json_lines(text, name)
    for where, message in items:
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise CliError(
                f"{where}: not a chat message (an object with a 'role', as write_transcript "
                f"writes them); nothing was recorded"
            )
    return [message for _where, message in items]


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


def _check_all(memory: EpisodicMemory, episodes: Sequence[Episode], where: Sequence[str]) -> None:
    """Every check ``record`` runs (an id holding a secret, a future timestamp included), on
    every episode, before any is written: the first bad one is named and nothing is stored."""
    from .. import InvalidEpisodeError

    for episode, place in zip(episodes, where, strict=True):
        try:
            memory.check(episode)
        except InvalidEpisodeError as exc:
            raise CliError(f"{place}: {exc}; nothing was written") from None


def _validated(cls: type[Episode], item: Any, where: str) -> Episode:
    from .. import InvalidEpisodeError

    try:
        return cls.coerce(item)
    except InvalidEpisodeError as exc:
        raise CliError(f"{where}: {exc}; nothing was written") from None


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
        # A kind is a label (openai-key, basic-auth), not a noun to put in the plural: the
        # count is of secrets, and a kind found more than once says how often.
        listed = ", ".join(k + f" x{n}" * (n > 1) for k, n in sorted(found.items()))
        note(f"redacted before storing: {quantity(sum(found.values()), 'secret')} ({listed})")


async def _read_text(path: str) -> str:
    """The text of *path* (``-``: stdin), read in a worker thread: the loop stays free."""
    import anyio.to_thread

    return await anyio.to_thread.run_sync(_read_text_now, path)


def _read_text_now(path: str) -> str:
    name = "stdin" if path == "-" else path
    try:
        if path == "-":
            # Bytes, decoded here: the terminal's locale says nothing about a file piped in.
            stream = getattr(sys.stdin, "buffer", None)
            if stream is None:
                raise CliError("stdin: closed, nothing to read")
            raw: bytes = stream.read()
        else:
            raw = Path(path).read_bytes()
        return raw.decode("utf-8-sig")  # a BOM (Windows tools) is not text
    except FileNotFoundError:
        raise CliError(f"{name}: no such file") from None
    except IsADirectoryError:
        raise CliError(f"{name}: is a directory, not a file") from None
    except UnicodeDecodeError as exc:
        raise CliError(f"{name}: not UTF-8 text ({exc.reason})") from None
    except MemoryError:
        raise CliError(f"{name}: too large to read into memory") from None
    except (OSError, ValueError) as exc:  # unreadable: permissions, a closed descriptor
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise CliError(f"{name}: cannot be read ({reason})") from None


def _without_grades(records: list[tuple[str, Any]], command: str) -> list[tuple[str, Any]]:
    """The records with the ``grades`` an export or a ``--json`` listing adds to each episode
    left out (grades are not imported: the episode is stored as exported), said on stderr."""
    dropped = 0
    kept: list[tuple[str, Any]] = []
    for where, item in records:
        if isinstance(item, dict) and "grades" in item:
            grades = item["grades"]
            dropped += len(grades) if isinstance(grades, list) else 1
        kept.append((where, _episode_part(item)))
    if dropped:
        note(
            f"{command}: {quantity(dropped, 'grade')} in the file {'was' if dropped == 1 else 'were'} "
            f"not recorded (the episodes are "
            f"stored as recorded; 'import' restores a backup with its grades and uses)"
        )
    return kept


async def _read_records(path: str) -> list[tuple[str, Any]]:
    """(where, item) for each record in a JSON object, a JSON array or a JSONL file."""
    return _parse_records(await _read_text(path), "stdin" if path == "-" else path)


def _parse_records(text: str, name: str) -> list[tuple[str, Any]]:
    try:
        whole = json.loads(text)
    except json.JSONDecodeError:
        whole = None
    except RecursionError:
        raise CliError(f"{name}: nested too deeply to be episodes") from None
    except ValueError:
        whole = None  # read line by line below: the line that holds it is named
    else:
        if isinstance(whole, dict):
            return [(name, whole)]
        if isinstance(whole, list):
            return [(f"{name}: item {i}", item) for i, item in enumerate(whole, 1)]
        raise CliError(f"{name}: expected a JSON object, an array of objects, or JSONL")
    return _json_lines(text, name)


def _json_lines(text: str, name: str) -> list[tuple[str, Any]]:
    """``(where, value)`` for each non-blank line of JSONL *text*; a bad line is named."""
    found: list[tuple[str, Any]] = []
    # Lines end at "\n" only (JSONL's rule): str.splitlines() also splits at U+2028, U+0085
    # and other characters a JSON string may hold raw, which would break a record in two.
    for number, line in enumerate(text.split("\n"), 1):
        line = line.removesuffix("\r")
        if not line.strip():
            continue
        try:
            found.append((f"{name}: line {number}", json.loads(line)))
        except json.JSONDecodeError as exc:
            raise CliError(f"{name}: line {number} is not JSON ({exc.msg})") from None
        except RecursionError:
            raise CliError(f"{name}: line {number} is nested too deeply") from None
        except ValueError:
            raise CliError(f"{name}: line {number}: {_TOO_LONG}; nothing was written") from None
    return found


# json.loads refuses such an integer with a bare ValueError (a guard against slow conversions).
_TOO_LONG = "holds an integer of more than 4,300 digits"


async def cmd_import(args: argparse.Namespace, memory: EpisodicMemory) -> int:
    from .. import Episode

    text = await _read_text(args.path)
    name = "stdin" if args.path == "-" else args.path
    log = await _as_deepcrew_log(text)
    if log is not None:
        found = await stored_namespaces(log)
        source = _pick_namespace(found, args.from_namespace, memory.namespace, name)
        episodes = await _read_deepcrew_log(log, source)
        places = [
            f"{name}: namespace '{source}', episode {i} of {len(episodes)} (oldest first)"
            for i in range(1, len(episodes) + 1)
        ]
        extras: list[tuple[list[Grade], int]] = [([], 0)] * len(episodes)
    else:
        if args.from_namespace:
            raise UsageError("import: --from-namespace applies to a deepcrew-ai log only")
        records = _parse_records(text, name)
        extras = [_backup_extras(item, where) for where, item in records]
        episodes = [_validated(Episode, _episode_part(item), where) for where, item in records]
        places = [where for where, _item in records]
    held = await stored(memory)
    present = {ep.id for ep in held}
    fresh: list[Episode] = []
    where: list[str] = []
    restored: list[tuple[list[Grade], int]] = []
    for episode, place, extra in zip(episodes, places, extras, strict=True):
        if episode.id and episode.id in present:
            continue  # already stored, or given twice: skipped, so not checked either
        present.add(episode.id)
        fresh.append(episode)
        where.append(place)
        restored.append(extra)
    skipped = len(episodes) - len(fresh)
    _check_all(memory, fresh, where)
    # The ring keeps the newest max_episodes in the order they were written: an episode of the
    # file older than all that the ring keeps is left out, not written to push a newer stored
    # one out (so importing a backup into a smaller ring twice changes nothing).
    keep = _newest(held, fresh, memory.max_episodes)
    left_out = len(fresh) - len(keep)
    fresh, where, restored = (
        [fresh[i] for i in keep],
        [where[i] for i in keep],
        [restored[i] for i in keep],
    )
    # The ring keeps the newest max_episodes: an import that overflows it pushes the oldest
    # stored episodes out, for good, so it asks like every other command that deletes.
    pushed = held[: max(0, len(held) + len(fresh) - memory.max_episodes)]
    if args.dry_run:
        _list_doomed(memory, pushed)
        note(
            f"import would add {quantity(len(fresh), 'episode')} from {name} ({skipped} already present"
            f"{f', {left_out} older than the ring keeps' if left_out else ''}) and push "
            f"{quantity(len(pushed), 'stored episode')} out of the ring of {memory.max_episodes} "
            f"(dry run: nothing was written)"
        )
        return 0
    if pushed:
        _ask(
            args,
            f"Importing {quantity(len(fresh), 'episode')} pushes the oldest "
            f"{quantity(len(pushed), 'stored episode')} "
            f"of namespace '{memory.namespace}' out of its ring of {memory.max_episodes}, for "
            f"good. Go on?",
            f"{quantity(len(pushed), 'stored episode')} would be pushed out; --max-episodes N keeps more",
        )
    # Each with its grades and use count: a backup reads as it did when it was exported.
    kept = [
        await memory.restore(episode, grades=grades, uses=uses)
        for episode, (grades, uses) in zip(fresh, restored, strict=True)
    ]
    added = len(kept)
    _report_redactions(fresh, kept)
    already = f", {skipped} already present" if skipped else ""
    out(f"imported {quantity(added, 'episode')} from {name}{already}")
    if left_out:
        note(
            f"the ring keeps the newest {memory.max_episodes}: "
            f"{quantity(left_out, 'older episode')} of {name} {'was' if left_out == 1 else 'were'} "
            f"left out (pass --max-episodes to keep more)"
        )
    return 0


def _newest(held: Sequence[Episode], fresh: Sequence[Episode], ring: int) -> list[int]:
    """The positions in *fresh* of the episodes a ring of *ring* keeps among *held* and
    *fresh*, newest first by time (a stored episode wins a tie; one of *fresh* without a
    timestamp is recorded now, so it is the newest); all of them when everything fits."""
    if len(held) + len(fresh) <= ring:
        return list(range(len(fresh)))

    def when(episode: Episode, undated: float) -> float:
        try:
            moment = episode.time()
        except ValueError:  # a garbled stored time: the oldest
            return -math.inf
        return undated if moment is None else moment

    # An episode of the file without a timestamp is recorded now: the newest.
    ranked = sorted(
        [(when(ep, -math.inf), 1, i) for i, ep in enumerate(held)]
        + [(when(ep, math.inf), 0, i) for i, ep in enumerate(fresh)],
        reverse=True,
    )[:ring]
    return sorted(i for _, stored_one, i in ranked if not stored_one)


_BACKUP_FIELDS = ("grades", "uses")


def _episode_part(item: Any) -> Any:
    """A record without what ``export`` writes beside the episode (its grades, its uses)."""
    if isinstance(item, dict):
        return {k: v for k, v in item.items() if k not in _BACKUP_FIELDS}
    return item


def _backup_extras(item: Any, where: str) -> tuple[list[Grade], int]:
    """The grades and use count ``export`` wrote beside an episode, checked: a bad one is named
    by its line (or item) and grade, and nothing is imported."""
    from .. import Grade, InvalidEpisodeError

    if not isinstance(item, dict):
        return [], 0
    given = item.get("grades", [])
    if not isinstance(given, list):
        raise CliError(
            f"{where}: grades: a list of grades, not a JSON {type(given).__name__}; "
            "nothing was imported"
        )
    grades: list[Grade] = []
    for i, grade in enumerate(given, 1):
        try:
            grades.append(Grade.from_dict(grade, "-"))
        except InvalidEpisodeError as exc:
            raise CliError(f"{where}: grade {i}: {exc}; nothing was imported") from None
    uses = item.get("uses", 0)
    if isinstance(uses, bool) or not isinstance(uses, int):
        raise CliError(
            f"{where}: uses: a whole number, not a JSON {type(uses).__name__}; nothing was imported"
        )
    if not 0 <= uses <= 10**15:
        raise CliError(f"{where}: uses: a whole number from 0 to 10**15; nothing was imported")
    return grades, uses


async def _as_deepcrew_log(text: str) -> MemoryProvider | None:
    """The keys and values of a file written by deepcrew-ai's FileMemoryProvider (or ours), in
    an in-memory store, or ``None`` when *text* is not one (it holds no namespace)."""
    from ..providers import InMemoryProvider

    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None  # not a log file: read as episodes, which names what is wrong
    if not isinstance(data, dict):
        return None
    log = InMemoryProvider()
    await log.write({k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str)})
    return log if await stored_namespaces(log) else None


def _pick_namespace(found: list[str], chosen: str | None, target: str, name: str) -> str:
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


async def _read_deepcrew_log(log: MemoryProvider, namespace: str) -> list[Episode]:
    from .. import EpisodicMemory

    # A ring as large as the file, to see every slot it holds (a deepcrew-ai log records no
    # ring size); redaction happens on the way in.
    size = max(1, len(await log.keys("")))
    reader = EpisodicMemory(log, namespace=namespace, max_episodes=size, redact=False)
    return await reader.load()


async def cmd_forget(args: argparse.Namespace, memory: EpisodicMemory) -> int:
    if args.corrupt:
        return await _forget_corrupt(args, memory)
    ids = _resolve_ids(args.ids, await stored(memory), memory) if args.ids else None
    selected = await memory.select(
        ids=ids,
        outcome=args.outcome,
        tags=args.tags,
        before=args.before,
        containing=args.containing,
    )
    if args.dry_run:
        _list_doomed(memory, selected)
        note(
            f"{quantity(len(selected), 'episode')} would be forgotten (dry run: nothing was deleted)"
        )
        return 0
    if not selected:
        out("forgot 0 episodes (none matched)")
        return 0
    _ask(
        args,
        f"Forget {quantity(len(selected), 'episode')} of namespace '{memory.namespace}' for good?",
        f"{quantity(len(selected), 'episode')} match{'es' * (len(selected) == 1)}",
    )
    count = await memory.forget([ep.id for ep in selected])
    out(f"forgot {quantity(count, 'episode')}")
    return 0


async def _forget_corrupt(args: argparse.Namespace, memory: EpisodicMemory) -> int:
    """``forget --corrupt``: delete the records that cannot be decoded (which every other
    command skips, counts and leaves in place)."""
    found = await memory.forget(corrupt=True, dry_run=True)
    if args.dry_run:
        note(f"{quantity(found, 'corrupt record')} would be deleted (dry run: nothing was deleted)")
        return 0
    if not found:
        out("forgot 0 corrupt records (none found)")
        return 0
    _ask(
        args,
        f"Delete {quantity(found, 'corrupt record')} of namespace '{memory.namespace}' for good?",
        quantity(found, "corrupt record"),
    )
    count = await memory.forget(corrupt=True)
    out(f"forgot {quantity(count, 'corrupt record')}")
    return 0


def _resolve_ids(
    given: Sequence[str], episodes: Sequence[Episode], memory: EpisodicMemory
) -> set[str]:
    """Full ids, or unique prefixes of them (see :mod:`._ids`): all of them, or an error."""
    resolved: set[str] = set()
    for wanted in given:
        found = resolve_id(wanted, episodes, memory.is_expired, nothing="nothing was deleted")
        if found is None:
            raise CliError(f"no episode with id '{clean(wanted)}': nothing was deleted")
        resolved.add(found)
    return resolved


def _ask(args: argparse.Namespace, question: str, what: str) -> None:
    """Go on only with ``--yes`` or a yes on the terminal (no terminal: no), the same way in
    every command that deletes; otherwise stop with nothing deleted, saying how to go on."""
    if args.yes or confirm(question):
        return
    raise CliError(
        f"not confirmed: nothing was deleted ({what}; pass --yes to go on without asking, "
        f"--dry-run to list what would go)"
    )


def _list_doomed(memory: EpisodicMemory, episodes: Sequence[Episode]) -> None:
    """What a deletion would take, one line each. An expired episode is listed by id only:
    its text must not reach any output."""
    for ep in episodes:
        out(f"{clean(ep.id)}  (expired)" if memory.is_expired(ep) else timeline_line(ep))


async def cmd_clear(args: argparse.Namespace, memory: EpisodicMemory, label: str) -> int:
    held = await stored(memory)
    corrupt = (await memory.stats()).corrupt
    what = quantity(len(held), "episode") + (
        f" and {quantity(corrupt, 'corrupt record')}" if corrupt else ""
    )
    if args.dry_run:
        _list_doomed(memory, held)
        note(
            f"clear would delete every key of namespace '{memory.namespace}': {what}, with "
            f"their grades, uses and vectors (dry run: nothing was deleted)"
        )
        return 0
    _ask(args, f"Delete every episode of namespace '{memory.namespace}' in {label}?", what)
    await memory.clear()
    out(f"cleared namespace '{memory.namespace}'")
    return 0


async def cmd_sweep(args: argparse.Namespace, memory: EpisodicMemory) -> int:
    if memory.max_age is None:
        note("no --max-age: only episodes past their own forget_after expire")
    count = await memory.sweep(dry_run=True)
    expired = [ep for ep in await stored(memory) if memory.is_expired(ep)]
    what = (
        f"{quantity(count, 'key')}: {quantity(len(expired), 'expired episode')}, and stray keys "
        f"no read path shows"
        if expired
        else f"{quantity(count, 'stray key')} no read path shows"
    )
    if args.dry_run:
        _list_doomed(memory, expired)
        note(f"sweep would delete {what} (dry run: nothing was deleted)")
        return 0
    if count:
        _ask(args, f"Sweep namespace '{memory.namespace}', deleting {what} for good?", what)
        count = await memory.sweep()
    out(f"swept {quantity(count, 'key')} (expired episodes and strays)")
    return 0


async def cmd_shrink(args: argparse.Namespace, memory: EpisodicMemory, label: str) -> int:
    """Lower the log's ring size: the one command that deletes by ring size."""
    held = await stored(memory)
    doomed = held[: max(0, len(held) - args.size)]
    if args.dry_run:
        _list_doomed(memory, doomed)
        note(
            f"shrink {args.size} would delete {quantity(len(doomed), 'episode')} of namespace "
            f"'{memory.namespace}' (dry run: nothing was deleted)"
        )
        return 0
    _ask(
        args,
        f"Shrink namespace '{memory.namespace}' in {label} to the newest "
        f"{quantity(args.size, 'episode')}, deleting {len(doomed)} for good?",
        f"{quantity(len(doomed), 'episode')} fall{'s' * (len(doomed) == 1)} outside a ring of "
        f"{args.size}",
    )
    deleted = await memory.shrink(args.size)
    out(
        f"shrank namespace '{memory.namespace}' to {quantity(args.size, 'episode')}: "
        f"deleted {deleted}"
    )
    return 0


# --- recall by meaning --------------------------------------------------------------------------


class Progress:
    """A tqdm progress bar on stderr for ``backfill`` and ``reembed`` (only on a terminal:
    a log file or a pipe gets the one result line). Counts what was written, for the message
    of a failure part way."""

    def __init__(self, command: str) -> None:
        import importlib

        from .. import MissingDependencyError

        try:
            # (by name: the package ships no type stubs, and only its constructor is used)
            tqdm = importlib.import_module("tqdm").tqdm
        except ImportError:
            raise MissingDependencyError(
                f"{command} needs tqdm for its progress bar: pip install "
                f"'deepcrew-episodic[embeddings]'"
            ) from None
        self._tqdm = tqdm
        self._command = command
        self._bar: Any = None
        self.done = 0

    def __call__(self, done: int, total: int) -> None:
        self.done = done
        if self._bar is None:
            self._bar = self._tqdm(
                total=total,
                desc=self._command,
                unit="episode",
                file=sys.stderr,
                disable=None,  # no bar when stderr is not a terminal
                leave=False,
                dynamic_ncols=True,
            )
        self._bar.update(done - self._bar.n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


async def cmd_backfill(args: argparse.Namespace, memory: EpisodicMemory) -> int:
    """Embed the episodes that have no usable vector (``EpisodicMemory.backfill``)."""
    progress = Progress("backfill")
    try:
        written = await memory.backfill(batch_size=args.batch_size, progress=progress)
    except _embedding_errors() as exc:
        raise _stopped(exc, progress.done) from exc
    finally:
        progress.close()
    _written(args, "backfilled", written)
    return 0


async def cmd_reembed(args: argparse.Namespace, memory: EpisodicMemory, label: str) -> int:
    """Rebuild every vector with this embedder (``EpisodicMemory.reembed``), after asking."""
    assert memory.embedder is not None
    stats = await memory.stats()
    made = f" (made by {clean(stats.embedder)})" if stats.embedder else ""
    model = clean(memory.embedder_name or "")
    if args.dry_run:
        note(
            f"reembed would replace every vector{made} of namespace '{memory.namespace}', "
            f"embedding all {quantity(stats.total, 'episode')} with '{model}' (dry run: nothing was "
            f"replaced)"
        )
        return 0
    if not args.yes and not confirm(
        f"Replace every vector of namespace '{memory.namespace}' in {label}{made} with one "
        f"made by '{model}'?"
    ):
        raise CliError(
            "not confirmed: no vector was replaced (pass --yes to reembed without asking, "
            "--dry-run to see what it would replace)"
        )
    progress = Progress("reembed")
    try:
        written = await memory.reembed(batch_size=args.batch_size, progress=progress)
    except _embedding_errors() as exc:
        raise _stopped(exc, progress.done) from exc
    finally:
        progress.close()
    _written(args, "reembedded", written)
    return 0


def _embedding_errors() -> tuple[type[Exception], ...]:
    from .. import EmbedderMismatchError, EmbeddingError

    return (EmbeddingError, EmbedderMismatchError)


def _stopped(exc: Exception, done: int) -> CliError:
    """The library's message (it names the embedders), and what the run already wrote: those
    vectors are kept, and running ``backfill`` again goes on from there."""
    message = " ".join(clean(without_traceback(str(exc))).split())
    if not done:
        return CliError(message)
    return CliError(
        f"{message} ({quantity(done, 'vector')} written before it "
        f"{'is' if done == 1 else 'are'} kept; 'backfill' goes on from there)"
    )


def _written(args: argparse.Namespace, verb: str, written: int) -> None:
    if args.json:
        dump({"written": written})
    else:
        out(f"{verb} {quantity(written, 'vector')}")
