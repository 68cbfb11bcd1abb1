"""The ``deepcrew-episodic`` command, run for real: as a subprocess (the console script and
``python -m deepcrew_episodic``) and through ``main(argv)`` in this process, against real
stores (JSON file, SQLite, the redis-server fixture)."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib.util
import json
import os
import pty
import re
import shutil
import sqlite3
import stat
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

import deepcrew_episodic
from deepcrew_episodic import Episode, EpisodicMemory
from deepcrew_episodic._unicode import is_hidden
from deepcrew_episodic.cli import main
from deepcrew_episodic.cli._parse import build_parser
from deepcrew_episodic.providers import FileMemoryProvider

SCRIPT = Path(sys.executable).with_name("deepcrew-episodic")
ENV_VARS = (
    "DEEPCREW_EPISODIC_STORE",
    "DEEPCREW_EPISODIC_NAMESPACE",
    "DEEPCREW_EPISODIC_MAX_EPISODES",
    "DEEPCREW_EPISODIC_MAX_AGE",
)


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ENV_VARS}
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    return {**env, **extra}


def cli(
    *argv: str,
    env: dict[str, str] | None = None,
    stdin: int | None = subprocess.DEVNULL,
    input: str | None = None,
    script: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run the real command in a subprocess."""
    command = [str(SCRIPT)] if script else [sys.executable, "-m", "deepcrew_episodic"]
    return subprocess.run(
        [*command, *argv],
        capture_output=True,
        text=True,
        env=env or clean_env(),
        stdin=None if input is not None else stdin,
        input=input,
        timeout=60,
    )


@pytest.fixture(autouse=True)
def no_ambient_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)


