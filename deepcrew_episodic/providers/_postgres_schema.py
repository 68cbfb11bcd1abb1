"""The PostgreSQL store's tables, and the versioned migrations that create them.

Everything lives in one schema (``deepcrew_episodic`` by default), so a database the team
already runs holds the store beside its own tables without a name in common::

    schema_version(version, applied_at)   one row per migration applied
    kv(key bytea, value bytea)            the log: every key and value of the contract
    ix_pending(key)                       records written, not indexed yet
    ix_episode(...), ix_term(...),        the recall index (see _postgres_index.py)
    ix_count(...), ix_grade(...)
    ix_revision(id, token)                the store's revision: new with every write

Keys and values are ``bytea``, not ``text``: PostgreSQL's text holds neither a NUL character
nor bytes that are not UTF-8, and the contract stores both (a key with a NUL in its namespace,
a value another program left undecodable). ``bytea`` compares byte by byte, which is code
point order for UTF-8: ``keys(prefix)`` is a range scan of the primary key.

Append-only in the schema: a trigger refuses an ``UPDATE`` that would change the value of an
episode record (``episodic:<ns>:e:<seq>``) or a grade record (``…:g:<n>``), whoever runs it,
and another one that renames a record's key (or renames another key into one); they can be
written once and deleted (forget, retention, the ring).

Migrations are numbered; :func:`migrate` applies the missing ones on a provider's first
connection, inside one transaction that holds an advisory lock on the schema's name, so several
processes opening a new store at once apply each migration exactly once and none of them sees
half a schema. A store written by a newer version (a higher number) is refused, never touched.
"""

from __future__ import annotations

import hashlib
from typing import Any

from .._exceptions import ConfigurationError

__all__ = ["LATEST", "MIGRATIONS", "REVISED", "WRITING", "lock_id", "migrate"]

# A key is an episode or grade record: "episodic:", anything, ":e:" or ":g:", a digit (the
# patterns of SQLite's GLOB triggers). encode(..., 'escape') leaves ASCII as it is, so the
# pattern reads the key's bytes whatever they are.
_RECORD = "encode({key}, 'escape') ~ '^episodic:.*:[eg]:[0-9]'"

