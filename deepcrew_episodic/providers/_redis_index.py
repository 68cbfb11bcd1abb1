"""The recall index in a Redis store: keys kept by the same script as every write.

Every key of the index of namespace ``ns`` starts with its base ``<prefix>ix:<len(ns)>{<tag>}<rest>:``
where ``<tag><rest>`` is ``episodic:<ns>`` cut as the cluster hash tag is cut (see
``_redis.py``): the index of a namespace lives in the slot of its log, and the length of
``ns`` keeps two namespaces apart whatever characters they hold. The provider's ``keys()``
never lists these keys (they are not under the log's key layout), so ``forget``, ``stats``,
``namespaces()`` and the command line see what they saw before the index existed. Under the
base (``<m>`` is a sequence number as a sorted-set member: its digit count as a letter, then
its digits, so that members of equal score sort by number)::

    f:<seq>             the facts of one episode record: the time it ranks by, its id, then a
                        JSON array of the rest (see ``episode_op``)
    t:<size>:<term>     sorted set: the postings of a term's length class, scored by the time
                        the episode ranks by (-inf: undated with no dated episode before it)
    s                   sorted set: every indexed episode, scored by seq
    d                   sorted set: every decodable one, scored by the time it ranks by
    x                   sorted set: the undecodable ones, scored by seq
    r:<run> c:<conv> i:<id>
                        sorted sets by seq: a run's iterations, a conversation's turns, the
                        episodes holding an id
    R                   sorted set by seq: every episode that belongs to a run (complete once
                        ``w`` holds ``runs``; an index written before it had none, and the
                        first read that needs it builds it from the ``r:`` sets)
    g                   hash: grade number -> the episode id it names
    gi:<id>             sorted set: the grade numbers naming an episode id
    w                   hash: the watermarks ``e`` and ``g``: every record at or below them is
                        indexed (a record written by an older version above them is not yet)
    v                   string: the index's revision, a random token every script that changes
                        the index sets anew (what a reader kept of the index is valid while it
                        holds the same token)

The terms need Python (stemming), so the provider computes each record's row
(:func:`~deepcrew_episodic._index.index_row`) and the write script stores it with the record,
in the same atomic step; a deleted record's entries go in the step that deletes it (the
script reads its facts to know which postings to drop). An undated episode takes the time of
the newest indexed episode below it, looked up inside that step.

A reader compares the watermarks with ``__seq__`` and ``__grades__`` and indexes what lies
between (written by an older version, or by hand) before it searches: in batches, each one
script that skips what is indexed already and raises the watermark only over what it covered,
so a kill loses a batch's work and two readers (or a writer) meeting there change nothing.
"""

from __future__ import annotations

import json
import logging
import math
import re
import uuid
from array import array
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

from .._index import Facts, StaleIndexError, Whole, index_read, index_row
from .._recall import LENGTH_CAP

log = logging.getLogger("deepcrew_episodic")

# An episode or grade record of a namespace (a namespace may hold ':'; the number cannot).
RECORD = re.compile(r"episodic:(.+):([eg]):([1-9][0-9]{0,17})", re.DOTALL)
# The key (under a namespace's index base) of the index's revision.
REVISION = "v"
# Records indexed per script while a reader catches up.
BATCH = 250
# A range of record numbers longer than this is not walked: the records that exist are listed.
_WALKED = 100_000
# The facts read along with a chunk of postings, or ahead of the one a search asks for.
AHEAD = 64

