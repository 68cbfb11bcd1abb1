"""The recall index in a SQLite store: tables kept in the same transaction as every write.

Tables (``ns`` is the namespace as it appears in the log's keys)::

    ix_episode(ns, seq, episode_id, timestamp, recorded, outcome, source, size, terms, tags,
               forget_at, run, conversation, graded, corrupt)
        one row per episode record (``episodic:<ns>:e:<seq>``): what ranking, the filters and
        retention read of it; ``recorded`` is the time it ranks by (its timestamp, or for one
        without a usable timestamp the time of the episode before it).
    ix_post(ns, term, size, recorded, seq, n)
        the postings: one row per term of an episode's default recall fields, in the order a
        search reads them (newest first within a term and length class); and around each
        term's postings in a length class, two counter rows whose ``n`` make how many it has
        (exact: kept by the statements that merge postings in and out, see HEAD_AT and
        merge()).
    ix_lag(ns, seq, sign, size, recorded, terms)
        postings on their way: +1, the terms of an episode indexed since the last merge; -1,
        those of an episode deleted since (see MERGE_AT).
    ix_grade(key, ns, n, episode_id, record)
        one row per grade record (``episodic:<ns>:g:<n>``).
    ix_pending(key)
        records written but not indexed yet.

How it stays consistent with the log, whoever writes it: triggers on the ``kv`` table put every
inserted episode or grade key in ``ix_pending`` and drop the rows of a deleted one, so nothing
written or deleted through SQL (this library, another version of it, a hand edit in the
``sqlite3`` shell) escapes them. The terms need Python (stemming), so every write transaction of
the provider indexes what is pending before it commits; a reader that finds rows pending (a
write made outside the library) indexes them before it searches. An upgrade from a store
without the index queues every record and indexes them in batches, each its own transaction:
a kill between two leaves the rest queued, never a half-built index in use.
"""

from __future__ import annotations

import base64
import json
import math
import re
import sqlite3
import struct
from array import array
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence

from .._index import Facts, Whole, index_read, index_row
from .._recall import LENGTH_CAP, SizedMatches

# A term's count lives among its postings, in two counter rows of ix_post that sort around
# them: the tail (TAIL_AT, TAIL_SEQ: after the newest) counts the postings added, the head
# (HEAD_AT, HEAD_SEQ: before the oldest) those dropped; the count is tail - head. A record adds
# postings beside the tail and a ring eviction drops them beside the head, so the counts change
# on pages the postings dirty anyway (a table of counts apart costs a page per term). No real
# posting takes either place: a seq is at least 1 and at most 18 digits, a time is never +inf.
HEAD_AT, HEAD_SEQ = "-9e999", 0
TAIL_AT, TAIL_SEQ = "9e999", 2**63 - 1
REAL = f"seq > {HEAD_SEQ} AND recorded < {TAIL_AT}"  # a posting, not a counter row
_NUMBERS = (float, int)
_CODED = 1 << 59  # seqs below it code as seq * 16 + class in an int64 (see sized_matches)
_COUNTERS = (
    f"(SELECT {HEAD_AT} AS recorded, {HEAD_SEQ} AS seq UNION ALL SELECT {TAIL_AT}, {TAIL_SEQ})"
)

# The row of the episode whose record has the key {key}, found by its primary key: the
# namespace and seq read from the key (``episodic:<ns>:e:<seq>``, a namespace holds no colon),
# and the key made again from them to compare (a key of another kind or form has no row).
_AT = "instr(substr({key}, 10), ':')"
_ROW_OF = (
    f"{{e}}ns = substr({{key}}, 10, {_AT} - 1) "
    f"AND {{e}}seq = CAST(substr({{key}}, {_AT} + 12) AS INTEGER) "
    "AND 'episodic:' || {e}ns || ':e:' || {e}seq = {key}"
)
_IS_E = _ROW_OF.replace("{e}", "e.")

# Postings wait in ix_lag before they reach ix_post: a record writes one row there (+1: the
# postings of an episode indexed), a deleted record one (-1: the postings of an episode gone),
# and every MERGE_AT rows they are applied to ix_post together (merge()). A term's postings
# are scattered over ix_post by term, so writing them one episode at a time dirties a page per
# term added and per term dropped (about forty pages a record on a full ring); ix_lag is
# written in the order of seq, a page or two a record. Readers apply what waits as they read
# (SQLiteIndexReader), so a search sees exactly what a merge would leave.
MERGE_AT = 32

# What an episode's record takes with it when it goes ({key}: the SQL of its key): postings that
# never reached ix_post go with their +1 row; those that did are marked to go (-1: the terms,
# length class and time they were filed under, as its facts row has them); then its facts.
_DROP_EPISODE: tuple[str, ...] = (
    "INSERT OR IGNORE INTO ix_lag (ns, seq, sign, size, recorded, terms) "
    "SELECT e.ns, e.seq, -1, e.size, e.recorded, e.terms FROM ix_episode AS e "
    "WHERE " + _IS_E + " AND e.terms != '[]' AND NOT EXISTS (SELECT 1 FROM ix_lag AS l "
    "WHERE l.ns = e.ns AND l.seq = e.seq AND l.sign = 1)",
    "DELETE FROM ix_lag WHERE sign = 1 AND " + _ROW_OF.replace("{e}", ""),
    "DELETE FROM ix_episode WHERE " + _ROW_OF.replace("{e}", ""),
)
_DROP_BY_KEY = tuple(statement.format(key="?1") for statement in _DROP_EPISODE)
# (Replacing: a row left waiting for facts an edit of the index deleted.)
_ADD_LAG = (
    "INSERT OR REPLACE INTO ix_lag (ns, seq, sign, size, recorded, terms) VALUES (?, ?, 1, ?, ?, ?)"
)

