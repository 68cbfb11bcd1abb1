"""A worker that serves many namespaces: the memory a process holds after recalling from each.

One store holds ``--namespaces`` logs of ``--episodes`` episodes each (a tenant, a user, a
project per namespace). A fresh worker process opens the store and serves every namespace in
turn, twice over, the way a web worker or a queue consumer does:

* ``kept``: one ``EpisodicMemory`` per namespace, kept for the process's life (a dict of
  memories, the pattern of an agent server);
* ``per request``: a new ``EpisodicMemory`` for each request, dropped after it.

It prints the resident memory (RSS) the process holds over what it held after its imports,
after the first 10% of the namespaces, after all of them, and after the second pass, for the
``--old`` and the new code tree side by side (each on its own copy of the store, built once by
the old tree: the new tree upgrades its copy in place before the measure). "Flat" means the
figure after every namespace is about the figure after a tenth of them.

    python bench/namespaces.py --old ../old                  # SQLite and Redis, 1,000 x 100
    python bench/namespaces.py --old ../old --providers sqlite --namespaces 2000
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(HERE.parent / "tests"))


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def open_provider(spec: dict[str, Any]) -> Any:
    if spec["provider"] == "sqlite":
        from deepcrew_episodic.providers import SQLiteMemoryProvider

        return SQLiteMemoryProvider(spec["path"])
    from deepcrew_episodic.providers import RedisMemoryProvider

    return RedisMemoryProvider(spec["url"])


def names(count: int) -> list[str]:
    return [f"tenant-{i:05d}" for i in range(count)]


async def child_build(spec: dict[str, Any]) -> dict[str, Any]:
    """Record ``episodes`` episodes in each of ``namespaces`` logs, through ``record``."""
    from store_recall import episodes

    from deepcrew_episodic import EpisodicMemory

    provider = open_provider(spec)
    source = list(episodes(spec["episodes"] * 4, seed=5))
    for i, namespace in enumerate(names(spec["namespaces"])):
        memory = EpisodicMemory(provider, namespace=namespace)
        start = (i * 7) % (len(source) - spec["episodes"])
        for episode in source[start : start + spec["episodes"]]:
            await memory.record(episode)
        if (i + 1) % 200 == 0:
            print(f"# built {i + 1:,} namespaces", file=sys.stderr, flush=True)
    await provider.aclose()
    return {}


async def child_serve(spec: dict[str, Any]) -> dict[str, Any]:
    """Serve every namespace twice; RSS held (over the imports) at four points."""
    from recall_probes import load_probes

    import deepcrew_episodic  # noqa: F401
    from deepcrew_episodic import EpisodicMemory

    queries = [p.query for p in load_probes()]
    hits = 0

    provider = open_provider(spec)
    every = names(spec["namespaces"])
    tenth = max(1, len(every) // 10)
    kept: dict[str, Any] = {}
    gc.collect()
    base = rss_bytes()
    held: dict[str, float] = {}
    took: list[float] = []
    for round_ in (1, 2):
        for i, namespace in enumerate(every, 1):
            if spec["mode"] == "kept":
                memory = kept.get(namespace)
                if memory is None:
                    memory = kept[namespace] = EpisodicMemory(provider, namespace=namespace)
            else:
                memory = EpisodicMemory(provider, namespace=namespace)
            began = time.perf_counter()
            found = await memory.recall(queries[i % len(queries)])
            took.append((time.perf_counter() - began) * 1000)
            hits += bool(found)
            del memory
            if round_ == 1 and i == tenth:
                gc.collect()
                held["tenth"] = (rss_bytes() - base) / 1e6
        gc.collect()
        held["all" if round_ == 1 else "again"] = (rss_bytes() - base) / 1e6
    await provider.aclose()
    import deepcrew_episodic as lib

    if not hits:
        raise SystemExit("no recall found anything: the measure would not read the index")
    module = str(Path(lib.__file__))
    return {"held": held, "ms": statistics.median(took), "hits": hits, "module": module}


def run(tree: Path, spec: dict[str, Any]) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(spec)]
    done = subprocess.run(command, env=env, stdout=subprocess.PIPE, text=True, check=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    module = result.get("module")
    if module and not module.startswith(str(tree.resolve()) + os.sep):
        raise SystemExit(f"the child imported {module}, not {tree}'s code")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--old", type=Path, help="the code tree to compare with (required)")
    parser.add_argument("--new", type=Path, default=HERE.parent)
    parser.add_argument("--providers", default="sqlite,redis")
    parser.add_argument("--namespaces", type=int, default=1000)
    parser.add_argument("--episodes", type=int, default=100, help="per namespace")
    parser.add_argument("--rounds", type=int, default=1, help="fresh processes per row")
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "ns-bench")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        spec = json.loads(args.worker)
        op = child_build if spec["op"] == "build" else child_serve
        print(json.dumps(asyncio.run(op(spec))), flush=True)
        return
    if args.old is None:
        parser.error("--old is required")
    from _redis import redis_server

    args.cache.mkdir(parents=True, exist_ok=True)
    trees = {"old": args.old, "new": args.new}
    shape = {"namespaces": args.namespaces, "episodes": args.episodes}
    print(f"### Memory held by one worker serving {args.namespaces:,} namespaces (MB)\n")
    print(
        f"{args.episodes} episodes per namespace; each namespace recalled from once, then the "
        f"whole set again; RSS over the imports. Medians of {args.rounds} processes.\n"
    )
    print(
        "| provider | memories | tree | after 10% | after all | after the second pass "
        "| recall p50 |"
    )
    print("|---|---|---|---|---|---|---|")
    for kind in args.providers.split(","):
        stem = f"{kind}-{args.namespaces}x{args.episodes}"
        built = args.cache / (stem + (".db" if kind == "sqlite" else ".rdb"))
        if not built.exists():
            print(f"# building {stem} with the old tree ...", file=sys.stderr, flush=True)
            if kind == "sqlite":
                part = built.with_suffix(".part")
                part.unlink(missing_ok=True)
                run(args.old, {"op": "build", "provider": kind, "path": str(part), **shape})
                part.rename(built)
            else:
                from store_recall import save_redis

                with redis_server() as url:
                    run(args.old, {"op": "build", "provider": kind, "url": url, **shape})
                    save_redis(url, built)
        for mode in ("kept", "per request"):
            for label, tree in trees.items():
                results = []
                for _ in range(args.rounds):
                    spec: dict[str, Any] = {"op": "serve", "provider": kind, "mode": mode}
                    spec.update(shape)
                    if kind == "sqlite":
                        work = args.cache / f"work-{label}.db"
                        shutil.copyfile(built, work)
                        run(tree, {**spec, "path": str(work), "mode": "per request"})  # upgrade
                        results.append(run(tree, {**spec, "path": str(work)}))
                        work.unlink()
                    else:
                        with redis_server(data=built) as url:
                            run(tree, {**spec, "url": url, "mode": "per request"})
                            results.append(run(tree, {**spec, "url": url}))

                def mb(point: str, results: list[dict[str, Any]] = results) -> str:
                    return f"{statistics.median(r['held'][point] for r in results):.1f} MB"

                ms = statistics.median(r["ms"] for r in results)
                print(
                    f"| {kind} | {mode} | {label} | {mb('tenth')} | {mb('all')} | "
                    f"{mb('again')} | {ms:.2f} ms |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
