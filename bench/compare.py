"""deepcrew-episodic next to deepcrew-ai 0.6.1: the same workloads, one run, one table.

Measures, for each provider and log size (100, 1,000, 10,000, 100,000 episodes):

* record latency: p50 / p90 of ``record()`` on a full ring (``max_episodes`` = size, so every
  record also evicts the oldest episode), realistic episodes of about 600 bytes of JSON;
* recall latency: p50 / p90 of ``recall()`` on a long-lived memory object (an agent process
  recalling before each run) and, for this library, the first recall of a fresh process
  (provider and memory opened anew: everything is read and indexed once);
* episodes kept under concurrency: 500 concurrent ``record()`` calls in one process on every
  provider, and 4 processes x 200 concurrent records on the shared providers;
* import time: ``import deepcrew_episodic`` and ``from deepcrew_episodic import EpisodicMemory,
  Episode`` against ``import deepcrew``, medians over fresh interpreters, over a bare one.

Logs are filled in their stored form (the exact keys and JSON that recording would leave) so
that 100,000 episodes take seconds, not the hours the ancestor's file provider would need. A
measurement stops after ``--budget`` seconds (at least one sample); an operation slower than
``--cap`` seconds is reported as skipped. Redis runs on a redis-server this script starts on a
free loopback port (or ``--redis-url``; only keys under a per-run prefix are touched).

    # the ancestor, in the same environment
    pip install deepcrew-ai==0.6.1
    LITELLM_LOCAL_MODEL_COST_MAP=True python bench/compare.py             # full run, ~15 min
    LITELLM_LOCAL_MODEL_COST_MAP=True python bench/compare.py --quick     # ~1 min
    python bench/compare.py --providers sqlite --sizes 100000 --no-ancestor --no-concurrency
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime as dt
import gc
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _redis import redis_server

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

OURS, ANCESTOR = "deepcrew-episodic", "deepcrew-ai 0.6.1"
ALL_PROVIDERS = ["dict", "file", "redis", "sqlite"]
ANCESTOR_PROVIDERS = {"dict", "file", "redis"}
SHARED = ["file", "redis", "sqlite"]  # providers several processes can share
ALL_SIZES = [100, 1_000, 10_000, 100_000]

# --- realistic episodes -----------------------------------------------------------------------

TOPICS = [
    ("refund a duplicate charge on order", ["billing"], ["orders_api", "payments"]),
    ("rotate the API key of the reporting service", ["security"], ["vault", "deploy"]),
    ("deploy the checkout service to staging", ["devops"], ["ci", "kubectl"]),
    ("reset the password and 2FA of account", ["accounts"], ["admin_console"]),
    ("export last quarter's invoices as CSV for", ["billing", "export"], ["reports_api"]),
    ("investigate 502 errors on the search endpoint for", ["incident"], ["logs", "metrics"]),
    ("migrate the customer table to the new schema for", ["database"], ["psql", "migrations"]),
    ("summarise the support tickets opened by", ["support"], ["helpdesk_api"]),
    ("cancel the subscription and prorate the refund of", ["billing"], ["payments"]),
    ("update the shipping address on order", ["orders"], ["orders_api"]),
]
NAMES = ["acme", "globex", "initech", "umbrella", "hooli", "stark", "wayne", "tyrell", "wonka"]
OUTCOMES = ["success", "success", "success", "partial", "failure"]
# Episodes are 7 minutes apart and the newest of 100,000 is recorded about now (never in the
# future, which record() refuses).
START = dt.datetime.now(dt.UTC).replace(microsecond=0) - dt.timedelta(minutes=7 * 100_000)


def episode_fields(i: int) -> dict[str, Any]:
    """Episode *i*'s fields, the same for both libraries (about 600 bytes as JSON)."""
    rng = random.Random(i)
    topic, tags, tools = TOPICS[i % len(TOPICS)]
    name = NAMES[rng.randrange(len(NAMES))]
    outcome = OUTCOMES[rng.randrange(len(OUTCOMES))]
    query = f"Please {topic} {name}-{rng.randrange(10_000):04d} (ticket #{100_000 + i})"
    response = (
        f"Looked up {name}'s record with {tools[0]}, checked the recent history and the audit "
        f"log, then applied the change. Verified the result end to end and wrote a short note "
        f"on ticket #{100_000 + i} for the account owner; {rng.randrange(2, 9)} steps, "
        f"{rng.randrange(3, 40)} seconds. Nothing else needed attention."
    )
    reflection = (
        f"For '{topic}' requests check {tools[-1]} first; it saves a round of questions."
        if i % 2
        else None
    )
    return {
        "query": query,
        "response": response,
        "outcome": outcome,
        "score": round(rng.uniform(0.3, 1.0), 2) if outcome != "failure" else 0.1,
        "tools_used": list(tools),
        "reflection": reflection,
        "tags": list(tags),
        # i can be 1,000,000 and more (the process workers): wrap, to stay in the past.
        "timestamp": (START + dt.timedelta(minutes=7 * (i % 100_000))).strftime(
            "%Y-%m-%dT%H:%M:%SZ"
        ),
        "agent_id": "support-agent",
    }