class Run:
    """``main(argv)`` in this process, with its output captured."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self.capsys = capsys

    def __call__(self, *argv: str) -> tuple[int, str, str]:
        code = main(list(argv))
        captured = self.capsys.readouterr()
        return code, captured.out, captured.err


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str]) -> Run:
    return Run(capsys)


@pytest.fixture
def store(tmp_path: Path) -> str:
    return str(tmp_path / "episodes.json")


def assert_one_clean_line(stderr: str) -> None:
    assert "Traceback" not in stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("deepcrew-episodic: error: ")


def seed(run: Run, store: str, *extra: str) -> dict[str, str]:
    """Four episodes; returns their ids by a short name."""
    ids = {}
    rows = [
        ("refund", ["--query", "Refund order 1182 for Acme", "--response", "Refunded in full",
                    "--outcome", "success", "--score", "0.9", "--tag", "billing", "--tool", "payments"]),
        ("refund-fail", ["--query", "Refund order 77 twice", "--response", "Double refund blocked",
                         "--outcome", "failure", "--tag", "billing", "--reflection",
                         "Check for an existing refund before issuing one."]),
        ("deploy", ["--query", "Deploy the api service", "--response", "Rolled out",
                    "--outcome", "partial", "--tag", "ops"]),
        ("rotate", ["--query", "Rotate the signing key", "--response", "Rotated", "--tag", "security"]),
    ]  # fmt: skip
    for name, flags in rows:
        code, out, err = run("--store", store, *extra, "record", *flags)
        assert code == 0, err
        ids[name] = out.split()[1]
    return ids


# --- entry points -------------------------------------------------------------------------


def test_console_script_and_module_both_run() -> None:
    assert SCRIPT.exists(), "the console script is not installed (pip install -e .)"
    version = cli("--version", script=True)
    assert version.returncode == 0
    assert version.stdout.startswith("deepcrew-episodic ")
    helped = cli("--help")
    assert helped.returncode == 0
    for command in ("record", "recall", "timeline", "stats", "export", "import", "forget", "clear"):
        assert command in helped.stdout


def test_full_round_trip_in_subprocesses(tmp_path: Path) -> None:
    store = str(tmp_path / "mem.json")
    recorded = cli("--store", store, "record", "-q", "How do I rotate the billing API key?",
                   "-r", "Rotated with a 24h overlap", "--outcome", "success", "--score", "0.8",
                   "--tag", "billing", script=True)  # fmt: skip
    assert recorded.returncode == 0, recorded.stderr
    episode_id = recorded.stdout.split()[1]
    cli("--store", store, "record", "-q", "Refund order 9", "--outcome", "failure")

    found = cli("recall", "rotate the api key", "--store", store, "--json", script=True)
    assert found.returncode == 0, found.stderr
    [item] = json.loads(found.stdout)
    assert item["id"] == episode_id
    assert item["query"] == "How do I rotate the billing API key?"
    Episode.coerce(item)  # a whole episode, as the library defines it

    verbose = cli("--store", store, "recall", "rotate api key", "-v")
    assert verbose.returncode == 0
    assert "score " in verbose.stdout
    assert "matched" in verbose.stdout
    assert episode_id in verbose.stdout

    stats = cli("--store", store, "stats", "--json")
    assert json.loads(stats.stdout)["by_outcome"] == {
        "success": 1,
        "failure": 1,
        "partial": 0,
        "unknown": 0,
        "claimed_success": 0,
        "abandoned": 0,
    }
    exported = cli("--store", store, "export")
    assert [json.loads(x)["outcome"] for x in exported.stdout.splitlines()] == [
        "success",
        "failure",
    ]
    forgot = cli("--store", store, "forget", "--id", episode_id, "--yes")
    assert (forgot.returncode, forgot.stdout.strip()) == (0, "forgot 1 episode")
    assert "rotate" not in Path(store).read_text()


# --- store selection and settings --------------------------------------------------------------


def test_options_work_before_or_after_the_command(run: Run, store: str) -> None:
    seed(run, store, "--namespace", "team-a")
    before = run("--store", store, "--namespace", "team-a", "timeline", "--json")
    after = run("timeline", "--json", "--store", store, "--namespace", "team-a")
    mixed = run("--store", store, "timeline", "-n", "team-a", "--json")
    assert before[0] == after[0] == mixed[0] == 0
    assert len(json.loads(before[1])) == 4
    assert before[1] == after[1] == mixed[1]


def test_environment_variables_give_the_defaults(tmp_path: Path) -> None:
    store = str(tmp_path / "env.json")
    env = clean_env(DEEPCREW_EPISODIC_STORE=store, DEEPCREW_EPISODIC_NAMESPACE="from-env")
    assert cli("record", "-q", "Reset the password for bob", env=env).returncode == 0
    found = cli("recall", "reset password", "--json", env=env)
    assert len(json.loads(found.stdout)) == 1
    # the flag wins over the variable
    other = cli("recall", "reset password", "--json", "--namespace", "other", env=env)
    assert json.loads(other.stdout) == []
    assert "namespace 'other' holds no episodes; namespaces in this store: from-env" in other.stderr
    assert "from-env" in Path(store).read_text()


def test_no_store_is_a_usage_error(run: Run) -> None:
    code, _, err = run("stats")
    assert code == 2
    assert "DEEPCREW_EPISODIC_STORE" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--store", "notes.txt", "stats"], "expected a path ending in .json"),
        (["--store", "x.json", "timeline", "--since", "someday"], "is not a time"),
        (["--store", "x.json", "recall"], "QUERY"),
        (["--store", "x.json", "recall", "q", "-k", "0"], "at least 1"),
        (["--store", "x.json", "record", "--outcome", "great", "-q", "q"], "invalid choice"),
        (["--store", "x.json", "frobnicate"], "invalid choice"),
        (["--store", "x.json", "record"], "--query"),
        (["--store", "x.json", "forget"], "give --id, a filter"),
        (["--store", "x.json", "--max-age", "soon", "stats"], "not a duration"),
    ],
)
def test_usage_errors_exit_2(run: Run, argv: list[str], message: str) -> None:
    code, out, err = run(*argv)
    assert code == 2
    assert message in err
    assert out == ""


def test_usage_error_in_a_subprocess_exits_2() -> None:
    done = cli("--store", "x.json", "timeline", "--until", "someday")
    assert done.returncode == 2
    assert "Traceback" not in done.stderr


def test_missing_json_store_is_an_error_for_reading_commands(run: Run, tmp_path: Path) -> None:
    typo = tmp_path / "epsiodes.json"
    for command in (["recall", "x"], ["timeline"], ["stats"], ["export"], ["forget", "--id", "a"]):
        code, out, err = run("--store", str(typo), *command)
        assert code == 1
        assert out == ""
        assert_one_clean_line(err)
        assert "no store at" in err
    assert list(tmp_path.iterdir()) == []  # not created, no lock file left behind


def test_corrupt_store_is_one_line_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{"episodic:default:e:1": "{\\"query\\": ')
    before = path.read_bytes()
    for command in (["recall", "x"], ["record", "-q", "new"]):
        done = cli("--store", str(path), *command)
        assert done.returncode == 1
        assert_one_clean_line(done.stderr)
        assert "not valid JSON" in done.stderr
    assert path.read_bytes() == before


def test_a_directory_is_not_a_store(run: Run, tmp_path: Path) -> None:
    code, _, err = run("--store", str(tmp_path / "dir.json"), "record", "-q", "x")
    assert code == 0  # created on first write
    (tmp_path / "d.json").mkdir()
    code, _, err = run("--store", str(tmp_path / "d.json"), "stats")
    assert code == 1
    assert "is a directory" in err


@pytest.mark.redis
def test_redis_store(clean_redis: str) -> None:
    recorded = cli("--store", clean_redis, "-n", "bot", "record", "-q", "Escalate ticket 5")
    assert recorded.returncode == 0, recorded.stderr
    found = cli("--store", clean_redis, "-n", "bot", "recall", "escalate ticket", "--json")
    assert [e["query"] for e in json.loads(found.stdout)] == ["Escalate ticket 5"]
    import redis

    client = redis.Redis.from_url(clean_redis)

    def texts() -> list[bytes]:
        # Every stored string, and every key name (the recall index's hash and sorted sets
        # hold the terms of an episode in their names).
        keys = client.keys("*")
        return keys + [client.get(k) or b"" for k in keys if client.type(k) == b"string"]

    try:
        assert any(b"Escalate" in text for text in texts())
        assert any(b"escal" in key for key in client.keys("*"))  # its term, in the index
        episode_id = recorded.stdout.split()[1]
        assert (
            cli(
                "--store", clean_redis, "-n", "bot", "forget", "--id", episode_id, "--yes"
            ).returncode
            == 0
        )
        assert not any(b"Escalate" in text or b"escal" in text for text in texts())
    finally:
        client.close()


@pytest.mark.parametrize(
    ("url", "message", "status"),
    [
        ("redis://127.0.0.1:1/0", "cannot reach redis at redis://127.0.0.1:1/0", 1),
        ("redis://:hunter22@127.0.0.1:1/0", "cannot reach redis at redis://:***@127.0.0.1:1/0", 1),
        ("unix://:hunter22@/nonexistent/redis.sock", "cannot reach redis at unix://:***@", 1),
        # A URL that does not parse is a usage error, like any value that does not parse.
        ("redis://127.0.0.1:notaport/0", "invalid redis URL", 2),
        ("redis://:hunter22@127.0.0.1:notaport/0", "redis://:***@127.0.0.1:notaport/0", 2),
    ],
)
def test_unreachable_or_bad_redis_is_one_line(url: str, message: str, status: int) -> None:
    done = cli("--store", url, "stats")
    assert done.returncode == status
    assert_one_clean_line(done.stderr)
    assert message in done.stderr
    assert "hunter22" not in done.stderr


def test_sqlite_store(run: Run, tmp_path: Path) -> None:
    db = str(tmp_path / "episodes.db")
    code, _, err = run("--store", db, "stats")
    assert code == 1
    assert "no store at" in err
    seed(run, db)
    code, out, _ = run("--store", db, "recall", "refund order", "--json")
    assert code == 0
    assert {e["query"] for e in json.loads(out)} == {
        "Refund order 1182 for Acme",
        "Refund order 77 twice",
    }
    code, out, _ = run("--store", str(tmp_path / "other.sqlite"), "record", "-q", "x")
    assert code == 0


def test_memory_store(run: Run) -> None:
    code, out, _ = run("--store", "memory:", "record", "-q", "scratch")
    assert code == 0
    code, out, _err = run("--store", "memory:", "stats", "--json")
    assert json.loads(out)["total"] == 0  # nothing survives the process


def test_bad_namespace_is_one_line(run: Run, store: str) -> None:
    code, _, err = run("--store", store, "-n", "a\x1b[2Jb\nforged", "record", "-q", "x")
    assert code == 1
    assert_one_clean_line(err)
    assert "invalid namespace" in err
    assert "\x1b" not in err


# --- reading commands -----------------------------------------------------------------------


def test_recall_human_and_verbose_output(run: Run, store: str) -> None:
    ids = seed(run, store)
    code, out, _ = run("--store", store, "recall", "refund an order", "-k", "1")
    assert code == 0
    assert out.startswith("1. ")
    assert out.count("\n1. ") + out.startswith("1. ") == 1
    assert "2. " not in out
    code, out, _ = run("--store", store, "recall", "refund order", "-v", "--intent", "what_failed")
    first = out.splitlines()[0]
    assert "Refund order 77 twice" in first  # the failure ranks first for what_failed
    assert "lesson: Check for an existing refund" in out
    assert "score " in out
    assert f"id {ids['refund-fail']}" in out


def test_recall_json_is_an_array_of_episodes(run: Run, store: str) -> None:
    seed(run, store)
    code, out, _ = run("--store", store, "recall", "refund order", "--json", "--outcome", "failure")
    assert code == 0
    items = json.loads(out)
    assert [i["query"] for i in items] == ["Refund order 77 twice"]
    assert set(items[0]) == {f.name for f in dataclasses.fields(Episode)}
    code, out, _ = run(
        "--store", store, "recall", "refund order", "--json", "-v", "--tag", "billing"
    )
    items = json.loads(out)
    assert len(items) == 2
    assert {"score", "why", "matched"} <= set(items[0]["recall"])
    assert items[0]["recall"]["score"] >= items[1]["recall"]["score"]


def test_recall_with_no_match_is_empty_and_exit_0(run: Run, store: str) -> None:
    seed(run, store)
    code, out, err = run("--store", store, "recall", "kubernetes helm chart", "--json")
    assert (code, json.loads(out)) == (0, [])
    code, out, err = run("--store", store, "recall", "kubernetes helm chart")
    assert (code, out) == (0, "")
    assert "no episode" in err


def test_timeline_filters(run: Run, store: str) -> None:
    seed(run, store)
    code, out, _ = run(
        "--store", store, "record", "-q", "Old migration", "--outcome", "success",
        "--tag", "ops", "--file", "/dev/null",
    )  # fmt: skip
    assert code == 2  # --file and flags together
    old = {"query": "Old migration", "outcome": "success", "timestamp": "2025-01-15T10:00:00Z"}
    path = Path(store).with_name("old.json")
    path.write_text(json.dumps(old))
    assert run("--store", store, "record", "--file", str(path))[0] == 0

    def timeline(*argv: str) -> list[str]:
        code, out, _ = run("--store", store, "timeline", "--json", *argv)
        assert code == 0
        return [e["query"] for e in json.loads(out)]

    everything = timeline()
    assert len(everything) == 5
    assert "Old migration" not in timeline("--since", "7d")
    assert timeline("--until", "2025-01-15") == ["Old migration"]  # a date includes its day
    assert timeline("--until", "2025-01-14") == []
    assert timeline("--since", "2025-01-01", "--until", "2025-02-01") == ["Old migration"]
    assert timeline("--outcome", "failure") == ["Refund order 77 twice"]
    assert timeline("--outcome", "partial", "--outcome", "failure") == [
        "Refund order 77 twice",
        "Deploy the api service",
    ]
    assert timeline("--tag", "OPS") == ["Deploy the api service"]
    assert timeline("--limit", "2") == everything[-2:]
    code, out, _ = run("--store", store, "timeline")
    lines = out.splitlines()
    assert len(lines) == 5
    assert "#billing" in lines[0]


def test_stats_counts_corrupt_and_expired(run: Run, store: str) -> None:
    seed(run, store)
    assert run("--store", store, "record", "-q", "gone", "--forget-after", "2020-01-01")[0] == 0
    data = json.loads(Path(store).read_text())
    data["episodic:default:e:2"] = '{"query": "half a rec'
    Path(store).write_text(json.dumps(data))
    code, out, err = run("--store", store, "stats", "--json")
    assert code == 0
    stats = json.loads(out)
    assert stats["total"] == 3
    assert stats["by_outcome"] == {
        "success": 1,
        "failure": 0,
        "partial": 1,
        "unknown": 1,
        "claimed_success": 0,
        "abandoned": 0,
    }
    assert stats["expired"] == 1
    assert stats["corrupt"] == 1
    assert stats["capacity"] == 100
    assert stats["size_bytes"] > 200
    assert stats["oldest"] <= stats["newest"]
    assert "undecodable record" in err  # the skipped record is reported (once)
    code, out, _ = run("--store", store, "stats")
    assert "corrupt    1" in out
    assert "expired    1" in out
    histogram = {line.split()[0]: line for line in out.splitlines()[-6:]}
    assert histogram["success"].endswith("#" * 30)
    assert histogram["failure"].split() == ["failure", "0"]


def test_export_and_import_round_trip(run: Run, store: str, tmp_path: Path) -> None:
    seed(run, store)
    dump = tmp_path / "dump.jsonl"
    assert run("--store", store, "export", "-o", str(dump))[0] == 0
    exported = [json.loads(line) for line in dump.read_text().splitlines()]
    assert len(exported) == 4
    copy = str(tmp_path / "copy.json")
    code, out, _ = run("--store", copy, "import", str(dump))
    assert (code, out.strip()) == (0, f"imported 4 episodes from {dump}")
    code, out, _ = run("--store", copy, "import", str(dump))
    assert out.strip() == f"imported 0 episodes from {dump}, 4 already present"
    code, out, _ = run("--store", copy, "export")
    assert [json.loads(line) for line in out.splitlines()] == exported


def test_import_rejects_a_bad_line_and_writes_nothing(run: Run, store: str, tmp_path: Path) -> None:
    good = json.dumps({"query": "ok"})
    bad = tmp_path / "bad.jsonl"
    bad.write_text(f"{good}\n{good}\n{json.dumps({'query': 'x', 'outcome': 'great'})}\n")
    code, _, err = run("--store", store, "import", str(bad))
    assert code == 1
    assert_one_clean_line(err)
    assert "line 3" in err
    assert "outcome" in err
    assert not Path(store).exists()
    bad.write_text(f"{good}\nnot json\n")
    code, _, err = run("--store", store, "import", str(bad))
    assert code == 1
    assert "line 2 is not JSON" in err


def test_import_a_hand_written_deepcrew_ai_log(run: Run, store: str, tmp_path: Path) -> None:
    # deepcrew-ai's layout: a ring of slots plus {"count", "next"}; slot 0 is the newest here.
    log = {
        "episodic:support:__meta__": json.dumps({"count": 3, "next": 1}),
        "episodic:support:0": json.dumps({"query": "third", "response": "c", "timestamp": "2026-01-03T00:00:00Z"}),
        "episodic:support:1": json.dumps({"query": "first", "response": "a", "timestamp": "2026-01-01T00:00:00Z"}),
        "episodic:support:2": json.dumps({"query": "second", "response": "b", "timestamp": "2026-01-02T00:00:00Z"}),
        "episodic:other:__meta__": json.dumps({"count": 1, "next": 1}),
        "episodic:other:0": json.dumps({"query": "elsewhere", "response": "x"}),
        "agent:scratch": "unrelated",
    }  # fmt: skip
    path = tmp_path / "deepcrew.json"
    path.write_text(json.dumps(log))
    code, _, err = run("--store", store, "import", str(path))
    assert code == 1
    assert "several namespaces (other, support)" in err
    code, out, _ = run("--store", store, "import", str(path), "--from-namespace", "support")
    assert code == 0
    code, out, _ = run("--store", store, "timeline", "--json")
    assert [e["query"] for e in json.loads(out)] == ["first", "second", "third"]
    code, out, _ = run("--store", store, "import", str(path), "--from-namespace", "support")
    assert "0 episodes" in out
    assert "3 already present" in out  # ids derived from the content: re-import is a no-op
    code, out, _ = run("--store", store, "-n", "support", "import", str(path))
    assert "imported 3" in out  # the target namespace picks the source namespace


def test_a_deepcrew_ai_log_larger_than_the_default_ring_is_read_whole(run: Run, store: str) -> None:
    # deepcrew-ai records its slot count, not a ring size of ours: all 150 slots are shown.
    log = {"episodic:support:__meta__": json.dumps({"count": 150, "next": 0})}
    for i in range(150):
        log[f"episodic:support:{i}"] = json.dumps({"query": f"ticket {i}", "response": "done"})
    Path(store).write_text(json.dumps(log))
    code, out, err = run("--store", store, "-n", "support", "timeline", "--json")
    assert code == 0, err
    assert [e["query"] for e in json.loads(out)] == [f"ticket {i}" for i in range(150)]
    code, out, _ = run("--store", store, "-n", "support", "stats", "--json")
    assert json.loads(out)["capacity"] == 150


@pytest.mark.skipif(importlib.util.find_spec("deepcrew") is None, reason="deepcrew-ai missing")
def test_import_a_log_written_by_deepcrew_ai(tmp_path: Path) -> None:
    legacy = tmp_path / "legacy.json"
    writer = textwrap.dedent(
        f"""
        import asyncio, deepcrew
        from deepcrew.memory import FileMemoryProvider
        async def main():
            memory = deepcrew.EpisodicMemory(
                FileMemoryProvider({str(legacy)!r}), namespace="helpdesk", max_episodes=4)
            for i in range(6):
                await memory.record(deepcrew.Episode(
                    query=f"printer jam number {{i}}", response=f"fixed {{i}}",
                    outcome="success" if i % 2 else "failure", tags=["printer"]))
        asyncio.run(main())
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", writer], env=clean_env(), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    store = str(tmp_path / "ours.json")
    imported = cli("--store", store, "import", str(legacy))
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.strip() == f"imported 4 episodes from {legacy}"
    found = cli("--store", store, "timeline", "--json")
    assert [e["query"] for e in json.loads(found.stdout)] == [
        f"printer jam number {i}" for i in range(2, 6)
    ]
    assert cli("--store", store, "-n", "x", "import", str(legacy)).returncode == 0  # only one ns


