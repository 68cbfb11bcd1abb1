"""How fast does `deepcrew-episodic recall` answer on a file store?

Runs the real command (the console script and ``python -m deepcrew_episodic``) N times against
a JSON store of 100 episodes and prints the median and 90th percentile wall time next to a bare
interpreter (``python -c pass``), plus the heaviest imports on that path and whether litellm
was imported. The target is a median at or under 300 ms for ``recall`` on a file store.

    python bench/cli_startup.py            # 21 runs each
    python bench/cli_startup.py --runs 51
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

from deepcrew_episodic import Episode, EpisodicMemory
from deepcrew_episodic.providers import FileMemoryProvider

TOPICS = ["refund order", "rotate api key", "deploy service", "reset password", "export report"]
TARGET_MS = 300.0
EPISODE = "from deepcrew_episodic._episode import Episode"
RECALL = "deepcrew-episodic recall"
LIBRARY = "import the library's recall path"


async def fill(path: Path, count: int) -> None:
    async with FileMemoryProvider(path, fsync=False) as backend:
        memory = EpisodicMemory(backend, max_episodes=count)
        for i in range(count):
            topic = TOPICS[i % len(TOPICS)]
            await memory.record(
                Episode(
                    query=f"{topic} number {i} for customer {i * 7 % 13}",
                    response=f"Handled {topic} {i}: looked it up, applied the fix, confirmed.",
                    outcome="success" if i % 3 else "failure",
                    score=0.5 + (i % 5) / 10,
                    tags=[topic.split()[0]],
                )
            )


def timed(
    cases: list[tuple[str, list[str]]], runs: int, env: dict[str, str]
) -> dict[str, tuple[list[float], list[float]]]:
    """Wall and CPU (user + system) milliseconds of each run of each command. The commands
    take turns, so a burst of load elsewhere on the machine hits them all alike. CPU time is
    the steadier figure on a shared machine; wall time is what a user waits."""
    for _, cmd in cases:  # write bytecode, warm the page cache
        subprocess.run(cmd, env=env, capture_output=True, check=True)
    samples: dict[str, tuple[list[float], list[float]]] = {label: ([], []) for label, _ in cases}
    for _ in range(runs):
        for label, cmd in cases:
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            subprocess.run(cmd, env=env, capture_output=True, check=True)
            wall = (time.perf_counter() - start) * 1000
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            samples[label][0].append(wall)
            samples[label][1].append(cpu * 1000)
    return samples


def heaviest_imports(cmd: list[str], env: dict[str, str], top: int) -> tuple[list[str], bool]:
    """The *top* imports by cumulative time in one run under ``-X importtime``, and whether
    litellm was among all of them."""
    done = subprocess.run(
        [cmd[0], "-X", "importtime", *cmd[1:]], env=env, capture_output=True, text=True
    )
    rows: list[tuple[int, str]] = []
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative_us, name = line.split("|")
        rows.append((int(cumulative_us), name.strip()))
    rows.sort(reverse=True)
    shown = [f"{us / 1000:7.1f} ms  {name}" for us, name in rows[:top]]
    return shown, any(n == "litellm" or n.startswith("litellm.") for _, n in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--imports", type=int, default=12, help="show the N heaviest imports")
    opts = parser.parse_args()

    script = Path(sys.executable).with_name("deepcrew-episodic")
    with tempfile.TemporaryDirectory() as tmp:
        # An installed package has its bytecode compiled; a checkout run with
        # PYTHONDONTWRITEBYTECODE would recompile every module on every run. Cache it, but
        # outside the source tree.
        env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
        store = Path(tmp) / "episodes.json"
        anyio.run(fill, store, 100)
        recall = ["recall", "refund order for a customer", "--store", str(store)]
        library = (
            "import deepcrew_episodic.cli, deepcrew_episodic._memory,"
            " deepcrew_episodic.providers._file, deepcrew_episodic.providers._dict"
        )
        event_loop = "import anyio, anyio._backends._asyncio"
        cases = [
            ("python -c pass (bare interpreter)", [sys.executable, "-c", "pass"]),
            ("import Episode", [sys.executable, "-c", EPISODE]),
            (LIBRARY, [sys.executable, "-c", library]),
            ("import anyio + asyncio (not needed)", [sys.executable, "-c", event_loop]),
            ("deepcrew-episodic --help", [str(script), "--help"]),
            (RECALL, [str(script), *recall]),
            (
                "python -m deepcrew_episodic recall",
                [sys.executable, "-m", "deepcrew_episodic", *recall],
            ),
            ("deepcrew-episodic stats", [str(script), "stats", "--store", str(store)]),
            # A duration or a date never loads dateparser; a phrase does (about 70 ms).
            ("recall --since 7d", [str(script), *recall, "--since", "7d"]),
            ("recall --since 'last tuesday'", [str(script), *recall, "--since", "last tuesday"]),
        ]
        samples = timed(cases, opts.runs, env)
        results = [
            (label, statistics.median(wall), min(wall), _p90(wall), statistics.median(cpu))
            for label, (wall, cpu) in samples.items()
        ]
        imports, litellm = heaviest_imports(
            [sys.executable, "-m", "deepcrew_episodic", *recall], env, opts.imports
        )

    bare = results[0][1]
    print(f"CLI start-up, file store of 100 episodes, {opts.runs} runs each (wall time, ms)")
    print(
        f"{'command':<38} {'median':>8} {'min':>8} {'p90':>8} {'over bare':>10} {'cpu median':>11}"
    )
    for label, median, fastest, p90, cpu in results:
        print(
            f"{label:<38} {median:8.1f} {fastest:8.1f} {p90:8.1f} {median - bare:10.1f} {cpu:11.1f}"
        )
    medians = {label: median for label, median, *_ in results}
    recall, floor = medians[RECALL], medians[LIBRARY]
    load = os.getloadavg()[0]
    verdict = "PASS" if recall <= TARGET_MS else "FAIL"
    print(f"\nrecall median {recall:.0f} ms, target <= {TARGET_MS:.0f} ms: {verdict}")
    print(f"(load average {load:.2f} on {os.cpu_count()} CPUs: other work inflates every row)")
    print(
        f"of which importing the modules recall needs (no anyio, no asyncio) "
        f"{floor:.0f} ms, the command itself (argparse, reading the file, recall, output) "
        f"{recall - floor:.0f} ms"
    )
    print(f"litellm imported on the recall path: {'YES' if litellm else 'no'}")
    print("\nheaviest imports of recall (cumulative, one run with -X importtime):")
    for row in imports:
        print("  " + row)


def _p90(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]


if __name__ == "__main__":
    main()