def recall_query(i: int) -> str:
    topic, _, _ = TOPICS[(i * 7) % len(TOPICS)]
    return f"how do I {topic} {NAMES[i % len(NAMES)]} quickly?"


# --- measuring --------------------------------------------------------------------------------


@dataclass
class Cell:
    """One measured figure: samples in milliseconds, or why there are none."""

    ms: list[float] = field(default_factory=list)
    note: str = ""

    def p(self, q: float) -> float:
        ordered = sorted(self.ms)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    @property
    def p50(self) -> float | None:
        return statistics.median(self.ms) if self.ms and not self.note else None

    def show(self, p90: bool = True, want: int = 0) -> str:
        if self.note:
            return self.note
        if not self.ms:
            return "n/a"
        text = fmt(statistics.median(self.ms))
        if p90 and len(self.ms) >= 10:
            text += f" / {fmt(self.p(0.9))}"
        if want and len(self.ms) < want:
            text += f" (n={len(self.ms)})"
        return text


def fmt(ms: float) -> str:
    if ms >= 1000:
        return f"{ms / 1000:.2f} s"
    if ms >= 100:
        return f"{ms:.0f}"
    if ms >= 10:
        return f"{ms:.1f}"
    return f"{ms:.2f}"


async def sample(
    op: Callable[[int], Awaitable[object]], want: int, budget: float, cap: float
) -> Cell:
    """Time ``op(i)`` up to *want* times within *budget* seconds; skip if one call > *cap*."""
    cell = Cell()
    began = time.perf_counter()
    for i in range(want):
        start = time.perf_counter()
        await op(i)
        took = time.perf_counter() - start
        cell.ms.append(took * 1000)
        if took > cap:
            cell.note = f"skipped: one call took {took:.0f} s"
            break
        if time.perf_counter() - began > budget:
            break
    return cell


# --- the two libraries behind one interface ---------------------------------------------------


@dataclass
class Env:
    workdir: Path
    redis_url: str
    prefix: str  # every redis key of this run starts with it


class Library:
    name: str
    providers: frozenset[str]

    async def open(self, kind: str, env: Env, tag: str) -> Any: ...
    def memory(self, provider: Any, namespace: str, size: int) -> Any: ...
    async def fill(self, kind: str, env: Env, tag: str, namespace: str, size: int) -> None: ...
    def episode(self, i: int) -> Any: ...
    async def close(self, provider: Any) -> None: ...
    def forget_dicts(self) -> None: ...