def test_record_from_json_jsonl_and_stdin(run: Run, store: str, tmp_path: Path) -> None:
    array = tmp_path / "many.json"
    array.write_text(json.dumps([{"query": "a1"}, {"query": "a2", "outcome": "success"}]))
    lines = tmp_path / "many.jsonl"
    lines.write_text('{"query": "l1"}\n\n{"query": "l2", "tags": ["x"]}\n')
    code, out, _ = run("--store", store, "record", "--file", str(array), "--json")
    assert code == 0
    assert [e["query"] for e in json.loads(out)] == ["a1", "a2"]
    assert run("--store", store, "record", "-f", str(lines), "--forget-after", "30d")[0] == 0
    piped = cli("--store", store, "record", "--file", "-", input='{"query": "from stdin"}')
    assert piped.returncode == 0, piped.stderr
    code, out, _ = run("--store", store, "export")
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["query"] for r in rows] == ["a1", "a2", "l1", "l2", "from stdin"]
    assert rows[2]["forget_after"] is not None
    assert rows[0]["forget_after"] is None
    code, _, err = run("--store", store, "record", "--file", str(tmp_path / "nope.json"))
    assert code == 1
    assert "no such file" in err


def test_stdin_that_is_closed_or_not_utf8_is_a_one_line_error(store: str) -> None:
    assert cli("--store", store, "record", "-q", "keep me").returncode == 0
    for command in (["import", "-"], ["record", "--file", "-"]):
        closed = subprocess.run(
            [sys.executable, "-m", "deepcrew_episodic", "--store", store, *command],
            capture_output=True, text=True, env=clean_env(), timeout=60, stdin=None,
            preexec_fn=lambda: os.close(0),
        )  # fmt: skip
        assert (closed.returncode, closed.stderr.splitlines()) == (
            1,
            ["deepcrew-episodic: error: stdin: closed, nothing to read"],
        )
        latin = subprocess.run(
            [sys.executable, "-m", "deepcrew_episodic", "--store", store, *command],
            capture_output=True, env=clean_env(), timeout=60,
            input='{"query": "caf\u00e9"}'.encode("latin-1"),
        )  # fmt: skip
        assert latin.returncode == 1
        assert latin.stderr.decode().startswith("deepcrew-episodic: error: stdin: not UTF-8")
    # UTF-8 with a byte order mark, whatever the locale says: read as the text it is.
    marked = subprocess.run(
        [sys.executable, "-m", "deepcrew_episodic", "--store", store, "import", "-"],
        capture_output=True, env=clean_env(LC_ALL="C", PYTHONIOENCODING="ascii"), timeout=60,
        input='\ufeff{"query": "caf\u00e9 cr\u00e8me"}'.encode(),
    )  # fmt: skip
    assert marked.returncode == 0, marked.stderr
    exported = cli("--store", store, "export").stdout.splitlines()
    assert [json.loads(line)["query"] for line in exported] == ["keep me", "caf\u00e9 cr\u00e8me"]


def test_record_redacts_and_says_so(run: Run, store: str) -> None:
    key = "sk-" + "Ab1" * 16
    code, out, err = run("--store", store, "record", "-q", f"why does {key} fail", "--json")
    assert code == 0
    assert json.loads(out)[0]["query"] == "why does [REDACTED:openai-key] fail"
    assert "redacted before storing: 1 secret (openai-key)" in err
    assert key not in Path(store).read_text()


# --- forget, clear, sweep -------------------------------------------------------------------------


def test_forget_by_filter_asks_and_dry_run_lists(run: Run, store: str) -> None:
    seed(run, store)
    code, out, err = run("--store", store, "forget", "--tag", "billing", "--dry-run")
    assert code == 0
    assert len(out.splitlines()) == 2
    assert "would be forgotten" in err
    code, out, err = run("--store", store, "forget", "--tag", "billing")
    assert code == 1  # no terminal to ask: nothing deleted
    assert "not confirmed" in err
    assert len(json.loads(run("--store", store, "timeline", "--json")[1])) == 4
    code, out, _ = run("--store", store, "forget", "--containing", "ACME", "--yes")
    assert (code, out.strip()) == (0, "forgot 1 episode")
    assert "Acme" not in Path(store).read_text()
    code, out, _ = run("--store", store, "forget", "--before", "2000-01-01", "--yes")
    assert (code, out.strip()) == (0, "forgot 0 episodes (none matched)")


def test_forget_by_id_prefix_and_unknown_id(run: Run, store: str) -> None:
    ids = seed(run, store)
    code, _, err = run(
        "--store", store, "forget", "--id", "0123456789abcdef", "--id", ids["deploy"], "--yes"
    )
    assert code == 1
    assert "no episode with id '0123456789abcdef'" in err
    assert len(json.loads(run("--store", store, "timeline", "--json")[1])) == 4  # all or nothing
    code, out, _ = run("--store", store, "forget", "--id", ids["deploy"][:12], "--yes")
    assert (code, out.strip()) == (0, "forgot 1 episode")
    remaining = {e["id"] for e in json.loads(run("--store", store, "timeline", "--json")[1])}
    assert ids["deploy"] not in remaining
    assert len(remaining) == 3


def test_an_unambiguous_id_prefix_of_four_or_more_names_its_episode(
    run: Run, store: str, tmp_path: Path
) -> None:
    batch = tmp_path / "batch.jsonl"
    batch.write_text(
        jsonl(
            {"query": "Rotate the signing key", "id": "5813b0021111aaaa"},
            {"query": "Deploy the api service", "id": "5813b0022222bbbb"},
            {"query": "Refund order 1182", "id": "77ac90d14e2f"},
        )
    )
    assert run("--store", store, "record", "--file", str(batch))[0] == 0
    # Five characters, as one reads them off a listing: that episode, and it alone.
    code, out, err = run("--store", store, "grade", "77ac9", "--outcome", "success")
    assert code == 0, err
    assert out.startswith("graded 77ac90d14e2f: success")
    code, out, err = run("--store", store, "forget", "--id", "77ac", "--yes")
    assert (code, out.strip()) == (0, "forgot 1 episode"), err
    # Shorter than four characters: refused as too short, not reported unknown.
    for argv in (["forget", "--id", "581", "--yes"], ["grade", "581", "--outcome", "failure"]):
        code, out, err = run("--store", store, *argv)
        assert code == 1
        assert_one_clean_line(err)
        assert "id prefix '581' is too short" in err
        assert "at least 4 characters" in err
    # Ambiguous: the candidates, so that one can choose, and nothing done.
    for argv in (
        ["forget", "--id", "5813b", "--yes"],
        ["grade", "5813b002", "--outcome", "failure"],
    ):
        code, out, err = run("--store", store, *argv)
        assert code == 1
        assert_one_clean_line(err)
        assert "is ambiguous" in err
        assert "5813b0021111 (Rotate the signing key)" in err
        assert "5813b0022222 (Deploy the api service)" in err
    episodes = json.loads(run("--store", store, "timeline", "--json")[1])
    assert sorted(e["id"] for e in episodes) == ["5813b0021111aaaa", "5813b0022222bbbb"]
    assert {e["outcome"] for e in episodes} == {"unknown"}


def test_counts_of_one_are_singular(run: Run, store: str) -> None:
    ids = seed(run, store)
    code, _, err = run("--store", store, "forget", "--id", ids["deploy"], "--dry-run")
    assert "1 episode would be forgotten" in err
    code, _, err = run("--store", store, "forget", "--id", ids["deploy"])
    assert "(1 episode matches;" in err
    code, out, _ = run("--store", store, "forget", "--id", ids["deploy"], "--yes")
    assert (code, out.strip()) == (0, "forgot 1 episode")
    code, _, err = run("--store", store, "shrink", "1", "--dry-run")
    assert "would delete 2 episodes" in err
    code, out, err = run("--store", store, "shrink", "1", "--yes")
    assert (code, out.strip()) == (0, "shrank namespace 'default' to 1 episode: deleted 2"), err
    code, _, err = run("--store", store, "clear", "--dry-run")
    assert ": 1 episode, with" in err
    code, out, _ = run("--store", store, "sweep", "--yes")
    assert (code, out.strip()) == (0, "swept 0 keys (expired episodes and strays)")


def test_every_count_message_agrees_with_its_number(run: Run, store: str, tmp_path: Path) -> None:
    # The counts the other commands print, at 1 and at more (forget, shrink, clear and sweep:
    # above; backfill and reembed: tests/test_cli_embeddings.py).
    one, two = "sk-" + "Ab1" * 16, "sk-" + "Cd2" * 16
    code, out, err = run("--store", store, "record", "-q", f"why does {one} fail")
    assert code == 0, err
    assert "redacted before storing: 1 secret (openai-key)" in err
    episode_id = out.split()[1]
    code, _, err = run(
        "--store", store, "record", "-q", f"{one} or {two}", "-r", "ghp_" + "x1" * 18
    )
    assert code == 0, err
    assert "redacted before storing: 3 secrets (github-token, openai-key x2)" in err
    code, out, err = run("--store", store, "grade", episode_id, "--outcome", "failure")
    assert (code, out.splitlines()[-1].endswith("(1 grade)")) == (0, True), out + err
    code, out, _ = run("--store", store, "grade", episode_id, "--outcome", "success")
    assert out.splitlines()[-1].endswith("(2 grades)")
    backup = tmp_path / "backup.jsonl"
    code, _, err = run("--store", store, "export", "-o", str(backup))
    assert f"exported 2 episodes to {backup}" in err
    lines = backup.read_text().splitlines()
    single = tmp_path / "single.jsonl"
    single.write_text(lines[0] + "\n")
    other = str(tmp_path / "other.json")
    code, out, err = run("--store", other, "import", str(single))
    assert (code, out.strip()) == (0, f"imported 1 episode from {single}"), err
    code, out, _ = run("--store", other, "import", str(backup))
    assert out.strip() == f"imported 1 episode from {backup}, 1 already present"
    code, _, err = run("--store", other, "record", "--file", str(single), "-n", "copy")
    assert code == 0, err
    assert "record: 2 grades in the file were not recorded" in err


def commands() -> list[str]:
    """Every subcommand of the real parser."""
    parser = build_parser()
    found = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return sorted(name for action in found for name in action.choices)