# The index upkeep, run inside the write script after its compare-and-set passed (the
# caller's ``i`` is the position of the first op in ARGV). Ops:
#   E / EC  base seq member when id facts size terms run conv corrupt: index an episode
#           record (E replaces an entry, EC keeps one found; facts: the JSON array of
#           _facts_json, terms space-separated)
#   G / GC  base n episode_id: index a grade record
#   DE / DG base number: drop the entries of an episode / grade record
#   W       base field low high: every record from low to high is indexed (a catch-up batch)
#   V       base token: the index's revision is now token
_UPKEEP = r"""
local function member_seq(m) return string.sub(m, 2) end
local function advance(b, field, from)
  local w = tonumber(redis.call('HGET', b .. 'w', field) or '0') or 0
  if from > w + 1 then return end
  local probe = field == 'e' and function(n) return redis.call('EXISTS', b .. 'f:' .. n) == 1 end
    or function(n) return redis.call('HEXISTS', b .. 'g', n) == 1 end
  local n = w
  for _ = 1, 1000 do
    if not probe(n + 1) then break end
    n = n + 1
  end
  if n > w then redis.call('HSET', b .. 'w', field, string.format('%d', n)) end
end
local function drop_episode(b, seq)
  local f = b .. 'f:' .. seq
  local v = redis.call('GET', f)
  if not v then return end
  local id, body = string.match(v, '^[^\31]*\31([^\31]*)\31(.*)$')
  local d = cjson.decode(body)
  local m, size, terms, run, conv = d[1], d[5], d[6], d[9], d[10]
  for t in string.gmatch(terms, '%S+') do
    redis.call('ZREM', b .. 't:' .. size .. ':' .. t, m)
  end
  redis.call('ZREM', b .. 's', m)
  redis.call('ZREM', b .. 'd', m)
  redis.call('ZREM', b .. 'x', m)
  if run ~= '' then
    redis.call('ZREM', b .. 'r:' .. run, m)
    redis.call('ZREM', b .. 'R', m)
  end
  if conv ~= '' then redis.call('ZREM', b .. 'c:' .. conv, m) end
  if id ~= '' then redis.call('ZREM', b .. 'i:' .. id, m) end
  redis.call('DEL', f)
end
local function add_episode(a, i, keep)
  local b, seq, m, when, id = a[i], a[i + 1], a[i + 2], a[i + 3], a[i + 4]
  local f = b .. 'f:' .. seq
  if keep then
    if redis.call('EXISTS', f) == 1 then return end
  else
    drop_episode(b, seq)
  end
  if when == '' then
    local below = redis.call('ZREVRANGEBYSCORE', b .. 's', '(' .. seq, '-inf', 'LIMIT', 0, 1)
    when = '-inf'
    if below[1] then
      local v = redis.call('GET', b .. 'f:' .. member_seq(below[1]))
      if v then when = string.match(v, '^([^\31]*)') end
    end
  end
  local size, terms, run, conv, corrupt = a[i + 6], a[i + 7], a[i + 8], a[i + 9], a[i + 10]
  if redis.call('EXISTS', b .. 's') == 0 then
    -- The index's first episode: its run set R is whole from the start (see ANY_RUN).
    redis.call('HSET', b .. 'w', 'runs', '1')
  end
  -- The facts: the time it ranks by and its id (read without decoding), then the rest.
  redis.call('SET', f, when .. '\31' .. id .. '\31' .. a[i + 5])
  redis.call('ZADD', b .. 's', seq, m)
  if corrupt == '1' then
    redis.call('ZADD', b .. 'x', seq, m)
  else
    redis.call('ZADD', b .. 'd', when, m)
    for t in string.gmatch(terms, '%S+') do
      redis.call('ZADD', b .. 't:' .. size .. ':' .. t, when, m)
    end
    if run ~= '' then
      redis.call('ZADD', b .. 'r:' .. run, seq, m)
      redis.call('ZADD', b .. 'R', seq, m)
    end
    if conv ~= '' then redis.call('ZADD', b .. 'c:' .. conv, seq, m) end
    if id ~= '' then redis.call('ZADD', b .. 'i:' .. id, seq, m) end
  end
  advance(b, 'e', tonumber(seq))
end
local function drop_grade(b, n)
  local id = redis.call('HGET', b .. 'g', n)
  if not id then return end
  redis.call('ZREM', b .. 'gi:' .. id, n)
  redis.call('HDEL', b .. 'g', n)
end
local function add_grade(b, n, id, keep)
  if keep then
    if redis.call('HEXISTS', b .. 'g', n) == 1 then return end
  else
    drop_grade(b, n)
  end
  redis.call('HSET', b .. 'g', n, id)
  redis.call('ZADD', b .. 'gi:' .. id, n, n)
  advance(b, 'g', tonumber(n))
end
local function upkeep(a, i)
  while i <= #a do
    local op = a[i]
    if op == 'E' or op == 'EC' then
      add_episode(a, i + 1, op == 'EC')
      i = i + 12
    elseif op == 'G' or op == 'GC' then
      add_grade(a[i + 1], a[i + 2], a[i + 3], op == 'GC')
      i = i + 4
    elseif op == 'DE' then
      drop_episode(a[i + 1], a[i + 2])
      i = i + 3
    elseif op == 'DG' then
      drop_grade(a[i + 1], a[i + 2])
      i = i + 3
    elseif op == 'W' then
      local b, field, low, high = a[i + 1], a[i + 2], tonumber(a[i + 3]), tonumber(a[i + 4])
      local w = tonumber(redis.call('HGET', b .. 'w', field) or '0') or 0
      if w >= low - 1 and high > w then
        redis.call('HSET', b .. 'w', field, string.format('%d', high))
      end
      advance(b, field, high + 1)
      i = i + 5
    elseif op == 'V' then
      redis.call('SET', a[i + 1] .. 'v', a[i + 2])
      i = i + 3
    else
      return redis.error_reply('ERR unknown recall index op ' .. tostring(op))
    end
  end
end
"""