class Ours(Library):
    name = OURS
    providers = frozenset(ALL_PROVIDERS)

    def __init__(self) -> None:
        from deepcrew_episodic import Episode, EpisodicMemory
        from deepcrew_episodic.providers import (
            FileMemoryProvider,
            InMemoryProvider,
            RedisMemoryProvider,
            SQLiteMemoryProvider,
        )

        self.Episode, self.EpisodicMemory = Episode, EpisodicMemory
        self.kinds: dict[str, Callable[[Env, str], Any]] = {
            "dict": lambda env, tag: InMemoryProvider(),
            "file": lambda env, tag: FileMemoryProvider(env.workdir / f"{tag}.json"),
            "sqlite": lambda env, tag: SQLiteMemoryProvider(env.workdir / f"{tag}.db"),
            "redis": lambda env, tag: RedisMemoryProvider(env.redis_url, prefix=env.prefix),
        }
        self._dicts: dict[str, Any] = {}  # a dict "store" lives as long as its provider

    async def open(self, kind: str, env: Env, tag: str) -> Any:
        if kind == "dict":
            return self._dicts.setdefault(tag, self.kinds["dict"](env, tag))
        return self.kinds[kind](env, tag)

    def memory(self, provider: Any, namespace: str, size: int) -> Any:
        return self.EpisodicMemory(provider, namespace=namespace, max_episodes=size)

    def episode(self, i: int) -> Any:
        return self.Episode(**episode_fields(i))

    async def fill(self, kind: str, env: Env, tag: str, namespace: str, size: int) -> None:
        from deepcrew_episodic._log import EpisodeLog

        provider = await self.open(kind, env, tag)
        log = EpisodeLog(provider, namespace, size)
        items = {
            log.entry_key(seq, None): self.Episode(
                **episode_fields(seq), id=uuid.UUID(int=seq).hex
            ).to_json()
            for seq in range(1, size + 1)
        }
        items[log.seq_key] = str(size)
        keys = list(items)
        step = 5000 if kind == "redis" else len(keys)  # one file replace, one transaction
        for start in range(0, len(keys), step):
            await provider.write({k: items[k] for k in keys[start : start + step]})
        if kind != "dict":
            await provider.aclose()

    async def close(self, provider: Any) -> None:
        await provider.aclose()

    def forget_dicts(self) -> None:
        self._dicts.clear()


class Ancestor(Library):
    name = ANCESTOR
    providers = frozenset(ANCESTOR_PROVIDERS)

    def __init__(self) -> None:
        import deepcrew
        from deepcrew.memory.redis_provider import RedisMemoryProvider

        self.dc = deepcrew
        self.Redis = RedisMemoryProvider
        self._dicts: dict[str, Any] = {}

    async def open(self, kind: str, env: Env, tag: str) -> Any:
        if kind == "dict":
            return self._dicts.setdefault(tag, self.dc.InMemoryProvider())
        if kind == "file":
            return self.dc.FileMemoryProvider(env.workdir / f"{tag}.json")
        return self.Redis(env.redis_url, prefix=env.prefix)

    def memory(self, provider: Any, namespace: str, size: int) -> Any:
        return self.dc.EpisodicMemory(provider, namespace=namespace, max_episodes=size)

    def episode(self, i: int) -> Any:
        return self.dc.Episode(**episode_fields(i))

    async def fill(self, kind: str, env: Env, tag: str, namespace: str, size: int) -> None:
        # deepcrew-ai's layout: slots 0..size-1 and a full ring index.
        items = {
            f"episodic:{namespace}:{slot}": json.dumps(
                dataclasses.asdict(self.dc.Episode(**episode_fields(slot + 1)))
            )
            for slot in range(size)
        }
        items[f"episodic:{namespace}:__meta__"] = json.dumps({"count": size, "next": 0})
        if kind == "file":  # its file format: one JSON object of strings
            (env.workdir / f"{tag}.json").write_text(json.dumps(items))
        elif kind == "dict":
            provider = await self.open(kind, env, tag)
            for key, value in items.items():
                await provider.store(key, value)
        else:
            import redis

            client = redis.Redis.from_url(env.redis_url)
            keys = list(items)
            for start in range(0, len(keys), 5000):
                client.mset({env.prefix + k: items[k] for k in keys[start : start + 5000]})
            client.close()

    async def close(self, provider: Any) -> None:
        close = getattr(provider, "aclose", None)
        if close is not None:
            await close()

    def forget_dicts(self) -> None:
        self._dicts.clear()