# A path of this machine (/home/me/src/..., ~/..., C:\\...) or a URL with a host or path: help text
# a user reads names neither ("redis://," and "unix:// or" name a kind of URL, not one).
_MACHINE_PATH = re.compile(
    r"(?<![\w:/])(?:~|\.{1,2})?/(?:[\w.-]+/)+[\w.-]*"
    r"|\b[A-Za-z]:\\"
    r"|\b[a-z][a-z0-9+.-]*://[^\s,)]+"
    r"|site-packages|\.py\b|\.md\b|\bdocs/"
)


@pytest.mark.parametrize("command", ["", *commands()])
def test_help_names_no_file_of_the_source_tree(run: Run, command: str, tmp_path: Path) -> None:
    argv = [*([command] if command else []), "--help"]
    code, out, err = run(*argv)
    assert code == 0, err
    # The console script too, run from elsewhere: its help must not depend on where it runs.
    installed = subprocess.run(
        [str(SCRIPT), *argv], capture_output=True, text=True, env=clean_env(), cwd=tmp_path,
        timeout=60,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr
    for text in (out, installed.stdout):
        source = Path(deepcrew_episodic.__file__).resolve().parents[1]
        assert str(source) not in text
        assert str(tmp_path) not in text
        assert _MACHINE_PATH.findall(text) == []
        assert not text.rstrip().endswith(("/", ".md", ".py"))


def test_clear_without_yes_never_hangs_and_deletes_nothing(store: str) -> None:
    assert cli("--store", store, "record", "-q", "keep me").returncode == 0
    for stdin in (subprocess.DEVNULL, subprocess.PIPE):  # PIPE: open, but nobody ever writes
        done = cli("--store", store, "clear", stdin=stdin)
        assert done.returncode == 1
        assert "not confirmed" in done.stderr
    closed = subprocess.run(
        [sys.executable, "-m", "deepcrew_episodic", "--store", store, "clear"],
        capture_output=True, text=True, env=clean_env(), timeout=60, stdin=None,
        preexec_fn=lambda: os.close(0),
    )  # fmt: skip
    assert closed.returncode == 1
    assert "keep me" in Path(store).read_text()
    assert cli("--store", store, "clear", "--yes").returncode == 0
    assert "keep me" not in Path(store).read_text()


@pytest.mark.parametrize(("answer", "cleared"), [("y\n", True), ("n\n", False), ("\n", False)])
def test_clear_asks_on_a_terminal(store: str, answer: str, cleared: bool) -> None:
    assert cli("--store", store, "record", "-q", "keep me").returncode == 0
    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "deepcrew_episodic", "--store", store, "clear"],
            stdin=follower,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=clean_env(),
            text=True,
        )
        os.write(leader, answer.encode())
        _out, err = proc.communicate(timeout=60)
    finally:
        os.close(leader)
        os.close(follower)
    assert "Delete every episode of namespace 'default'" in err
    assert (proc.returncode == 0) is cleared
    assert ("keep me" not in Path(store).read_text()) is cleared


def test_sweep_command(run: Run, store: str) -> None:
    seed(run, store)
    assert (
        run("--store", store, "record", "-q", "expired one", "--forget-after", "2020-01-01")[0] == 0
    )
    assert "expired one" in Path(store).read_text()
    code, out, err = run("--store", store, "sweep", "--yes")
    assert (code, out.strip()) == (0, "swept 1 key (expired episodes and strays)")
    assert "no --max-age" in err
    assert "expired one" not in Path(store).read_text()

    async def record_two_hours_ago() -> None:
        async with FileMemoryProvider(store) as provider:
            past = EpisodicMemory(provider, clock=lambda: time.time() - 7200)
            for query in ("old one", "old two"):
                await past.record(Episode(query=query))

    anyio.run(record_two_hours_ago)
    assert json.loads(run("--store", store, "stats", "--json")[1])["total"] == 6
    code, out, _ = run("--store", store, "--max-age", "1h", "sweep", "--yes")
    assert (code, out.strip()) == (0, "swept 2 keys (expired episodes and strays)")
    assert json.loads(run("--store", store, "stats", "--json")[1])["total"] == 4


# --- start-up -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command", [["recall", "refund"], ["timeline"], ["history", "refund"], ["stats"], ["export"]]
)
def test_reading_a_file_store_imports_no_heavy_package(store: str, command: list[str]) -> None:
    # What keeps `recall` fast to start: it reads the file once and runs without an event
    # loop, so neither asyncio nor anyio loads, and pydantic and litellm never do.
    assert cli("--store", store, "record", "-q", "refund order").returncode == 0
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "deepcrew_episodic", "--store", store,
         *command],
        capture_output=True, text=True, env=clean_env(), timeout=60,
    )  # fmt: skip
    assert done.returncode == 0
    assert "refund order" in done.stdout or command == ["stats"]
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if "|" in line}
    # The measurement saw the real path (_memory itself loads through the package's lazy
    # __getattr__, i.e. importlib, which -X importtime does not report; its imports it does).
    assert {"deepcrew_episodic._log", "deepcrew_episodic._recall"} <= imported
    heavy = {"litellm", "openai", "redis", "httpx", "pydantic", "pydantic_core", "asyncio", "anyio"}
    assert not {m for m in imported if m.split(".")[0] in heavy}


def test_text_that_is_not_utf8_is_refused_in_one_line(store: str) -> None:
    # A Latin-1 byte on the command line becomes a lone surrogate in Python: storing it would
    # break every later reader that writes it out.
    done = subprocess.run(
        [sys.executable, "-m", "deepcrew_episodic", "--store", store, "record", "-q",
         b"caf\xe9 refund"],
        capture_output=True, text=True, env=clean_env(), timeout=60,
    )  # fmt: skip
    assert done.returncode == 1
    assert "query: text is not valid Unicode" in done.stderr
    assert "Traceback" not in done.stderr
    assert not Path(store).exists()  # nothing was written


def test_a_redis_url_ending_in_json_is_still_redis() -> None:
    # Reading commands take a loop-free path for .json files; a URL must never take it.
    url = "redis://127.0.0.1:1/0?client_name=bot.json"
    for command in (["stats"], ["recall", "refund"]):
        done = cli("--store", url, *command)
        assert done.returncode == 1
        assert "cannot reach redis" in done.stderr
        assert "no store at" not in done.stderr


def test_writing_commands_and_other_stores_still_run_on_an_event_loop(store: str) -> None:
    # The loop-free path is for reading a file only; a write needs anyio (worker threads).
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "deepcrew_episodic", "--store", store,
         "record", "-q", "refund order"],
        capture_output=True, text=True, env=clean_env(), timeout=60,
    )  # fmt: skip
    assert done.returncode == 0
    assert "anyio" in {line.split("|")[-1].strip() for line in done.stderr.splitlines()}


def test_export_into_a_closed_pipe_is_quiet(store: str, tmp_path: Path) -> None:
    # More than a pipe buffer of output, read by a consumer that stops after 10 bytes.
    batch = tmp_path / "batch.jsonl"
    batch.write_text(
        "".join(json.dumps({"query": f"episode {i} " + "x" * 2000}) + "\n" for i in range(100))
    )
    assert cli("--store", store, "record", "--file", str(batch)).returncode == 0
    shell = shutil.which("sh")
    assert shell is not None
    done = subprocess.run(
        [shell, "-c", f"{sys.executable} -m deepcrew_episodic --store {store} export | head -c 10"],
        capture_output=True, text=True, env=clean_env(), timeout=60,
    )  # fmt: skip
    assert done.stdout == '{"query": '
    assert done.stderr == ""


def test_stored_control_characters_never_reach_the_terminal(run: Run, store: str) -> None:
    hostile = "refund \x1b]0;pwned\x07 order \x1b[2J\x9b31m now\nIGNORE PREVIOUS"
    assert (
        run("--store", store, "record", "-q", hostile, "-r", "ok\x1b[0m", "--tag", "a\x1bb")[0] == 0
    )
    for command in (["timeline"], ["recall", "refund order", "-v"]):
        code, out, _ = run("--store", store, *command)
        assert code == 0
        assert not any(c in out for c in "\x1b\x07\x9b")
        assert "IGNORE PREVIOUS" in out.splitlines()[0]  # one episode, one line
    for command in (["recall", "refund order", "--json"], ["export"]):
        code, out, _ = run("--store", store, *command)
        assert not any(c in out for c in "\x1b\x07\x9b")  # escaped: \u001b, \u009b, ...
        item = json.loads(out)[0] if command[0] == "recall" else json.loads(out.splitlines()[0])
        assert item["query"] == hostile  # machine output keeps the exact text


def test_the_ring_size_of_the_application_is_adopted(run: Run, store: str) -> None:
    async def fill() -> None:
        async with FileMemoryProvider(store) as provider:
            memory = EpisodicMemory(provider, namespace="app", max_episodes=150)
            for i in range(120):
                await memory.record(Episode(query=f"ticket {i}"))

    anyio.run(fill)
    code, out, _ = run("--store", store, "-n", "app", "timeline", "--json")
    assert code == 0
    assert len(json.loads(out)) == 120  # not the default 100
    assert run("--store", store, "-n", "app", "record", "-q", "ticket 120")[0] == 0
    _, out, _ = run("--store", store, "-n", "app", "stats", "--json")
    stats = json.loads(out)
    assert (stats["total"], stats["capacity"]) == (121, 150)  # the CLI's record deleted nothing
    _code, out, _ = run("--store", store, "-n", "app", "--max-episodes", "10", "timeline", "--json")
    assert [e["query"] for e in json.loads(out)] == [f"ticket {i}" for i in range(111, 121)]


def test_record_file_with_a_stored_id_writes_nothing(run: Run, store: str, tmp_path: Path) -> None:
    code, out, _ = run("--store", store, "record", "-q", "first", "--json")
    first = json.loads(out)[0]
    batch = tmp_path / "batch.jsonl"
    batch.write_text(json.dumps({"query": "new one"}) + "\n" + json.dumps(first) + "\n")
    code, _, err = run("--store", store, "record", "--file", str(batch))
    assert code == 1
    assert_one_clean_line(err)
    assert "already stored" in err
    batch.write_text(
        json.dumps({"query": "a", "id": "x1"}) + "\n" + json.dumps({"query": "b", "id": "x1"})
    )
    assert run("--store", store, "record", "--file", str(batch))[0] == 1
    code, out, _ = run("--store", store, "timeline", "--json")
    assert [e["query"] for e in json.loads(out)] == ["first"]


# --- secrets of the store URL (issue 11, item 5) -----------------------------------------------

NASTY_PASSWORDS = [
    "hunter22-Secret",
    "p@ss w#rd",
    "a/b?c%41:d+e",
    'it\'s "quoted" \\ back',
    "pässwörd-ünïcode",
    "plus+and space",
]


