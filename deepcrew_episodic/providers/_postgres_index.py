"""The recall index in a PostgreSQL store: tables kept in the same transaction as every write.

The tables (see _postgres_schema.py; ``ns`` is the namespace as it appears in the log's keys)
hold what SQLite's index holds (see _sqlite_index.py), in real columns with b-tree indexes:

    ix_episode   one row per episode record: seq, id, time, outcome, source, terms, tags,
                 forget_at, run, conversation, how many grades name it; primary key (ns, seq),
                 indexes on (ns, episode_id), (ns, run, seq), (ns, conversation, seq),
                 (ns, recorded), (ns, outcome, seq)
    ix_term      the postings, primary key (ns, term, size, recorded, seq): a search reads a
                 term's newest postings as a range of that key
    ix_count     how many postings each term and length class has (exact: kept by the same
                 functions that add and drop postings)
    ix_grade     one row per grade record
    ix_pending   records written and not indexed yet

Triggers on ``kv`` queue every inserted episode or grade key and drop the rows of a deleted one,
so nothing written or deleted through SQL (this library, another version of it, ``psql``)
escapes them. The terms need Python (stemming): every write transaction of the provider indexes
what is pending before it commits, and a reader that finds rows pending (a write made outside
the library) indexes them first.

Strings read from a record (terms, ids, runs) are stored as ``bytea`` of their UTF-8 with
``surrogatepass``: any Python string comes back exactly, a NUL or a lone surrogate included.
Namespaces come from keys, and are encoded as keys are (``surrogateescape``).
"""

from __future__ import annotations

import json
import re
from array import array
from collections import Counter
from collections.abc import Collection, Sequence
from typing import Any

from .._index import Facts, Whole, index_row

__all__ = ["PostgresIndexReader", "index_pending", "key_bytes", "text_bytes"]

# An episode or grade record of a namespace, as Redis's and the log read it: a namespace may
# hold ':' (the greedy group takes all but the last two parts); a number is the log's only in
# its one spelling (from 1, no leading zero), so ``e:007`` is not record 7 and never meets it
# in ix_episode's primary key.
_RECORD = re.compile(r"episodic:(.+):([eg]):([1-9][0-9]{0,17})", re.DOTALL)
_DIGITS = re.compile(r"[0-9]{1,18}")


def key_bytes(text: str) -> bytes:
    """A key (or a namespace taken from one) as the store keeps it."""
    return text.encode("utf-8", "surrogateescape")


def key_text(raw: bytes | memoryview) -> str:
    return bytes(raw).decode("utf-8", "surrogateescape")


def text_bytes(text: str) -> bytes:
    """A string read from a record, as the index keeps it (any string, exactly)."""
    return text.encode("utf-8", "surrogatepass")


def _text(raw: bytes | memoryview) -> str:
    return bytes(raw).decode("utf-8", "surrogatepass")


def pending(conn: Any, s: str) -> bool:
    row = conn.execute(f"SELECT EXISTS (SELECT 1 FROM {s}.ix_pending)").fetchone()
    return bool(row[0])


def queued(conn: Any, s: str) -> Any:
    """The cursor of the records queued and not indexed yet, ``(key, value)`` (a ``None``
    value: deleted since); issued, not waited for (a pipeline sends it with what follows)."""
    return conn.execute(
        f"SELECT p.key, kv.value FROM {s}.ix_pending AS p LEFT JOIN {s}.kv ON kv.key = p.key"
    )


def index_records(
    conn: Any,
    s: str,
    waiting: Sequence[tuple[Any, Any]],
    written: Sequence[tuple[bytes, bytes]] = (),
    deleted: Collection[bytes] = (),
) -> None:
    """Index, inside the caller's transaction (which holds the writers' lock), the records
    *waiting* in the queue (read under that lock) and those this transaction *written*, after
    it *deleted* keys; then take them all off the queue. The values come from the caller, so
    nothing here waits on the server: in a pipeline it all travels with the commit."""
    records = {bytes(k): bytes(v) for k, v in waiting if v is not None}
    for key in deleted:
        records.pop(key, None)
    records.update(written)
    episodes: list[tuple[str, int, bytes, bytes]] = []
    grades: list[tuple[bytes, str, int, bytes]] = []
    for raw_key, value in records.items():
        match = _RECORD.fullmatch(key_text(raw_key))
        if match is None:
            continue
        ns, kind, number = match.group(1), match.group(2), int(match.group(3))
        if kind == "e":
            episodes.append((ns, number, raw_key, value))
        else:
            grades.append((raw_key, ns, number, value))
    # Episodes in log order: an undated one takes the time of the one before it.
    episodes.sort(key=lambda e: (e[0], e[1]))
    for ns, seq, raw_key, value in episodes:
        _index_episode(conn, s, ns, seq, raw_key, key_text(value))
    for raw_key, ns, number, value in grades:
        _index_grade(conn, s, raw_key, ns, number, key_text(value))
    # Every key the trigger may have queued (its pattern is looser than _RECORD) goes.
    done = [bytes(k) for k, _ in waiting] + [k for k, _ in written]
    if done:
        conn.execute(f"DELETE FROM {s}.ix_pending WHERE key = ANY (%s::bytea[])", (done,))