# --- workloads --------------------------------------------------------------------------------


@dataclass
class Latency:
    record: Cell
    recall: Cell
    first_recall: Cell


async def latency(
    lib: Library, kind: str, size: int, env: Env, args: argparse.Namespace
) -> Latency:
    tag, namespace = f"{type(lib).__name__.lower()}-{kind}-{size}", "bench"
    await lib.fill(kind, env, tag, namespace, size)
    first = Cell()
    if isinstance(lib, Ours):

        async def first_recall(i: int) -> None:
            provider = await lib.open(kind, env, tag)
            try:
                await lib.memory(provider, namespace, size).recall(recall_query(i))
            finally:
                if kind != "dict":
                    await lib.close(provider)

        first = await sample(first_recall, args.first_samples, args.budget, args.cap)
    provider = await lib.open(kind, env, tag)
    memory = lib.memory(provider, namespace, size)
    try:
        if isinstance(lib, Ours):  # a long-lived process has read the log once
            await memory.recall(recall_query(0))
        recall = await sample(
            lambda i: memory.recall(recall_query(i + 1)), args.samples, args.budget, args.cap
        )
        record = await sample(
            lambda i: memory.record(lib.episode(size + 1 + i)), args.samples, args.budget, args.cap
        )
    finally:
        await lib.close(provider)
    return Latency(record, recall, first)


async def concurrent_in_process(lib: Library, kind: str, env: Env, count: int) -> str:
    """Record *count* episodes concurrently into an empty log; say how many are kept."""
    tag = f"{type(lib).__name__.lower()}-conc-{kind}"
    provider = await lib.open(kind, env, tag)
    memory = lib.memory(provider, "conc", 10 * count)
    try:
        outcomes = await asyncio.gather(
            *(memory.record(lib.episode(i)) for i in range(count)), return_exceptions=True
        )
        kept = await lib.memory(provider, "conc", 10 * count).load()
    finally:
        await lib.close(provider)
    failed = [o for o in outcomes if isinstance(o, BaseException)]
    text = f"{len({e.query for e in kept})} of {count}"
    if failed:
        causes = sorted({type(f.__cause__ or f).__name__ for f in failed})
        text += f" ({len(failed)} calls raised: {', '.join(causes)})"
    return text