# A merge (?1: the sign of the rows it applies), the -1 rows first: the postings, then their
# terms' counters moved by how many each term gained or lost when every posting was found
# (dropped) or new (added), else those counts taken again from the postings (rows left behind or
# lost by an edit of the index: a count stays exact); the counter rows of a count left at zero.
_LAGGED = (
    "FROM ix_lag AS l, json_each(CASE WHEN json_valid(l.terms) THEN l.terms ELSE '[]' END) AS j "
    "WHERE l.sign = ?1"
)
_LAGGED_POSTINGS = f"SELECT l.ns, j.value, l.size, l.recorded, l.seq {_LAGGED}"
_LAGGED_TERMS = f"SELECT DISTINCT l.ns AS ns, j.value AS term, l.size AS size {_LAGGED}"
_EXPECTED = f"SELECT count(*) {_LAGGED}"
_MERGE_POSTINGS = {
    -1: f"DELETE FROM ix_post WHERE (ns, term, size, recorded, seq) IN ({_LAGGED_POSTINGS})",
    1: f"INSERT OR IGNORE INTO ix_post (ns, term, size, recorded, seq) {_LAGGED_POSTINGS}",
}
_MOVE_COUNTS = (
    "INSERT INTO ix_post (ns, term, size, recorded, seq, n) "
    f"SELECT l.ns, j.value, l.size, CASE WHEN ?1 > 0 THEN {TAIL_AT} ELSE {HEAD_AT} END, "
    f"CASE WHEN ?1 > 0 THEN {TAIL_SEQ} ELSE {HEAD_SEQ} END, count(*) {_LAGGED} "
    "GROUP BY l.ns, j.value, l.size "
    "ON CONFLICT (ns, term, size, recorded, seq) DO UPDATE SET n = coalesce(n, 0) + excluded.n"
)
_RECOUNT: tuple[str, ...] = (
    "INSERT INTO ix_post (ns, term, size, recorded, seq, n) "
    f"SELECT a.ns, a.term, a.size, {TAIL_AT}, {TAIL_SEQ}, (SELECT count(*) FROM ix_post AS t "
    "WHERE t.ns = a.ns AND t.term = a.term AND t.size = a.size "
    f"AND t.seq > {HEAD_SEQ} AND t.recorded < {TAIL_AT}) FROM ({_LAGGED_TERMS}) AS a "
    "WHERE true ON CONFLICT (ns, term, size, recorded, seq) DO UPDATE SET n = excluded.n",
    f"UPDATE ix_post SET n = 0 WHERE recorded = {HEAD_AT} AND seq = {HEAD_SEQ} "
    f"AND (ns, term, size) IN ({_LAGGED_TERMS})",
)
# Found from the tails (rows by their keys, two a term), not by a subquery per row.
# (CROSS JOIN: in this order, the lagged terms first, never a scan of the postings.)
_DROP_ZEROS = (
    "DELETE FROM ix_post WHERE (ns, term, size, recorded, seq) IN (SELECT t.ns, t.term, "
    f"t.size, k.recorded, k.seq FROM ({_LAGGED_TERMS}) AS a "
    "CROSS JOIN ix_post AS t "
    "LEFT JOIN ix_post AS h ON h.ns = t.ns AND h.term = t.term AND h.size = t.size "
    f"AND h.recorded = {HEAD_AT} AND h.seq = {HEAD_SEQ} CROSS JOIN {_COUNTERS} AS k "
    "WHERE t.ns = a.ns AND t.term = a.term AND t.size = a.size "
    f"AND t.recorded = {TAIL_AT} AND t.seq = {TAIL_SEQ} AND t.n - coalesce(h.n, 0) <= 0)"
)


def waiting(conn: sqlite3.Connection) -> int:
    """How many rows wait in ix_lag (every namespace)."""
    (n,) = conn.execute("SELECT count(*) FROM ix_lag").fetchone()
    return int(n)


def merge(conn: sqlite3.Connection, *, due: bool = True) -> None:
    """Apply what waits in ix_lag to ix_post, inside the caller's transaction: when MERGE_AT
    rows wait (*due*), or whatever waits."""
    count = waiting(conn)
    if not count or (due and count < MERGE_AT):
        return
    for sign in (-1, 1):
        (expected,) = conn.execute(_EXPECTED, (sign,)).fetchone()
        if not expected:
            continue
        changed = conn.execute(_MERGE_POSTINGS[sign], (sign,)).rowcount
        for statement in (_MOVE_COUNTS,) if changed == expected else _RECOUNT:
            conn.execute(statement, (sign,))
        if sign < 0:
            conn.execute(_DROP_ZEROS, (sign,))
    conn.execute("DELETE FROM ix_lag")