def spellings(password: str) -> set[str]:
    """How a password could appear in output: as written, percent-encoded, escaped."""
    from urllib.parse import quote, quote_plus

    forms = {password, quote(password, safe=""), quote_plus(password), repr(password)[1:-1]}
    forms |= {json.dumps(password)[1:-1], password.encode("unicode_escape").decode()}
    return forms


def assert_no_secret(text: str, *secrets: str) -> None:
    for secret in secrets:
        for form in spellings(secret):
            assert form not in text, f"{form!r} leaked in {text!r}"


def store_urls(password: str, port: int) -> list[str]:
    from urllib.parse import quote

    encoded = quote(password, safe="")
    return [
        f"redis://:{encoded}@127.0.0.1:{port}/0",
        f"redis://agent-user:{encoded}@127.0.0.1:{port}/0",
        f"redis://127.0.0.1:{port}/0?password={encoded}",
        f"redis://127.0.0.1:{port}/0?username=agent-user&password={quote(password, safe='@ ')}",
        f"redis://:{password}@127.0.0.1:{port}/0",  # as typed, not encoded
    ]


@pytest.mark.parametrize("password", NASTY_PASSWORDS)
def test_no_output_carries_a_store_password_when_redis_is_unreachable(
    run: Run, password: str
) -> None:
    # Port 1 on loopback: redis-py's own connection error, on every command path.
    for url in store_urls(password, 1):
        for command in (["stats"], ["stats", "--json"], ["recall", "x", "-v", "--json"],
                        ["timeline"], ["export", "-o", "/nonexistent/x.jsonl"],
                        ["record", "-q", "x"], ["shrink", "3", "--yes"]):  # fmt: skip
            code, out, err = run("--store", url, *command)
            assert code in (1, 2), (url, command, err)
            assert out == ""
            assert_one_clean_line(err)
            assert_no_secret(err, password)
            assert_no_secret(err, "agent-user")


@pytest.mark.parametrize("password", NASTY_PASSWORDS[:3])
def test_argparse_and_environment_errors_do_not_echo_a_password(run: Run, password: str) -> None:
    from urllib.parse import quote

    url = f"redis://:{quote(password, safe='')}@127.0.0.1:1/0"
    for argv in (
        [f"--sotre={url}", "stats"],  # argparse echoes an unknown option with its value
        ["--store", url, "stats", "--since", "x"],
        ["--store", url.replace("redis", "memcached"), "stats"],  # not a store kind we know
        ["stats", "--store", url, "--max-age", "99999999999d"],
    ):
        code, out, err = run(*argv)
        assert code == 2, argv
        assert_one_clean_line(err)
        assert_no_secret(out + err, password)
    done = cli("stats", env=clean_env(DEEPCREW_EPISODIC_STORE=url.replace("redis", "mongo")))
    assert done.returncode == 2
    assert_no_secret(done.stdout + done.stderr, password)


@pytest.fixture(scope="module")
def password_redis() -> Iterator[tuple[int, str]]:
    """A real redis-server that requires a password full of URL-special characters."""
    import redis
    from redis_server import redis_server

    password = "p@ss w#rd/?%:+'\"ü"
    with redis_server() as (port, _proc):
        client = redis.Redis(host="127.0.0.1", port=port)
        client.config_set("requirepass", password)
        client.close()
        yield port, password


@pytest.mark.redis
def test_no_output_carries_the_password_of_a_real_redis(
    run: Run, password_redis: tuple[int, str]
) -> None:
    from urllib.parse import quote

    port, password = password_redis
    for url in store_urls(password, port)[:1] + store_urls(password, port)[2:3]:
        every = ""
        for command in (
            ["record", "-q", "Rotate the key", "--tag", "ops"],
            ["record", "-q", f"the raw password was {password} in a log", "--json"],
            ["recall", "rotate key", "-v"],
            ["recall", "rotate key", "-v", "--json"],
            ["timeline", "--json"],
            ["stats"],
            ["stats", "--json"],
            ["export"],
            ["forget", "--containing", "rotate", "--dry-run"],
        ):
            code, out, err = run("--store", url, "-n", "secrets", *command)
            assert code == 0, (command, err)
            every += out + err
            if command[0] in ("stats", "recall", "timeline"):
                json.loads(out) if "--json" in command else None
        assert_no_secret(every, password)
        assert "redis://:***@127.0.0.1" in every or "password=***" in every
        # The episode quoting the password: scrubbed from every output, and said so.
        assert "the raw password was *** in a log" in every
        assert re.search(r"replaced [0-9]+ occurrences? of the store URL's credentials", every)
        assert run("--store", url, "-n", "secrets", "clear", "--yes")[0] == 0
    wrong = f"redis://:{quote(password[::-1], safe='')}@127.0.0.1:{port}/0"
    code, out, err = run("--store", wrong, "stats", "--json")
    assert code == 1
    assert_one_clean_line(err)
    assert_no_secret(out + err, password, password[::-1])
    done = cli("--store", store_urls(password, port)[1], "stats")  # a user that does not exist
    assert done.returncode == 1
    assert_one_clean_line(done.stderr)
    assert_no_secret(done.stdout + done.stderr, password, "agent-user")


# --- exports (item 8) -------------------------------------------------------------------------


def test_export_follows_no_planted_symlink_and_keeps_the_store_private(
    run: Run, store: str, tmp_path: Path
) -> None:
    seed(run, store)
    os.chmod(store, 0o600)
    victim = tmp_path / "victim.txt"
    victim.write_text("do not touch")
    out_dir = tmp_path / "exports"
    out_dir.mkdir()
    target = out_dir / "backup.jsonl"
    # Every name the old code wrote first, and the target itself, point at the victim.
    (out_dir / ".backup.jsonl.tmp").symlink_to(victim)
    target.symlink_to(victim)
    code, _, err = run("--store", store, "export", "-o", str(target))
    assert code == 0, err
    assert victim.read_text() == "do not touch"
    assert not target.is_symlink()
    assert len(target.read_text().splitlines()) == 4
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert sorted(p.name for p in out_dir.iterdir()) == [".backup.jsonl.tmp", "backup.jsonl"]
    # An existing world-readable export is replaced by one with the store's mode.
    os.chmod(store, 0o640)
    target.chmod(0o644)
    assert run("--store", store, "export", "-o", str(target))[0] == 0
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    # A store with no file mode of its own (SQLite, Redis): 0600.
    db = str(tmp_path / "e.db")
    seed(run, db)
    os.chmod(db, 0o644)
    assert run("--store", db, "export", "-o", str(target))[0] == 0
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    code, _, err = run("--store", store, "export", "-o", str(out_dir))
    assert code == 1
    assert "is a directory" in err


# --- second round of issue 11 (items 5, 8, 10) ----------------------------------------------

CUT_PASSWORD = "S3cretPassw0rdXYZ"


@pytest.fixture(scope="module")
def cut_redis() -> Iterator[str]:
    """A real redis-server that requires :data:`CUT_PASSWORD`; yields its URL."""
    import redis
    from redis_server import redis_server

    with redis_server() as (port, _proc):
        client = redis.Redis(host="127.0.0.1", port=port)
        client.config_set("requirepass", CUT_PASSWORD)
        client.close()
        yield f"redis://:{CUT_PASSWORD}@127.0.0.1:{port}/0"


def pieces_of(secret: str, size: int = 4) -> set[str]:
    return {secret[i : i + size] for i in range(len(secret) - size + 1)}


@pytest.mark.redis
def test_no_cut_leaves_a_piece_of_the_store_password(
    run: Run, cut_redis: str, tmp_path: Path
) -> None:
    # The password at every offset around each cut a listing makes (query 70, tags 80,
    # recall query 90, answer 160, a quoted value 60, the id prefix 12): the whole password
    # is scrubbed before anything cuts, so not even 4 characters of it may show.
    every = ""
    for n in (*range(50, 75, 3), *range(75, 95, 4), 150, 155, 158):
        ns = ["-n", f"cut{n}"]
        padded = "x" * n + CUT_PASSWORD
        code, out, err = run("--store", cut_redis, *ns, "record", "-q", padded, "-r", padded,
                             "--tag", "t" * (n % 80) + CUT_PASSWORD)  # fmt: skip
        assert code == 0, err
        for command in (["timeline"], ["recall", "x" * 20, "-v"], ["stats"],
                        ["forget", "--containing", "x", "--dry-run"],
                        ["recall", padded + " nothing", "--tag", "none"]):  # fmt: skip
            code, out, err = run("--store", cut_redis, *ns, *command)
            assert code == 0, (command, err)
            every += out + err
    # A stored id holding the password, and the password split by a zero-width space or a
    # line break (on a terminal, still the password).
    batch = tmp_path / "odd.json"
    batch.write_text(json.dumps([
        {"query": "zw " + CUT_PASSWORD[:6] + "\u200b" + CUT_PASSWORD[6:], "id": "odd-1"},
        {"query": "nl " + CUT_PASSWORD[:9] + "\n" + CUT_PASSWORD[9:], "id": "odd-2"},
        {"query": "id", "id": "xx" + CUT_PASSWORD},
    ]))  # fmt: skip
    code, _, err = run("--store", cut_redis, "-n", "odd", "record", "--file", str(batch))
    assert code == 0, err
    for command in (["timeline"], ["recall", "zw nl id", "-v"], ["timeline", "--json"]):
        code, out, err = run("--store", cut_redis, "-n", "odd", *command)
        assert code == 0, err
        every += out + err
    leaked = {p for p in pieces_of(CUT_PASSWORD) if p in every}
    assert not leaked, leaked
    assert "[xx***]" in every  # the id prefix, scrubbed before it was cut
    assert "x***" in every


def test_a_piece_of_a_store_secret_left_by_a_cut_is_removed() -> None:
    # A message cut before the scrubber saw it (the library's own messages cut values): a
    # head of the secret before an ellipsis or at the end of a line, a tail after one.
    from deepcrew_episodic.cli._output import Scrubber

    scrub = Scrubber()
    scrub.learn(f"redis://:{CUT_PASSWORD}@host:6379/0")
    for text, kept in [
        (f"value 'xx{CUT_PASSWORD[:8]}…'", "value 'xx***…'"),
        (f"value xx{CUT_PASSWORD[:4]}...", "value xx***..."),
        (f"ends on {CUT_PASSWORD[:11]}", "ends on ***"),
        (f"quoted ('{CUT_PASSWORD[:5]}')", "quoted ('***')"),
        (f"…{CUT_PASSWORD[-6:]} and on", "…*** and on"),
        (f"{CUT_PASSWORD[:3]}… is too short to tell", f"{CUT_PASSWORD[:3]}… is too short to tell"),
        (f"{CUT_PASSWORD[:6]} in the middle stays", f"{CUT_PASSWORD[:6]} in the middle stays"),
    ]:
        assert scrub(text) == kept


def jsonl(*items: dict[str, object]) -> str:
    return "".join(json.dumps(item) + "\n" for item in items)