# A compare-and-set over several keys that keeps the recall index. KEYS: the expected keys,
# the keys to store, the keys to delete. ARGV: how many expected keys and keys to store; per
# expected key "0" (absent or "") or "1" followed by the value; the values to store; then the
# index ops (see _UPKEEP). Returns 1 when it wrote, 0 when not.
WRITE_IF = (
    _UPKEEP
    + r"""
local expected, stored = tonumber(ARGV[1]), tonumber(ARGV[2])
for i = 1, expected do
  local want = ARGV[2 + i]
  local have = redis.call('GET', KEYS[i])
  if string.sub(want, 1, 1) == '0' then
    if have and have ~= '' then return 0 end
  elseif have ~= string.sub(want, 2) then
    return 0
  end
end
local failed = upkeep(ARGV, 3 + expected + stored)
if failed then return failed end
for i = 1, stored do
  redis.call('SET', KEYS[expected + i], ARGV[2 + expected + i])
end
for i = expected + stored + 1, #KEYS do
  redis.call('UNLINK', KEYS[i])
end
return 1
"""
)

# A catch-up batch: the index ops alone (KEYS[1] routes it to the namespace's slot).
CATCH_UP = _UPKEEP + "\nreturn upkeep(ARGV, 1) or 1\n"

# --- reads (KEYS[1]: the namespace's watermark key, which routes the call to its slot) ------