def index_pending(conn: Any, s: str) -> None:
    """Index every queued record, inside the caller's transaction."""
    index_records(conn, s, queued(conn, s).fetchall())


def _index_episode(conn: Any, s: str, ns: str, seq: int, key: bytes, raw: str) -> None:
    row = index_row(raw)
    if row is None:
        args: tuple[Any, ...] = (key, key_bytes(ns), seq, b"", b"", None, b"", b"", 0, [])
        args += ("[]", None, b"", b"", True)
    else:
        args = (
            key,
            key_bytes(ns),
            seq,
            text_bytes(row.episode_id),
            text_bytes(row.timestamp),
            row.when,
            text_bytes(row.outcome),
            text_bytes(row.source),
            row.size,
            [text_bytes(t) for t in row.terms],
            json.dumps(row.tags),  # ASCII: any tag, NUL and lone surrogates escaped
            row.forget_at,
            text_bytes(row.run),
            text_bytes(row.conversation),
            False,
        )
    conn.execute(
        f"SELECT {s}.ix_add_episode(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s::bytea[], %s, %s, "
        f"%s, %s, %s)",
        args,
    )


def _index_grade(conn: Any, s: str, key: bytes, ns: str, number: int, raw: str) -> None:
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        data = None
    episode = data.get("episode") if isinstance(data, dict) else None
    # An unreadable grade is kept under no episode: the read paths skip and count it.
    conn.execute(
        f"SELECT {s}.ix_add_grade(%s, %s, %s, %s, %s)",
        (
            key,
            key_bytes(ns),
            number,
            text_bytes(episode) if isinstance(episode, str) else b"",
            key_bytes(raw),
        ),
    )