def test_a_file_is_checked_whole_before_anything_is_written(
    run: Run, store: str, tmp_path: Path
) -> None:
    # record() refuses an id holding a secret and a future timestamp; the file's earlier
    # records must not be stored before that refusal, and the record is named.
    batch = tmp_path / "batch.jsonl"
    bad_records = [
        ({"query": "two", "id": "AKIAIOSFODNN7EXAMPLE"}, "looks like a secret"),
        ({"query": "two", "timestamp": "2999-01-01T00:00:00Z"}, "in the future"),
    ]
    for bad, reason in bad_records:
        batch.write_text(jsonl({"query": "one"}, bad, {"query": "three"}))
        for command in (["import", str(batch)], ["record", "--file", str(batch)]):
            code, out, err = run("--store", store, *command)
            assert code == 1, (command, out)
            assert_one_clean_line(err)
            assert f"{batch}: line 2:" in err
            assert reason in err
            assert "nothing was written" in err
            assert "AKIAIOSFODNN7EXAMPLE" not in err
            assert (
                not Path(store).exists() or run("--store", store, "timeline", "--json")[1] == "[]\n"
            )
        # The same from a JSON array: the item is named.
        array = tmp_path / "batch.json"
        array.write_text(json.dumps([{"query": "one"}, bad]))
        code, _, err = run("--store", store, "import", str(array))
        assert code == 1
        assert f"{array}: item 2:" in err
    assert not Path(store).exists()
    # An episode already stored is skipped by import, not checked again.
    batch.write_text(jsonl({"query": "one", "id": "run-1"}))
    assert run("--store", store, "import", str(batch))[0] == 0
    batch.write_text(jsonl({"query": "one", "id": "run-1"}, {"query": "two", "id": "run-2"}))
    code, out, _ = run("--store", store, "import", str(batch))
    assert (code, out.strip()) == (0, f"imported 1 episode from {batch}, 1 already present")


def test_a_deepcrew_ai_log_is_checked_whole_before_import(
    run: Run, store: str, tmp_path: Path
) -> None:
    log = {
        "episodic:default:__meta__": json.dumps({"count": 2, "next": 2}),
        "episodic:default:0": json.dumps({"query": "fine", "timestamp": "2026-01-01T00:00:00Z"}),
        "episodic:default:1": json.dumps({"query": "later", "timestamp": "2999-01-01T00:00:00Z"}),
    }
    source = tmp_path / "old.json"
    source.write_text(json.dumps(log))
    code, _, err = run("--store", store, "import", str(source))
    assert code == 1
    assert_one_clean_line(err)
    assert "in the future" in err
    assert "episode 2 of 2" in err
    assert not Path(store).exists()


@pytest.mark.parametrize("kind", ["fifo", "socket", "directory"])
def test_export_refuses_a_target_that_is_not_a_regular_file(
    run: Run, store: str, tmp_path: Path, kind: str
) -> None:
    import socket

    seed(run, store)
    target = tmp_path / "t"
    sock = None
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(target))
    else:
        target.mkdir()
    try:
        before = os.lstat(target)
        code, out, err = run("--store", store, "export", "-o", str(target))
        assert code == 1
        assert out == ""
        assert_one_clean_line(err)
        assert "not a regular file" in err
        assert "nothing was written" in err
        after = os.lstat(target)
        assert (after.st_ino, stat.S_IFMT(after.st_mode)) == (
            before.st_ino,
            stat.S_IFMT(before.st_mode),
        )
        assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    finally:
        if sock is not None:
            sock.close()


def test_export_replaces_a_symlink_to_a_fifo_and_dash_is_stdout(
    run: Run, store: str, tmp_path: Path
) -> None:
    seed(run, store)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    link = tmp_path / "link.jsonl"
    link.symlink_to(fifo)
    # Never opened (opening a FIFO to write would block): the link is replaced, not followed.
    code, _, err = run("--store", store, "export", "-o", str(link))
    assert code == 0, err
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert not link.is_symlink()
    assert len(link.read_text().splitlines()) == 4
    code, out, _ = run("--store", store, "export", "-o", "-")
    assert code == 0
    assert out == link.read_text()
    assert not (Path.cwd() / "-").exists()


AWS_KEY = "AKIAIOSFODNN7EXAMPLE"
DB_URL = "postgres://admin:hunter2hunter2@db.internal/app"


def test_stored_secrets_never_reach_a_listing(run: Run, store: str) -> None:
    # Stored with redact=False (as deepcrew-ai and such memories do), each secret placed so
    # that a listing's cut falls inside it: the redactor must run before the cut.
    async def write() -> None:
        async with FileMemoryProvider(store) as provider:
            memory = EpisodicMemory(provider, redact=False)
            for pad in (60, 64, 66, 85, 150):
                await memory.record(
                    Episode(
                        query="refund " + "q" * pad + " " + AWS_KEY,
                        response="r" * pad + " " + DB_URL,
                        reflection="lesson " + AWS_KEY if pad == 60 else None,
                        tags=["t" * (pad % 70) + "-" + AWS_KEY],
                        tools_used=[AWS_KEY],
                        agent_id=AWS_KEY,
                        outcome="failure",
                    )
                )
            await memory.record(Episode(query="refund by id", id=AWS_KEY))

    anyio.run(write)
    secrets = [AWS_KEY, "hunter2hunter2"]
    every = ""
    for command in (["timeline"], ["timeline", "--json"], ["recall", "refund", "-v", "-k", "9"],
                    ["recall", "refund", "-v", "--json", "-k", "9"], ["stats"],
                    ["forget", "--containing", "refund", "--dry-run"],
                    ["recall", "refund " + "q" * 55 + " " + AWS_KEY, "--tag", "none"]):  # fmt: skip
        code, out, err = run("--store", store, *command)
        assert code == 0, (command, err)
        if "--json" in command:
            assert json.loads(out)
        every += out + err
    for secret in secrets:
        assert not {p for p in pieces_of(secret, 6) if p in every}, (secret, every)
    assert "[REDACTED:aws-access-key]" in every
    # export is a backup: the data as stored, and it says so on stderr.
    code, out, err = run("--store", store, "export")
    assert code == 0
    assert AWS_KEY in out
    assert DB_URL in out
    assert "6 exported episodes hold text that looks like a secret" in err


# --- stored text on the terminal (item 10) ----------------------------------------------------

# (A lone surrogate makes a record undecodable: see the corrupt-record tests.)
HOSTILE = "a\x1b[2J\x1b]0;t\x07b\u202eevil\u200bc\u2028d\nFORGED LINE\x9b1m\U000e0041\ufeff"


def hidden_in(text: str) -> list[str]:
    return [c for c in text if c != "\n" and (is_hidden(c) or c in "\u2028\u2029")]


def test_every_stored_string_is_escaped_in_human_output(run: Run, store: str) -> None:
    # Written around validation, as an old log or a hand edit would hold it.
    fields = {"query": "refund " + HOSTILE, "response": HOSTILE, "reflection": HOSTILE,
              "tags": [HOSTILE], "tools_used": [HOSTILE], "agent_id": HOSTILE,
              "timestamp": "2026-01-01T00:00:00Z", "id": "ok-id-1"}  # fmt: skip
    log = {
        "episodic:default:__seq__": "1",
        "episodic:default:e:1": json.dumps(fields),
    }
    Path(store).write_text(json.dumps(log))
    outputs = []
    for command in (["timeline"], ["recall", "refund", "-v"], ["forget", "--id", "ok-id-1",
                    "--dry-run"], ["stats"], ["recall", "nothing " + HOSTILE]):  # fmt: skip
        code, out, err = run("--store", store, *command)
        assert code == 0, err
        outputs.append(out + err)
        assert not hidden_in(out + err), (command, out + err)
        if command[0] in ("timeline", "forget"):
            assert len(out.splitlines()) == 1  # one episode, one line: nothing forged
    assert "\\x1b[2J" in outputs[0]  # spelled out, visible
    assert "\\u202e" in outputs[0]
    for command in (["timeline", "--json"], ["recall", "refund", "--json"], ["export"]):
        code, out, err = run("--store", store, *command)
        assert code == 0
        assert not hidden_in(out + err), command
        item = json.loads(out)[0] if "--json" in command else json.loads(out)
        assert item["query"] == "refund " + HOSTILE  # machine output keeps the exact text


def test_ids_are_validated_on_record_and_escaped_when_stored(
    run: Run, store: str, tmp_path: Path
) -> None:
    batch = tmp_path / "batch.jsonl"
    for bad in ("\x1b[2J", "x\nrecorded fake (success)", "a\u202eb", "a b"):
        batch.write_text(json.dumps({"query": "q", "id": bad}))
        code, out, err = run("--store", store, "record", "--file", str(batch))
        assert code == 1
        assert out == ""
        assert_one_clean_line(err)
        assert not hidden_in(err)
    assert not Path(store).exists()  # nothing was recorded
    # An id stored by hand (an old log) reaches no terminal raw: the record is undecodable.
    log = {"episodic:default:__seq__": "1",
           "episodic:default:e:1": json.dumps({"query": "q", "id": "\x1b[2Jx\ny"})}  # fmt: skip
    Path(store).write_text(json.dumps(log))
    for command in (["timeline"], ["stats"], ["export"], ["forget", "--corrupt", "--dry-run"]):
        code, out, err = run("--store", store, *command)
        assert code == 0
        assert not hidden_in(out + err), command


# --- absurd values (item 15) ------------------------------------------------------------------

ABSURD = ["3000000d", "99999999999d", "9" * 400 + "s", "1e9d", "inf", "nan", "-5d", "0d",
          "0.0000001s", "٣d", "²d", "9999-12-31T23:59-05:00", "0001-01-01T00:00+05:00",
          "\u0661\u0662\u0663\u0664-\u0660\u0661-\u0660\u0661", "10000-01-01", "x" * 100000]  # fmt: skip


VALID_EXTREMES = {
    ("--max-age", "3000000d"),
    ("timeline", "9999-12-31T23:59-05:00"),
    ("timeline", "0001-01-01T00:00+05:00"),
    ("forget", "9999-12-31T23:59-05:00"),
    ("forget", "0001-01-01T00:00+05:00"),
}


@pytest.mark.parametrize("value", ABSURD)
def test_absurd_durations_and_dates_are_usage_errors(run: Run, store: str, value: str) -> None:
    assert run("--store", store, "record", "-q", "x")[0] == 0
    for argv in (
        ["timeline", "--since", value],
        ["timeline", "--until", value],
        ["forget", "--before", value, "--dry-run"],
        ["--max-age", value, "stats"],
        ["record", "-q", "y", "--forget-after", value],
    ):
        code, _, err = run("--store", store, *argv)
        if code == 0:  # a value this option can hold (a retention of 8,000 years)
            assert (argv[0], value) in VALID_EXTREMES, argv
            continue
        assert code == 2, (argv, err)
        assert_one_clean_line(err)
        assert len(err) < 400


