"""Every path that filters by time files an episode at the same time: one whose timestamp
cannot be used (garbled by an old writer) takes the time of the dated episode recorded before
it, in ``recall``/``history`` (API and command line), the command line's ``timeline``, the
viewer's timeline and the MCP server's ``timeline`` alike."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from test_mcp_server import call, env, failing, stdio
from test_viewer import client, row_ids

from deepcrew_episodic import ConfigurationError, Episode, EpisodicMemory, SyncEpisodicMemory
from deepcrew_episodic.providers import FileMemoryProvider

TASK = "rebuild the search index"


async def garbled_log(path: Path) -> list[str]:
    """Three runs recorded now, the second one's timestamp then garbled in the file."""
    async with FileMemoryProvider(path) as backend:
        memory = EpisodicMemory(backend, namespace="ops")
        start = datetime.now(UTC) - timedelta(seconds=40)
        ids = []
        for n in range(3):  # ten seconds apart: each timestamp occurs once in the file
            when = (start + timedelta(seconds=10 * n)).isoformat()
            episode = Episode(query=TASK, response=f"try {n}", outcome="failure", timestamp=when)
            ids.append((await memory.record(episode)).id)
        middle = (await memory.load())[1].timestamp
    raw = path.read_text()
    assert raw.count(middle) == 1
    path.write_text(raw.replace(middle, "last spring"))
    return ids


def cli(*argv: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-m", "deepcrew_episodic", *argv], capture_output=True, text=True,
        env=env(), timeout=60, stdin=subprocess.DEVNULL, check=True,
    )  # fmt: skip
    return [item["id"] for item in json.loads(done.stdout)]


@pytest.mark.anyio
async def test_an_undated_episode_is_in_the_same_period_on_every_path(tmp_path: Path) -> None:
    path = tmp_path / "ops.json"
    ids = await garbled_log(path)
    store = ["--store", str(path), "-n", "ops"]
    async with FileMemoryProvider(path) as backend:
        memory = EpisodicMemory(backend, namespace="ops")
        loaded = await memory.load()
        # The memory files the undated one at the time of the one before it.
        assert loaded[1].timestamp == ""
        assert memory.recorded_at(loaded[1]) == memory.recorded_at(loaded[0])
        assert memory.recorded_at(loaded[0]) == loaded[0].time()
        recalled = await memory.recall(TASK, until="today")
        assert {e.id for e in recalled} == set(ids)
        # The viewer's timeline, over HTTP on the same memory.
        async with client(memory) as viewer:
            page = await viewer.get("/", params={"until": "today"})
            assert page.status_code == httpx.codes.OK
            assert set(row_ids(page.text)) == set(ids)
    # The command line: recall and timeline agree.
    assert set(cli(*store, "recall", TASK, "--until", "today", "--json")) == set(ids)
    assert cli(*store, "timeline", "--until", "today", "--json") == ids
    assert cli(*store, "timeline", "--since", "1h", "--json") == ids
    # The MCP server's timeline.
    async with stdio(str(path), "-n", "ops") as mcp:
        found = await call(mcp, "timeline", until="today")
        assert {e["id"] for e in found["episodes"]} == set(ids)
        found = await call(mcp, "timeline", since="1h")
        assert {e["id"] for e in found["episodes"]} == set(ids)


def test_the_sync_facade_files_an_episode_at_the_same_time(tmp_path: Path) -> None:
    with SyncEpisodicMemory(FileMemoryProvider(tmp_path / "s.json")) as memory:
        memory.record(Episode(query=TASK, response="done", outcome="success"))
        (episode,) = memory.load()  # as of the last read
        assert memory.recorded_at(episode) == episode.time()
        assert memory.recorded_at(Episode(query="never recorded")) is None