class PostgresIndexReader:
    """:class:`~deepcrew_episodic._index.IndexReader` over one connection (inside one
    repeatable-read transaction: every read sees the same snapshot) and one namespace."""

    def __init__(self, conn: Any, s: str, ns: str) -> None:
        self._conn = conn
        self._s = s
        self._ns = key_bytes(ns)
        self._prefix = f"episodic:{ns}:"
        self._query: list[bytes] = []
        self._facts: dict[int, Facts | None] = {}
        self.revision: str | None = None  # the snapshot's (set by read_index)

    def _rows(self, sql: str, args: Sequence[Any]) -> list[Any]:
        return self._conn.execute(sql.replace("{s}", self._s), args).fetchall()  # type: ignore[no-any-return]

    def newest_seq(self) -> int:
        (newest,) = self._rows("SELECT max(seq) FROM {s}.ix_episode WHERE ns = %s", (self._ns,))[0]
        return int(newest or 0)

    def set_query(self, terms: Collection[str]) -> None:
        self._query = [text_bytes(t) for t in sorted(terms)]
        self._facts.clear()

    def counts(self, terms: Sequence[str]) -> dict[str, dict[int, int]]:
        found: dict[str, dict[int, int]] = {}
        if not terms:
            return found
        for term, size, n in self._rows(
            "SELECT term, size, n FROM {s}.ix_count WHERE ns = %s AND term = ANY (%s::bytea[])",
            (self._ns, [text_bytes(t) for t in terms]),
        ):
            found.setdefault(_text(term), {})[int(size)] = int(n)
        return found

    def postings(
        self, term: str, size: int, limit: int, before: tuple[float, int] | None
    ) -> list[tuple[float, int]]:
        if before is None:
            rows = self._rows(
                "SELECT recorded, seq FROM {s}.ix_term WHERE ns = %s AND term = %s AND size = %s "
                "ORDER BY recorded DESC, seq DESC LIMIT %s",
                (self._ns, text_bytes(term), size, limit),
            )
        else:
            rows = self._rows(
                "SELECT recorded, seq FROM {s}.ix_term WHERE ns = %s AND term = %s AND size = %s "
                "AND (recorded, seq) < (%s, %s) ORDER BY recorded DESC, seq DESC LIMIT %s",
                (self._ns, text_bytes(term), size, before[0], before[1], limit),
            )
        return [(float(r[0]), int(r[1])) for r in rows]

    def matches(self, terms: Sequence[str]) -> Counter[int]:
        # One array for every posting: a row per posting would cost several times as much.
        ((seqs,),) = self._rows(
            "SELECT array_agg(seq) FROM {s}.ix_term WHERE ns = %s AND term = ANY (%s::bytea[])",
            (self._ns, [text_bytes(t) for t in terms]),
        )
        return Counter(seqs) if seqs else Counter()

    def facts(self, seqs: Sequence[int]) -> dict[int, Facts]:
        known = self._facts
        wanted = [s for s in seqs if s not in known]
        rows = self._rows(_FACTS, (self._query, self._ns, wanted)) if wanted else []
        for seq in wanted:
            known[seq] = None
        for r in rows:
            known[int(r[0])] = _facts(r)
        return {s: f for s in seqs if (f := known.get(s)) is not None}

    def any_run(self, live: range) -> bool:
        rows = self._rows(
            "SELECT 1 FROM {s}.ix_episode WHERE ns = %s AND run <> '' AND seq >= %s "
            "AND seq < %s LIMIT 1",
            (self._ns, live.start, live.stop),
        )
        return bool(rows)

    def grades(self, episode_id: str) -> list[str]:
        return [
            key_text(r[0])
            for r in self._rows(
                "SELECT record FROM {s}.ix_grade WHERE ns = %s AND episode_id = %s ORDER BY n",
                (self._ns, text_bytes(episode_id)),
            )
        ]

    def _values(self, keys: dict[bytes, int]) -> dict[int, str]:
        found: dict[int, str] = {}
        for key, value in self._rows(
            "SELECT key, value FROM {s}.kv WHERE key = ANY (%s::bytea[])", (list(keys),)
        ):
            if value:
                found[keys[bytes(key)]] = key_text(value)
        return found

    def records(self, seqs: Sequence[int]) -> dict[int, str]:
        return self._values({key_bytes(f"{self._prefix}e:{seq}"): seq for seq in seqs})

    def uses(self, seqs: Sequence[int]) -> dict[int, int]:
        found = self._values({key_bytes(f"{self._prefix}u:{seq}"): seq for seq in seqs})
        return {seq: int(v) for seq, v in found.items() if _DIGITS.fullmatch(v)}

    def run(self, run: str) -> list[int]:
        return [
            int(r[0])
            for r in self._rows(
                "SELECT seq FROM {s}.ix_episode WHERE ns = %s AND run = %s AND run <> '' "
                "ORDER BY seq",
                (self._ns, text_bytes(run)),
            )
        ]

    def conversation(self, conversation: str) -> list[int]:
        return [
            int(r[0])
            for r in self._rows(
                "SELECT seq FROM {s}.ix_episode WHERE ns = %s AND conversation = %s "
                "AND conversation <> '' AND NOT corrupt ORDER BY seq",
                (self._ns, text_bytes(conversation)),
            )
        ]

    def with_id(self, episode_id: str) -> list[int]:
        return [
            int(r[0])
            for r in self._rows(
                "SELECT seq FROM {s}.ix_episode WHERE ns = %s AND episode_id = %s AND NOT corrupt",
                (self._ns, text_bytes(episode_id)),
            )
        ]

    def newest_after(self, start: int, when: float) -> bool:
        """Whether an episode at or past *start* ranks by a time after *when*."""
        rows = self._rows(
            "SELECT 1 FROM {s}.ix_episode WHERE ns = %s AND recorded > %s AND seq >= %s LIMIT 1",
            (self._ns, when, start),
        )
        return bool(rows)

    def corrupt(self, live: range) -> list[int]:
        return [
            int(r[0])
            for r in self._rows(
                "SELECT seq FROM {s}.ix_episode WHERE ns = %s AND corrupt AND seq >= %s "
                "AND seq < %s ORDER BY seq",
                (self._ns, live.start, live.stop),
            )
        ]

    def newest(
        self, live: range, now: float, oldest: float, limit: int, offset: int
    ) -> tuple[list[int], int]:
        """The seqs of the newest *limit* unexpired episodes in *live* after skipping
        *offset*, newest first, and how many unexpired episodes *live* holds."""
        where = (
            "FROM {s}.ix_episode WHERE ns = %s AND NOT corrupt AND seq >= %s AND seq < %s "
            "AND (forget_at IS NULL OR forget_at > %s) AND recorded >= %s"
        )
        args = (self._ns, live.start, live.stop, now, oldest)
        ((total,),) = self._rows(f"SELECT count(*) {where}", args)
        rows = self._rows(
            f"SELECT seq {where} ORDER BY seq DESC LIMIT %s OFFSET %s", (*args, limit, offset)
        )
        return [int(r[0]) for r in rows], int(total)

    def value(self, key: str) -> str | None:
        rows = self._rows("SELECT value FROM {s}.kv WHERE key = %s", (key_bytes(key),))
        return key_text(rows[0][0]) if rows else None

    def whole_namespace(self, most: int) -> Whole | None:
        """Everything a keyword search can read of this namespace, read at once in a few
        statements (``None``: it holds more than *most* episodes); each part is what this
        reader's own read of it returns."""
        ((n,),) = self._rows(
            "SELECT count(*) FROM (SELECT 1 FROM {s}.ix_episode WHERE ns = %s LIMIT %s) AS t",
            (self._ns, most + 1),
        )
        if n > most:
            return None
        episodes: list[tuple[int, float, str, bool]] = []
        facts: dict[int, Facts] = {}
        for r in self._rows(
            "SELECT seq, episode_id, timestamp, recorded, outcome, source, size, terms, tags, "
            "forget_at, run, conversation, graded, corrupt FROM {s}.ix_episode "
            "WHERE ns = %s ORDER BY seq",
            (self._ns,),
        ):
            episodes.append((int(r[0]), float(r[3]), _text(r[10]), bool(r[13])))
            if not r[13]:
                facts[int(r[0])] = _facts(r)  # (with all of its terms)
        postings: dict[tuple[str, int], tuple[Any, Any]] = {}
        for term, size, whens, seqs in self._rows(
            "SELECT term, size, array_agg(recorded ORDER BY recorded, seq), "
            "array_agg(seq ORDER BY recorded, seq) FROM {s}.ix_term WHERE ns = %s "
            "GROUP BY term, size",
            (self._ns,),
        ):
            postings[(_text(term), int(size))] = (array("d", whens), array("q", seqs))
        graded = {f.episode_id for f in facts.values() if f.graded}
        grades: dict[str, list[str]] = {}
        if graded:
            for episode_id, record in self._rows(
                "SELECT episode_id, record FROM {s}.ix_grade WHERE ns = %s ORDER BY n",
                (self._ns,),
            ):
                if (found := _text(episode_id)) in graded:
                    grades.setdefault(found, []).append(key_text(record))
        return Whole(
            newest=self.newest_seq(),
            counts=self.counts(sorted({term for term, _ in postings})),
            postings=postings,
            facts=facts,
            episodes=episodes,
            grades={i: tuple(grades.get(i, ())) for i in graded},
            uses=self.uses([seq for seq, *_ in episodes]),
            records=self.records(list(facts)),
        )


# What ranking reads of an episode; of its terms, only those of the query.
_FACTS = (
    "SELECT e.seq, e.episode_id, e.timestamp, e.recorded, e.outcome, e.source, e.size, "
    "ARRAY(SELECT unnest(e.terms) INTERSECT SELECT unnest(%s::bytea[])), "
    "e.tags, e.forget_at, e.run, e.conversation, e.graded "
    "FROM {s}.ix_episode AS e WHERE NOT e.corrupt AND e.ns = %s AND e.seq = ANY (%s::bigint[])"
)


def _facts(r: Sequence[Any]) -> Facts:
    forget = r[9]
    return Facts(
        int(r[0]),
        _text(r[1]),
        _text(r[2]),
        float(r[3]),
        _text(r[4]),
        _text(r[5]),
        int(r[6]),
        frozenset(_text(t) for t in r[7]),
        str(r[8]),  # the JSON list of its case-folded tags
        None if forget is None else float(forget),
        _text(r[10]),
        _text(r[11]),
        int(r[12]),
    )