_EPISODE_COLUMNS = (
    "ns, seq, episode_id, timestamp, recorded, outcome, source, size, terms, tags, forget_at, "
    "run, conversation, graded, corrupt"
)
TABLES: tuple[str, ...] = (
    "CREATE TABLE IF NOT EXISTS ix_episode (ns TEXT NOT NULL, "
    "seq INTEGER NOT NULL, episode_id TEXT NOT NULL, timestamp TEXT NOT NULL, "
    "recorded REAL NOT NULL, outcome TEXT NOT NULL, source TEXT NOT NULL, "
    "size INTEGER NOT NULL, terms TEXT NOT NULL, tags TEXT NOT NULL, forget_at REAL, "
    "run TEXT NOT NULL, conversation TEXT NOT NULL, graded INTEGER NOT NULL DEFAULT 0, "
    "corrupt INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (ns, seq)) WITHOUT ROWID",
    # What a listing counts (shown: decodable and unexpired), read without the rows.
    "CREATE INDEX IF NOT EXISTS ix_episode_shown ON ix_episode "
    "(ns, seq, corrupt, forget_at, recorded)",
    "CREATE INDEX IF NOT EXISTS ix_episode_id ON ix_episode (ns, episode_id)",
    "CREATE INDEX IF NOT EXISTS ix_episode_run ON ix_episode (ns, run, seq) WHERE run != ''",
    "CREATE INDEX IF NOT EXISTS ix_episode_conversation ON ix_episode (ns, conversation, seq) "
    "WHERE conversation != ''",
    "CREATE INDEX IF NOT EXISTS ix_episode_recorded ON ix_episode (ns, recorded)",
    "CREATE INDEX IF NOT EXISTS ix_episode_corrupt ON ix_episode (ns, seq) WHERE corrupt = 1",
    # n: the count of a counter row (see HEAD_AT), NULL in a posting.
    "CREATE TABLE IF NOT EXISTS ix_post (ns TEXT NOT NULL, term TEXT NOT NULL, "
    "size INTEGER NOT NULL, recorded REAL NOT NULL, seq INTEGER NOT NULL, n INTEGER, "
    "PRIMARY KEY (ns, term, size, recorded, seq)) WITHOUT ROWID",
    # Postings on their way to ix_post (see MERGE_AT): an episode's terms, as a JSON array.
    "CREATE TABLE IF NOT EXISTS ix_lag (ns TEXT NOT NULL, seq INTEGER NOT NULL, "
    "sign INTEGER NOT NULL, size INTEGER NOT NULL, recorded REAL NOT NULL, terms TEXT NOT NULL, "
    "PRIMARY KEY (ns, seq, sign)) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS ix_grade (key TEXT PRIMARY KEY NOT NULL, ns TEXT NOT NULL, "
    "n INTEGER NOT NULL, episode_id TEXT NOT NULL, record TEXT NOT NULL) WITHOUT ROWID",
    "CREATE INDEX IF NOT EXISTS ix_grade_episode ON ix_grade (ns, episode_id, n)",
    "CREATE TABLE IF NOT EXISTS ix_pending (key TEXT PRIMARY KEY NOT NULL) WITHOUT ROWID",
    # Every episode or grade record inserted, by anyone, waits to be indexed.
    "CREATE TRIGGER IF NOT EXISTS ix_record_added AFTER INSERT ON kv "
    "WHEN new.key GLOB 'episodic:*:[eg]:[0-9]*' "
    "BEGIN INSERT OR IGNORE INTO ix_pending (key) VALUES (new.key); END",
    # A deleted one takes its rows with it, in the same statement: the counts of the postings
    # it had, the postings, its facts (see _DROP_EPISODE).
    "CREATE TRIGGER IF NOT EXISTS ix_record_deleted AFTER DELETE ON kv "
    "WHEN old.key GLOB 'episodic:*:[eg]:[0-9]*' BEGIN "
    + " ".join(f"{statement.format(key='old.key')};" for statement in _DROP_EPISODE)
    + " DELETE FROM ix_grade WHERE key = old.key; "
    "DELETE FROM ix_pending WHERE key = old.key; END",
    # A record keeps its key (the log is append-only): an UPDATE that renames one, or renames
    # another key into one, is refused, as the triggers above follow inserts and deletes only.
    "CREATE TRIGGER IF NOT EXISTS records_keep_their_keys BEFORE UPDATE OF key ON kv "
    "WHEN old.key IS NOT new.key AND (old.key GLOB 'episodic:*:[egv]:[0-9]*' "
    "OR new.key GLOB 'episodic:*:[egv]:[0-9]*') "
    "BEGIN SELECT RAISE(ABORT, 'episodes, grades and vectors keep their keys: a stored one is "
    "never renamed'); END",
    "CREATE TRIGGER IF NOT EXISTS ix_grade_added AFTER INSERT ON ix_grade BEGIN "
    "UPDATE ix_episode SET graded = graded + 1 WHERE ns = new.ns "
    "AND episode_id = new.episode_id; END",
    "CREATE TRIGGER IF NOT EXISTS ix_grade_deleted AFTER DELETE ON ix_grade BEGIN "
    "UPDATE ix_episode SET graded = graded - 1 WHERE ns = old.ns "
    "AND episode_id = old.episode_id; END",
)
# Schema 3 kept the counts with a trigger per posting; schema 4 in the statements that add and
# drop an episode's postings (the trigger on kv is replaced: CREATE ... IF NOT EXISTS would keep
# the old one). Its postings table, ix_term, is renamed: a process of schema 3 that still has
# the store open fails on its next write of postings ("no such table") instead of writing
# postings whose counts nothing keeps any more.
UPGRADE_FROM_3: tuple[str, ...] = (
    "DROP TRIGGER IF EXISTS ix_posting_added",
    "DROP TRIGGER IF EXISTS ix_posting_deleted",
    "DROP TRIGGER IF EXISTS ix_record_deleted",
    "ALTER TABLE ix_term RENAME TO ix_posting",
)
# Schema 4 kept the counts in a table of their own, ix_count; schema 5 in counter rows among the
# postings. The tails are counted from the postings themselves (a count taken over as it was
# could carry an edit of the index); no head is needed until a posting is dropped. ix_count
# goes: a process of schema 4 that still has the store open fails on its next write or search
# ("no such table") instead of reading counter rows as postings. Schema 4's ix_episode kept each
# record's key in a column of its own, with an index a record paid for; schema 5 finds the row
# by its primary key, so the table is copied without it (the triggers that name it are made
# again by TABLES, with its indexes).
UPGRADE_FROM_4: tuple[str, ...] = (
    "DROP TRIGGER IF EXISTS ix_record_deleted",
    "DROP TRIGGER IF EXISTS ix_grade_added",
    "DROP TRIGGER IF EXISTS ix_grade_deleted",
    "ALTER TABLE ix_posting ADD COLUMN n INTEGER",
    "INSERT INTO ix_posting (ns, term, size, recorded, seq, n) "
    f"SELECT ns, term, size, {TAIL_AT}, {TAIL_SEQ}, count(*) FROM ix_posting "
    "GROUP BY ns, term, size",
    "DROP TABLE IF EXISTS ix_count",
    TABLES[0].replace("ix_episode (", "ix_episode_5 (", 1),
    # Made before the rows are copied, in the order of seq: the index by id is filled in the
    # order a store fills it, with room left in its pages. Built after, it would be packed
    # full, and every record would split a page of it for a long while.
    "DROP INDEX IF EXISTS ix_episode_id",
    "CREATE INDEX ix_episode_id ON ix_episode_5 (ns, episode_id)",
    f"INSERT INTO ix_episode_5 ({_EPISODE_COLUMNS}) SELECT {_EPISODE_COLUMNS} FROM ix_episode "
    "ORDER BY ns, seq",
    "DROP TABLE ix_episode",
    "ALTER TABLE ix_episode_5 RENAME TO ix_episode",
)
# Schema 6 writes postings to ix_lag first (see MERGE_AT), and names the postings table ix_post:
# a process of schema 5 that still has the store open fails on its next write or search ("no
# such table") instead of reading postings without those that wait.
UPGRADE_FROM_5: tuple[str, ...] = (
    "DROP TRIGGER IF EXISTS ix_record_deleted",
    "ALTER TABLE ix_posting RENAME TO ix_post",
)
QUEUE_EVERY_RECORD = (
    "INSERT OR IGNORE INTO ix_pending (key) SELECT key FROM kv "
    "WHERE key GLOB 'episodic:*:[egv]:[0-9]*'"  # v: vectors (VECTOR_TABLES)
)

_RECORD = re.compile(r"episodic:([^:]+):([eg]):([1-9][0-9]{0,17})")
# Records indexed per transaction while an upgrade catches up (a kill loses one batch's work).
BATCH = 5000


def pending(conn: sqlite3.Connection) -> int:
    (n,) = conn.execute("SELECT count(*) FROM ix_pending").fetchone()
    return int(n)


def index_pending(
    conn: sqlite3.Connection, limit: int | None = None, written: Mapping[str, str] | None = None
) -> int:
    """Index what is pending (at most *limit* records), inside the caller's transaction (which
    then calls :func:`merge`); return how many records were taken off the queue. *written*:
    what this transaction wrote (key -> value), so that a record it queued is indexed from
    there, not read back."""
    rows: list[tuple[str, str | None]] | None = None
    if limit is None and written is not None:
        # The common case: only this transaction's own records are queued.
        keys = [k for (k,) in conn.execute("SELECT key FROM ix_pending")]
        if not keys:
            return 0
        if all(k in written for k in keys):
            rows = [(k, written[k]) for k in keys]
    if rows is None:
        sql = "SELECT p.key, kv.value FROM ix_pending AS p LEFT JOIN kv ON kv.key = p.key"
        if limit is not None:
            # Episodes in log order: an undated one takes the time of the one before it.
            sql += f" ORDER BY length(p.key), p.key LIMIT {int(limit)}"
        rows = conn.execute(sql).fetchall()
    if not rows:
        return 0
    index_vectors(conn, rows)
    episodes: list[tuple[str, int, str, str]] = []
    grades: list[tuple[str, str, int, str]] = []
    for key, value in rows:
        match = _RECORD.fullmatch(key) if isinstance(key, str) else None
        if match is None or value is None:
            continue
        ns, kind, number = match.group(1), match.group(2), int(match.group(3))
        if kind == "e":
            episodes.append((ns, number, key, value))
        else:
            grades.append((key, ns, number, value))
    episodes.sort(key=lambda e: (e[0], e[1]))
    for ns, seq, key, value in episodes:
        _index_episode(conn, ns, seq, key, value)
    for key, ns, number, value in grades:
        _index_grade(conn, key, ns, number, value)
    conn.executemany("DELETE FROM ix_pending WHERE key = ?", [(k,) for k, _ in rows])
    return len(rows)