async def concurrent_processes(lib: Library, kind: str, env: Env, procs: int, each: int) -> str:
    """*procs* processes each record *each* episodes concurrently, started together."""
    tag = f"{type(lib).__name__.lower()}-procs-{kind}"
    lib_arg = "ours" if isinstance(lib, Ours) else "ancestor"
    size = 10 * procs * each
    spec = [lib_arg, kind, str(env.workdir), env.redis_url, env.prefix, tag]
    children = [
        subprocess.Popen(
            [sys.executable, __file__, "--worker", json.dumps([*spec, p, each, size])],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for p in range(procs)
    ]
    for child in children:  # every worker has imported and opened its store
        assert child.stdout is not None
        line = await asyncio.to_thread(child.stdout.readline)
        if line.strip() != b"ready":
            raise RuntimeError(
                f"worker failed: {child.stderr.read().decode() if child.stderr else ''}"
            )
    for child in children:  # then all start writing at once
        assert child.stdin is not None
        child.stdin.write(b"go\n")
        child.stdin.flush()
    failed, causes = 0, set()
    for child in children:
        report, err = await asyncio.to_thread(child.communicate)
        if child.returncode != 0:
            raise RuntimeError(f"worker failed: {err.decode()[-2000:]}")
        outcome = json.loads(report.decode().strip().splitlines()[-1])
        failed += outcome["failed"]
        causes.update(outcome["causes"])
    provider = await lib.open(kind, env, tag)
    try:
        kept = await lib.memory(provider, "procs", size).load()
    finally:
        await lib.close(provider)
    text = f"{len({e.query for e in kept})} of {procs * each}"
    if failed:
        text += f" ({failed} calls raised: {', '.join(sorted(causes))})"
    return text


async def worker(spec: str) -> None:
    lib_arg, kind, workdir, redis_url, prefix, tag, p, each, size = json.loads(spec)
    lib: Library = Ours() if lib_arg == "ours" else Ancestor()
    env = Env(Path(workdir), redis_url, prefix)
    provider = await lib.open(kind, env, tag)
    memory = lib.memory(provider, "procs", size)
    print("ready", flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    base = 1_000_000 * (p + 1)
    outcomes = await asyncio.gather(
        *(memory.record(lib.episode(base + i)) for i in range(each)), return_exceptions=True
    )
    await lib.close(provider)
    failed = [o for o in outcomes if isinstance(o, BaseException)]
    causes = sorted({type(f.__cause__ or f).__name__ for f in failed})
    print(json.dumps({"failed": len(failed), "causes": causes}), flush=True)


def import_times(runs: int) -> dict[str, tuple[list[float], list[float]]]:
    """Wall and CPU (user + system) milliseconds of fresh interpreters running each statement,
    interleaved. CPU time is the steadier figure on a machine shared with other work."""
    statements = {
        "python -c pass (bare interpreter)": "pass",
        "import deepcrew_episodic": "import deepcrew_episodic",
        "from deepcrew_episodic import EpisodicMemory, Episode": (
            "from deepcrew_episodic import EpisodicMemory, Episode"
        ),
        "import deepcrew (deepcrew-ai 0.6.1)": "import deepcrew",
    }
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    times: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in statements}
    for code in statements.values():  # write bytecode, warm the page cache
        subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True)
    for _ in range(runs):
        for name, code in statements.items():
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True)
            wall = (time.perf_counter() - start) * 1000
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000
            times[name][0].append(wall)
            times[name][1].append(cpu)
    return times


# --- redis ------------------------------------------------------------------------------------


def clear_redis(env: Env) -> None:
    import redis

    client = redis.Redis.from_url(env.redis_url)
    batch = list(client.scan_iter(match=env.prefix + "*", count=5000))
    for start in range(0, len(batch), 5000):
        client.unlink(*batch[start : start + 5000])
    client.close()


# --- the run ----------------------------------------------------------------------------------


def ratio(ancestor: Cell | None, ours: Cell) -> str:
    if ancestor is None or ancestor.p50 is None or ours.p50 is None or ours.p50 == 0:
        return "—"
    times = ancestor.p50 / ours.p50
    return f"x{times:,.0f}" if times >= 10 else f"x{times:.1f}"


async def run(args: argparse.Namespace) -> str:
    libs: list[Library] = [Ours()]
    if args.ancestor:
        try:
            libs.append(Ancestor())
        except ImportError:
            raise SystemExit(
                "deepcrew-ai is not installed: pip install deepcrew-ai==0.6.1 (or --no-ancestor)"
            ) from None
    out: list[str] = []

    def emit(line: str = "") -> None:
        out.append(line)
        print(line, flush=True)

    workdir = Path(tempfile.mkdtemp(prefix="bench-compare-"))
    uses_redis = "redis" in args.providers
    with redis_server(args.redis_url if uses_redis else "unused") as url:
        env = Env(workdir, url, f"bench-{uuid.uuid4().hex[:8]}:")
        try:
            results: dict[tuple[str, str, int], Latency] = {}
            for size in args.sizes:
                for kind in args.providers:
                    for lib in libs:
                        if kind not in lib.providers:
                            continue
                        began = time.perf_counter()
                        results[lib.name, kind, size] = await latency(lib, kind, size, env, args)
                        lib.forget_dicts()
                        if kind == "redis":
                            clear_redis(env)
                        gc.collect()
                        r = results[lib.name, kind, size]
                        print(
                            f"# {lib.name:18} {kind:6} {size:>7,}: record {r.record.show()}, "
                            f"recall {r.recall.show()}, first recall {r.first_recall.show()} "
                            f"({time.perf_counter() - began:.0f} s)",
                            file=sys.stderr,
                            flush=True,
                        )
            emit(latency_tables(results, args, [lib.name for lib in libs]))
            if args.concurrency:
                emit(await concurrency_table(libs, env, args))
        finally:
            if uses_redis:
                clear_redis(env)
            shutil.rmtree(workdir, ignore_errors=True)
    if args.imports:
        emit(imports_table(import_times(args.import_runs), args.import_runs))
    return "\n".join(out)