_V1 = (
    "CREATE TABLE {s}.kv (key bytea PRIMARY KEY, value bytea NOT NULL)",
    # --- append-only --------------------------------------------------------------------
    "CREATE FUNCTION {s}.refuse_rewrite() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    "RAISE EXCEPTION 'episodes and grades are append-only: a stored one is never rewritten' "
    "USING ERRCODE = 'integrity_constraint_violation'; END $$",
    "CREATE TRIGGER episodes_append_only BEFORE UPDATE OF value ON {s}.kv FOR EACH ROW "
    "WHEN (old.value IS DISTINCT FROM new.value AND " + _RECORD.format(key="old.key") + ") "
    "EXECUTE FUNCTION {s}.refuse_rewrite()",
    # --- the recall index ---------------------------------------------------------------
    "CREATE TABLE {s}.ix_pending (key bytea PRIMARY KEY)",
    "CREATE TABLE {s}.ix_episode (key bytea NOT NULL UNIQUE, ns bytea NOT NULL, "
    "seq bigint NOT NULL, episode_id bytea NOT NULL, timestamp bytea NOT NULL, "
    "recorded double precision NOT NULL, outcome bytea NOT NULL, source bytea NOT NULL, "
    "size integer NOT NULL, terms bytea[] NOT NULL, tags text NOT NULL, "
    "forget_at double precision, run bytea NOT NULL, conversation bytea NOT NULL, "
    "graded integer NOT NULL DEFAULT 0, corrupt boolean NOT NULL DEFAULT false, "
    "PRIMARY KEY (ns, seq))",
    "CREATE INDEX ix_episode_id ON {s}.ix_episode (ns, episode_id)",
    "CREATE INDEX ix_episode_run ON {s}.ix_episode (ns, run, seq) WHERE run <> ''",
    "CREATE INDEX ix_episode_conversation ON {s}.ix_episode (ns, conversation, seq) "
    "WHERE conversation <> ''",
    "CREATE INDEX ix_episode_recorded ON {s}.ix_episode (ns, recorded)",
    "CREATE INDEX ix_episode_outcome ON {s}.ix_episode (ns, outcome, seq)",
    "CREATE INDEX ix_episode_corrupt ON {s}.ix_episode (ns, seq) WHERE corrupt",
    "CREATE TABLE {s}.ix_term (ns bytea NOT NULL, term bytea NOT NULL, size integer NOT NULL, "
    "recorded double precision NOT NULL, seq bigint NOT NULL, "
    "PRIMARY KEY (ns, term, size, recorded, seq))",
    # Postings by episode, for matches() (every seq holding a term) without the time order.
    "CREATE TABLE {s}.ix_count (ns bytea NOT NULL, term bytea NOT NULL, size integer NOT NULL, "
    "n bigint NOT NULL, PRIMARY KEY (ns, term, size))",
    "CREATE TABLE {s}.ix_grade (key bytea PRIMARY KEY, ns bytea NOT NULL, n bigint NOT NULL, "
    "episode_id bytea NOT NULL, record bytea NOT NULL)",
    "CREATE INDEX ix_grade_episode ON {s}.ix_grade (ns, episode_id, n)",
    # Every episode or grade record inserted, by anyone, waits to be indexed ...
    "CREATE FUNCTION {s}.ix_queue() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    "INSERT INTO {s}.ix_pending (key) VALUES (NEW.key) ON CONFLICT DO NOTHING; "
    "RETURN NULL; END $$",
    "CREATE TRIGGER ix_record_added AFTER INSERT ON {s}.kv FOR EACH ROW "
    "WHEN (" + _RECORD.format(key="NEW.key") + ") EXECUTE FUNCTION {s}.ix_queue()",
    # ... and a deleted one takes its rows with it, in the same statement.
    """CREATE FUNCTION {s}.ix_forget(gone bytea) RETURNS void LANGUAGE plpgsql AS $$
    DECLARE e record; g record;
    BEGIN
      FOR e IN DELETE FROM {s}.ix_episode WHERE key = gone
               RETURNING ns, seq, size, recorded, terms LOOP
        WITH dropped AS (
          DELETE FROM {s}.ix_term WHERE ns = e.ns AND term = ANY (e.terms) AND size = e.size
          AND recorded = e.recorded AND seq = e.seq RETURNING term)
        UPDATE {s}.ix_count AS c SET n = c.n - 1 FROM dropped
        WHERE c.ns = e.ns AND c.term = dropped.term AND c.size = e.size;
        DELETE FROM {s}.ix_count WHERE ns = e.ns AND size = e.size AND term = ANY (e.terms)
        AND n <= 0;
      END LOOP;
      FOR g IN DELETE FROM {s}.ix_grade WHERE key = gone RETURNING ns, episode_id LOOP
        UPDATE {s}.ix_episode SET graded = graded - 1
        WHERE ns = g.ns AND episode_id = g.episode_id;
      END LOOP;
    END $$""",
    "CREATE FUNCTION {s}.ix_record_deleted() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    "PERFORM {s}.ix_forget(OLD.key); DELETE FROM {s}.ix_pending WHERE key = OLD.key; "
    "RETURN NULL; END $$",
    "CREATE TRIGGER ix_record_deleted AFTER DELETE ON {s}.kv FOR EACH ROW "
    "WHEN (" + _RECORD.format(key="OLD.key") + ") EXECUTE FUNCTION {s}.ix_record_deleted()",
    # One episode indexed in one round trip: its row, its postings, their counts. An episode
    # without a usable time (p_when NULL) is filed under the time of the one before it.
    """CREATE FUNCTION {s}.ix_add_episode(p_key bytea, p_ns bytea, p_seq bigint,
        p_id bytea, p_timestamp bytea, p_when double precision, p_outcome bytea,
        p_source bytea, p_size integer, p_terms bytea[], p_tags text,
        p_forget double precision, p_run bytea, p_conversation bytea, p_corrupt boolean)
    RETURNS void LANGUAGE plpgsql AS $$
    DECLARE w double precision := p_when; n_graded integer := 0;
    BEGIN
      -- Indexed already and queued again: replaced behind the library's back.
      PERFORM {s}.ix_forget(p_key);
      IF w IS NULL THEN
        SELECT recorded INTO w FROM {s}.ix_episode WHERE ns = p_ns AND seq < p_seq
        ORDER BY seq DESC LIMIT 1;
        w := coalesce(w, '-Infinity'::double precision);
      END IF;
      IF NOT p_corrupt THEN
        SELECT count(*) INTO n_graded FROM {s}.ix_grade WHERE ns = p_ns AND episode_id = p_id;
      END IF;
      INSERT INTO {s}.ix_episode (key, ns, seq, episode_id, timestamp, recorded, outcome,
        source, size, terms, tags, forget_at, run, conversation, graded, corrupt)
      VALUES (p_key, p_ns, p_seq, p_id, p_timestamp, w, p_outcome, p_source, p_size, p_terms,
        p_tags, p_forget, p_run, p_conversation, n_graded, p_corrupt);
      WITH added AS (
        INSERT INTO {s}.ix_term (ns, term, size, recorded, seq)
        SELECT p_ns, t, p_size, w, p_seq FROM unnest(p_terms) AS t
        ON CONFLICT DO NOTHING RETURNING term)
      INSERT INTO {s}.ix_count AS c (ns, term, size, n)
      SELECT p_ns, term, p_size, 1 FROM added
      ON CONFLICT (ns, term, size) DO UPDATE SET n = c.n + 1;
    END $$""",
    """CREATE FUNCTION {s}.ix_add_grade(p_key bytea, p_ns bytea, p_n bigint, p_id bytea,
        p_record bytea) RETURNS void LANGUAGE plpgsql AS $$
    BEGIN
      PERFORM {s}.ix_forget(p_key);
      INSERT INTO {s}.ix_grade (key, ns, n, episode_id, record)
      VALUES (p_key, p_ns, p_n, p_id, p_record);
      UPDATE {s}.ix_episode SET graded = graded + 1 WHERE ns = p_ns AND episode_id = p_id;
    END $$""",
)