@pytest.mark.parametrize("value", ["0", "-1", "٣", "²", "1.5", "1e3", "9" * 5000, "10" * 30, " "])
def test_absurd_counts_are_usage_errors(run: Run, store: str, value: str) -> None:
    for argv in (["recall", "x", "-k", value], ["timeline", "--limit", value],
                 ["--max-episodes", value, "stats"], ["shrink", value, "--yes"]):  # fmt: skip
        code, _, err = run("--store", store, *argv)
        assert code == 2, (argv, err)
        assert_one_clean_line(err)
    env = clean_env(DEEPCREW_EPISODIC_STORE=store, DEEPCREW_EPISODIC_MAX_AGE="99999999999d")
    done = cli("stats", env=env)
    assert done.returncode == 2
    assert_one_clean_line(done.stderr)


@pytest.mark.parametrize("value", ["٣", "inf", "nan", "1e999", "0x10"])
def test_absurd_scores_are_usage_errors(run: Run, store: str, value: str) -> None:
    code, _, err = run("--store", store, "record", "-q", "x", "--score", value)
    assert code == 2
    assert_one_clean_line(err)


def test_an_overflowing_duration_in_a_subprocess_is_one_line() -> None:
    done = cli("--store", "x.json", "timeline", "--since", "3000000d")
    assert done.returncode == 2
    assert_one_clean_line(done.stderr)
    assert "out of range" in done.stderr


# --- ring sizes (item 1) ----------------------------------------------------------------------


def test_a_smaller_max_episodes_never_shrinks_and_shrink_does(
    run: Run, store: str, tmp_path: Path
) -> None:
    batch = tmp_path / "batch.jsonl"
    batch.write_text("".join(json.dumps({"query": f"ticket {i}"}) + "\n" for i in range(300)))
    assert run("--store", store, "--max-episodes", "300", "record", "--file", str(batch))[0] == 0

    def total() -> int:
        return int(json.loads(run("--store", store, "stats", "--json")[1])["total"])

    code, out, err = run("--store", store, "--max-episodes", "10", "sweep")
    assert (code, out.strip()) == (0, "swept 0 keys (expired episodes and strays)")
    assert "smaller than the log's ring (300)" in err
    assert run("--store", store, "--max-episodes", "10", "record", "-q", "ticket 300")[0] == 0
    first = json.loads(run("--store", store, "timeline", "--json")[1])[1]["id"]
    assert run("--store", store, "--max-episodes", "10", "forget", "--id", first, "--yes")[0] == 0
    assert total() == 299  # 300 kept in a 300 ring (+1 recorded, -1 evicted), -1 forgotten
    code, _, err = run("--store", store, "--max-episodes", "10", "import", str(batch), "--yes")
    assert code == 0
    assert run("--store", store, "--max-episodes", "10", "clear")[0] == 1  # not confirmed
    assert total() == 300
    # shrink asks like clear: without a terminal and without --yes, nothing is deleted.
    done = cli("--store", store, "shrink", "10")
    assert done.returncode == 1
    assert "not confirmed" in done.stderr
    assert total() == 300
    code, out, _ = run("--store", store, "shrink", "10", "--yes")
    assert (code, out.strip()) == (0, "shrank namespace 'default' to 10 episodes: deleted 290")
    stats = json.loads(run("--store", store, "stats", "--json")[1])
    assert (stats["total"], stats["capacity"]) == (10, 10)
    assert len(json.loads(Path(store).read_text())) < 20  # the payloads are gone from the file


# --- undecodable records and unexpected errors (item 13) --------------------------------------


def test_undecodable_sqlite_records_never_crash_and_forget_corrupt_deletes_them(
    run: Run, tmp_path: Path
) -> None:
    db = str(tmp_path / "e.db")
    seed(run, db)
    conn = sqlite3.connect(db)
    with conn:
        # Invalid UTF-8, inside a JSON string and as a whole value.
        # REPLACE deletes and inserts: the store refuses to change an episode in place.
        conn.execute(
            "INSERT OR REPLACE INTO kv SELECT key, CAST(? AS TEXT) FROM kv WHERE key LIKE '%:e:1'",
            (b'{"query": "caf\xe9 \xff refund", "id": "bad-1"}',),
        )
        conn.execute("INSERT OR REPLACE INTO kv SELECT key, CAST(? AS TEXT) FROM kv "
                     "WHERE key LIKE '%:e:2'", (b"\xff\xfe\x00garbage",))  # fmt: skip
    conn.close()
    env = clean_env(PYTHONIOENCODING="ascii")  # a terminal that cannot even show "é"
    for command in (["timeline"], ["timeline", "--json"], ["recall", "refund", "-v"],
                    ["recall", "refund", "--json"], ["stats"], ["export"],
                    ["forget", "--containing", "refund", "--dry-run"]):  # fmt: skip
        done = cli("--store", db, *command, env=env)
        assert done.returncode == 0, (command, done.stderr)
        assert "Traceback" not in done.stderr
        assert not hidden_in(done.stdout + done.stderr)
    stats = json.loads(run("--store", db, "stats", "--json")[1])
    assert stats["corrupt"] >= 1
    assert run("--store", db, "forget", "--corrupt")[0] == 1  # asks; no terminal: no
    assert run("--store", db, "forget", "--corrupt", "--outcome", "success")[0] == 2
    code, out, _ = run("--store", db, "forget", "--corrupt", "--yes")
    assert code == 0
    assert out.startswith(f"forgot {stats['corrupt']} corrupt records")
    after = json.loads(run("--store", db, "stats", "--json")[1])
    assert (after["corrupt"], after["total"]) == (0, stats["total"])


@pytest.mark.redis
def test_undecodable_redis_records_never_crash(run: Run, clean_redis: str) -> None:
    import redis

    seed(run, clean_redis)
    client = redis.Redis.from_url(clean_redis)
    try:
        [key] = [k for k in client.keys("*") if k.endswith(b":e:1")]
        client.set(key, b'{"query": "caf\xe9 refund \xed\xa0\x80"}')
    finally:
        client.close()
    for command in (["timeline"], ["recall", "refund", "-v"], ["stats", "--json"], ["export"]):
        code, out, err = run("--store", clean_redis, *command)
        assert code == 0, err
        assert not hidden_in(out + err)
    assert run("--store", clean_redis, "forget", "--corrupt", "--yes")[0] == 0
    assert json.loads(run("--store", clean_redis, "stats", "--json")[1])["corrupt"] == 0


def test_deep_nesting_is_one_clean_line_naming_the_file(store: str, tmp_path: Path) -> None:
    # json.loads raises RecursionError on deep nesting: the CLI names the file instead.
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "\x1b[2J")
    for command in (["record", "--file", str(deep)], ["import", str(deep)]):
        done = cli("--store", store, *command)
        assert done.returncode == 1
        assert_one_clean_line(done.stderr)
        assert "nested too deeply" in done.stderr
        assert "deep.json" in done.stderr