# ARGV: the log prefix. The counters a catch-up compares with the watermarks, in one read,
# and whether a record lies just past both (a counter that fell behind a record written
# outside the library: the log read in process reads it, so the index must hold it too).
HEAD = r"""
local lp = ARGV[1]
local function get(k) return redis.call('GET', lp .. k) or '' end
local function num(v) v = tonumber(v); if v and v >= 0 then return math.floor(v) end return 0 end
local marks = redis.call('HMGET', KEYS[1], 'e', 'g')
local seq, grades = get('__seq__'), get('__grades__')
local next_e = math.max(num(seq), num(marks[1])) + 1
local next_g = math.max(num(grades), num(marks[2])) + 1
return {seq, grades, get('__max__'), marks[1] or '', marks[2] or '',
        redis.call('EXISTS', lp .. 'e:' .. next_e), redis.call('EXISTS', lp .. 'g:' .. next_g)}
"""
_FACTS_OF = r"""
local function facts_of(b, lp, m)
  local seq = string.sub(m, 2)
  local v = redis.call('GET', b .. 'f:' .. seq)
  if not v then return {seq} end
  local out = {seq, v, redis.call('GET', lp .. 'u:' .. seq) or ''}
  local id = string.match(v, '^[^\31]*\31([^\31]*)\31')
  if id ~= '' and redis.call('EXISTS', b .. 'gi:' .. id) == 1 then
    for _, n in ipairs(redis.call('ZRANGE', b .. 'gi:' .. id, 0, -1)) do
      out[#out + 1] = redis.call('GET', lp .. 'g:' .. n) or ''
    end
  end
  return out
end
"""
# ARGV: base, log prefix, offset, limit, the member expected just before offset ('' none),
# the member to read after when the offset is not known ('' none), how many of the rows to
# read the facts of. Returns {rows, facts} (rows: member, score, ...) or {} when the expected
# member is not where it was.
POSTINGS = (
    _FACTS_OF
    + r"""
local b, lp, offset, limit, expect, after = ARGV[1], ARGV[2], tonumber(ARGV[3]),
  tonumber(ARGV[4]), ARGV[5], ARGV[6]
local key = KEYS[2]
if after ~= '' then
  local r = redis.call('ZREVRANK', key, after)
  if not r then return {} end
  offset = r + 1
elseif expect ~= '' then
  local at = redis.call('ZRANGE', key, offset - 1, offset - 1, 'REV')
  if at[1] ~= expect then return {} end
end
local rows = redis.call('ZRANGE', key, offset, offset + limit - 1, 'REV', 'WITHSCORES')
local facts = {}
for j = 1, math.min(#rows, 2 * tonumber(ARGV[7])), 2 do facts[#facts + 1] = facts_of(b, lp, rows[j]) end
return {rows, facts}
"""
)
# ARGV: base, log prefix, members.
FACTS = (
    _FACTS_OF
    + r"""
local out = {}
for j = 3, #ARGV do out[#out + 1] = facts_of(ARGV[1], ARGV[2], ARGV[j]) end
return out
"""
)
# ARGV: base, the length classes, terms. Returns term, size, count, ... for counts above 0.
COUNTS = r"""
local b, sizes, out = ARGV[1], tonumber(ARGV[2]), {}
for j = 3, #ARGV do
  for s = 0, sizes do
    local n = redis.call('ZCARD', b .. 't:' .. s .. ':' .. ARGV[j])
    if n > 0 then
      out[#out + 1] = ARGV[j]; out[#out + 1] = s; out[#out + 1] = n
    end
  end
end
return out
"""
# ARGV: base, the length classes, terms. Returns seq, count, ... for every episode holding one.
MATCHES = r"""
local b, sizes, counts, order = ARGV[1], tonumber(ARGV[2]), {}, {}
for j = 3, #ARGV do
  for s = 0, sizes do
    for _, m in ipairs(redis.call('ZRANGE', b .. 't:' .. s .. ':' .. ARGV[j], 0, -1)) do
      local c = counts[m]
      if c then counts[m] = c + 1 else counts[m] = 1; order[#order + 1] = m end
    end
  end
end
local out = {}
for _, m in ipairs(order) do
  out[#out + 1] = string.sub(m, 2); out[#out + 1] = counts[m]
end
return out
"""
# ARGV: base, first seq, last seq. 1 when an episode of a run lies between the two seqs. An
# index that does not say its run set ``R`` is whole (one whose first episode was indexed
# before the write scripts marked it) gets it first, from its own episodes' facts (never a
# SCAN: that would walk every key of the database, for each namespace), then the mark.
ANY_RUN = r"""
local b = ARGV[1]
if redis.call('HGET', b .. 'w', 'runs') ~= '1' then
  local members = redis.call('ZRANGE', b .. 's', 0, -1)
  for _, m in ipairs(members) do
    local seq = string.sub(m, 2)
    local v = redis.call('GET', b .. 'f:' .. seq)
    local body = v and string.match(v, '^[^\31]*\31[^\31]*\31(.*)$')
    if body then
      local d = cjson.decode(body)
      if d[9] ~= '' and not redis.call('ZSCORE', b .. 'x', m) then  -- (as add_episode)
        redis.call('ZADD', b .. 'R', tonumber(seq), m)
      end
    end
  end
  redis.call('HSET', b .. 'w', 'runs', '1')
end
return #redis.call('ZRANGEBYSCORE', b .. 'R', ARGV[2], ARGV[3], 'LIMIT', 0, 1)
"""
# ARGV: base, first seq, time. 1 when an episode at or past that seq ranks by a later time.
NEWEST_AFTER = r"""
local b, start = ARGV[1], tonumber(ARGV[2])
local offset = 0
while true do
  local found = redis.call('ZRANGEBYSCORE', b .. 'd', '(' .. ARGV[3], '+inf',
    'LIMIT', offset, 256)
  if #found == 0 then return 0 end
  for _, m in ipairs(found) do
    if tonumber(string.sub(m, 2)) >= start then return 1 end
  end
  offset = offset + #found
end
"""


def member(seq: int) -> str:
    """*seq* as a sorted-set member: members of equal score sort by their bytes, so the
    digit count comes first (as a letter) and numbers sort as numbers."""
    digits = str(seq)
    return chr(ord("a") + len(digits) - 1) + digits


def episode_op(base: str, seq: int, raw: str, *, keep: bool = False) -> list[str]:
    """The upkeep op that indexes the episode record *raw* at *seq*."""
    op = "EC" if keep else "E"
    m = member(seq)
    row = index_row(raw)
    if row is None:
        facts = json.dumps([m, "", "", "", 0, "", [], None, "", "", 1])
        return [op, base, str(seq), m, "", "", facts, "0", "", "", "", "1"]
    terms = " ".join(row.terms)
    facts = json.dumps(
        [
            m,
            row.timestamp,
            row.outcome,
            row.source,
            row.size,
            terms,
            row.tags,
            row.forget_at,
            row.run,
            row.conversation,
            0,
        ],
        ensure_ascii=False,
    )
    when = "" if row.when is None else repr(row.when)
    size = str(row.size)
    return [
        op,
        base,
        str(seq),
        m,
        when,
        row.episode_id,
        facts,
        size,
        terms,
        row.run,
        row.conversation,
        "0",
    ]


