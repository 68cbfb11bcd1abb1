"""Recall from the store: two code trees side by side on the same stores, one run, one table
per measure.

Every figure comes from a fresh child process (a short-lived worker is exactly what is
measured) run once per code tree: ``--old DIR`` and ``--new DIR`` (default: the checkout this
script is in), with ``PYTHONPATH=DIR`` and the same Python. Each tree gets its own copy of each
store (a file copy for SQLite, a redis-server of its own for Redis), because a newer tree may
upgrade a store in place on first open; that first open is timed as a measure of its own
(``upgrade``), and every other measure runs on a copy the tree has opened once already.

Stores are built once and cached under ``--cache``: realistic episodes (the probe episodes of
``tests/probes`` varied as ``bench/recall_scale.py`` does, with a long tail of rare words)
written in their stored form through the provider's ``write`` in large batches, by the
``--old`` tree. ``--verify`` checks on a small log that such a store holds exactly the keys and
values ``EpisodicMemory.record`` leaves, and that both trees recall the same from it as from a
recorded one.

Measures (``--measures``; medians over ``--rounds`` fresh processes unless said otherwise):

* ``first``: open the store and recall once (keywords), SQLite and Redis; also the memory the
  process holds after it (RSS after the recall minus RSS after the imports);
* ``upgrade``: the same on a fresh copy of the store as built (what a new version pays once);
* ``hybrid``: first recall with vectors (an in-process hash embedder; the query's embedding is
  not counted), and the memory held after it;
* ``longlived``: p50 of ``--recalls`` recalls in one process that has recalled once (dict,
  SQLite, Redis);
* ``record``: p50 of ``--recalls`` records on a full ring (index upkeep included);
* ``viewer``: the viewer's first page (a full GET of ``/``) in a fresh server process;
* ``cli``: ``deepcrew-episodic recall`` end to end, as a subprocess.

``--million`` adds 1,000,000 episodes on SQLite to ``first`` and ``record`` (the build takes
minutes and is cached; the old tree's first recall at that size takes minutes and gigabytes).

    python bench/store_recall.py --old ../old                        # every measure
    python bench/store_recall.py --old ../old --million --measures first,record \
        --providers sqlite --sizes 1000000 --rounds 2                # 1,000,000 on SQLite
    python bench/store_recall.py --old ../old --measures first --providers sqlite \\
        --sizes 10000 --rounds 3                                     # one row in a minute
    python bench/store_recall.py --old ../old --verify               # the bulk build is exact
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import datetime as dt
import gc
import hashlib
import json
import os
import random
import re
import resource
import shlex
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

NAMESPACE = "default"  # what the CLI and the viewer open without flags
BUILD_FORMAT = 1  # bump when the generated episodes change: cached stores are rebuilt
DIMENSION = 384
MEASURES = ["first", "upgrade", "hybrid", "longlived", "record", "viewer", "cli"]
# Per measure: the providers it runs on, the default providers and the default sizes.
SUPPORTED = {
    "first": (["sqlite", "redis"], ["sqlite", "redis"], [10_000, 100_000]),
    "upgrade": (["sqlite", "redis"], ["sqlite"], [100_000]),
    "hybrid": (["sqlite", "redis"], ["sqlite"], [100_000]),
    "longlived": (["dict", "sqlite", "redis"], ["dict", "sqlite", "redis"], [1_000, 100_000]),
    "record": (["dict", "sqlite", "redis"], ["sqlite"], [100_000]),
    "viewer": (["sqlite"], ["sqlite"], [100_000]),
    "cli": (["sqlite"], ["sqlite"], [100_000]),
}
# Defaults that only some rows want: Redis "first" only at 100,000 unless --sizes says so.
DEFAULT_ONLY = {("first", "redis"): [100_000]}
MILLION = 1_000_000
# (measure, provider, episodes) -> the target for the new tree (ms, or MB for "held").
TARGETS: dict[tuple[str, str, int], float] = {
    ("first", "sqlite", 100_000): 30,
    ("first", "sqlite", 10_000): 10,
    ("first", "redis", 100_000): 50,
    ("first", "sqlite", MILLION): 100,
    ("hybrid", "sqlite", 100_000): 100,
    ("held", "sqlite", 100_000): 40,
    ("held", "redis", 100_000): 40,
    ("record", "sqlite", 100_000): 1,
    ("record", "sqlite", MILLION): 1,
    ("viewer", "sqlite", 100_000): 300,
    ("cli", "sqlite", 100_000): 400,
}


# --- the episodes and the embedder (used by the children too) ------------------------------


def episodes(n: int, seed: int = 7, now: float | None = None) -> Iterator[Any]:
    """*n* episodes, oldest first: ``recall_scale.corpus`` made lazy (a million episodes are
    never all in memory). The probe episodes with other numbers, names and dates, and two words
    each from a Pareto-distributed long tail, so that common terms match tens of thousands of
    episodes at 100,000 while names and ids stay rare."""
    from recall_probes import load_episodes
    from recall_scale import NAMES, long_tail

    rng = random.Random(seed)
    now = time.time() if now is None else now
    base = [e for _, e in load_episodes(now)]
    tail = long_tail(rng)
    digits = re.compile(r"\d+")

    def vary(text: str) -> str:
        return digits.sub(lambda m: str(rng.randint(10, 99999)), text)

    for i in range(n):
        e = base[i % len(base)]
        extra = " ".join(
            tail[min(int(rng.paretovariate(1.2)) - 1, len(tail) - 1)] for _ in range(2)
        )
        who = f"{rng.choice(NAMES)} {rng.randint(1, 5000)}"
        age_days = (n - i) / n * 1000 + rng.random()
        yield dataclasses.replace(
            e,
            id="",
            query=f"{vary(e.query)} ({who}, {extra})",
            reflection=vary(e.reflection) if e.reflection else None,
            timestamp=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now - age_days * 86400)),
        )


def episode_id(seq: int) -> str:
    """A fixed id per sequence number, of the form ``record`` gives (a uuid4 in hex)."""
    raw = hashlib.blake2b(str(seq).encode(), digest_size=16).digest()
    return uuid.UUID(bytes=raw, version=4).hex


class HashEmbedder:
    """A deterministic in-process embedder: signed feature hashing of the words into 384
    dimensions (texts that share words are close). It keeps the time spent in it, so that a
    measure can leave the query's embedding out."""

    name = "bench-hash-384"
    _TOKEN = re.compile(r"\w+")

    def __init__(self) -> None:
        self.spent = 0.0
        self._slots: dict[str, tuple[int, float]] = {}

    def vectors(self, texts: list[str]) -> Any:
        import numpy as np

        out = np.zeros((len(texts), DIMENSION), dtype=np.float32)
        for row, text in enumerate(texts):
            for token in self._TOKEN.findall(text.lower()):
                slot = self._slots.get(token)
                if slot is None:
                    h = int.from_bytes(hashlib.blake2b(token.encode(), digest_size=8).digest())
                    slot = self._slots[token] = (h % DIMENSION, 1.0 if h >> 63 else -1.0)
                out[row, slot[0]] += slot[1]
            if not out[row].any():
                out[row, 0] = 1.0
        return out

    async def embed(self, texts: list[str]) -> Any:
        began = time.perf_counter()
        try:
            return self.vectors(texts)
        finally:
            self.spent += time.perf_counter() - began