def _index_episode(conn: sqlite3.Connection, ns: str, seq: int, key: str, raw: str) -> None:
    # Indexed already and queued again: the record was replaced behind the library's back
    # (an INSERT OR REPLACE fires no delete trigger). Its old rows go; it is indexed as it is.
    if (
        conn.execute("SELECT 1 FROM ix_episode WHERE ns = ? AND seq = ?", (ns, seq)).fetchone()
        is not None
    ):
        for statement in _DROP_BY_KEY:
            conn.execute(statement, (key,))
    row = index_row(raw)
    when = row.when if row is not None else None
    if when is None:
        before = conn.execute(
            "SELECT recorded FROM ix_episode WHERE ns = ? AND seq < ? ORDER BY seq DESC LIMIT 1",
            (ns, seq),
        ).fetchone()
        when = float(before[0]) if before else -math.inf
    if row is None:
        conn.execute(
            "INSERT INTO ix_episode (ns, seq, episode_id, timestamp, recorded, outcome, "
            "source, size, terms, tags, forget_at, run, conversation, corrupt) "
            "VALUES (?, ?, '', '', ?, '', '', 0, '[]', '[]', NULL, '', '', 1)",
            (ns, seq, when),
        )
        return
    (graded,) = conn.execute(
        "SELECT count(*) FROM ix_grade WHERE ns = ? AND episode_id = ?", (ns, row.episode_id)
    ).fetchone()
    terms = row.terms_json()
    conn.execute(
        "INSERT INTO ix_episode (ns, seq, episode_id, timestamp, recorded, outcome, source, "
        "size, terms, tags, forget_at, run, conversation, graded) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            ns,
            seq,
            row.episode_id,
            row.timestamp,
            when,
            row.outcome,
            row.source,
            row.size,
            terms,
            row.tags_json(),
            row.forget_at,
            row.run,
            row.conversation,
            graded,
        ),
    )
    if row.terms:
        conn.execute(_ADD_LAG, (ns, seq, row.size, when, terms))


def _index_grade(conn: sqlite3.Connection, key: str, ns: str, number: int, raw: str) -> None:
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        data = None
    episode = data.get("episode") if isinstance(data, dict) else None
    # An unreadable grade is kept under no episode: the read paths skip and count it.
    conn.execute("DELETE FROM ix_grade WHERE key = ?", (key,))  # replaced: indexed again
    conn.execute(
        "INSERT INTO ix_grade (key, ns, n, episode_id, record) VALUES (?, ?, ?, ?, ?)",
        (key, ns, number, episode if isinstance(episode, str) else "", raw),
    )