def latency_tables(
    results: dict[tuple[str, str, int], Latency], args: argparse.Namespace, libs: list[str]
) -> str:
    both = ANCESTOR in libs
    lines = ["### Record: p50 / p90 in ms (one `record()` on a full ring of N episodes)", ""]
    head = ["episodes", "provider", OURS] + ([ANCESTOR, "ancestor / ours (p50)"] if both else [])
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for size in args.sizes:
        for kind in args.providers:
            ours = results[OURS, kind, size]
            row = [f"{size:,}", kind, ours.record.show(want=args.samples)]
            if both:
                anc = results.get((ANCESTOR, kind, size))
                row += [
                    anc.record.show(want=args.samples) if anc else "n/a (no such provider)",
                    ratio(anc.record if anc else None, ours.record),
                ]
            lines.append("| " + " | ".join(row) + " |")
    lines += [
        "",
        "### Recall: p50 / p90 in ms (`recall()` over N episodes)",
        "",
        "Long-lived process: the memory object has read the log before (an agent recalling "
        "before each run). First recall: a fresh process opens the store and recalls once "
        "(this library reads and indexes the whole log then; deepcrew-ai has no cache, so "
        "every recall of it is a first recall).",
        "",
    ]
    head = ["episodes", "provider", f"{OURS} long-lived", f"{OURS} first recall"] + (
        [ANCESTOR, "ancestor / ours long-lived (p50)"] if both else []
    )
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for size in args.sizes:
        for kind in args.providers:
            ours = results[OURS, kind, size]
            row = [
                f"{size:,}",
                kind,
                ours.recall.show(want=args.samples),
                ours.first_recall.show(p90=False, want=args.first_samples),
            ]
            if both:
                anc = results.get((ANCESTOR, kind, size))
                row += [
                    anc.recall.show(want=args.samples) if anc else "n/a (no such provider)",
                    ratio(anc.recall if anc else None, ours.recall),
                ]
            lines.append("| " + " | ".join(row) + " |")
    lines += ["", "Targets (p50):"]
    checks = [
        (
            "recall over 1,000 episodes on redis <= 3 ms (issue 2)",
            (OURS, "redis", 1000),
            "recall",
            3.0,
        ),
        ("record at 1,000 episodes on file <= 3 ms (issue 2)", (OURS, "file", 1000), "record", 3.0),
        (
            "record at 100,000 episodes on sqlite <= 1 ms (issue 7)",
            (OURS, "sqlite", 100_000),
            "record",
            1.0,
        ),
    ]
    for text, key, what, limit in checks:
        if key in results:
            p50 = getattr(results[key], what).p50
            verdict = (
                "not measured"
                if p50 is None
                else (f"{fmt(p50)} ms: {'met' if p50 <= limit else 'MISSED'}")
            )
            lines.append(f"- {text}: {verdict}")
    return "\n".join(lines) + "\n"