def rss_bytes() -> int:
    """This process's resident set size now (not its peak)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


# --- the children ------------------------------------------------------------------------------


def provider_class(kind: str) -> Any:
    if kind == "sqlite":
        from deepcrew_episodic.providers import SQLiteMemoryProvider

        return SQLiteMemoryProvider
    if kind == "redis":
        from deepcrew_episodic.providers import RedisMemoryProvider

        return RedisMemoryProvider
    from deepcrew_episodic.providers import InMemoryProvider

    return InMemoryProvider


def open_provider(spec: dict[str, Any]) -> Any:
    cls = provider_class(spec["provider"])
    if spec["provider"] == "sqlite":
        return cls(spec["path"])
    if spec["provider"] == "redis":
        return cls(spec["url"])
    return cls()


async def fill_dict(provider: Any, path: str) -> None:
    items = json.loads(Path(path).read_text("utf-8"))
    keys = list(items)
    for start in range(0, len(keys), 20_000):
        await provider.write({k: items[k] for k in keys[start : start + 20_000]})


def import_library(spec: dict[str, Any]) -> None:
    """What a worker imports before it opens a store: the library, the provider's module (and
    its client library), and numpy when it embeds."""
    import deepcrew_episodic  # noqa: F401

    provider_class(spec["provider"])

    if spec.get("vectors"):
        import numpy  # noqa: F401 - the embedder's own dependency, loaded before any measure


async def child_first(spec: dict[str, Any]) -> dict[str, Any]:
    """Open the store and recall once; the memory held after it."""
    import_library(spec)
    from deepcrew_episodic import EpisodicMemory

    embedder = HashEmbedder() if spec.get("vectors") else None
    gc.collect()
    base = rss_bytes()
    began, cpu = time.perf_counter(), time.process_time()
    provider = open_provider(spec)
    memory = EpisodicMemory(
        provider, namespace=NAMESPACE, max_episodes=spec["n"], embedder=embedder
    )
    found = await memory.recall(spec["query"])
    spent = embedder.spent if embedder else 0.0
    took = time.perf_counter() - began - spent
    cpu = time.process_time() - cpu - spent
    gc.collect()
    held = rss_bytes() - base
    await provider.aclose()
    return {
        "ms": took * 1000,
        "cpu": cpu * 1000,
        "held": held,
        "peak": peak_bytes(),
        "answer": [e.query for e in found],
    }


async def child_longlived(spec: dict[str, Any]) -> dict[str, Any]:
    import_library(spec)
    from deepcrew_episodic import EpisodicMemory

    provider = open_provider(spec)
    if spec["provider"] == "dict":
        await fill_dict(provider, spec["items"])
    memory = EpisodicMemory(provider, namespace=NAMESPACE, max_episodes=spec["n"])
    found = await timed_recalls(memory, spec["queries"], spec["count"])
    await provider.aclose()
    return found


async def timed_recalls(memory: Any, queries: list[str], count: int) -> dict[str, Any]:
    """A first recall, then *count* recalls timed (*queries* in turn): their p50 and p90, and
    the p50 of the first pass apart (each question asked for the first time: what an agent
    mostly does) and of the later passes (asked again: what a cache can answer)."""
    began = time.perf_counter()
    await memory.recall(queries[0])
    first = (time.perf_counter() - began) * 1000
    samples = []
    for i in range(count):
        began = time.perf_counter()
        await memory.recall(queries[(i + 1) % len(queries)])
        samples.append((time.perf_counter() - began) * 1000)
    novel, again = samples[: len(queries) - 1], samples[len(queries) - 1 :]
    return {
        "ms": statistics.median(samples),
        "novel": statistics.median(novel),
        "again": statistics.median(again or novel),
        "p90": pct(samples, 0.9),
        "first": first,
    }


async def child_record(spec: dict[str, Any]) -> dict[str, Any]:
    import_library(spec)
    from deepcrew_episodic import EpisodicMemory

    provider = open_provider(spec)
    if spec["provider"] == "dict":
        await fill_dict(provider, spec["items"])
    fresh = [dataclasses.replace(e, timestamp="") for e in episodes(spec["count"] + 1, seed=11)]
    memory = EpisodicMemory(provider, namespace=NAMESPACE, max_episodes=spec["n"])
    began = time.perf_counter()
    await memory.record(fresh[0])
    first = (time.perf_counter() - began) * 1000
    samples = []
    for episode in fresh[1:]:
        began = time.perf_counter()
        await memory.record(episode)
        samples.append((time.perf_counter() - began) * 1000)
    await provider.aclose()
    return {
        "ms": statistics.median(samples),
        "mean": statistics.mean(samples),
        "p90": pct(samples, 0.9),
        "p99": pct(samples, 0.99),
        "first": first,
    }


async def http_get(host: str, port: int, path: str, token: str) -> tuple[float, float]:
    """(ms to the first byte, ms to the whole answer) of one GET; raises unless HTTP 200."""
    reader, writer = await asyncio.open_connection(host, port)
    request = (
        f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nCookie: dce_token={token}\r\n"
        f"Connection: close\r\n\r\n"
    )
    began = time.perf_counter()
    writer.write(request.encode())
    await writer.drain()
    head = await reader.read(1)
    first = (time.perf_counter() - began) * 1000
    rest = await reader.read()
    whole = (time.perf_counter() - began) * 1000
    writer.close()
    status = (head + rest).split(b" ", 2)[1]
    if status != b"200":
        raise RuntimeError(f"{path}: HTTP {status.decode()}")
    return first, whole


async def child_viewer(spec: dict[str, Any]) -> dict[str, Any]:
    """A fresh viewer process (as ``bench/viewer.py`` serves it): open, serve, first GET /."""
    import secrets
    import socket

    import uvicorn

    import_library(spec)
    from deepcrew_episodic import EpisodicMemory
    from deepcrew_episodic.viewer import create_app

    began, cpu = time.perf_counter(), time.process_time()
    provider = open_provider(spec)
    memory = await EpisodicMemory.open(provider, namespace=NAMESPACE)
    token = secrets.token_urlsafe(32)
    app = create_app(memory, token=token, label="bench")
    opened = (time.perf_counter() - began) * 1000
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    host, port = sock.getsockname()
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:  # noqa: ASYNC110 - uvicorn offers no event to wait on
        await asyncio.sleep(0.01)
    first_byte, whole = await http_get(host, port, "/", token)
    cpu = time.process_time() - cpu  # the server's and this client's: one process
    _, warm = await http_get(host, port, "/", token)
    server.should_exit = True
    await serving
    await provider.aclose()
    return {"ms": whole, "cpu": cpu * 1000, "first_byte": first_byte, "open": opened, "warm": warm}


async def child_build(spec: dict[str, Any]) -> dict[str, Any]:
    """Write *n* episodes in their stored form, exactly as ``record`` would leave them."""
    import_library(spec)
    from deepcrew_episodic import EpisodicMemory
    from deepcrew_episodic._embed import (
        check_vectors,
        digest,
        embed_text,
        encode_identity,
        encode_vector,
        fingerprint,
    )

    n = spec["n"]
    batch_size = spec.get("batch") or (20_000 if spec["provider"] == "sqlite" else 5_000)
    embedder = HashEmbedder() if spec.get("vectors") else None
    provider = open_provider(spec)
    memory = EpisodicMemory(provider, namespace=NAMESPACE, max_episodes=n, embedder=embedder)
    log = memory._log
    head = await provider.retrieve_many([log.seq_key])
    if head[0] is not None:
        raise SystemExit(f"{spec.get('path') or spec.get('url')} already holds a log")
    mark = fingerprint(HashEmbedder.name, DIMENSION)
    began = time.perf_counter()
    items: dict[str, str] = {}
    texts: list[tuple[int, str]] = []

    async def flush() -> None:
        if embedder is not None and texts:
            rows = check_vectors(embedder.vectors([t for _, t in texts]), len(texts), "bench")
            for (seq, text), row in zip(texts, rows, strict=True):
                items[log.vector_key(seq)] = encode_vector(row, mark, digest(text))
            texts.clear()
        await provider.write(items)
        items.clear()

    for seq, episode in enumerate(episodes(n, now=spec.get("now")), 1):
        stored = memory.check(episode)
        stored.id = episode_id(seq)
        items[log.entry_key(seq, None)] = stored.to_json()
        if embedder is not None:
            # (The build runs on the --old tree, which kept the fields on the memory.)
            options = getattr(memory, "_options", None)
            fields = options.embedding.fields if options else memory._embed_fields
            redactor = getattr(memory, "redactor", None) or getattr(memory, "_redactor", None)
            texts.append((seq, embed_text(stored, fields, redactor)))
        if len(items) >= batch_size:
            await flush()
            if seq % 100_000 < batch_size:
                print(f"# built {seq:,} of {n:,}", file=sys.stderr, flush=True)
    await flush()
    # The head last: a build killed half way leaves no log that looks whole.
    head_items = {
        log.ring_key: str(n),
        log.gen_key: uuid.uuid4().hex,
        log.base_key: "0",
        log.seq_key: str(n),
    }
    if embedder is not None:
        head_items[log.embedder_key] = encode_identity(HashEmbedder.name, DIMENSION)
    await provider.write(head_items)
    await provider.aclose()
    return {"ms": (time.perf_counter() - began) * 1000}


async def child_record_build(spec: dict[str, Any]) -> dict[str, Any]:
    """The same log as ``build``, written by ``record`` one episode at a time (for --verify)."""
    import_library(spec)
    from deepcrew_episodic import EpisodicMemory

    embedder = HashEmbedder() if spec.get("vectors") else None
    provider = open_provider(spec)
    memory = EpisodicMemory(
        provider, namespace=NAMESPACE, max_episodes=spec["n"], embedder=embedder
    )
    for episode in episodes(spec["n"], now=spec.get("now")):
        await memory.record(episode)
    await provider.aclose()
    return {"ms": 0.0}


async def child_dump(spec: dict[str, Any]) -> dict[str, Any]:
    """Every key of the store and its value (for --verify and the dict provider's copy)."""
    import_library(spec)
    provider = open_provider(spec)
    keys = sorted(await provider.keys(""))
    values = await provider.retrieve_many(keys)
    await provider.aclose()
    if spec.get("out"):
        Path(spec["out"]).write_text(json.dumps(dict(zip(keys, values, strict=True))), "utf-8")
        return {"ms": 0.0, "keys": len(keys)}
    return {"ms": 0.0, "items": dict(zip(keys, values, strict=True))}


async def child_answers(spec: dict[str, Any]) -> dict[str, Any]:
    """What recall returns for each query, keywords and (with vectors) hybrid."""
    import_library(spec)
    from deepcrew_episodic import EpisodicMemory

    provider = open_provider(spec)
    out: dict[str, list[Any]] = {}
    modes = [None, HashEmbedder()] if spec.get("vectors") else [None]
    for embedder in modes:
        memory = EpisodicMemory(
            provider, namespace=NAMESPACE, max_episodes=spec["n"], embedder=embedder
        )
        label = "hybrid" if embedder else "keywords"
        out[label] = []
        for query in spec["queries"]:
            found = await memory.explain(query)
            out[label].append([[s.episode.query, s.score] for s in found])
    await provider.aclose()
    return {"ms": 0.0, "answers": out}


CHILDREN = {
    "first": child_first,
    "longlived": child_longlived,
    "record": child_record,
    "viewer": child_viewer,
    "build": child_build,
    "record_build": child_record_build,
    "dump": child_dump,
    "answers": child_answers,
}


def run_child(spec: dict[str, Any]) -> None:
    result = asyncio.run(CHILDREN[spec["op"]](spec))
    import deepcrew_episodic

    result["module"] = str(Path(deepcrew_episodic.__file__).resolve())
    print(json.dumps(result), flush=True)


# --- the parent --------------------------------------------------------------------------------


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


@dataclasses.dataclass
class Tree:
    label: str  # "old" or "new"
    path: Path
    shown: str = ""  # as given on the command line

    @property
    def digest(self) -> str:
        """A hash of the tree's package source: a prepared store is reused only by the same
        code."""
        h = hashlib.blake2b(digest_size=6)
        for file in sorted((self.path / "deepcrew_episodic").rglob("*.py")):
            h.update(str(file.relative_to(self.path)).encode() + b"\0" + file.read_bytes())
        return h.hexdigest()


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.cache: Path = args.cache
        self.trees = [Tree("old", args.old, args.old_given), Tree("new", args.new, args.new_given)]
        self.build_tree = self.trees[0]
        self.pycache = self.cache / "pycache"
        self.tmp = Path(tempfile.mkdtemp(prefix="store-recall-"))
        from recall_probes import load_probes

        self.queries = [p.query for p in load_probes()]

    def env(self, tree: Tree) -> dict[str, str]:
        env = {**os.environ, "PYTHONPATH": str(tree.path), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(self.pycache)  # compiled once, outside the trees
        return env

    def child(
        self, tree: Tree, spec: dict[str, Any], timeout: float | None = -1.0
    ) -> dict[str, Any]:
        """Run *spec* in a fresh process on *tree*'s code; its result. A child past the
        timeout (``--timeout`` unless given; ``None``: none) is killed and reported."""
        command = [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(spec)]
        try:
            done = subprocess.run(
                command,
                env=self.env(tree),
                stdout=subprocess.PIPE,
                # A build's progress goes straight to the terminal.
                stderr=None if spec["op"] == "build" else subprocess.PIPE,
                text=True,
                timeout=self.args.timeout if timeout == -1.0 else timeout,
            )
        except subprocess.TimeoutExpired:
            return {"skipped": f"over {self.args.timeout:g} s"}
        if done.returncode != 0:
            raise RuntimeError(
                f"{spec['op']} on the {tree.label} tree failed:\n{(done.stderr or '')[-3000:]}"
            )
        result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        if not result["module"].startswith(str(tree.path.resolve()) + os.sep):
            raise RuntimeError(
                f"the {tree.label} child imported {result['module']}, not the tree's code"
            )
        return result

    # --- stores ------------------------------------------------------------------------

    def original(self, kind: str, n: int, vectors: bool = False) -> Path:
        """The store as built (read-only; never opened by a measure), built when missing."""
        what = "vec" if vectors else "kw"
        folder = self.cache / f"v{BUILD_FORMAT}"
        folder.mkdir(parents=True, exist_ok=True)
        if kind == "dict":
            path = folder / f"items-{what}-{n}.json"
            if not path.exists():
                source = self.original("sqlite", n, vectors)
                work = self.tmp / "dump.db"
                copy_sqlite(source, work)
                part = path.with_suffix(".part")
                self.child(
                    self.build_tree,
                    {"op": "dump", "provider": "sqlite", "path": str(work), "out": str(part)},
                )
                part.rename(path)
                remove_sqlite(work)
            return path
        path = folder / f"{kind}-{what}-{n}.{'db' if kind == 'sqlite' else 'rdb'}"
        if path.exists():
            return path
        note(f"building {kind} {n:,} episodes{' with vectors' if vectors else ''} ...")
        began = time.perf_counter()
        spec = {"op": "build", "provider": kind, "n": n, "vectors": vectors}
        if kind == "sqlite":
            work = path.with_name(path.name + ".part")
            remove_sqlite(work)
            result = self.child(self.build_tree, {**spec, "path": str(work)}, timeout=None)
            for suffix in ("", "-wal", "-shm"):
                if Path(f"{work}{suffix}").exists():
                    Path(f"{work}{suffix}").rename(f"{path}{suffix}")
        else:
            with redis_server() as url:
                result = self.child(self.build_tree, {**spec, "url": url}, timeout=None)
                save_redis(url, path)
        if "skipped" in result:
            raise SystemExit(f"building {path.name} took {result['skipped']}")
        path.chmod(0o444)  # measures open copies, never the store as built
        note(f"built {path.name} in {time.perf_counter() - began:.0f} s")
        return path

    def prepared(self, tree: Tree, kind: str, n: int, vectors: bool = False) -> Path:
        """The tree's own copy of a SQLite store, opened and recalled from once by that tree (an
        upgrade in place, if the tree makes one, is behind it); cached per tree source."""
        source = self.original(kind, n, vectors)
        folder = self.cache / f"v{BUILD_FORMAT}" / f"{tree.label}-{tree.digest}"
        folder.mkdir(parents=True, exist_ok=True)
        # Named for the build it copies too: a store built again is prepared again.
        path = folder / f"{source.stem}-{source.stat().st_mtime_ns}{source.suffix}"
        if not path.exists():
            work = self.tmp / f"prepare-{tree.label}-{source.name}"
            copy_sqlite(source, work)
            spec = {"op": "first", "provider": kind, "path": str(work), "n": n}
            # No timeout: an upgrade in place may take long, and is needed whatever it takes.
            self.child(tree, {**spec, "vectors": vectors, "query": self.queries[0]}, timeout=None)
            for suffix in ("", "-wal", "-shm"):
                if Path(f"{work}{suffix}").exists():
                    shutil.move(f"{work}{suffix}", f"{path}{suffix}")
        return path

    @contextlib.contextmanager
    def stores(
        self, kind: str, n: int, vectors: bool = False
    ) -> Iterator[dict[str, dict[str, Any]]]:
        """Per tree, the spec of its own prepared store of *kind*."""
        specs: dict[str, dict[str, Any]] = {}
        with contextlib.ExitStack() as stack:
            for tree in self.trees:
                spec: dict[str, Any] = {"provider": kind, "n": n, "vectors": vectors}
                if kind == "sqlite":
                    spec["path"] = str(self.prepared(tree, kind, n, vectors))
                elif kind == "redis":
                    url = stack.enter_context(redis_server(data=self.original(kind, n, vectors)))
                    spec["url"] = url
                    self.child(
                        tree, {**spec, "op": "first", "query": self.queries[0]}, timeout=None
                    )
                else:
                    spec["items"] = str(self.original(kind, n, vectors))
                specs[tree.label] = spec
            yield specs

    @contextlib.contextmanager
    def scratch(self, spec: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """A throwaway copy of a tree's prepared store, for a measure that writes."""
        if spec["provider"] != "sqlite":
            yield spec  # redis: the tree's server; dict: a copy in the child anyway
            return
        work = self.tmp / f"scratch-{Path(spec['path']).name}"
        copy_sqlite(Path(spec["path"]), work)
        # On disk before the child starts: its writes must not wait behind the copy's.
        os.sync()
        try:
            yield {**spec, "path": str(work)}
        finally:
            remove_sqlite(work)

    # --- measures ------------------------------------------------------------------------

    def rows(self, measure: str) -> list[tuple[str, int]]:
        supported, default_providers, default_sizes = SUPPORTED[measure]
        providers = self.args.providers or default_providers
        out = []
        for kind in [p for p in providers if p in supported]:
            sizes = self.args.sizes or DEFAULT_ONLY.get((measure, kind), default_sizes)
            if self.args.million and kind == "sqlite" and measure in ("first", "record"):
                sizes = [*sizes, MILLION] if MILLION not in sizes else sizes
            out += [(kind, n) for n in sizes]
        return out

    def rounds(self, make: Any, count: int) -> dict[str, list[dict[str, Any]]]:
        """*count* rounds of ``make(tree, i)``, the trees taking turns in each round."""
        results: dict[str, list[dict[str, Any]]] = {t.label: [] for t in self.trees}
        for i in range(count):
            for tree in self.trees if i % 2 == 0 else self.trees[::-1]:
                results[tree.label].append(make(tree, i))
        return results

    def first(self, vectors: bool = False) -> tuple[Table, Table]:
        measure = "hybrid" if vectors else "first"
        what = "hybrid (vectors)" if vectors else "keywords"
        fresh = f"Medians of {self.args.rounds} fresh processes per checkout."
        how = (
            " The embedder is the bench's in-process hash embedder; the time spent in it (the "
            "query's embedding) is taken out."
            if vectors
            else ""
        )
        table = Table(
            f"First recall in a fresh process, {what} (ms)",
            measure,
            note=f"Open the store and recall once, after the imports. {fresh} CPU: user + "
            f"system time of the process over the same span.{how}",
        )
        held = Table(
            f"Memory held after the first recall, {what} (MB)",
            "held",
            unit="MB",
            note=f"RSS after the recall minus RSS after importing the library and the provider"
            f"{' and numpy' if vectors else ''}, in the same process. {fresh}",
        )
        for kind, n in self.rows(measure):
            with self.stores(kind, n, vectors) as specs:

                def make(tree: Tree, i: int) -> dict[str, Any]:
                    spec = {
                        **specs[tree.label],
                        "op": "first",
                        "query": self.queries[i % len(self.queries)],
                    }
                    return self.child(tree, spec)

                results = self.rounds(make, self.args.rounds)
            table.add(kind, n, results, same=same_answers(results))
            held.add(
                kind,
                n,
                {k: [{**r, "ms": r.get("held", 0) / 1e6} for r in v] for k, v in results.items()},
            )
            progress(table)
        return table, held

    def upgrade(self) -> Table:
        table = Table(
            "Upgrade in place: the first open of a store as the old code wrote it (ms)",
            "upgrade",
            note="A fresh copy of the store for every process (a server of its own on Redis); "
            "open it and recall once, whatever the code does to the store on its first open "
            f"included. Medians of {self.args.rounds} processes per checkout.",
        )
        for kind, n in self.rows("upgrade"):
            source = self.original(kind, n)

            def make(
                tree: Tree, i: int, kind: str = kind, n: int = n, source: Path = source
            ) -> dict[str, Any]:
                spec: dict[str, Any] = {"op": "first", "provider": kind, "n": n}
                spec["query"] = self.queries[i % len(self.queries)]
                if kind == "redis":
                    with redis_server(data=source) as url:
                        return self.child(tree, {**spec, "url": url})
                work = self.tmp / f"upgrade-{source.name}"
                copy_sqlite(source, work)
                try:
                    return self.child(tree, {**spec, "path": str(work)})
                finally:
                    remove_sqlite(work)

            table.add(kind, n, self.rounds(make, self.args.rounds))
            progress(table)
        return table

    def repeated(self, measure: str) -> list[Table]:
        processes = max(2, self.args.rounds // 2)
        asked = len(self.queries)
        notes = {
            "longlived": f"p50 of {self.args.recalls} recalls (the {asked} probe queries in "
            f"turn) in a process that has recalled once; the median of {processes} processes "
            "per checkout. The tables after it split the same recalls: each question asked for "
            f"the first time (the first {asked - 1}), and asked again (the rest).",
            "record": f"p50 of {self.args.recalls} records (now-stamped episodes) on a full "
            f"ring: every record evicts the oldest. Index upkeep included. The median of "
            f"{processes} processes per checkout, each on its own fresh copy of the store.",
        }
        titles = {"longlived": "Long-lived recall (ms)", "record": "Record (ms)"}
        table = Table(titles[measure], measure, note=notes[measure])
        tables = [table]
        if measure == "longlived":
            tables += [
                Table(
                    "Long-lived recall, a question asked for the first time (ms)",
                    measure,
                    field="novel",
                ),
                Table("Long-lived recall, a question asked before (ms)", measure, field="again"),
            ]
        if measure == "record":
            # The store's index may batch its upkeep (SQLite merges postings every 32
            # records): the mean and the slow records show what the median does not.
            tables += [
                Table("Record, the mean of the same records (ms)", measure, field="mean"),
                Table("Record, p99 of the same records (ms)", measure, field="p99"),
            ]
        for kind, n in self.rows(measure):
            with self.stores(kind, n) as specs:

                def make(tree: Tree, i: int) -> dict[str, Any]:
                    spec = {**specs[tree.label], "op": measure, "count": self.args.recalls}
                    spec["queries"] = self.queries[i:] + self.queries[:i]
                    with self.scratch(spec) as own:
                        return self.child(tree, own)

                # Each process gives a p50 of many calls: fewer processes are needed.
                results = self.rounds(make, processes)
                for each in tables:
                    each.add(kind, n, results)
            progress(table)
        return tables

    def viewer(self) -> Table:
        table = Table(
            "Viewer: the first page in a fresh server process (ms)",
            "viewer",
            note="The viewer served by uvicorn on a loopback port; the time from sending the "
            "first GET of `/` to the end of its answer. Medians of "
            f"{self.args.rounds} server processes per checkout.",
        )
        for kind, n in self.rows("viewer"):
            with self.stores(kind, n) as specs:
                results = self.rounds(
                    lambda tree, i: self.child(tree, {**specs[tree.label], "op": "viewer"}),
                    self.args.rounds,
                )
            table.add(kind, n, results)
            progress(table)
        return table

    def cli(self) -> Table:
        table = Table(
            "`deepcrew-episodic recall`: the whole process (ms)",
            "cli",
            note="`deepcrew-episodic recall QUERY --store FILE` run as a subprocess, from start "
            f"to exit (bytecode compiled, page cache warm). Medians of {self.args.rounds} runs per checkout.",
        )
        script = Path(sys.executable).with_name("deepcrew-episodic")
        for kind, n in self.rows("cli"):
            with self.stores(kind, n) as specs:

                def make(tree: Tree, i: int) -> dict[str, Any]:
                    query = self.queries[i % len(self.queries)]
                    command = [str(script), "recall", query, "--store", specs[tree.label]["path"]]
                    before = resource.getrusage(resource.RUSAGE_CHILDREN)
                    began = time.perf_counter()
                    try:
                        done = subprocess.run(
                            command,
                            env=self.env(tree),
                            capture_output=True,
                            text=True,
                            timeout=self.args.timeout,
                        )
                    except subprocess.TimeoutExpired:
                        return {"skipped": f"over {self.args.timeout:g} s"}
                    took = (time.perf_counter() - began) * 1000
                    after = resource.getrusage(resource.RUSAGE_CHILDREN)
                    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
                    if done.returncode != 0:
                        raise RuntimeError(
                            f"the CLI on the {tree.label} tree: {done.stderr[-2000:]}"
                        )
                    return {"ms": took, "cpu": cpu * 1000}

                for tree in self.trees:  # bytecode written, page cache warm
                    make(tree, 0)
                table.add(kind, n, self.rounds(make, self.args.rounds))
            progress(table)
        return table

    # --- verify --------------------------------------------------------------------------

    def verify(self, n: int) -> str:
        """A bulk-built log holds what ``record`` leaves, and recalls the same."""
        lines = []
        bulk, recorded = self.tmp / "bulk.db", self.tmp / "recorded.db"
        for path in (bulk, recorded):
            remove_sqlite(path)
        # Small batches: the bulk build's batching is checked too.
        spec = {"provider": "sqlite", "n": n, "vectors": True, "now": time.time(), "batch": 97}
        self.child(self.build_tree, {**spec, "op": "build", "path": str(bulk)})
        self.child(self.build_tree, {**spec, "op": "record_build", "path": str(recorded)})
        a = self.child(self.build_tree, {**spec, "op": "dump", "path": str(bulk)})["items"]
        b = self.child(self.build_tree, {**spec, "op": "dump", "path": str(recorded)})["items"]
        problems = compare_items(a, b)
        lines.append(
            f"- SQLite keys: {len(a)} written in bulk, {len(b)} by `record`; "
            + (
                "same keys and values (ids and the change token aside)"
                if not problems
                else "DIFFER: " + "; ".join(problems[:5])
            )
        )
        # The same on Redis (its bulk writes go in batches of their own).
        with redis_server() as bulk_url, redis_server() as recorded_url:
            redis = {**spec, "provider": "redis"}
            self.child(self.build_tree, {**redis, "op": "build", "url": bulk_url})
            self.child(self.build_tree, {**redis, "op": "record_build", "url": recorded_url})
            ra = self.child(self.build_tree, {**redis, "op": "dump", "url": bulk_url})["items"]
            rb = self.child(self.build_tree, {**redis, "op": "dump", "url": recorded_url})["items"]
        found = compare_items(ra, rb)
        problems += found
        lines.append(
            f"- Redis keys: {len(ra)} written in bulk, {len(rb)} by `record`; "
            + (
                "same keys and values (ids and the change token aside)"
                if not found
                else "DIFFER: " + "; ".join(found[:5])
            )
        )
        for tree in self.trees:
            # The bulk log, the old code's recorded log and this code's own recorded log (one
            # it wrote itself: an upgraded store must answer as a native one does).
            own = self.tmp / f"recorded-{tree.label}.db"
            remove_sqlite(own)
            self.child(tree, {**spec, "op": "record_build", "path": str(own)})
            answers = []
            for path in (bulk, recorded, own):
                work = self.tmp / f"answers-{path.name}"
                copy_sqlite(path, work)
                answers.append(
                    self.child(
                        tree, {**spec, "op": "answers", "path": str(work), "queries": self.queries}
                    )["answers"]
                )
                remove_sqlite(work)
            remove_sqlite(own)
            same = [answers_match(answers[0], other) for other in answers[1:]]
            if not all(same) and os.environ.get("BENCH_DEBUG"):
                for mode in answers[0]:
                    for q, x, y in zip(
                        self.queries, answers[0][mode], answers[1][mode], strict=True
                    ):
                        if x != y:
                            note(f"{mode} {q!r}: {x[:3]} != {y[:3]}")
            said = ["the same episodes and scores" if ok else "DIFFERENT answers" for ok in same]
            lines.append(
                f"- {tree.label} code ({tree.shown}): {len(self.queries)} queries, keywords and "
                f"hybrid, `explain()` on the bulk log against the old code's recorded log: "
                f"{said[0]}; against its own recorded log: {said[1]}"
            )
            if not all(same):
                problems.append(f"{tree.label} answers differ")
        return "\n".join(lines) + ("\n\nverify: OK" if not problems else "\n\nverify: FAILED")


def compare_items(a: dict[str, str | None], b: dict[str, str | None]) -> list[str]:
    problems = []
    if set(a) != set(b):
        problems.append(
            f"keys only in bulk {sorted(set(a) - set(b))[:3]}, only recorded {sorted(set(b) - set(a))[:3]}"
        )
    for key in sorted(set(a) & set(b)):
        x, y = a[key], b[key]
        if key.endswith(":__gen__"):
            ok = bool(
                x and y and re.fullmatch(r"[0-9a-f]{32}", x) and re.fullmatch(r"[0-9a-f]{32}", y)
            )
        elif re.search(r":e:[0-9]+$", key):
            dx, dy = json.loads(x or "{}"), json.loads(y or "{}")
            ok = bool(dx.pop("id", "")) and bool(dy.pop("id", "")) and dx == dy
            if not ok:
                fields = sorted(f for f in set(dx) | set(dy) if dx.get(f) != dy.get(f))
                problems.append(f"{key}: fields {fields} differ")
                continue
        else:
            ok = x == y
        if not ok:
            problems.append(f"{key}: {str(x)[:80]!r} != {str(y)[:80]!r}")
    return problems


def answers_match(a: dict[str, list[Any]], b: dict[str, list[Any]]) -> bool:
    """The same episodes in the same order with the same scores, to 1e-6 (recency moves a
    score by about 1e-9 between two calls)."""
    if a.keys() != b.keys():
        return False
    for mode in a:
        for x, y in zip(a[mode], b[mode], strict=True):
            if [q for q, _ in x] != [q for q, _ in y]:
                return False
            if any(abs(s - t) > 1e-6 for (_, s), (_, t) in zip(x, y, strict=True)):
                return False
    return True


def same_answers(results: dict[str, list[dict[str, Any]]]) -> str:
    old, new = results["old"], results["new"]
    pairs = [(o.get("answer"), n.get("answer")) for o, n in zip(old, new, strict=False)]
    if not pairs or any(o is None or n is None for o, n in pairs):
        return ""
    same = sum(o == n for o, n in pairs)
    return f"{same}/{len(pairs)}"


class Table:
    def __init__(
        self, title: str, measure: str, unit: str = "ms", note: str = "", field: str = "ms"
    ) -> None:
        self.title, self.measure, self.unit, self.note = title, measure, unit, note
        self.field = field  # which figure of each run the table shows
        self.lines: list[str] = []

    def add(
        self, kind: str, n: int, results: dict[str, list[dict[str, Any]]], same: str = ""
    ) -> None:
        cells, medians = [], []
        for label in ("old", "new"):
            runs = results[label]
            skipped = next((r["skipped"] for r in runs if "skipped" in r), None)
            values = [r[self.field] for r in runs if "skipped" not in r]
            if skipped or not values:
                cells.append(f"skipped ({skipped})")
                medians.append(None)
                continue
            m = statistics.median(values)
            medians.append(m)
            cell = show(m, self.unit)
            cpus = [r["cpu"] for r in runs if "cpu" in r]
            if cpus and self.unit == "ms":
                cell += f" (CPU {show(statistics.median(cpus), 'ms')})"
            cells.append(cell)
        old, new = medians
        ratio = f"x{old / new:,.1f}" if old and new else "—"
        target = TARGETS.get((self.measure, kind, n))
        verdict = ""
        if target is not None:
            verdict = f"<= {target:g} {self.unit}" + (
                "" if new is None else (": met" if new <= target else ": MISSED")
            )
        elif self.measure == "longlived" and old and new:
            verdict = "no worse: " + ("met" if new <= old * 1.1 else "MISSED")
        row = [kind, f"{n:,}", *cells, ratio, verdict]
        if self.measure in ("first", "hybrid"):
            row.append(same)
        self.lines.append("| " + " | ".join(row) + " |")

    def render(self) -> str:
        head = ["provider", "episodes", "old", "new", "old / new", "target (new)"]
        if self.measure in ("first", "hybrid"):
            head.append("same answers")
        return "\n".join(
            [
                f"### {self.title}",
                "",
                *([self.note, ""] if self.note else []),
                "| " + " | ".join(head) + " |",
                "|" + "---|" * len(head),
                *self.lines,
                "",
            ]
        )


def show(value: float, unit: str) -> str:
    if unit == "MB":
        return f"{value:.0f} MB" if value >= 10 else f"{value:.1f} MB"
    from compare import fmt

    text = fmt(value)
    return text if text.endswith(" s") else f"{text} ms"


# --- stores on disk and redis ------------------------------------------------------------------


def copy_sqlite(source: Path, dest: Path) -> None:
    remove_sqlite(dest)
    for suffix in ("", "-wal", "-shm"):
        if Path(f"{source}{suffix}").exists():
            shutil.copyfile(f"{source}{suffix}", f"{dest}{suffix}")


def remove_sqlite(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


@contextlib.contextmanager
def redis_server(data: Path | None = None) -> Iterator[str]:
    from _redis import redis_server as server

    with server(data=data) as url:
        yield url


def save_redis(url: str, dest: Path) -> None:
    import redis

    client = redis.Redis.from_url(url)
    try:
        client.save()
        folder = client.config_get("dir")["dir"]
        name = client.config_get("dbfilename")["dbfilename"]
    finally:
        client.close()
    part = dest.with_name(dest.name + ".part")
    shutil.copyfile(Path(folder) / name, part)
    part.rename(dest)


def note(text: str) -> None:
    print(f"# {text}", file=sys.stderr, flush=True)


def progress(table: Table) -> None:
    note(table.lines[-1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--old", type=Path, help="a checkout of the code to compare against")
    parser.add_argument(
        "--new", type=Path, default=None, help="the code to measure (default: this checkout)"
    )
    parser.add_argument("--measures", default=",".join(MEASURES), help=f"of {','.join(MEASURES)}")
    parser.add_argument(
        "--providers", default="", help="of dict,sqlite,redis (default: per measure)"
    )
    parser.add_argument(
        "--sizes", default="", help="episodes, e.g. 10000,100000 (default: per measure)"
    )
    parser.add_argument(
        "--rounds", type=int, default=5, help="fresh processes per checkout and row"
    )
    parser.add_argument("--recalls", type=int, default=200, help="recalls or records per process")
    parser.add_argument("--million", action="store_true", help="add 1,000,000 on SQLite")
    parser.add_argument(
        "--cache", type=Path, default=Path(tempfile.gettempdir()) / "deepcrew-store-recall"
    )
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per child at most")
    parser.add_argument(
        "--verify",
        type=int,
        nargs="?",
        const=300,
        default=0,
        metavar="N",
        help="check the bulk build against record() on N episodes (300) and stop",
    )
    parser.add_argument("--out", type=Path, help="also write the tables here")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        run_child(json.loads(args.worker))
        return
    if args.old is None:
        parser.error("--old DIR is required (e.g. git worktree add --detach ../old main)")
    args.old_given, args.new_given = str(args.old), str(args.new or "this checkout")
    args.new = args.new or HERE.parent
    args.old, args.new = args.old.resolve(), args.new.resolve()
    for tree in (args.old, args.new):
        if not (tree / "deepcrew_episodic" / "__init__.py").exists():
            parser.error(f"{tree} holds no deepcrew_episodic package")
    args.measures = [m for m in args.measures.split(",") if m]
    args.providers = [p for p in args.providers.split(",") if p]
    args.sizes = [int(s.replace("_", "")) for s in args.sizes.split(",") if s]
    for m in args.measures:
        if m not in MEASURES:
            parser.error(f"unknown measure {m!r}; pick from {MEASURES}")
    bench = Bench(args)
    failed = False
    began = time.perf_counter()
    out: list[str] = []

    def emit(text: str) -> None:
        out.append(text)
        print(text, flush=True)

    try:
        for measure in [] if args.verify else args.measures:
            if measure in ("first", "hybrid"):
                for table in bench.first(vectors=measure == "hybrid"):
                    emit(table.render())
            elif measure == "upgrade":
                emit(bench.upgrade().render())
            elif measure in ("longlived", "record"):
                for table in bench.repeated(measure):
                    emit(table.render())
            elif measure == "viewer":
                emit(bench.viewer().render())
            else:
                emit(bench.cli().render())
        if args.verify:
            report = bench.verify(args.verify)
            emit(report)
            failed = report.endswith("FAILED")
    finally:
        shutil.rmtree(bench.tmp, ignore_errors=True)
    command = "python bench/store_recall.py " + shlex.join(sys.argv[1:])
    stamp = (
        f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} CPUs, Python "
        f"{sys.version.split()[0]}, load average {os.getloadavg()[0]:.2f}, "
        f"{time.perf_counter() - began:.0f} s; old = {args.old_given}, new = {args.new_given}"
    )
    emit(f"Command: `{command}`\n\n{stamp}")
    if args.out:
        args.out.write_text("\n".join(out) + "\n", "utf-8")
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
