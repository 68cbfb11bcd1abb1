"""What the PostgreSQL provider promises beyond the conformance kit (which it runs through
``stores.KINDS``): the schema refuses to rewrite an episode, migrations are applied once when
several processes open a new store at once, a password never shows, a lost server, a restart
and a statement timeout are typed errors that lose nothing."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator

import anyio
import psycopg
import pytest
from postgres_server import PASSWORD, PostgresServer, postgres_server

from deepcrew_episodic import (
    ConfigurationError,
    Episode,
    EpisodicMemory,
    StorageError,
    StorageTimeoutError,
    StorageUnavailableError,
)
from deepcrew_episodic.providers import PostgresMemoryProvider, open_provider
from deepcrew_episodic.providers._postgres_schema import LATEST, lock_id

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


def _schema() -> str:
    return f"t_{uuid.uuid4().hex[:12]}"


@pytest.fixture
def schema(postgres_server_: PostgresServer) -> str:
    return _schema()


async def test_an_episode_or_grade_row_cannot_be_updated_in_the_schema(
    postgres_server_: PostgresServer, schema: str
) -> None:
    async with PostgresMemoryProvider(postgres_server_.url, schema=schema) as backend:
        memory = EpisodicMemory(backend, namespace="bot")
        stored = await memory.record(Episode(query="refund", response="done", outcome="success"))
        await memory.grade(stored.id, outcome="failure")
        keys = await backend.keys("episodic:bot:")
    with psycopg.connect(postgres_server_.url, autocommit=True) as conn:
        for key in [k for k in keys if ":e:" in k or ":g:" in k]:
            with pytest.raises(psycopg.errors.IntegrityConstraintViolation, match="append-only"):
                conn.execute(
                    f'UPDATE "{schema}".kv SET value = %s WHERE key = %s',
                    (b"rewritten", key.encode()),
                )
        # other keys (counters) are updated in place; an unchanged value is no rewrite
        conn.execute(f'UPDATE "{schema}".kv SET value = value')
        versions = conn.execute(f'SELECT version FROM "{schema}".schema_version').fetchall()
    assert versions == [(v,) for v in range(1, LATEST + 1)]


async def test_the_provider_refuses_to_rewrite_an_episode_too(
    postgres_server_: PostgresServer, schema: str
) -> None:
    async with PostgresMemoryProvider(postgres_server_.url, schema=schema) as backend:
        await backend.write({"episodic:bot:e:1": "first"})
        with pytest.raises(StorageError, match="append-only") as caught:
            await backend.write({"episodic:bot:e:1": "second"})
        assert caught.value.__cause__ is None or PASSWORD not in str(caught.value.__cause__)
        assert await backend.retrieve("episodic:bot:e:1") == "first"


def test_processes_opening_a_new_store_at_once_apply_each_migration_once(
    postgres_server_: PostgresServer, schema: str
) -> None:
    code = textwrap.dedent(
        """
        import sys, anyio
        from deepcrew_episodic.providers import PostgresMemoryProvider

        async def main():
            async with PostgresMemoryProvider(sys.argv[1], schema=sys.argv[2]) as p:
                await p.increment("opened")

        anyio.run(main)
        """
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code, postgres_server_.url, schema])
        for _ in range(6)
    ]
    assert [p.wait(120) for p in procs] == [0] * 6
    with psycopg.connect(postgres_server_.url) as conn:
        versions = conn.execute(f'SELECT version FROM "{schema}".schema_version').fetchall()
        opened = conn.execute(f"SELECT value FROM \"{schema}\".kv WHERE key = 'opened'").fetchone()
    assert versions == [(v,) for v in range(1, LATEST + 1)]
    assert opened == (b"6",)


async def test_a_schema_holding_another_applications_kv_table_is_left_alone(
    postgres_server_: PostgresServer, schema: str
) -> None:
    with psycopg.connect(postgres_server_.url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
        conn.execute(f'CREATE TABLE "{schema}".kv (id int)')
    async with PostgresMemoryProvider(postgres_server_.url, schema=schema) as backend:
        with pytest.raises(ConfigurationError, match="not a deepcrew-episodic store"):
            await backend.keys("")


async def test_a_store_of_a_newer_version_is_refused(
    postgres_server_: PostgresServer, schema: str
) -> None:
    async with PostgresMemoryProvider(postgres_server_.url, schema=schema) as backend:
        await backend.write({"a": "1"})
    with psycopg.connect(postgres_server_.url, autocommit=True) as conn:
        conn.execute(f'INSERT INTO "{schema}".schema_version (version) VALUES (%s)', (LATEST + 1,))
    async with PostgresMemoryProvider(postgres_server_.url, schema=schema) as backend:
        with pytest.raises(ConfigurationError, match="newer deepcrew-episodic"):
            await backend.keys("")


def test_open_provider_opens_postgresql_and_postgres_urls(
    postgres_server_: PostgresServer,
) -> None:
    for url in (postgres_server_.url, postgres_server_.url.replace("postgresql:", "postgres:")):
        backend = open_provider(url, schema=_schema())
        assert isinstance(backend, PostgresMemoryProvider)
        assert PASSWORD not in repr(backend)
        assert "***" in repr(backend)


@pytest.mark.parametrize(
    "dsn",
    [
        f"postgresql://postgres:{PASSWORD}@127.0.0.1:1/episodic",
        f"postgresql://postgres@127.0.0.1:1/episodic?password={PASSWORD}",
        f"host=127.0.0.1 port=1 user=postgres password={PASSWORD} dbname=episodic",
    ],
)
async def test_an_unreachable_server_is_unavailable_without_the_password(dsn: str) -> None:
    backend = PostgresMemoryProvider(dsn, timeout=2)
    assert PASSWORD not in repr(backend)
    try:
        with pytest.raises(StorageUnavailableError) as caught:
            await backend.keys("")
        assert PASSWORD not in str(caught.value)
        assert caught.value.__cause__ is None
    finally:
        await backend.aclose()


async def test_a_wrong_password_is_a_refused_connection_without_it(
    postgres_server_: PostgresServer,
) -> None:
    wrong = postgres_server_.url.replace(PASSWORD, "not-the-pw-42")
    async with PostgresMemoryProvider(wrong, timeout=3) as backend:
        with pytest.raises(StorageUnavailableError, match="password") as caught:
            await backend.keys("")
    assert "not-the-pw-42" not in str(caught.value)


def test_the_command_line_opens_a_postgres_store_and_never_prints_its_password(
    postgres_server_: PostgresServer, schema: str
) -> None:
    env_code = "import sys; from deepcrew_episodic.cli import main; sys.exit(main())"
    url = postgres_server_.url
    record = subprocess.run(
        [sys.executable, "-c", env_code, "--store", url, "-n", "bot", "record", "-q", "refund x"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert record.returncode == 0, record.stderr
    recall = subprocess.run(
        [sys.executable, "-c", env_code, "--store", url, "-n", "bot", "recall", "refund"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert recall.returncode == 0, recall.stderr
    assert "refund x" in recall.stdout
    unreachable = url.replace(str(postgres_server_.port), "1")
    bad = subprocess.run(
        [sys.executable, "-c", env_code, "--store", unreachable, "stats"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode != 0
    for done in (record, recall, bad):
        assert PASSWORD not in done.stdout + done.stderr


async def test_a_statement_timeout_is_a_storage_timeout_error_and_changes_nothing(
    postgres_server_: PostgresServer, schema: str
) -> None:
    async with PostgresMemoryProvider(
        postgres_server_.url, schema=schema, statement_timeout=0.2
    ) as backend:
        await backend.write({"k": "before"})
        with psycopg.connect(postgres_server_.url, autocommit=True) as other:
            # another writer holds the writers' lock past the timeout
            other.execute("SELECT pg_advisory_lock(%s)", (lock_id(schema),))
            with pytest.raises(StorageTimeoutError, match="timeout"):
                await backend.write({"k": "after"})
            other.execute("SELECT pg_advisory_unlock(%s)", (lock_id(schema),))
        assert await backend.retrieve("k") == "before"
        await backend.write({"k": "after"})
        assert await backend.retrieve("k") == "after"


async def test_a_connection_lost_during_a_write_is_unavailable_and_changes_nothing(
    postgres_server_: PostgresServer, schema: str
) -> None:
    application = f"app_{uuid.uuid4().hex[:8]}"
    url = f"{postgres_server_.url}?application_name={application}"
    async with PostgresMemoryProvider(url, schema=schema) as backend:
        await backend.write({"k": "before"})
        with psycopg.connect(postgres_server_.url, autocommit=True) as other:
            other.execute("SELECT pg_advisory_lock(%s)", (lock_id(schema),))
            async with anyio.create_task_group() as tg:

                async def write() -> None:
                    with pytest.raises(StorageUnavailableError, match="lost") as caught:
                        await backend.write({"k": "after"})
                    assert PASSWORD not in str(caught.value)

                tg.start_soon(write)
                for _ in range(200):  # until the write waits for the lock (10 s at most)
                    waiting = other.execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE application_name = %s AND wait_event_type = 'Lock'",
                        (application,),
                    ).fetchall()
                    if waiting:
                        break
                    await anyio.sleep(0.05)
                assert waiting == [(True,)]
            other.execute("SELECT pg_advisory_unlock(%s)", (lock_id(schema),))
        assert await backend.retrieve("k") == "before"  # and the next call reconnects


async def test_a_busy_pool_is_a_timeout_and_a_lock_past_lock_timeout_too(
    postgres_server_: PostgresServer, schema: str
) -> None:
    application = f"app_{uuid.uuid4().hex[:8]}"
    url = f"{postgres_server_.url}?application_name={application}"
    async with PostgresMemoryProvider(url, schema=schema, max_connections=1, timeout=1) as backend:
        await backend.write({"k": "v"})
        with psycopg.connect(postgres_server_.url, autocommit=True) as holder:
            holder.execute("SELECT pg_advisory_lock(%s)", (lock_id(schema),))
            async with anyio.create_task_group() as tg:
                # The one connection waits for the writers' lock; the next call for it.
                tg.start_soon(backend.write, {"k": "w"})
                for _ in range(200):  # until the write waits for the lock (10 s at most)
                    waiting = holder.execute(
                        "SELECT 1 FROM pg_stat_activity "
                        "WHERE application_name = %s AND wait_event_type = 'Lock'",
                        (application,),
                    ).fetchall()
                    if waiting:
                        break
                    await anyio.sleep(0.05)
                assert waiting
                with pytest.raises(StorageTimeoutError, match="no connection within 1 s"):
                    await backend.retrieve("k")
                holder.execute("SELECT pg_advisory_unlock(%s)", (lock_id(schema),))
        assert await backend.retrieve("k") == "w"
    waiting = f"{postgres_server_.url}?options=-c%20lock_timeout%3D200"
    async with PostgresMemoryProvider(waiting, schema=schema) as backend:
        with psycopg.connect(postgres_server_.url, autocommit=True) as holder:
            holder.execute("SELECT pg_advisory_lock(%s)", (lock_id(schema),))
            with pytest.raises(StorageTimeoutError, match="lock_timeout"):
                await backend.write({"k": "x"})
            holder.execute("SELECT pg_advisory_unlock(%s)", (lock_id(schema),))
        assert await backend.retrieve("k") == "w"


async def test_an_applications_transaction_and_a_write_of_the_librarys_never_deadlock(
    postgres_server_: PostgresServer, schema: str
) -> None:
    # The application changes x, the library writes y, then the application changes y: the
    # library's write waits for the application's transaction (the store's revision row is
    # the first lock either takes), instead of holding y while it waits.
    table = f'"{schema}".kv'
    async with PostgresMemoryProvider(postgres_server_.url, schema=schema) as backend:
        await backend.write({"x": "0", "y": "0"})
        with psycopg.connect(postgres_server_.url) as app:
            app.execute(f"UPDATE {table} SET value = 'app' WHERE key = 'x'")
            async with anyio.create_task_group() as tg:
                tg.start_soon(backend.write, {"y": "library"})
                await anyio.sleep(0.3)
                await anyio.to_thread.run_sync(
                    app.execute, f"UPDATE {table} SET value = 'app' WHERE key = 'y'"
                )
                app.commit()
        assert await backend.retrieve_many(["x", "y"]) == ["app", "library"]


async def test_a_memory_that_stays_up_follows_a_store_restored_from_a_backup(
    postgres_server_: PostgresServer, schema: str
) -> None:
    # A restore brings back the store's revision as it was at the backup; every revision
    # after it must still differ from any a process kept something for.
    tables = ["kv", "ix_pending", "ix_episode", "ix_term", "ix_count", "ix_grade", "ix_revision"]
    url = f"{postgres_server_.url}?schema={schema}"
    async with open_provider(url) as backend, open_provider(url) as other:
        memory = EpisodicMemory(backend, namespace="bot")
        for query in ("refund the order", "refund twice"):
            await memory.record(Episode(query=query, response="done"))
        with psycopg.connect(postgres_server_.url, autocommit=True) as conn:
            for table in tables:
                conn.execute(f'CREATE TABLE "{schema}".bk_{table} AS TABLE "{schema}".{table}')
        await memory.record(Episode(query="refund the lost order", response="done"))
        for _ in range(2):
            assert (await memory.recall("refund lost order"))[0].query == "refund the lost order"
        with psycopg.connect(postgres_server_.url, autocommit=True) as conn:
            # As pg_restore loads data: before any trigger of the schema exists.
            conn.execute("SET session_replication_role = replica")
            for table in tables:
                conn.execute(f'TRUNCATE "{schema}".{table}')
                conn.execute(f'INSERT INTO "{schema}".{table} TABLE "{schema}".bk_{table}')
        writer = EpisodicMemory(other, namespace="bot")
        await writer.record(Episode(query="refund the duplicate order", response="done"))
        fresh = EpisodicMemory(other, namespace="bot")
        for _ in range(3):
            expected = [s.episode.query for s in await fresh.explain("refund order", top_k=5)]
            assert "refund the lost order" not in expected
            assert [s.episode.query for s in await memory.explain("refund order", top_k=5)] == (
                expected
            )
            await other.write({"unrelated": "x"})  # (more revisions after the restore)


@pytest.fixture
def own_server() -> Iterator[PostgresServer]:
    """A server of the test's own, to restart."""
    with postgres_server() as server:
        yield server