# Version 2: a record keeps its key. An UPDATE that renames an episode or grade record, or
# renames another key into one, would leave the index rows under a key that no longer holds
# them (the queue and delete triggers follow INSERT and DELETE only): refused, as SQLite does.
_V2 = (
    "CREATE FUNCTION {s}.refuse_rename() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    "RAISE EXCEPTION 'episodes and grades keep their keys: a stored one is never renamed' "
    "USING ERRCODE = 'integrity_constraint_violation'; END $$",
    "CREATE TRIGGER records_keep_their_keys BEFORE UPDATE OF key ON {s}.kv FOR EACH ROW "
    "WHEN (old.key IS DISTINCT FROM new.key AND ("
    + _RECORD.format(key="old.key")
    + " OR "
    + _RECORD.format(key="new.key")
    + ")) EXECUTE FUNCTION {s}.refuse_rename()",
)

# Version 3: the store's revision, for what recalls keep between recalls (see
# PostgresMemoryProvider.read_revised): a random token, new with every change, so that a
# store restored from a backup (or a replica promoted behind the primary) never shows again a
# revision a process kept something for, as a counter would. Every write of the library's sets
# it in its own transaction (REVISED) and marks itself with WRITING; any other statement that
# changes the log or its index, whoever runs it (psql, a migration of the application, a raw
# DELETE), sets it through a statement trigger, so a process that kept what it read sees it.
_V3 = (
    "CREATE TABLE {s}.ix_revision (id integer PRIMARY KEY CHECK (id = 1), token uuid NOT NULL)",
    "INSERT INTO {s}.ix_revision (id, token) VALUES (1, gen_random_uuid())",
    "CREATE FUNCTION {s}.ix_revised() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    "UPDATE {s}.ix_revision SET token = gen_random_uuid() WHERE id = 1; RETURN NULL; END $$",
    *(
        f"CREATE TRIGGER {table}_revised AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE "
        f"ON {{s}}.{table} FOR EACH STATEMENT "
        f"WHEN (current_setting('deepcrew_episodic.writing', true) IS DISTINCT FROM 'on') "
        f"EXECUTE FUNCTION {{s}}.ix_revised()"
        for table in ("kv", "ix_pending", "ix_episode", "ix_term", "ix_count", "ix_grade")
    ),
)
WRITING = "SET LOCAL deepcrew_episodic.writing = 'on'"
"""The first statement of the library's own writes (their triggers then leave the revision to
:data:`REVISED`, once per write instead of once per statement)."""
REVISED = "UPDATE {s}.ix_revision SET token = gen_random_uuid() WHERE id = 1"
"""The library's own writes set a new revision before anything else (after the writers' lock):
the row's lock is then always taken before a record's, in any transaction, so a transaction of
the application's that changes the tables waits for a write of the library's, or the other
way round, and the two never deadlock."""

