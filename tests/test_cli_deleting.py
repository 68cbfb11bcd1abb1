"""Every command that deletes (``forget``, ``forget --corrupt``, ``clear``, ``sweep``,
``shrink``, an ``import`` that overflows the ring) behaves the same way: ``--dry-run`` lists what
would go and changes nothing, a terminal is asked, and without one nothing is deleted unless
``--yes`` is given. Run for real, on a JSON file and an SQLite store."""

from __future__ import annotations

import json
import os
import pty
import sqlite3
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from deepcrew_episodic import Episode, EpisodicMemory
from deepcrew_episodic.cli import main
from deepcrew_episodic.providers import open_provider

OLD = "2020-01-02T03:04:05Z"
SECRET_TEXT = "expired-customer-Zyxwv"


def env() -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DEEPCREW_EPISODIC_")}
    return {**clean, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}


@pytest.fixture(autouse=True)
def no_ambient_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("DEEPCREW_EPISODIC_"):
            monkeypatch.delenv(name)


@pytest.fixture(params=["episodes.json", "episodes.db"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store of 31 episodes recorded in 2020 (all older than ``--max-age 1s``), one of them
    also past its ``forget_after``, and a ring of 40."""
    path = str(tmp_path / request.param)

    async def fill() -> None:
        async with open_provider(path) as backend:
            memory = EpisodicMemory(backend, max_episodes=40)
            for i in range(30):
                await memory.record(Episode(query=f"ticket {i} refund", timestamp=OLD, tags=["t"]))
            await memory.record(
                Episode(query=SECRET_TEXT, timestamp=OLD, forget_after="2021-01-01T00:00:00Z")
            )

    anyio.run(fill)
    return path


def held(store: str) -> int:
    async def count() -> int:
        async with open_provider(store) as backend:
            memory = await EpisodicMemory.open(backend)
            return len(await memory.load(include_expired=True))

    return anyio.run(count)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# (arguments, how many of the 31 episodes each deletes)
DELETING = {
    "forget --id": (["forget", "--id", "@first"], 1),
    "forget --containing": (["forget", "--containing", "refund"], 30),
    "clear": (["clear"], 31),
    "sweep --max-age 1s": (["--max-age", "1s", "sweep"], 31),
    "sweep": (["sweep"], 1),
    "shrink": (["shrink", "5"], 26),
    "import past the ring": (["import", "@batch"], 21),
}


def argv_for(name: str, store: str, tmp_path: Path) -> list[str]:
    argv = list(DELETING[name][0])
    if "@first" in argv:

        async def first() -> str:
            async with open_provider(store) as backend:
                return (await (await EpisodicMemory.open(backend)).load())[0].id

        argv[argv.index("@first")] = anyio.run(first)
    if "@batch" in argv:
        batch = tmp_path / "batch.jsonl"
        batch.write_text("".join(json.dumps({"query": f"new {i}"}) + "\n" for i in range(30)))
        argv[argv.index("@batch")] = str(batch)
    return ["--store", store, *argv]


@pytest.mark.parametrize("name", DELETING)
def test_without_a_terminal_nothing_is_deleted_unless_yes(
    capsys: pytest.CaptureFixture[str], store: str, tmp_path: Path, name: str
) -> None:
    argv = argv_for(name, store, tmp_path)
    before = Path(store).read_bytes()
    code, out, err = run(capsys, *argv)
    assert code == 1, (out, err)
    assert "not confirmed: nothing was deleted" in err
    assert "--yes" in err
    assert "--dry-run" in err
    assert held(store) == 31
    if store.endswith(".json"):
        assert Path(store).read_bytes() == before
    code, out, err = run(capsys, *argv, "--yes")
    assert code == 0, err
    deleted = DELETING[name][1]
    imported = 30 if "import" in name else 0
    assert held(store) == min(40, 31 - deleted + imported)


@pytest.mark.parametrize("name", DELETING)
def test_dry_run_lists_what_would_go_and_changes_nothing(
    capsys: pytest.CaptureFixture[str], store: str, tmp_path: Path, name: str
) -> None:
    argv = argv_for(name, store, tmp_path)
    before = Path(store).read_bytes()
    code, out, err = run(capsys, *argv, "--dry-run")
    assert code == 0, err
    assert "dry run" in err
    assert held(store) == 31
    if store.endswith(".json"):
        assert Path(store).read_bytes() == before
    lines = out.splitlines()
    assert len(lines) == DELETING[name][1], out
    # An expired episode is listed by its id only, never by its text.
    assert SECRET_TEXT not in out + err


def test_forget_corrupt_takes_dry_run_and_yes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    db = str(tmp_path / "episodes.db")
    assert run(capsys, "--store", db, "record", "-q", "fine")[0] == 0
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM kv WHERE key = 'episodic:default:e:1'")
        conn.execute("INSERT INTO kv VALUES ('episodic:default:e:1', 'not json')")
    code, _, err = run(capsys, "--store", db, "forget", "--corrupt", "--dry-run")
    assert (code, "1 corrupt record would be deleted" in err) == (0, True)
    code, _, err = run(capsys, "--store", db, "forget", "--corrupt")
    assert code == 1
    assert "not confirmed" in err
    assert "--dry-run" in err
    assert run(capsys, "--store", db, "forget", "--corrupt", "--yes")[1].strip() == (
        "forgot 1 corrupt record"
    )


def ask(argv: list[str], answer: str) -> subprocess.CompletedProcess[str]:
    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "deepcrew_episodic", *argv],
            stdin=follower,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env(),
            text=True,
        )
        os.write(leader, answer.encode())
        out, err = proc.communicate(timeout=60)
    finally:
        os.close(leader)
        os.close(follower)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


@pytest.mark.parametrize("name", ["sweep --max-age 1s", "forget --id", "shrink"])
@pytest.mark.parametrize(("answer", "deletes"), [("y\n", True), ("n\n", False)])
def test_a_terminal_is_asked(
    store: str, tmp_path: Path, name: str, answer: str, deletes: bool
) -> None:
    if store.endswith(".db") and answer == "n\n":
        pytest.skip("one store is enough for the refusal")
    done = ask(argv_for(name, store, tmp_path), answer)
    assert "[y/N]" in done.stderr
    assert (done.returncode == 0) is deletes, done.stderr
    assert held(store) == (31 - DELETING[name][1] if deletes else 31)