async def test_a_server_restart_loses_nothing_and_the_next_call_reconnects(
    own_server: PostgresServer,
) -> None:
    async with PostgresMemoryProvider(own_server.url, schema="restart", timeout=5) as backend:
        memory = EpisodicMemory(backend, namespace="bot")
        for i in range(5):
            await memory.record(Episode(query=f"refund {i}", response="done"))
        own_server.restart()  # a failover, as the client sees one: every connection is cut
        await memory.record(Episode(query="refund after", response="done"))
        own_server.stop()
        with pytest.raises(StorageUnavailableError):
            await memory.record(Episode(query="refund while down", response="done"))
        own_server.start()
        fresh = EpisodicMemory(backend, namespace="bot")
        found = {e.query for e in await fresh.load()}
    assert {f"refund {i}" for i in range(5)} | {"refund after"} <= found


async def test_a_server_that_cannot_be_reached_fails_the_first_call_at_once_with_its_reason(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from redis_server import free_port

    url = f"postgresql://writer:{PASSWORD}@127.0.0.1:{free_port()}/db"
    async with PostgresMemoryProvider(url, timeout=20) as backend:
        with anyio.fail_after(10):  # well inside the 20 s a pool would wait for a connection
            for _ in range(2):  # and the next call tries again, as directly
                with pytest.raises(StorageUnavailableError, match="could not be reached") as caught:
                    await backend.retrieve("k")
                message = str(caught.value)
                assert "refused" in message
                assert PASSWORD not in message
                assert "\n" not in message
        logged = len(caplog.records)
        # No pool is left retrying in the background (its first retry comes after about a
        # second): nothing more is logged.
        await anyio.sleep(2.5)
        assert len(caplog.records) == logged


def _connections(server: PostgresServer, application: str) -> int:
    with psycopg.connect(server.url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (application,)
        ).fetchone()
    assert row is not None
    return int(row[0])


async def test_the_first_call_opens_one_connection_and_busy_calls_later_open_more(
    postgres_server_: PostgresServer, schema: str
) -> None:
    # A second connection made while the first call waits would cost a fresh process's first
    # call the server's fork of a backend; but the pool must still grow when calls queue.
    application = f"app_{uuid.uuid4().hex[:8]}"
    url = f"{postgres_server_.url}?application_name={application}"
    async with PostgresMemoryProvider(url, schema=schema, max_connections=3) as backend:
        assert await backend.retrieve("k") is None
        await anyio.sleep(0.5)  # (a pool that grows does so in the background)
        assert _connections(postgres_server_, application) == 1
        with psycopg.connect(postgres_server_.url, autocommit=True) as holder:
            # Every write takes the writers' lock first: while it is held, writes queue up
            # holding their connections, and the pool grows to its limit.
            holder.execute("SELECT pg_advisory_lock(%s)", (lock_id(schema),))
            async with anyio.create_task_group() as tg:
                for i in range(5):
                    tg.start_soon(backend.write, {f"k{i}": "v"})
                for _ in range(200):  # (the server's view of them, polled: 10 s at most)
                    if _connections(postgres_server_, application) == 3:
                        break
                    await anyio.sleep(0.05)
                grown = _connections(postgres_server_, application)
                holder.execute("SELECT pg_advisory_unlock(%s)", (lock_id(schema),))
        assert grown == 3
        assert await backend.retrieve_many([f"k{i}" for i in range(5)]) == ["v"] * 5


async def test_a_url_names_its_schema_and_libpq_never_sees_the_parameter(
    postgres_server_: PostgresServer, schema: str
) -> None:
    async with open_provider(f"{postgres_server_.url}?schema={schema}") as backend:
        assert isinstance(backend, PostgresMemoryProvider)
        assert backend.schema == schema
        await backend.write({"k": "v"})
    with psycopg.connect(postgres_server_.url) as conn:
        assert conn.execute(f'SELECT count(*) FROM "{schema}".kv').fetchone() == (1,)
    with pytest.raises(ConfigurationError, match="not both"):
        open_provider(f"{postgres_server_.url}?schema={schema}", schema="other")


def test_a_dsn_that_does_not_parse_is_a_configuration_error_without_the_password() -> None:
    with pytest.raises(ConfigurationError, match="invalid PostgreSQL DSN") as caught:
        PostgresMemoryProvider(f"host=127.0.0.1 password={PASSWORD} port")
    assert PASSWORD not in str(caught.value)


def test_the_postgres_example_keeps_every_episode_from_four_processes(
    postgres_server_: PostgresServer,
) -> None:
    from test_examples import run_example

    out = run_example("postgres_store.py", env={"DATABASE_URL": postgres_server_.url})
    assert "200 episodes from 4 processes (200 recorded)" in out
    block = out.split("## Relevant past experience", 1)[1]
    recalled = [line for line in block.splitlines() if line.startswith("- ")]
    assert len(recalled) == 2
    assert all("Refund a double charge" in line for line in recalled)
    assert PASSWORD not in out
    with psycopg.connect(postgres_server_.url, autocommit=True) as conn:
        (left,) = conn.execute(
            "SELECT count(*) FROM episodic_example.kv WHERE key LIKE 'episodic:example-%:e:%'"
        ).fetchone()
    assert left == 0  # the example's namespace is gone


async def test_a_store_of_the_first_schema_is_upgraded_in_place_and_keeps_its_records(
    postgres_server_: PostgresServer, schema: str
) -> None:
    """A store of the first schema, holding a log, gains what later migrations add (records
    keep their keys) on its first open by this version, and recalls what it held."""
    from deepcrew_episodic.providers._postgres_schema import MIGRATIONS

    source = _schema()
    async with PostgresMemoryProvider(postgres_server_.url, schema=source) as backend:
        memory = EpisodicMemory(backend, namespace="bot")
        stored = [
            await memory.record(Episode(query=f"rotate the key {i}", response="done"))
            for i in range(3)
        ]
    quoted = f'"{schema}"'
    with psycopg.connect(postgres_server_.url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {quoted}")
        conn.execute(
            f"CREATE TABLE {quoted}.schema_version (version integer PRIMARY KEY, "
            f"applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for statement in MIGRATIONS[0]:
            conn.execute(statement.replace("{s}", quoted))
        conn.execute(f"INSERT INTO {quoted}.schema_version (version) VALUES (1)")
        # The log as the first schema's triggers take it in (queued, then indexed).
        conn.execute(f'INSERT INTO {quoted}.kv SELECT key, value FROM "{source}".kv')
    async with PostgresMemoryProvider(postgres_server_.url, schema=schema) as backend:
        fresh = EpisodicMemory(backend, namespace="bot")
        found = await fresh.recall("rotate key", top_k=5)
        assert not fresh._log.synced
        added = await fresh.record(Episode(query="rotate the key again", response="done"))
    assert sorted(e.id for e in found) == sorted(e.id for e in stored)
    with psycopg.connect(postgres_server_.url, autocommit=True) as conn:
        versions = conn.execute(f"SELECT version FROM {quoted}.schema_version").fetchall()
        with pytest.raises(psycopg.errors.IntegrityConstraintViolation, match="never renamed"):
            conn.execute(
                f"UPDATE {quoted}.kv SET key = %s WHERE key = %s",
                (b"episodic:bot:moved", b"episodic:bot:e:1"),
            )
    assert versions == [(v,) for v in range(1, LATEST + 1)]
    async with PostgresMemoryProvider(postgres_server_.url, schema=schema) as backend:
        assert (
            len(await EpisodicMemory(backend, namespace="bot").recall("rotate key", top_k=10)) == 4
        )
    assert added.id not in {e.id for e in stored}
