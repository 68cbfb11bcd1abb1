"""The ``deepcrew-episodic`` command, run for real: as a subprocess (the console script and
``python -m deepcrew_episodic``) and through ``main(argv)`` in this process, against real
stores (JSON file, SQLite, the redis-server fixture)."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import pty
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import anyio
import pytest

from deepcrew_episodic import Episode, EpisodicMemory
from deepcrew_episodic._cli import OUTCOMES, main
from deepcrew_episodic._episode import OUTCOMES as EPISODE_OUTCOMES
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


def test_outcome_choices_match_the_episode_model() -> None:
    assert OUTCOMES == EPISODE_OUTCOMES


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
    }
    exported = cli("--store", store, "export")
    assert [json.loads(x)["outcome"] for x in exported.stdout.splitlines()] == [
        "success",
        "failure",
    ]
    forgot = cli("--store", store, "forget", "--id", episode_id)
    assert (forgot.returncode, forgot.stdout.strip()) == (0, "forgot 1 episodes")
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
        (["--store", "x.json", "timeline", "--since", "last week"], "neither a duration"),
        (["--store", "x.json", "recall"], "QUERY"),
        (["--store", "x.json", "recall", "q", "-k", "0"], "at least 1"),
        (["--store", "x.json", "record", "--outcome", "great", "-q", "q"], "invalid choice"),
        (["--store", "x.json", "frobnicate"], "invalid choice"),
        (["--store", "x.json", "record"], "--query"),
        (["--store", "x.json", "forget"], "--id or a filter"),
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
    try:
        assert any(b"Escalate" in (client.get(k) or b"") for k in client.keys("*"))
        episode_id = recorded.stdout.split()[1]
        assert (
            cli("--store", clean_redis, "-n", "bot", "forget", "--id", episode_id).returncode == 0
        )
        assert not any(b"Escalate" in (client.get(k) or b"") for k in client.keys("*"))
    finally:
        client.close()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis://127.0.0.1:1/0", "cannot reach redis at redis://127.0.0.1:1/0"),
        ("redis://:hunter22@127.0.0.1:1/0", "cannot reach redis at redis://:***@127.0.0.1:1/0"),
        ("redis://127.0.0.1:notaport/0", "redis"),
        ("redis://:hunter22@127.0.0.1:notaport/0", "redis://:***@127.0.0.1:notaport/0"),
    ],
)
def test_unreachable_or_bad_redis_is_one_line(url: str, message: str) -> None:
    done = cli("--store", url, "stats")
    assert done.returncode == 1
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
    code, _, err = run("--store", store, "-n", "a:b", "record", "-q", "x")
    assert code == 1
    assert_one_clean_line(err)
    assert "invalid namespace" in err


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
    assert stats["by_outcome"] == {"success": 1, "failure": 0, "partial": 1, "unknown": 1}
    assert stats["expired"] == 1
    assert stats["corrupt"] == 1
    assert stats["capacity"] == 100
    assert stats["size_bytes"] > 200
    assert stats["oldest"] <= stats["newest"]
    assert "undecodable record" in err  # the skipped record is reported (once)
    code, out, _ = run("--store", store, "stats")
    assert "corrupt    1" in out
    assert "expired    1" in out
    histogram = {line.split()[0]: line for line in out.splitlines()[-4:]}
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


def test_record_redacts_and_says_so(run: Run, store: str) -> None:
    key = "sk-" + "Ab1" * 16
    code, out, err = run("--store", store, "record", "-q", f"why does {key} fail", "--json")
    assert code == 0
    assert json.loads(out)[0]["query"] == "why does [REDACTED:openai-key] fail"
    assert "redacted before storing: 1 openai-key" in err
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
    assert (code, out.strip()) == (0, "forgot 1 episodes")
    assert "Acme" not in Path(store).read_text()
    code, out, _ = run("--store", store, "forget", "--before", "2000-01-01", "--yes")
    assert (code, out.strip()) == (0, "forgot 0 episodes (none matched)")


def test_forget_by_id_prefix_and_unknown_id(run: Run, store: str) -> None:
    ids = seed(run, store)
    code, _, err = run(
        "--store", store, "forget", "--id", "0123456789abcdef", "--id", ids["deploy"]
    )
    assert code == 1
    assert "no episode with id '0123456789abcdef'" in err
    assert len(json.loads(run("--store", store, "timeline", "--json")[1])) == 4  # all or nothing
    code, out, _ = run("--store", store, "forget", "--id", ids["deploy"][:12])
    assert (code, out.strip()) == (0, "forgot 1 episodes")
    remaining = {e["id"] for e in json.loads(run("--store", store, "timeline", "--json")[1])}
    assert ids["deploy"] not in remaining
    assert len(remaining) == 3


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
    code, out, err = run("--store", store, "sweep")
    assert (code, out.strip()) == (0, "swept 1 keys (expired episodes and strays)")
    assert "no --max-age" in err
    assert "expired one" not in Path(store).read_text()
    time.sleep(1.1)  # every episode is now older than a one-second max_age
    code, out, _ = run("--store", store, "--max-age", "1s", "sweep")
    assert code == 0
    assert json.loads(run("--store", store, "stats", "--json")[1])["total"] == 0


# --- start-up -----------------------------------------------------------------------------------


@pytest.mark.parametrize("command", [["recall", "refund"], ["timeline"], ["stats"], ["export"]])
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
    assert "deepcrew_episodic._memory" in imported  # the measurement saw the real path
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