def test_an_exception_that_is_not_the_librarys_is_one_unexpected_line_and_status_1(
    store: str,
) -> None:
    # A real failure nothing translates: with stdout closed (`>&-`) Python's sys.stdout is None,
    # so printing the listing raises AttributeError, neither the library's error nor an OSError.
    # (Should the command come to translate this one, trigger the guarantee another real way.)
    assert cli("--store", store, "record", "-q", "Deploy the api service").returncode == 0
    done = subprocess.run(
        ["/bin/sh", "-c", 'exec "$@" >&-', "sh", str(SCRIPT), "--store", store, "timeline"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
        text=True, env=clean_env(), timeout=60,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert_one_clean_line(done.stderr)
    assert re.fullmatch(
        r"deepcrew-episodic: error: unexpected AttributeError: \S.*\n", done.stderr
    ), done.stderr
    assert "'NoneType' object has no attribute 'write'" in done.stderr


# --- the command on the public API (issue 12, item 2) -------------------------------------------

PACKAGE = Path(__file__).resolve().parent.parent / "deepcrew_episodic"


def _resolve(module: str, node: ast.ImportFrom) -> str:
    """The absolute module an ``import from`` names, inside the package *module* is in."""
    if not node.level:
        return node.module or ""
    is_package = module.endswith(".__init__")
    parts = module.removesuffix(".__init__").split(".")
    base = parts if is_package else parts[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _module_name(path: Path, root: Path) -> str:
    rel = path.relative_to(root.parent).with_suffix("")
    return ".".join(rel.parts)


def private_uses(path: Path, root: Path) -> list[str]:
    """What a module of the CLI uses that is not the library's public API: an import of a
    private module or name, and any ``x._name`` on an object that is not its own (``self``)."""
    import deepcrew_episodic._unicode as unicode_module
    import deepcrew_episodic.providers as providers

    public = {
        "deepcrew_episodic": set(deepcrew_episodic.__all__),
        "deepcrew_episodic.providers": set(providers.__all__),
        # The terminal-safety rule the library states once; the CLI applies the same one.
        "deepcrew_episodic._unicode": set(unicode_module.__all__),
        # The web viewer is a public module of its own (``serve`` runs it).
        "deepcrew_episodic.viewer": {"create_app"},
        # So is the MCP server (``mcp`` runs it).
        "deepcrew_episodic.mcp_server": {"create_http_app", "create_server"},
    }
    module = _module_name(path, root).replace(".__init__", "") + (
        ".__init__" if path.name == "__init__.py" else ""
    )
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        where = f"{path.name}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.ImportFrom):
            target = _resolve(module, node)
            if not target.startswith("deepcrew_episodic") or target.startswith(
                "deepcrew_episodic.cli"
            ):
                continue
            allowed = public.get(target)
            for alias in node.names:
                if allowed is None or alias.name not in allowed:
                    found.append(f"{where}: from {target} import {alias.name}")
        elif isinstance(node, ast.Import):
            found += [
                f"{where}: import {a.name}"
                for a in node.names
                if a.name.startswith("deepcrew_episodic.")
                and a.name not in public
                and not a.name.startswith("deepcrew_episodic.cli")
            ]
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            own = isinstance(node.value, ast.Name) and node.value.id in {"self", "cls"}
            if not own and not (node.attr.startswith("__") and node.attr.endswith("__")):
                found.append(f"{where}: ._{node.attr.lstrip('_')} on {ast.unparse(node.value)}")
    return found


def test_the_cli_uses_only_the_public_api() -> None:
    root = PACKAGE
    modules = sorted((root / "cli").glob("*.py"))
    assert {m.name for m in modules} >= {"__init__.py", "_main.py", "_store.py"}
    assert not (root / "_cli.py").exists()
    found = [use for path in modules for use in private_uses(path, root)]
    assert found == []


def test_the_public_api_check_catches_what_the_old_cli_did(tmp_path: Path) -> None:
    # The old module: EpisodicMemory's private state, and an EpisodeLog built by hand.
    package = tmp_path / "deepcrew_episodic"
    (package / "cli").mkdir(parents=True)
    old = package / "cli" / "_old.py"
    old.write_text(
        textwrap.dedent(
            """
            from .. import EpisodicMemory, Episode
            from .._log import EpisodeLog, encode_namespace
            from ..providers._file import read_file_store
            import deepcrew_episodic._memory
            async def run(memory, args):
                await memory._sync()
                cached = memory._log.cached()
                self._ok = 1
                return await memory._select(ids=args.ids), memory._expired(1, 0.0)
            """
        )
    )
    found = private_uses(old, package)
    assert len(found) == 8, found
    assert not [f for f in found if "Episode," in f or "_ok" in f]
    for name in ("EpisodeLog", "encode_namespace", "read_file_store", "deepcrew_episodic._memory",
                 "_sync", "_log", "_select", "_expired"):  # fmt: skip
        assert any(name in f for f in found), name


def import_graph(root: Path) -> dict[str, set[str]]:
    """Each module of the package at *root* and the package modules it imports, at any level
    of the module (a lazy import inside a function counts), except under ``if TYPE_CHECKING``."""
    modules = {
        _module_name(p, root).removesuffix(".__init__"): p for p in sorted(root.rglob("*.py"))
    }
    graph: dict[str, set[str]] = {name: set() for name in modules}

    def type_checking(node: ast.AST) -> bool:
        test = getattr(node, "test", None)
        return isinstance(node, ast.If) and (
            (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
            or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
        )

    for name, path in modules.items():
        module = name + ".__init__" if path.name == "__init__.py" else name
        pending: list[ast.AST] = [ast.parse(path.read_text(), str(path))]
        while pending:
            node = pending.pop()
            if type_checking(node):
                pending += getattr(node, "orelse", [])
                continue
            pending += ast.iter_child_nodes(node)
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(module, node)
                # "from pkg import mod" imports the module pkg.mod; "from mod import name", mod.
                targets = [
                    f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                    for a in node.names
                ]
            graph[name] |= {t for t in targets if t in modules and t != name}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def test_the_package_has_no_import_cycle() -> None:
    graph = import_graph(PACKAGE)
    assert "deepcrew_episodic.cli._main" in graph
    assert "deepcrew_episodic.providers._open" in graph["deepcrew_episodic.providers"]
    assert import_cycles(graph) == []


def test_the_cycle_check_sees_lazy_imports_and_skips_type_checking(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    files = {
        "__init__.py": "",
        "a.py": "from .b import B\n",
        "b.py": "def f():\n    from . import a\n",  # lazy: still a cycle a <-> b
        "c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .d import D\n",
        "d.py": "from .c import C\n",  # c -> d only for the type checker: no cycle
        "sub/__init__.py": "from .e import E\n",
        "sub/e.py": "from .. import sub\nfrom ..a import x\n",  # sub <-> sub.e
    }
    for name, text in files.items():
        (package / name).write_text(text)
    cycles = import_cycles(import_graph(package))
    assert sorted(cycles) == [["pkg.a", "pkg.b"], ["pkg.sub", "pkg.sub.e"]]


# --- open_provider ----------------------------------------------------------------------------


def test_open_provider_names_every_kind(tmp_path: Path) -> None:
    from deepcrew_episodic.providers import (
        InMemoryProvider,
        RedisMemoryProvider,
        SQLiteMemoryProvider,
        open_provider,
    )

    assert type(open_provider("memory:")) is InMemoryProvider
    assert type(open_provider(str(tmp_path / "e.json"))) is FileMemoryProvider
    for name in ("e.db", "e.sqlite", "e.sqlite3", "E.DB"):
        assert type(open_provider(str(tmp_path / name))) is SQLiteMemoryProvider
    for url in ("redis://127.0.0.1:1/0", "rediss://u:p@127.0.0.1:1/0",
                "unix:///tmp/none.sock", "REDIS://127.0.0.1:1/0?client_name=bot.json"):  # fmt: skip
        provider = open_provider(url)
        assert type(provider) is RedisMemoryProvider, url
        assert type(provider.client).__name__ == "Redis"
    for url in ("redis+cluster://127.0.0.1:1", "rediss+cluster://127.0.0.1:1"):
        provider = open_provider(url)
        assert type(provider.client).__name__ == "RedisCluster", url
    assert list(tmp_path.iterdir()) == []  # nothing is created before the first call


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("notes.txt", "unknown store 'notes.txt'"),
        ("mongo://admin:hunter22@db.internal/agents", "unknown store kind 'mongo://...'"),
        ("redis://:hunter22@127.0.0.1:notaport/0", "invalid redis URL"),
        ("redis://127.0.0.1:1/0?password=hunter22&cluster=true", "redis+cluster://"),
        ("memory:extra", "use 'memory:'"),
        ("", "non-empty string"),
    ],
)
def test_open_provider_refuses_an_unknown_spec_without_echoing_a_password(
    spec: str, message: str
) -> None:
    from deepcrew_episodic import ConfigurationError
    from deepcrew_episodic.providers import open_provider

    with pytest.raises(ConfigurationError) as caught:
        open_provider(spec)
    assert message in str(caught.value)
    assert "hunter22" not in str(caught.value)
    if "unknown" in message:
        assert "expected a path ending in .json" in str(caught.value)


def test_open_provider_create_false_refuses_a_missing_file(tmp_path: Path) -> None:
    from deepcrew_episodic import StorageError
    from deepcrew_episodic.providers import open_provider

    for name in ("missing.json", "missing.db"):
        with pytest.raises(StorageError, match="no store at") as caught:
            open_provider(str(tmp_path / name), create=False)
        assert isinstance(caught.value.__cause__, FileNotFoundError)
    (tmp_path / "dir.json").mkdir()
    with pytest.raises(StorageError, match="is a directory"):
        open_provider(str(tmp_path / "dir.json"))
    assert [p.name for p in tmp_path.iterdir()] == ["dir.json"]  # no file, no lock file


def test_open_provider_passes_options_and_opens_a_working_store(tmp_path: Path) -> None:
    from deepcrew_episodic import ConfigurationError
    from deepcrew_episodic.providers import open_provider

    async def scenario() -> None:
        for spec in (str(tmp_path / "e.json"), str(tmp_path / "e.db")):
            async with open_provider(spec, fsync=True) as backend:
                memory = EpisodicMemory(backend, namespace="ops", max_episodes=7)
                await memory.record(Episode(query="Rotate the key"))
            async with open_provider(spec, create=False) as backend:
                memory = await EpisodicMemory.open(backend, namespace="ops")
                assert memory.max_episodes == 7  # the log's own ring
                assert [e.query for e in await memory.load()] == ["Rotate the key"]

    anyio.run(scenario)
    with pytest.raises(ConfigurationError, match="takes no options"):
        open_provider("memory:", fsync=True)
    with pytest.raises(TypeError):
        open_provider(str(tmp_path / "x.json"), no_such_option=1)


def test_open_provider_snapshot_reads_a_json_file_without_an_event_loop(tmp_path: Path) -> None:
    from deepcrew_episodic import ConfigurationError
    from deepcrew_episodic.cli._store import run_now
    from deepcrew_episodic.providers import InMemoryProvider, open_provider

    path = tmp_path / "e.json"

    async def fill() -> None:
        async with open_provider(str(path)) as backend:
            await EpisodicMemory(backend).record(Episode(query="Refund order 9"))

    anyio.run(fill)
    before = path.read_bytes()
    copy = open_provider(str(path), snapshot=True)
    assert type(copy) is InMemoryProvider

    async def read_and_write() -> list[str]:
        memory = await EpisodicMemory.open(copy)
        await memory.clear()  # a snapshot is a copy: the file never sees this
        return [e.query for e in await EpisodicMemory(InMemoryProvider()).load()]

    assert run_now(read_and_write()) == []
    assert run_now(EpisodicMemory.open(open_provider(str(path), snapshot=True))).max_episodes == 100
    assert path.read_bytes() == before
    for spec in (str(tmp_path / "e.db"), "memory:", "redis://127.0.0.1:1/0"):
        with pytest.raises(ConfigurationError, match="snapshot"):
            open_provider(spec, snapshot=True)


def test_register_provider_adds_a_scheme_or_a_suffix(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from deepcrew_episodic import ConfigurationError
    from deepcrew_episodic.providers import (
        InMemoryProvider,
        _open,
        open_provider,
        register_provider,
    )

    # The registry is process-wide: this test's registrations end with it.
    monkeypatch.setattr(_open, "_SCHEMES", dict(_open._SCHEMES))
    monkeypatch.setattr(_open, "_SUFFIXES", dict(_open._SUFFIXES))
    calls: list[tuple[str, bool, dict[str, object]]] = []

    def factory(spec: str, *, create: bool, **options: object) -> InMemoryProvider:
        calls.append((spec, create, options))
        return InMemoryProvider()

    register_provider("kv://", factory)
    register_provider("scratch:", factory)
    register_provider(".LMDB", factory)
    assert type(open_provider("kv://host/1", create=False, size=3)) is InMemoryProvider
    open_provider("scratch:anything")
    open_provider(str(tmp_path / "x.lmdb"))
    assert calls == [
        ("kv://host/1", False, {"size": 3}),
        ("scratch:anything", True, {}),
        (str(tmp_path / "x.lmdb"), True, {}),
    ]
    register_provider(".json", factory)  # a later registration replaces a built-in one
    assert type(open_provider(str(tmp_path / "y.json"))) is InMemoryProvider
    for bad in ("", "x", "1kv://", ".", "a/b.c", "k v:"):
        with pytest.raises(ConfigurationError, match="neither a scheme"):
            register_provider(bad, factory)
    with pytest.raises(ConfigurationError, match="callable"):
        register_provider("kv2:", "not a factory")  # type: ignore[arg-type]


def test_optional_dependencies_load_only_for_their_kind(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import sys
        from deepcrew_episodic.providers import open_provider
        open_provider({str(tmp_path / "e.json")!r})
        open_provider("memory:")
        assert not {{"redis", "sqlite3"}} & set(sys.modules), sorted(sys.modules)
        sys.modules["redis"] = None  # redis-py not installed
        from deepcrew_episodic import MissingDependencyError
        try:
            open_provider("redis://:hunter22@127.0.0.1:1/0")
        except MissingDependencyError as exc:
            assert "pip install 'deepcrew-episodic[redis]'" in str(exc), exc
            assert "hunter22" not in str(exc)
        else:
            raise AssertionError("no MissingDependencyError")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=clean_env(), timeout=60
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.redis
def test_a_redis_cluster_store_by_its_scheme(cluster_target: str) -> None:
    url = cluster_target.replace("redis://", "redis+cluster://")
    recorded = cli("--store", url, "-n", "bot", "record", "-q", "Escalate ticket 5")
    assert recorded.returncode == 0, recorded.stderr
    found = cli("--store", url, "-n", "bot", "recall", "escalate ticket", "--json")
    assert [e["query"] for e in json.loads(found.stdout)] == ["Escalate ticket 5"]
    refused = cli("--store", cluster_target + "/0?cluster=true", "stats")
    assert refused.returncode == 2
    assert "redis+cluster://" in refused.stderr