class SQLiteIndexReader:
    """:class:`~deepcrew_episodic._index.IndexReader` over one connection and namespace; what
    waits in ix_lag is applied to what ix_post holds (see MERGE_AT)."""

    def __init__(self, conn: sqlite3.Connection, ns: str) -> None:
        self._conn = conn
        self._ns = ns
        self._prefix = f"episodic:{ns}:"
        # The query's terms: facts carry the ones each episode holds, not all of its terms
        # (what the search intersects them with), so a row costs what the query needs.
        self._query = "[]"
        self._facts: dict[int, Facts | None] = {}
        self._waiting: _Waiting | None = None
        # The database's revision as of this reader's snapshot (set by the provider).
        self.revision: str | None = None

    def _lag(self) -> _Waiting:
        """What waits in ix_lag for this namespace (read once per snapshot)."""
        if self._waiting is None:
            self._waiting = _Waiting(self._conn, self._ns)
        return self._waiting

    @index_read
    def newest_seq(self) -> int:
        """The newest sequence number the index holds (0: none)."""
        (newest,) = self._conn.execute(
            "SELECT max(seq) FROM ix_episode WHERE ns = ?", (self._ns,)
        ).fetchone()
        return int(newest or 0)

    def set_query(self, terms: Collection[str]) -> None:
        self._query = json.dumps(sorted(terms), ensure_ascii=False)
        self._facts.clear()

    @index_read
    def counts(self, terms: Sequence[str]) -> dict[str, dict[int, int]]:
        found: dict[str, dict[int, int]] = {}
        if not terms:
            return found
        for term, size, n in self._conn.execute(
            _COUNTS, (self._ns, json.dumps(list(terms), ensure_ascii=False))
        ):
            found.setdefault(term, {})[int(size)] = int(n)
        lag = self._lag()
        if lag:
            lag.load(terms)
            for term in dict.fromkeys(terms):
                moves = Counter({size: -n for size, n in lag.drops(term).items()})
                for _, _, size in lag.adds(term):
                    moves[size] += 1
                sizes = found.setdefault(term, {})
                for size, by in moves.items():
                    if n := sizes.get(size, 0) + by:
                        sizes[size] = n
                    else:
                        sizes.pop(size, None)
                if not sizes:
                    del found[term]
        return found

    @index_read
    def postings(
        self, term: str, size: int, limit: int, before: tuple[float, int] | None
    ) -> list[tuple[float, int]]:
        lag = self._lag()
        sql = f"SELECT recorded, seq FROM ix_post WHERE ns = ? AND term = ? AND size = ? AND {REAL}"
        args: list[object] = [self._ns, term, size]
        if before is not None:
            sql += " AND (recorded, seq) < (?, ?)"
            args += before
        # As many more rows as there are episodes gone (a few dozen at most: whatever rows an
        # edit of the index left them here), then those left out.
        gone = len(lag.gone)
        rows: list[tuple[float, int]] = self._conn.execute(
            sql + " ORDER BY recorded DESC, seq DESC LIMIT ?", (*args, limit + gone)
        ).fetchall()
        if not all(type(seq) is int and type(when) in _NUMBERS for when, seq in rows):
            raise ValueError("a posting's seq or time is not a number")  # see index_read
        if gone:
            rows = [r for r in rows if r[1] not in lag.gone][:limit]
        waiting = [
            (when, seq)
            for when, seq, sized in lag.adds(term)
            if sized == size and (before is None or (when, seq) < before)
        ]
        if waiting:
            rows = sorted(rows + waiting, reverse=True)[:limit]
        return rows

    @index_read
    def matches(self, terms: Sequence[str]) -> Counter[int]:
        # Counted here rather than by GROUP BY, from one string: a row per posting would cost
        # three times as much.
        lag = self._lag()
        (joined,) = self._conn.execute(
            "SELECT group_concat(seq) FROM ix_post WHERE ns = ? AND term IN "
            f"(SELECT value FROM json_each(?)) AND {REAL}",
            (self._ns, json.dumps(list(terms), ensure_ascii=False)),
        ).fetchone()
        found = Counter(map(int, joined.split(","))) if joined else Counter()
        if lag:
            for seq in lag.gone:
                found.pop(seq, None)
            lag.load(terms)
        for term in dict.fromkeys(terms):
            for _, seq, _ in lag.adds(term):
                found[seq] += 1
        return found

    @index_read
    def sized_matches(self, terms: Sequence[str]) -> SizedMatches | None:
        """How many of *terms* each episode holding one holds, and its length class: what its
        keyword relevance is, read from the postings alone (no facts). ``None``: a seq too
        large to code as below (an edited index), where the caller counts another way."""
        import numpy as np  # a search by meaning reads this, and numpy is its dependency

        # One string, as matches(): each posting as seq * 16 + its length class (clamped to
        # 0..15), parsed by numpy in one call (a Python int per posting costs ten times more).
        lag = self._lag()
        joined, top = self._conn.execute(
            "SELECT group_concat(seq * 16 + max(0, min(size, 15))), max(seq) FROM ix_post "
            f"WHERE ns = ? AND term IN (SELECT value FROM json_each(?)) AND {REAL}",
            (self._ns, json.dumps(list(terms), ensure_ascii=False)),
        ).fetchone()
        if top is not None and (not isinstance(top, int) or top >= _CODED):
            return None
        # A seq that is not an integer (an edited index) raises ValueError: see index_read.
        codes = np.fromstring(joined or "", dtype=np.int64, sep=",")
        if joined and len(codes) != joined.count(",") + 1:
            raise ValueError("a posting's seq is not an integer")
        if lag.gone:
            gone = np.fromiter(lag.gone, dtype=np.int64, count=len(lag.gone))
            codes = codes[~np.isin(codes >> 4, gone)]
        if lag:
            lag.load(terms)
        waiting = [(seq, size) for term in dict.fromkeys(terms) for _, seq, size in lag.adds(term)]
        if any(seq >= _CODED for seq, _ in waiting):
            return None
        if waiting:
            added = np.array([seq * 16 + max(0, min(size, 15)) for seq, size in waiting])
            codes = np.concatenate((codes, added.astype(np.int64)))
        return SizedMatches.from_codes(codes)

    @index_read
    def ranked(self, seqs: Sequence[int]) -> dict[int, tuple[float, str, str, int]]:
        """seq -> (recorded, outcome, source, graded) of the indexed, decodable episodes among
        *seqs*: what bounds their scores, without their terms."""
        if not seqs:
            return {}
        return {
            int(r[0]): (float(r[1]), str(r[2]), str(r[3]), int(r[4]))
            for r in self._conn.execute(
                "SELECT seq, recorded, outcome, source, graded FROM ix_episode WHERE ns = ? "
                "AND corrupt = 0 AND seq IN (SELECT value FROM json_each(?))",
                (self._ns, json.dumps(list(seqs))),
            )
        }

    @index_read
    def facts(self, seqs: Sequence[int]) -> dict[int, Facts]:
        known = self._facts
        wanted = [s for s in seqs if s not in known]
        if len(wanted) == 1:
            rows = self._conn.execute(
                _FACTS + "AND seq = ?", (self._query, self._ns, wanted[0])
            ).fetchall()
        elif wanted:
            rows = self._conn.execute(
                _FACTS + "AND seq IN (SELECT value FROM json_each(?))",
                (self._query, self._ns, json.dumps(wanted)),
            ).fetchall()
        else:
            rows = []
        for seq in wanted:
            known[seq] = None
        for r in rows:
            known[int(r[0])] = _facts(r)
        return {s: f for s in seqs if (f := known.get(s)) is not None}

    @index_read
    def any_run(self, live: range) -> bool:
        """Whether an episode in *live* belongs to a run."""
        row = self._conn.execute(
            "SELECT 1 FROM ix_episode INDEXED BY ix_episode_run WHERE ns = ? AND run != '' "
            "AND seq >= ? AND seq < ? LIMIT 1",
            (self._ns, live.start, live.stop),
        ).fetchone()
        return row is not None

    @index_read
    def grades(self, episode_id: str) -> list[str]:
        return [
            r[0]
            for r in self._conn.execute(
                "SELECT record FROM ix_grade WHERE ns = ? AND episode_id = ? ORDER BY n",
                (self._ns, episode_id),
            )
        ]

    @index_read
    def records(self, seqs: Sequence[int]) -> dict[int, str]:
        found: dict[int, str] = {}
        for seq in seqs:
            row = self._conn.execute(
                "SELECT value FROM kv WHERE key = ?", (f"{self._prefix}e:{seq}",)
            ).fetchone()
            if row is not None and row[0]:
                found[seq] = row[0]
        return found

    @index_read
    def uses(self, seqs: Sequence[int]) -> dict[int, int]:
        found: dict[int, int] = {}
        for seq in seqs:
            row = self._conn.execute(
                "SELECT value FROM kv WHERE key = ?", (f"{self._prefix}u:{seq}",)
            ).fetchone()
            if row is not None and _DIGITS.fullmatch(row[0] or ""):
                found[seq] = int(row[0])
        return found

    @index_read
    def run(self, run: str) -> list[int]:
        return [
            int(r[0])
            for r in self._conn.execute(
                "SELECT seq FROM ix_episode WHERE ns = ? AND run = ? AND run != '' ORDER BY seq",
                (self._ns, run),
            )
        ]

    @index_read
    def conversation(self, conversation: str) -> list[int]:
        return [
            int(r[0])
            for r in self._conn.execute(
                "SELECT seq FROM ix_episode WHERE ns = ? AND conversation = ? "
                "AND conversation != '' AND corrupt = 0 ORDER BY seq",
                (self._ns, conversation),
            )
        ]

    @index_read
    def with_id(self, episode_id: str) -> list[int]:
        return [
            int(r[0])
            for r in self._conn.execute(
                "SELECT seq FROM ix_episode WHERE ns = ? AND episode_id = ? AND corrupt = 0",
                (self._ns, episode_id),
            )
        ]

    @index_read
    def newest_after(self, start: int, when: float) -> bool:
        """Whether an episode at or past *start* ranks by a time after *when* (a timestamp
        in the future: the in-process index files it under the episode before it)."""
        row = self._conn.execute(
            "SELECT 1 FROM ix_episode WHERE ns = ? AND recorded > ? AND seq >= ? LIMIT 1",
            (self._ns, when, start),
        ).fetchone()
        return row is not None

    @index_read
    def corrupt(self, live: range) -> list[int]:
        return [
            int(r[0])
            for r in self._conn.execute(
                "SELECT seq FROM ix_episode INDEXED BY ix_episode_corrupt "
                "WHERE ns = ? AND corrupt = 1 AND seq >= ? AND seq < ?",
                (self._ns, live.start, live.stop),
            )
        ]

    @index_read
    def newest(
        self, live: range, now: float, oldest: float, limit: int, offset: int
    ) -> tuple[list[int], int]:
        """The seqs of the newest *limit* unexpired episodes in *live* after skipping
        *offset*, newest first, and how many unexpired episodes *live* holds. Unexpired: no
        ``forget_after`` at or before *now*, and recorded at or after *oldest* (``-inf``: no
        ``max_age``)."""
        where = (
            "FROM ix_episode WHERE ns = ? AND corrupt = 0 AND seq >= ? AND seq < ? "
            "AND (forget_at IS NULL OR forget_at > ?) AND recorded >= ?"
        )
        args = (self._ns, live.start, live.stop, now, oldest)
        (total,) = self._conn.execute(f"SELECT count(*) {where}", args).fetchone()
        rows = self._conn.execute(
            f"SELECT seq {where} ORDER BY seq DESC LIMIT ? OFFSET ?", (*args, limit, offset)
        ).fetchall()
        return [int(r[0]) for r in rows], int(total)

    def value(self, key: str) -> str | None:
        row = self._conn.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def vectors(self) -> SQLiteVectorReader | None:
        """The vector reads of this namespace (see VECTOR_TABLES; ``None``: none kept)."""
        return vector_reader(self._conn, self._ns)

    @index_read
    def whole_namespace(self, most: int) -> Whole | None:
        """Everything a keyword search can read of this namespace, read at once (``None``:
        it holds more than *most* episodes). The postings come from :func:`_namespace_postings`
        (the one read of them besides :meth:`postings`); the rest from this reader's own
        queries, so each answers as they do."""
        # Counted no further than the limit: a large namespace is refused in a few pages.
        (n,) = self._conn.execute(
            "SELECT count(*) FROM (SELECT 1 FROM ix_episode WHERE ns = ? LIMIT ?)",
            (self._ns, most + 1),
        ).fetchone()
        if n > most:
            return None
        rows = _namespace_episodes(self._conn, self._ns)
        if rows is None:
            return None
        episodes, facts = rows
        postings = _namespace_postings(self._conn, self._ns)
        counts = self.counts(sorted({term for term, _ in postings}))
        seqs = [seq for seq, *_ in episodes]
        graded = {f.episode_id for f in facts.values() if f.graded}
        return Whole(
            newest=self.newest_seq(),
            counts=counts,
            postings=postings,
            facts=facts,
            episodes=episodes,
            grades={episode_id: tuple(self.grades(episode_id)) for episode_id in graded},
            uses=self.uses(seqs),
            records=self.records(list(facts)),
        )