async def concurrency_table(libs: list[Library], env: Env, args: argparse.Namespace) -> str:
    both = len(libs) > 1
    head = ["workload", "provider", OURS] + ([ANCESTOR] if both else [])
    lines = [
        "### Episodes kept under concurrency (all should be kept)",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    count = args.concurrent
    for kind in args.providers:
        row = [f"{count} concurrent `record()` in one process", kind]
        for lib in libs:
            if kind in lib.providers:
                row.append(await concurrent_in_process(lib, kind, env, count))
                lib.forget_dicts()
            else:
                row.append("n/a")
            if kind == "redis":
                clear_redis(env)
        lines.append("| " + " | ".join(row) + " |")
    procs, each = args.procs, args.per_proc
    for kind in [k for k in args.providers if k in SHARED]:
        row = [f"{procs} processes x {each} concurrent `record()`", kind]
        for lib in libs:
            if kind in lib.providers:
                row.append(await concurrent_processes(lib, kind, env, procs, each))
            else:
                row.append("n/a")
            if kind == "redis":
                clear_redis(env)
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def imports_table(times: dict[str, tuple[list[float], list[float]]], runs: int) -> str:
    bare_wall, bare_cpu = (statistics.median(m) for m in times["python -c pass (bare interpreter)"])
    lines = [
        f"### Import time: medians of {runs} fresh interpreters, in ms",
        "",
        "| statement | wall | wall over a bare interpreter | CPU | CPU over a bare interpreter |",
        "|---|---|---|---|---|",
    ]
    over: dict[str, float] = {}
    for name, (wall, cpu) in times.items():
        w, c = statistics.median(wall), statistics.median(cpu)
        if name.startswith("python"):
            lines.append(f"| `{name}` | {fmt(w)} | | {fmt(c)} | |")
            continue
        over[name] = c - bare_cpu
        lines.append(
            f"| `{name}` | {fmt(w)} | {fmt(w - bare_wall)} | {fmt(c)} | {fmt(c - bare_cpu)} |"
        )
    ours = over.get("import deepcrew_episodic", 0.0)
    ancestor = over.get("import deepcrew (deepcrew-ai 0.6.1)")
    if ancestor and ours > 0:
        lines += [
            "",
            f"`import deepcrew` costs x{ancestor / ours:,.0f} the CPU time of "
            f"`import deepcrew_episodic` over a bare interpreter.",
        ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--providers", default=",".join(ALL_PROVIDERS))
    parser.add_argument("--sizes", default=",".join(map(str, ALL_SIZES)))
    parser.add_argument("--samples", type=int, default=200, help="latency samples per cell")
    parser.add_argument("--first-samples", type=int, default=3, help="fresh-process recalls")
    parser.add_argument("--budget", type=float, default=12.0, help="seconds per cell at most")
    parser.add_argument("--cap", type=float, default=60.0, help="skip ops slower than this (s)")
    parser.add_argument("--concurrent", type=int, default=500)
    parser.add_argument("--procs", type=int, default=4)
    parser.add_argument("--per-proc", type=int, default=200)
    parser.add_argument("--import-runs", type=int, default=9)
    parser.add_argument("--redis-url", default=None, help="use this server, not a fresh one")
    parser.add_argument("--no-ancestor", dest="ancestor", action="store_false")
    parser.add_argument("--no-concurrency", dest="concurrency", action="store_false")
    parser.add_argument("--no-imports", dest="imports", action="store_false")
    parser.add_argument("--quick", action="store_true", help="100 and 1,000 episodes, fewer runs")
    parser.add_argument("--out", type=Path, default=None, help="also write the tables here")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        asyncio.run(worker(args.worker))
        return
    args.providers = [p for p in args.providers.split(",") if p]
    unknown = set(args.providers) - set(ALL_PROVIDERS)
    if unknown:
        parser.error(f"unknown providers {sorted(unknown)}; pick from {ALL_PROVIDERS}")
    args.sizes = [int(s.replace("_", "")) for s in args.sizes.split(",") if s]
    if args.quick:
        args.sizes = [s for s in args.sizes if s <= 1000] or [100, 1000]
        args.samples, args.import_runs, args.budget = 50, 3, 5.0
    began = time.perf_counter()
    tables = asyncio.run(run(args))
    stamp = (
        f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} CPUs, "
        f"Python {sys.version.split()[0]}, load average {os.getloadavg()[0]:.2f}, "
        f"{time.perf_counter() - began:.0f} s"
    )
    print(f"\n{stamp}")
    if args.out:
        args.out.write_text(tables + f"\n{stamp}\n")


if __name__ == "__main__":
    main()