def grade_op(base: str, number: int, raw: str, *, keep: bool = False) -> list[str]:
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        data = None
    episode = data.get("episode") if isinstance(data, dict) else None
    # An unreadable grade is kept under no episode: the read paths skip and count it.
    return ["GC" if keep else "G", base, str(number), episode if isinstance(episode, str) else ""]


def upkeep(
    base: Callable[[str], str], items: Mapping[str, str], delete: Iterable[str]
) -> list[str]:
    """The index ops for a write that stores *items* and deletes *delete* (log keys, not yet
    prefixed); *base* gives a namespace's index base. Drops come first, then the records in
    log order (an undated episode takes the time of the one indexed below it)."""
    ops: list[str] = []
    touched: set[str] = set()  # the bases of the indexes this write changes
    for key in delete:
        match = RECORD.fullmatch(key)
        if match is not None:
            ns, kind, number = match.groups()
            ops += ["DE" if kind == "e" else "DG", base(ns), str(int(number))]
            touched.add(base(ns))
    added: list[tuple[str, int, str, str]] = []
    for key, value in items.items():
        match = RECORD.fullmatch(key)
        if match is not None:
            ns, kind, number = match.groups()
            added.append((ns, int(number), kind, value))
    added.sort(key=lambda a: (a[0], a[2], a[1]))
    for ns, number, kind, value in added:
        if kind == "e":
            ops += episode_op(base(ns), number, value)
        else:
            ops += grade_op(base(ns), number, value)
    # A write that changes an index gives it a new revision, in the same step.
    touched.update(base(ns) for ns, _, _, _ in added)
    return ops + revised(touched)


def revised(bases: Iterable[str]) -> list[str]:
    """The ops that give the indexes under *bases* a new revision (one token for them all)."""
    ordered = sorted(bases)
    if not ordered:
        return []
    token = uuid.uuid4().hex
    return [part for b in ordered for part in ("V", b, token)]


def has_records(keys: Iterable[str]) -> bool:
    return any(RECORD.fullmatch(k) for k in keys)


class SyncScript:
    """A Lua script run by its SHA on a synchronous client (sent whole when unknown)."""

    def __init__(self, source: str) -> None:
        import hashlib

        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()

    def __call__(self, client: Any, keys: Sequence[str], args: Sequence[str | int]) -> Any:
        from redis import exceptions

        try:
            return client.evalsha(self.sha, len(keys), *keys, *args)
        except exceptions.NoScriptError:
            return client.eval(self.source, len(keys), *keys, *args)


_POSTINGS = SyncScript(POSTINGS)
_FACTS = SyncScript(FACTS)
_COUNTS = SyncScript(COUNTS)
_MATCHES = SyncScript(MATCHES)
_NEWEST_AFTER = SyncScript(NEWEST_AFTER)
_ANY_RUN = SyncScript(ANY_RUN)
_CATCH_UP = SyncScript(CATCH_UP)
_HEAD = SyncScript(HEAD)