class _Waiting:
    """What waits in ix_lag for one namespace, as a reader applies it: the postings of the
    episodes indexed since the last merge, and the episodes gone since (none of their rows in
    ix_post counts). Read in SQL, for the terms a search asks about, each term once."""

    __slots__ = ("_adds", "_any", "_conn", "_drops", "_ns", "gone")

    def __init__(self, conn: sqlite3.Connection, ns: str) -> None:
        self._conn, self._ns = conn, ns
        count, gone = conn.execute(
            "SELECT count(*), group_concat(CASE WHEN sign < 0 THEN seq END) FROM ix_lag "
            "WHERE ns = ?",
            (ns,),
        ).fetchone()
        self._any = bool(count)
        # The seqs gone: their rows in ix_post are left out in Python, not by the statements
        # (a NOT IN list costs each statement that reads postings more than its rows do).
        self.gone = frozenset(map(int, gone.split(","))) if gone else frozenset()
        self._adds: dict[str, list[tuple[float, int, int]]] = {}
        self._drops: dict[str, Counter[int]] = {}

    def __bool__(self) -> bool:
        return self._any

    def load(self, terms: Collection[str]) -> None:
        """Read what waits for those of *terms* not read yet, in one statement."""
        missing = [t for t in dict.fromkeys(terms) if t not in self._adds]
        if not missing:
            return
        adds: dict[str, list[tuple[float, int, int]]] = {t: [] for t in missing}
        drops: dict[str, Counter[int]] = {t: Counter() for t in missing}
        if self._any:
            for term, sign, size, when, seq in self._conn.execute(
                _WAITING, (self._ns, json.dumps(missing, ensure_ascii=False))
            ):
                if sign > 0:
                    adds[term].append((float(when), int(seq), int(size)))
                else:
                    drops[term][int(size)] += 1
        for term in missing:
            self._adds[term] = sorted(adds[term], reverse=True)
            self._drops[term] = drops[term]

    def adds(self, term: str) -> list[tuple[float, int, int]]:
        """(time, seq, length class) of the waiting postings of *term*, newest first."""
        self.load((term,))
        return self._adds[term]

    def drops(self, term: str) -> Counter[int]:
        """How many postings of *term* are gone, by length class."""
        self.load((term,))
        return self._drops[term]


# The waiting postings of some terms (?2), one row each (DISTINCT: as a merge files them).
_WAITING = (
    "SELECT DISTINCT j.value, l.sign, l.size, l.recorded, l.seq FROM ix_lag AS l, "
    "json_each(CASE WHEN json_valid(l.terms) THEN l.terms ELSE '[]' END) AS j "
    "WHERE l.ns = ?1 AND j.value IN (SELECT value FROM json_each(?2))"
)


# The counts of the query's terms (?2) in each length class: a tail less its head (none yet:
# nothing dropped), two rows found by their keys (CROSS JOIN: in this order, never a scan).
_COUNTS = (
    "SELECT q.value, s.value, t.n - coalesce(h.n, 0) FROM json_each(?2) AS q CROSS JOIN "
    f"json_each('{json.dumps(list(range(1, LENGTH_CAP + 1)))}') AS s "
    "CROSS JOIN ix_post AS t ON t.ns = ?1 AND t.term = q.value AND t.size = s.value "
    f"AND t.recorded = {TAIL_AT} AND t.seq = {TAIL_SEQ} "
    "LEFT JOIN ix_post AS h ON h.ns = ?1 AND h.term = q.value AND h.size = s.value "
    f"AND h.recorded = {HEAD_AT} AND h.seq = {HEAD_SEQ}"
)

# What ranking reads of an episode; of its terms, only those of the query (?1).
_COLUMNS = (
    "e.seq, e.episode_id, e.timestamp, e.recorded, e.outcome, e.source, e.size, "
    "(SELECT group_concat(j.value, ' ') FROM json_each(e.terms) AS j "
    "WHERE j.value IN (SELECT value FROM json_each(?1))), "
    "e.tags, e.forget_at, e.run, e.conversation, e.graded"
)
_FACTS = f"SELECT {_COLUMNS} FROM ix_episode AS e WHERE e.corrupt = 0 AND e.ns = ?2 "