@pytest.mark.parametrize("value", ["an episode", 3])
def test_recorded_at_takes_an_episode(value: object) -> None:
    from deepcrew_episodic import ConfigurationError
    from deepcrew_episodic.providers import InMemoryProvider

    with pytest.raises(ConfigurationError, match=re.escape("recorded_at() takes an Episode")):
        EpisodicMemory(InMemoryProvider()).recorded_at(value)  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_cli_history_says_the_period_when_nothing_in_it_matches(tmp_path: Path) -> None:
    path = tmp_path / "ops.json"
    await garbled_log(path)
    done = subprocess.run(
        [sys.executable, "-m", "deepcrew_episodic", "--store", str(path), "-n", "ops",
         "history", TASK, "--until", "2020-01-01"],
        capture_output=True, text=True, env=env(), timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (0, "")
    assert "matches 'rebuild the search index' in the period given" in done.stderr


async def worked_then_failed(path: Path) -> None:
    """A run that worked ten days ago, and one that failed today."""
    async with FileMemoryProvider(path) as backend:
        memory = EpisodicMemory(backend, namespace="ops")
        old = datetime.now(UTC) - timedelta(days=10)
        await memory.record(
            Episode(query=TASK, response="done", outcome="success", timestamp=old.isoformat())
        )
        await memory.record(Episode(query=TASK, response="broken", outcome="failure"))


@pytest.mark.anyio
async def test_a_history_of_a_period_never_says_the_task_never_worked(tmp_path: Path) -> None:
    path = tmp_path / "ops.json"
    await worked_then_failed(path)
    base = [sys.executable, "-m", "deepcrew_episodic", "--store", str(path), "-n", "ops"]
    done = subprocess.run(
        [*base, "history", TASK, "--since", "yesterday"],
        capture_output=True, text=True, env=env(), timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    last = done.stdout.splitlines()[-1]
    assert not last.startswith("never worked:"), last
    assert last == "no run worked in the period given: 1 failed run"
    whole = subprocess.run(
        [*base, "history", TASK], capture_output=True, text=True, env=env(), timeout=60,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert whole.stdout.splitlines()[-1].startswith("started failing: ")
    async with FileMemoryProvider(path) as backend:
        memory = EpisodicMemory(backend, namespace="ops")
        async with client(memory) as viewer:
            page = await viewer.get("/history", params={"task": TASK, "since": "yesterday"})
            assert "Never worked" not in page.text
            assert "No run worked in this period: 1 failed run." in page.text
            page = await viewer.get("/history", params={"task": TASK, "since": "1 year ago"})
            assert "Started failing on" in page.text


@pytest.mark.anyio
async def test_the_history_page_of_a_long_log_shows_its_newest_runs(tmp_path: Path) -> None:
    from deepcrew_episodic.providers import InMemoryProvider
    from deepcrew_episodic.viewer._app import MAX_HISTORY_ROWS

    memory = EpisodicMemory(InMemoryProvider(), max_episodes=10_000)
    start = datetime.now(UTC) - timedelta(days=30)
    runs = MAX_HISTORY_ROWS + 20
    for n in range(runs):  # worked, until the last 30 runs
        when = (start + timedelta(minutes=n)).isoformat()
        outcome = "success" if n < runs - 30 else "failure"
        await memory.record(
            Episode(query=TASK, response=f"run {n}", outcome=outcome, timestamp=when)
        )
    history = await memory.history(TASK)
    assert len(history) == runs
    async with client(memory) as viewer:
        page = await viewer.get("/history", params={"task": TASK})
    assert page.status_code == httpx.codes.OK
    shown = re.findall(r'<tr class="run[^"]*" data-id="([^"]*)"', page.text)
    assert shown == [s.episode.id for s in history][-MAX_HISTORY_ROWS:]
    assert f"The newest {MAX_HISTORY_ROWS} of {runs} runs" in page.text
    # The summary is the whole history's: the break, linked, though its row is older.
    assert history.broke is not None
    assert f'href="/episode/{history.broke.episode.id}"' in page.text
    assert "30 failed runs since the last success" in page.text


SECRET = "sk-proj-9aB3xYq7LmN2pR5tV8wZ1cE4gH6jK0sD"


@pytest.mark.anyio
async def test_a_bad_time_with_a_secret_is_named_redacted_on_every_path(tmp_path: Path) -> None:
    path = tmp_path / "ops.json"
    await garbled_log(path)
    for bad in [f"since {SECRET}", f"yesterday\x1b[2J {SECRET}", f"{SECRET}\x7f"]:
        done = subprocess.run(
            [sys.executable, "-m", "deepcrew_episodic", "--store", str(path), "-n", "ops",
             "history", TASK, "--since", bad],
            capture_output=True, text=True, env=env(), timeout=60, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        assert done.returncode == 2
        assert "history --since:" in done.stderr
        assert SECRET not in done.stderr
        assert "\x1b" not in done.stderr
        async with FileMemoryProvider(path) as backend:
            memory = EpisodicMemory(backend, namespace="ops")
            with pytest.raises(ConfigurationError) as raised:
                await memory.history(TASK, since=bad)
            assert SECRET not in str(raised.value)
            assert "\x1b" not in str(raised.value)
            async with client(memory) as viewer:
                for page in ("/", "/history"):
                    r = await viewer.get(page, params={"task": TASK, "since": bad})
                    assert r.status_code == httpx.codes.BAD_REQUEST
                    error = re.search(r'<p id="error"[^>]*>([^<]*)<', r.text)
                    assert error is not None
                    assert SECRET not in error.group(1)
        async with stdio(str(path), "-n", "ops") as mcp:
            message = await failing(mcp, "timeline", since=bad)
            assert "since:" in message
            assert SECRET not in message
            assert "\x1b" not in message