class RedisIndexReader:
    """:class:`~deepcrew_episodic._index.IndexReader` over a synchronous redis-py client, for
    one namespace: *base* is its index base, *log* the prefix of its log's keys as stored.

    Reads are Lua scripts, one round trip each: a chunk of postings comes with the facts,
    use counts and grade records of its episodes, kept for the rest of the search (the
    search then asks for them one by one)."""

    facts_hold_every_term = True  # (the query does not narrow what facts() returns)

    def __init__(self, client: Any, base: str, log_prefix: str) -> None:
        self._client = client
        self._base = base
        self._log = log_prefix
        self._route = base + "w"
        self._facts: dict[int, Facts | None] = {}
        self._grades: dict[str, list[str]] = {}
        self._uses: dict[int, int] = {}
        self._handed: dict[tuple[str, int], tuple[int, tuple[float, int]]] = {}
        self._order: dict[int, tuple[list[int], int]] = {}  # seq -> its postings chunk, where
        self._visited: list[int] = []  # the episodes the search asked about, in that order
        self._seen: set[int] = set()
        self._records: dict[int, str | None] = {}

    @index_read
    def newest_seq(self) -> int:
        """The newest sequence number the index holds (0: none)."""
        found = self._client.zrevrange(self._base + "s", 0, 0)
        return int(found[0][1:]) if found else 0

    def set_query(self, terms: Collection[str]) -> None:
        """Nothing to do: the facts read carry every term of their episode."""

    @index_read
    def any_run(self, live: range) -> bool:
        if not live:
            return False
        args: list[str | int] = [self._base, live.start, live.stop - 1]
        return bool(_ANY_RUN(self._client, [self._route], args))

    @index_read
    def newest(
        self, live: range, now: float, oldest: float, limit: int, offset: int
    ) -> tuple[list[int], int] | None:
        """``None``: a listing is read from the log (counting what is unexpired would read
        every episode's facts here)."""
        return None

    # --- catching up with records the index does not hold ---------------------------------

    def catch_up(self, namespace: str, progress: Callable[[int, int], None] | None = None) -> int:
        """Index the records above the watermarks (written by an older version, or outside
        the library); return how many records were read."""
        c = self._client
        head = _HEAD(c, [self._route], [self._log])
        seq_raw, grades_raw, ring_raw, mark_e, mark_g, past_e, past_g = head
        last, grades, ring = _number(seq_raw), _number(grades_raw), _number(ring_raw)
        done_e, done_g = _number(mark_e), _number(mark_g)
        if int(past_e):
            last = self._last_past("e:", max(last, done_e))
        if int(past_g):
            grades = self._last_past("g:", max(grades, done_g))
        low = done_e + 1
        if ring:
            low = max(low, last - ring + 1)
        episodes, grades_todo = (
            self._numbers("e:", low, last),
            self._numbers("g:", done_g + 1, grades),
        )
        todo = len(episodes) + len(grades_todo)
        if todo:
            log.info(
                "redis: indexing up to %d records of namespace %r for recall (written without "
                "the index)",
                todo,
                namespace,
            )
        done = 0
        for kind, numbers, mark, high in (
            ("e", episodes, done_e, last),
            ("g", grades_todo, done_g, grades),
        ):
            if not numbers:
                if high - mark > _WALKED:
                    # Listed, and none there: the watermark moves up to the counter at once,
                    # or every read would list the records again.
                    ops = ["W", self._base, kind, str(mark + 1), str(high), *revised([self._base])]
                    _CATCH_UP(c, [self._route], ops)
                continue
            for start in range(0, len(numbers), BATCH):
                chunk = numbers[start : start + BATCH]
                values = c.mget([f"{self._log}{kind}:{n}" for n in chunk])
                ops = []
                for number, raw in zip(chunk, values, strict=True):
                    if raw is not None and raw != "":
                        op = episode_op if kind == "e" else grade_op
                        ops += op(self._base, number, raw, keep=True)
                # The watermark moves over what this chunk read, and over the numbers between
                # chunks that hold no record; the last chunk takes it to the counter.
                top = high if start + BATCH >= len(numbers) else chunk[-1]
                ops += ["W", self._base, kind, str(mark + 1), str(top)]
                ops += revised([self._base])
                _CATCH_UP(c, [self._route], ops)
                mark = top
                done += len(chunk)
                if progress is not None:
                    progress(done, todo)
        return done

    def _numbers(self, kind: str, first: int, last: int) -> list[int]:
        """The numbers from *first* to *last* to read: all of them, or when a counter far past
        what was ever written (edited, damaged) makes that range too long to walk, those of
        the records that exist (one listing)."""
        if last - first < _WALKED:
            return list(range(first, last + 1))
        prefix = f"{self._log}{kind}"
        found: list[int] = []
        for key in self._client.scan_iter(match=_glob(prefix) + "[0-9]*", count=1000):
            tail = (key.decode("utf-8", "replace") if isinstance(key, bytes) else key)[
                len(prefix) :
            ]
            if tail.isascii() and tail.isdigit() and first <= int(tail) <= last:
                found.append(int(tail))
        return sorted(found)

    def _last_past(self, kind: str, start: int) -> int:
        """The last of the records stored one after another just past ``start`` (the first
        is known to exist): where a counter that fell behind them should be."""
        last = start
        while True:
            values = self._client.mget(
                [f"{self._log}{kind}{last + i}" for i in range(1, BATCH + 1)]
            )
            for value in values:
                if value is None:
                    return last
                last += 1

    # --- IndexReader ------------------------------------------------------------------------

    @index_read
    def counts(self, terms: Sequence[str]) -> dict[str, dict[int, int]]:
        found: dict[str, dict[int, int]] = {}
        if not terms:
            return found
        reply = _COUNTS(self._client, [self._route], [self._base, LENGTH_CAP, *terms])
        for i in range(0, len(reply), 3):
            found.setdefault(str(reply[i]), {})[int(reply[i + 1])] = int(reply[i + 2])
        return found

    @index_read
    def postings(
        self, term: str, size: int, limit: int, before: tuple[float, int] | None
    ) -> list[tuple[float, int]]:
        key = f"{self._base}t:{size}:{term}"
        handed = self._handed.get((term, size))
        offset, expect, after = 0, "", ""
        if before is not None:
            if handed is not None and handed[1] == before:
                offset, expect = handed[0], member(before[1])
            else:
                after = member(before[1])
        reply = _POSTINGS(
            self._client,
            [self._route, key],
            [self._base, self._log, offset, limit, expect, after, AHEAD],
        )
        if not reply:
            raise StaleIndexError(f"the postings of {term!r} changed during the search")
        rows_raw, facts_raw = reply
        rows = [(float(rows_raw[i + 1]), int(rows_raw[i][1:])) for i in range(0, len(rows_raw), 2)]
        for raw in facts_raw:
            self._keep(raw)
        order = [seq for _, seq in rows]
        for at, seq in enumerate(order):
            self._order.setdefault(seq, (order, at))
        if rows:
            start = offset if not after else -1
            count = start + len(rows) if start >= 0 else -1
            if count >= 0:
                self._handed[(term, size)] = (count, rows[-1])
            else:
                self._handed.pop((term, size), None)
        return rows

    @index_read
    def matches(self, terms: Sequence[str]) -> Counter[int]:
        reply = _MATCHES(self._client, [self._route], [self._base, LENGTH_CAP, *terms])
        return Counter({int(reply[i]): int(reply[i + 1]) for i in range(0, len(reply), 2)})

    @index_read
    def facts(self, seqs: Sequence[int]) -> dict[int, Facts]:
        if len(seqs) == 1 and seqs[0] not in self._seen:
            self._seen.add(seqs[0])
            self._visited.append(seqs[0])
        missing = [s for s in seqs if s not in self._facts]
        if len(missing) == 1 and missing[0] in self._order:
            # The search reads postings in order: the facts of the next ones come along.
            order, at = self._order[missing[0]]
            missing = [s for s in order[at : at + AHEAD * 2] if s not in self._facts][:AHEAD]
        if missing:
            reply = _FACTS(
                self._client, [self._route], [self._base, self._log, *map(member, missing)]
            )
            for raw in reply:
                self._keep(raw)
        found: dict[int, Facts] = {}
        for seq in seqs:
            facts = self._facts.get(seq)
            if facts is not None:
                found[seq] = facts
        return found

    @index_read
    def grades(self, episode_id: str) -> list[str]:
        found = self._grades.get(episode_id)
        if found is None:
            numbers = self._client.zrange(f"{self._base}gi:{episode_id}", 0, -1)
            values = self._client.mget([f"{self._log}g:{n}" for n in numbers]) if numbers else []
            found = self._grades[episode_id] = [v for v in values if v]
        return list(found)

    @index_read
    def records(self, seqs: Sequence[int]) -> dict[int, str]:
        wanted = [s for s in seqs if s not in self._records]
        if len(wanted) == 1:
            # The search asks for the records of what it returns one by one, and those are
            # among the episodes it scored: theirs come along (a bounded read-ahead).
            ahead = [s for s in self._visited if s not in self._records and s != wanted[0]]
            wanted += ahead[: AHEAD - 1]
        if wanted:
            values = self._client.mget([f"{self._log}e:{s}" for s in wanted])
            self._records.update(zip(wanted, values, strict=True))
        found: dict[int, str] = {}
        for seq in seqs:
            value = self._records.get(seq)
            if value:
                found[seq] = value
        return found

    @index_read
    def uses(self, seqs: Sequence[int]) -> dict[int, int]:
        missing = [s for s in seqs if s not in self._uses]
        if missing:
            values = self._client.mget([f"{self._log}u:{s}" for s in missing])
            for seq, value in zip(missing, values, strict=True):
                self._uses[seq] = _number(value)
        return {s: self._uses[s] for s in seqs if self._uses.get(s)}

    @index_read
    def run(self, run: str) -> list[int]:
        return self._by_seq(f"r:{run}") if run else []

    @index_read
    def conversation(self, conversation: str) -> list[int]:
        return self._by_seq(f"c:{conversation}") if conversation else []

    @index_read
    def with_id(self, episode_id: str) -> list[int]:
        return self._by_seq(f"i:{episode_id}") if episode_id else []

    @index_read
    def newest_after(self, start: int, when: float) -> bool:
        return bool(_NEWEST_AFTER(self._client, [self._route], [self._base, start, repr(when)]))

    @index_read
    def corrupt(self, live: range) -> list[int]:
        if not live:
            return []
        found = self._client.zrangebyscore(f"{self._base}x", live.start, live.stop - 1)
        return [int(m[1:]) for m in found]

    def value(self, key: str) -> str | None:
        found: str | None = self._client.get(key)
        return found

    @index_read
    def whole_namespace(self, most: int) -> Whole | None:
        """Everything a keyword search can read of this namespace, read at once (``None``:
        it holds more than *most* episodes, or the index changed while it was read). Each
        part as this reader's own reads return it; the postings of each term's length class
        that the counts name, whole, in one pipelined trip."""
        c, base = self._client, self._base
        revision = self.value(base + REVISION)
        if c.zcard(base + "s") > most:
            return None
        seqs = [int(m[1:]) for m in c.zrange(base + "s", 0, -1)]
        corrupt = {int(m[1:]) for m in c.zrange(base + "x", 0, -1)}
        facts = self.facts(seqs) if seqs else {}
        counts = self.counts(sorted({t for f in facts.values() for t in f.terms}))
        keys = [(t, s) for t, sizes in counts.items() for s, n in sizes.items() if n]
        postings: dict[tuple[str, int], tuple[array[float], array[int]]] = {}
        if keys:
            pipe = c.pipeline(transaction=False)
            for term, size in keys:
                pipe.zrange(f"{base}t:{size}:{term}", 0, -1, withscores=True)
            for key, rows in zip(keys, pipe.execute(), strict=True):
                postings[key] = (
                    array("d", [float(score) for _, score in rows]),
                    array("q", [int(m[1:]) for m, _ in rows]),
                )
        episodes = []
        for seq in seqs:
            found = facts.get(seq)
            when, run = (found.when, found.run) if found is not None else (-math.inf, "")
            episodes.append((seq, when, run, seq in corrupt))
        records = self.records(list(facts)) if facts else {}
        if self.value(base + REVISION) != revision:
            return None  # written meanwhile: the parts may not belong together
        graded = {f.episode_id for f in facts.values() if f.graded}
        return Whole(
            newest=seqs[-1] if seqs else 0,
            counts=counts,
            postings=postings,
            facts=facts,
            episodes=episodes,
            grades={episode_id: tuple(self.grades(episode_id)) for episode_id in graded},
            uses={seq: self._uses[seq] for seq in facts if self._uses.get(seq)},
            records=records,
        )

    # --- machinery ------------------------------------------------------------------------

    def _by_seq(self, name: str) -> list[int]:
        return [int(m[1:]) for m in self._client.zrange(self._base + name, 0, -1)]

    def _keep(self, raw: Sequence[Any]) -> None:
        seq = int(raw[0])
        if len(raw) < 2:
            self._facts[seq] = None
            return
        when, episode_id, body = raw[1].split("\x1f", 2)
        _, ts, outcome, source, size, terms, tags, forget, run, conversation, corrupt = json.loads(
            body
        )
        if corrupt:
            self._facts[seq] = None
            return
        grades = [g for g in raw[3:] if g]
        self._uses[seq] = _number(raw[2])
        if episode_id:
            self._grades[episode_id] = grades
        self._facts[seq] = Facts(
            seq,
            episode_id,
            ts,
            float(when),
            outcome,
            source,
            size,
            frozenset(terms.split()),
            json.dumps(tags, ensure_ascii=False),
            forget,
            run,
            conversation,
            len(grades) if episode_id else 0,
        )


def _number(value: Any) -> int:
    if isinstance(value, bytes):
        value = value.decode("ascii", "replace")
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 18:
        return int(value)
    return 0


def _glob(text: str) -> str:
    """*text* matched literally by a SCAN pattern."""
    return _GLOB.sub(r"\\\1", text)


_GLOB = re.compile(r"([*?\[\]\\])")


def index_keys_pattern(glob_prefix: str) -> str:
    """The SCAN pattern of every index key under a provider's (glob-escaped) prefix."""
    return glob_prefix + "ix:[0-9]*{*"


def is_index_key(rest: str) -> bool:
    """Whether *rest* (a stored key without the provider's prefix) belongs to an index."""
    return _INDEX_KEY.match(rest) is not None


_INDEX_KEY = re.compile(r"ix:[0-9]+\{")