_DIGITS = re.compile(r"[0-9]{1,18}")


def _namespace_postings(
    conn: sqlite3.Connection, ns: str
) -> dict[tuple[str, int], tuple[array[float], array[int]]]:
    """Every posting of *ns*, by term and length class, oldest first: what
    :meth:`SQLiteIndexReader.postings` reads of them, all at once (those of ix_post, less the
    episodes gone since the last merge, and those that wait in ix_lag)."""
    waiting: dict[tuple[str, int], list[tuple[float, int]]] = {}
    gone: set[int] = set()
    for seq, sign, size, when, terms in conn.execute(
        "SELECT seq, sign, size, recorded, terms FROM ix_lag WHERE ns = ?", (ns,)
    ):
        if sign < 0:
            gone.add(int(seq))
            continue
        # As json_each reads the row (what a merge files): strings of a JSON array, once each.
        try:
            held = json.loads(terms)
        except (ValueError, RecursionError):
            held = []
        for term in dict.fromkeys(held if isinstance(held, list) else []):
            if isinstance(term, str):
                waiting.setdefault((term, int(size)), []).append((float(when), int(seq)))
    found: dict[tuple[str, int], tuple[array[float], array[int]]] = {}
    key: tuple[str, int] | None = None
    whens: array[float] = array("d")
    seqs: array[int] = array("q")
    for term, size, when, seq in conn.execute(
        "SELECT term, size, recorded, seq FROM ix_post WHERE ns = ? "
        f"AND {REAL} ORDER BY term, size, recorded, seq",
        (ns,),
    ):
        if key is None or key[0] != term or key[1] != size:
            key = (term, int(size))
            whens, seqs = found.setdefault(key, (array("d"), array("q")))
        if gone and int(seq) in gone:
            continue
        whens.append(float(when))
        seqs.append(int(seq))
    for key, rows in waiting.items():
        had = found.get(key, (array("d"), array("q")))
        merged = sorted([*zip(had[0], had[1], strict=True), *rows])
        found[key] = (array("d", [r[0] for r in merged]), array("q", [r[1] for r in merged]))
    return {k: v for k, v in found.items() if v[1]}


def _namespace_episodes(
    conn: sqlite3.Connection, ns: str
) -> tuple[list[tuple[int, float, str, bool]], dict[int, Facts]] | None:
    """Every row of ix_episode of *ns* as ``(seq, recorded, run, corrupt)`` in seq order, and
    the facts of the decodable ones with all of their terms (``None``: a row's terms do not
    read as a list of terms, which the other reads would read otherwise)."""
    episodes: list[tuple[int, float, str, bool]] = []
    facts: dict[int, Facts] = {}
    for r in conn.execute(
        "SELECT seq, episode_id, timestamp, recorded, outcome, source, size, terms, tags, "
        "forget_at, run, conversation, graded, corrupt FROM ix_episode WHERE ns = ? "
        "ORDER BY seq",
        (ns,),
    ):
        seq = int(r[0])
        episodes.append((seq, float(r[3]), str(r[10]), bool(r[13])))
        if r[13]:
            continue
        try:
            terms = json.loads(r[7])
        except (TypeError, ValueError):
            return None
        if not isinstance(terms, list) or not all(isinstance(t, str) and t for t in terms):
            return None
        forget = r[9]
        facts[seq] = Facts(
            seq,
            str(r[1]),
            str(r[2]),
            float(r[3]),
            str(r[4]),
            str(r[5]),
            int(r[6]),
            frozenset(terms),
            str(r[8]),
            None if forget is None else float(forget),
            str(r[10]),
            str(r[11]),
            int(r[12]),
        )
    return episodes, facts


def _facts(r: Sequence[object]) -> Facts:
    forget = r[9]
    return Facts(
        int(r[0]),  # type: ignore[call-overload]
        str(r[1]),
        str(r[2]),
        float(r[3]),  # type: ignore[arg-type]
        str(r[4]),
        str(r[5]),
        int(r[6]),  # type: ignore[call-overload]
        frozenset(str(r[7]).split(" ")) if r[7] else frozenset(),
        str(r[8]),
        None if forget is None else float(forget),  # type: ignore[arg-type]
        str(r[10]),
        str(r[11]),
        int(r[12]),  # type: ignore[call-overload]
    )


Progress = Callable[[int, int], None]


# --- vectors (recall by meaning) --------------------------------------------------------------
#
#     ix_vblock(id, ns, mark, dim, block, n, heads, data)
#         the compact copies of the vectors of seqs block * SLOTS .. block * SLOTS + SLOTS - 1
#         of one namespace and embedder (fingerprint ``mark``, ``dim`` dimensions): slot
#         ``seq % SLOTS`` of ``heads`` is the copy's scale (float64, 0: no copy) and of ``data``
#         its components as int8, ``component / norm ~= scale * int8`` (off by at most
#         scale / 2). ``n`` counts the slots filled; an emptied block goes.
#     ix_vslot(key, ns, mark, dim, block)
#         where the copy of each stored vector (``episodic:<ns>:v:<seq>``) is.
#
# A search reads a namespace's blocks (about a hundred rows at 100,000 episodes), never one row
# per episode. A slot is written in place (``blobopen``): a record costs the size of its vector.
# The copies only pick candidates (see _vectors.py): each candidate's exact similarity comes
# from its stored record, decoded as every other path decodes it, so a copy left behind by a
# deleted vector is never used for more than a candidate that is then dropped.

SLOTS = 1024
VECTOR_TABLES = (
    "CREATE TABLE IF NOT EXISTS ix_vblock (id INTEGER PRIMARY KEY, ns TEXT NOT NULL, "
    "mark TEXT NOT NULL, dim INTEGER NOT NULL, block INTEGER NOT NULL, n INTEGER NOT NULL, "
    "heads BLOB NOT NULL, data BLOB NOT NULL, UNIQUE (ns, mark, dim, block))",
    "CREATE TABLE IF NOT EXISTS ix_vslot (key TEXT PRIMARY KEY NOT NULL, ns TEXT NOT NULL, "
    "mark TEXT NOT NULL, dim INTEGER NOT NULL, block INTEGER NOT NULL) WITHOUT ROWID",
    "CREATE TRIGGER IF NOT EXISTS ix_vslot_deleted AFTER DELETE ON ix_vslot BEGIN "
    "UPDATE ix_vblock SET n = n - 1 WHERE ns = old.ns AND mark = old.mark AND dim = old.dim "
    "AND block = old.block; "
    "DELETE FROM ix_vblock WHERE ns = old.ns AND mark = old.mark AND dim = old.dim "
    "AND block = old.block AND n <= 0; END",
    "CREATE TRIGGER IF NOT EXISTS ix_vector_added AFTER INSERT ON kv "
    "WHEN new.key GLOB 'episodic:*:v:[0-9]*' "
    "BEGIN INSERT OR IGNORE INTO ix_pending (key) VALUES (new.key); END",
    # A vector is rewritten in place (reembed): queued again like a new one.
    "CREATE TRIGGER IF NOT EXISTS ix_vector_changed AFTER UPDATE OF value ON kv "
    "WHEN new.key GLOB 'episodic:*:v:[0-9]*' "
    "BEGIN INSERT OR IGNORE INTO ix_pending (key) VALUES (new.key); END",
    # A deleted one is queued too: its copy is zeroed in place (index_vectors), in the same
    # transaction (every write indexes what is pending before it commits).
    "CREATE TRIGGER IF NOT EXISTS ix_vector_deleted AFTER DELETE ON kv "
    "WHEN old.key GLOB 'episodic:*:v:[0-9]*' "
    "BEGIN INSERT OR IGNORE INTO ix_pending (key) VALUES (old.key); END",
)
TABLES += VECTOR_TABLES