MIGRATIONS: tuple[tuple[str, ...], ...] = (_V1, _V2, _V3)
"""Migration *n* (from 1) is ``MIGRATIONS[n - 1]``: statements with ``{s}`` for the schema."""
LATEST = len(MIGRATIONS)


def lock_id(schema: str) -> int:
    """The advisory lock (a signed 64-bit key) that serialises the writers of *schema*, and
    its migrations."""
    digest = hashlib.blake2b(f"deepcrew_episodic:{schema}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def migrate(conn: Any, schema: str, quoted: str) -> int:
    """Bring *schema* (quoted as *quoted*) to :data:`LATEST` on the psycopg connection *conn*
    (in autocommit mode), creating it when absent; return the version it was at. Refuses a
    schema that holds a table named ``kv`` without our version table (another application's),
    and one written by a newer version."""
    found = _version(conn, schema, quoted)
    if found == LATEST:
        return found
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_id(schema),))
        found = _version(conn, schema, quoted)  # again, under the lock: another process may be done
        if found is None:
            exists = conn.execute(
                "SELECT to_regclass(%s) IS NOT NULL", (f"{quoted}.kv",)
            ).fetchone()
            if exists and exists[0]:
                raise ConfigurationError(
                    f"PostgreSQL schema {schema!r} holds a table 'kv' that is not a "
                    f"deepcrew-episodic store (no schema_version table); it was left "
                    f"untouched. Give another schema=."
                )
            conn.execute(f"CREATE SCHEMA IF NOT EXISTS {quoted}")
            conn.execute(
                f"CREATE TABLE {quoted}.schema_version (version integer PRIMARY KEY, "
                f"applied_at timestamptz NOT NULL DEFAULT now())"
            )
            found = 0
        if found > LATEST:
            raise ConfigurationError(
                f"PostgreSQL schema {schema!r} was written by a newer deepcrew-episodic "
                f"(schema {found}, this version reads {LATEST}); upgrade deepcrew-episodic."
            )
        for number in range(found + 1, LATEST + 1):
            for statement in MIGRATIONS[number - 1]:
                conn.execute(statement.replace("{s}", quoted))
            conn.execute(f"INSERT INTO {quoted}.schema_version (version) VALUES (%s)", (number,))
    return found


def _version(conn: Any, schema: str, quoted: str) -> int | None:
    """The schema's version (``None``: no version table)."""
    row = conn.execute(
        "SELECT 1 FROM pg_catalog.pg_tables WHERE schemaname = %s AND tablename = 'schema_version'",
        (schema,),
    ).fetchone()
    if row is None:
        return None
    (version,) = conn.execute(
        f"SELECT coalesce(max(version), 0) FROM {quoted}.schema_version"
    ).fetchone()
    return int(version)