_VECTOR_KEY = re.compile(r"episodic:([^:]+):v:([1-9][0-9]{0,17})")
_SCALE = struct.Struct("<d")


def index_vectors(conn: sqlite3.Connection, rows: Sequence[tuple[object, object]]) -> None:
    """Index the vector records among the pending *rows* (``(key, value)``), inside the
    caller's transaction (the caller takes them off the queue)."""
    for key, value in rows:
        match = _VECTOR_KEY.fullmatch(key) if isinstance(key, str) else None
        if match is None:
            continue
        key = match.group(0)
        _clear_slot(conn, key, int(match.group(2)))
        found = quantized(value) if isinstance(value, str) else None
        if found is None:
            continue  # not a vector any reader could use (decode_vector refuses it too)
        mark, dim, scale, data = found
        ns, seq = match.group(1), int(match.group(2))
        block, slot = divmod(seq, SLOTS)
        conn.execute(
            "INSERT OR IGNORE INTO ix_vblock (ns, mark, dim, block, n, heads, data) "
            "VALUES (?, ?, ?, ?, 0, zeroblob(?), zeroblob(?))",
            (ns, mark, dim, block, SLOTS * _SCALE.size, SLOTS * dim),
        )
        (row,) = conn.execute(
            "SELECT id FROM ix_vblock WHERE ns = ? AND mark = ? AND dim = ? AND block = ?",
            (ns, mark, dim, block),
        ).fetchone()
        with conn.blobopen("ix_vblock", "heads", row) as heads:
            heads.seek(slot * _SCALE.size)
            heads.write(_SCALE.pack(scale))
        with conn.blobopen("ix_vblock", "data", row) as blob:
            blob.seek(slot * dim)
            blob.write(data)
        conn.execute(
            "INSERT INTO ix_vslot (key, ns, mark, dim, block) VALUES (?, ?, ?, ?, ?)",
            (key, ns, mark, dim, block),
        )
        conn.execute("UPDATE ix_vblock SET n = n + 1 WHERE id = ?", (row,))


def _clear_slot(conn: sqlite3.Connection, key: str, seq: int) -> None:
    """Zero the copy of *key*'s vector where it is (a forgotten episode's vector leaves
    nothing behind) and forget where it was."""
    found = conn.execute(
        "SELECT b.id, b.dim FROM ix_vslot AS s JOIN ix_vblock AS b ON b.ns = s.ns "
        "AND b.mark = s.mark AND b.dim = s.dim AND b.block = s.block WHERE s.key = ?",
        (key,),
    ).fetchone()
    if found is not None:
        row, dim = int(found[0]), int(found[1])
        slot = seq % SLOTS
        with conn.blobopen("ix_vblock", "heads", row) as heads:
            heads.seek(slot * _SCALE.size)
            heads.write(bytes(_SCALE.size))
        with conn.blobopen("ix_vblock", "data", row) as blob:
            blob.seek(slot * dim)
            blob.write(bytes(dim))
    conn.execute("DELETE FROM ix_vslot WHERE key = ?", (key,))


def quantized(raw: str) -> tuple[str, int, float, bytes] | None:
    """``(fingerprint, dimension, scale, int8 components)`` of a stored vector (the format of
    ``_embed.encode_vector``); ``None`` when it does not decode to a usable one. Pure Python:
    a store without numpy indexes its vectors too."""
    parts = raw.split("|")
    if len(parts) != 4 or parts[0] != "v1":
        return None
    try:
        data = base64.b64decode(parts[3], validate=True)
    except ValueError:
        return None
    if not data or len(data) % 2:
        return None
    values = struct.unpack(f"<{len(data) // 2}e", data)
    if not all(math.isfinite(v) for v in values):
        return None
    top = max(abs(v) for v in values)
    if top == 0.0:
        return None
    norm = math.sqrt(math.fsum(v * v for v in values))
    step = top / 127.0
    codes = array("b", [round(v / step) for v in values])
    return parts[1], len(values), step / norm, codes.tobytes()


class SQLiteVectorReader:
    """:class:`~deepcrew_episodic._vectors.VectorReader` over one connection and namespace."""

    def __init__(self, conn: sqlite3.Connection, ns: str) -> None:
        self._conn = conn
        self._ns = ns
        self._prefix = f"episodic:{ns}:v:"

    def blocks(self, mark: str, dim: int, live: range) -> Iterator[tuple[int, bytes, bytes]]:
        """``(first seq, scales, int8 components)`` of each block of the namespace's copies
        of embedder *mark* and *dim* dimensions that holds a seq in *live*, in seq order."""
        if not live:
            return
        cursor = self._conn.execute(
            "SELECT block, heads, data FROM ix_vblock WHERE ns = ? AND mark = ? AND dim = ? "
            "AND block >= ? AND block <= ? ORDER BY block",
            (self._ns, mark, dim, live.start // SLOTS, (live.stop - 1) // SLOTS),
        )
        for block, heads, data in cursor:
            yield int(block) * SLOTS, heads, data

    def stored(self, seqs: Sequence[int]) -> dict[int, str]:
        """The stored vector records (``v:<seq>``) of *seqs*."""
        found: dict[int, str] = {}
        keys = {f"{self._prefix}{seq}": seq for seq in seqs}
        if len(keys) == 1:
            ((key, seq),) = keys.items()
            row = self._conn.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
            if row is not None and row[0]:
                found[seq] = str(row[0])
            return found
        for key, value in self._conn.execute(
            "SELECT key, value FROM kv WHERE key IN (SELECT value FROM json_each(?))",
            (json.dumps(list(keys), ensure_ascii=False),),
        ):
            if value:
                found[keys[key]] = str(value)
        return found


def vector_reader(conn: sqlite3.Connection, ns: str) -> SQLiteVectorReader | None:
    """The vector reads of *ns* (``None``: this store's schema has no vector table yet)."""
    row = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'ix_vblock'"
    ).fetchone()
    return None if row is None else SQLiteVectorReader(conn, ns)
