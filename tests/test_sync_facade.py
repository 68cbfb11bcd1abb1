"""SyncEpisodicMemory: the async memory, called without ``await``, on every provider."""

from __future__ import annotations

import ast
import inspect
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
from stores import Store

from deepcrew_episodic import (
    ConfigurationError,
    Episode,
    EpisodicMemory,
    InvalidEpisodeError,
    SyncEpisodicMemory,
)
from deepcrew_episodic.providers import InMemoryProvider


def test_every_operation_without_await(store: Store) -> None:
    with SyncEpisodicMemory(store.open(), namespace="sync", max_episodes=50) as memory:
        stored = memory.record(
            Episode(query="Rotate the billing API key", response="Done", outcome="success")
        )
        memory.record(Episode(query="Deploy the search service", outcome="failure"))
        assert [e.id for e in memory.recall("rotate the API key")] == [stored.id]
        assert memory.explain("deploy search")[0].episode.outcome == "failure"
        assert memory.render(memory.recall("rotate key")).startswith("## Relevant past experience")
        assert len(memory.load()) == 2
        assert memory.stats().total == 2
        with pytest.raises(InvalidEpisodeError):  # errors cross the thread unchanged
            memory.record(Episode(query="again", id=stored.id))
        assert [e.id for e in memory.select(containing="billing")] == [stored.id]
        assert not memory.is_expired(stored)
        assert memory.forget(stored.id, dry_run=True) == 1
        assert memory.forget(stored.id) == 1
        assert memory.sweep() == 0
        memory.record(Episode(query="three"))
        assert memory.shrink(1) == 1
        memory.clear()
        assert memory.load() == []
    with pytest.raises(ConfigurationError, match="closed"):
        memory.load()
    memory.close()  # idempotent


def test_it_wraps_an_existing_memory_and_refuses_options_then() -> None:
    inner = EpisodicMemory(InMemoryProvider(), namespace="wrapped", max_age=timedelta(days=1))
    with SyncEpisodicMemory(inner) as memory:
        assert memory.memory is inner
        assert memory.max_age == timedelta(days=1)
    with pytest.raises(ConfigurationError, match="recall_k"):
        SyncEpisodicMemory(inner, recall_k=2)


def test_it_runs_on_trio_too() -> None:
    with SyncEpisodicMemory(InMemoryProvider(), backend_name="trio") as memory:
        memory.record(Episode(query="on trio"))
        assert [e.query for e in memory.recall("trio")] == ["on trio"]


def test_it_works_inside_a_running_event_loop() -> None:
    """A notebook cell runs inside an event loop; the facade keeps its own in a thread."""
    import anyio

    async def cell() -> list[Episode]:
        with SyncEpisodicMemory(InMemoryProvider()) as memory:
            memory.record(Episode(query="from a notebook"))
            return memory.load()

    assert [e.query for e in anyio.run(cell)] == ["from a notebook"]


def test_the_loop_thread_stops_on_close_and_never_blocks_exit() -> None:
    # Other tests' threads may come and go meanwhile: the memory's own thread is followed.
    before = set(threading.enumerate())
    memory = SyncEpisodicMemory(InMemoryProvider())
    started = [t for t in threading.enumerate() if t not in before and t.is_alive()]
    assert len(started) == 1
    memory.close()
    assert not started[0].is_alive()
    # a memory never closed does not keep the interpreter alive
    code = (
        "from deepcrew_episodic import Episode, SyncEpisodicMemory\n"
        "from deepcrew_episodic.providers import InMemoryProvider\n"
        "m = SyncEpisodicMemory(InMemoryProvider()); m.record(Episode(query='q')); print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == b"ok"


def test_open_namespaces_counters_and_check(store: Store) -> None:
    with SyncEpisodicMemory(store.open(), namespace="ring7", max_episodes=7) as writer:
        for i in range(9):
            writer.record(Episode(query=f"task {i}"))
        assert writer.namespaces() == ["ring7"]
        assert writer.counters.corrupt_records == 0
        assert writer.backend is writer.memory.backend
        with pytest.raises(InvalidEpisodeError, match="secret"):
            writer.check(Episode(query="q", id="AKIAIOSFODNN7EXAMPLE"))
    if store.kind == "dict":
        return  # a dict store lives and dies with its provider
    with SyncEpisodicMemory.open(store.open(), namespace="ring7") as opened:
        assert opened.max_episodes == 7
        assert len(opened.load()) == 7


def test_the_sync_facade_grades_counts_uses_and_refreshes() -> None:
    from deepcrew_episodic.providers import InMemoryProvider

    with SyncEpisodicMemory(InMemoryProvider()) as memory:
        before = memory.refresh()
        episode = memory.record(Episode(query="rotate the signing key"))
        assert memory.refresh() > before
        memory.grade(episode.id, outcome="success", note="confirmed")
        assert [g.outcome for g in memory.grades(episode.id)] == ["success"]
        assert [e.outcome for e in memory.load()] == ["success"]
        assert [e.outcome for e in memory.load(graded=False)] == ["unknown"]
        memory.used([episode.id])
        assert memory.stats().most_used == [(episode.id, 1)]
        chat = memory.record(Episode(query="is it zero-downtime?", conversation_id="t-1"))
        assert memory.latest("t-1").id == chat.id
        assert memory.latest("t-2") is None


# --- processes and threads ------------------------------------------------------------------


def _in_child(work: Callable[[], object], *, timeout: float = 20.0) -> tuple[int, str]:
    """Run *work* in a forked child; its exit status and what it printed (or its error)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never back into pytest
        status = 0
        try:
            signal.alarm(int(timeout))  # a hang ends the child, not the suite
            text = repr(work())
        except BaseException as exc:
            status, text = 1, f"{type(exc).__name__}: {exc}"
        os.write(write_end, text.encode()[:60000])
        os._exit(status)
    os.close(write_end)
    deadline = time.monotonic() + timeout + 5
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung")
        time.sleep(0.02)
    with os.fdopen(read_end, "rb") as pipe:
        output = pipe.read().decode()
    code = os.waitstatus_to_exitcode(status)
    return code, output


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_facade_made_before_fork_works_in_the_child_and_the_parent(store: Store) -> None:
    memory = SyncEpisodicMemory(store.open(), namespace="prefork")
    try:
        first = memory.record(Episode(query="Rotate the billing API key", outcome="success"))
        assert [e.id for e in memory.recall("rotate the billing key")] == [first.id]

        def child() -> object:
            mine = memory.record(Episode(query="Restart the billing worker from a child"))
            found = [e.id for e in memory.recall("billing")]
            memory.close()
            memory.close()
            return (mine.id, sorted(found))

        code, output = _in_child(child)
        assert code == 0, output
        child_id, child_found = ast.literal_eval(output)
        assert first.id in child_found
        assert child_id in child_found
        # The parent's loop, connections and locks are untouched by the child's.
        later = memory.record(Episode(query="Deploy the billing service from the parent"))
        found = {e.id for e in memory.recall("billing")}
        assert {first.id, later.id} <= found
        if store.shared_across_processes:
            assert child_id in found  # the child wrote to the same store
        code, output = _in_child(lambda: len(memory.load()))  # a second fork, after more use
        assert code == 0, output
    finally:
        memory.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_facade_forked_mid_call_raises_at_once_in_the_child() -> None:
    gate, entered = threading.Event(), threading.Event()

    def slow_embedder(texts: list[str]) -> list[list[float]]:
        entered.set()
        gate.wait(10)
        return [[1.0, float(len(t))] for t in texts]

    memory = SyncEpisodicMemory(InMemoryProvider(), embedder=slow_embedder)
    pending = threading.Thread(target=memory.record, args=(Episode(query="q"),))
    pending.start()
    try:
        assert entered.wait(10)  # the record is in flight, inside the embedder

        def child() -> object:
            started = time.monotonic()
            try:
                memory.recall("q")
            except ConfigurationError as exc:
                memory.close()  # still idempotent, and does not hang
                return (str(exc), time.monotonic() - started)
            return "no error"

        code, output = _in_child(child)
        assert code == 0, output
        message, took = ast.literal_eval(output)
        assert "forked" in message
        assert "create one in each process" in message
        assert took < 2
    finally:
        gate.set()
        pending.join()
        memory.close()


def test_a_facade_cannot_be_sent_to_a_spawned_process() -> None:
    memory = SyncEpisodicMemory(InMemoryProvider())
    try:
        with pytest.raises(ConfigurationError, match="create it in each process"):
            pickle.dumps(memory)
    finally:
        memory.close()


def test_many_threads_closing_at_once_with_calls_in_flight(store: Store) -> None:
    memory = SyncEpisodicMemory(store.open(), namespace="closing")
    memory.record(Episode(query="Rotate the billing API key"))
    errors: list[BaseException] = []
    finished: list[str] = []
    start = threading.Barrier(24)

    def caller() -> None:
        start.wait()
        try:
            while True:
                memory.recall("rotate the key")
                memory.record(Episode(query="Deploy the search service"))
        except ConfigurationError as exc:
            if "closed" not in str(exc):
                errors.append(exc)
            finished.append("caller")
        except BaseException as exc:  # a RuntimeError from a stopped portal, a hang's timeout
            errors.append(exc)

    def closer() -> None:
        start.wait()
        time.sleep(0.05)  # let the callers get going
        try:
            memory.close()
            finished.append("closer")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=caller) for _ in range(8)]
    threads += [threading.Thread(target=closer) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not any(thread.is_alive() for thread in threads), "a thread hung"
    assert errors == []
    assert finished.count("closer") == 16
    assert finished.count("caller") == 8
    memory.close()
    with pytest.raises(ConfigurationError, match="closed"):
        memory.recall("rotate")


def test_close_from_inside_one_of_its_calls_is_refused_not_a_hang() -> None:
    from deepcrew_episodic.testing._embedder import ConceptEmbedder

    writer = SyncEpisodicMemory(InMemoryProvider())
    writer.record(Episode(query="customer billed double"))
    memory = SyncEpisodicMemory(writer.backend, embedder=ConceptEmbedder())

    def progress(done: int, total: int) -> None:
        memory.close()

    with pytest.raises(ConfigurationError, match="inside one of"):
        memory.backfill(progress=progress)
    assert memory.stats().total == 1  # still open, and usable
    memory.close()
    writer.close()


_FORK_AND_EXIT = """
import os, sys
sys.path.insert(0, sys.argv[3])
from stores import Store
from deepcrew_episodic import Episode, SyncEpisodicMemory

memory = SyncEpisodicMemory(Store(sys.argv[1], sys.argv[2]).open(), namespace="exits")
memory.record(Episode(query="parent before the fork"))
for _ in range(3):
    pid = os.fork()
    if pid == 0:
        memory.record(Episode(query="a worker's episode"))
        sys.exit(0)  # a normal exit: what crossed the fork is torn down here
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    memory.record(Episode(query="parent after a worker exited"))
print(len(memory.load()))
memory.close()
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_workers_that_exit_normally_leave_the_parent_working(store: Store) -> None:
    # A worker's exit tears down the connections and the event loop it inherited; none of it
    # may reach the parent's (asyncio's epoll instance is shared across a fork).
    done = subprocess.run(
        [
            sys.executable,
            "-W",
            "error",
            "-c",
            _FORK_AND_EXIT,
            store.kind,
            store.target,
            str(Path(__file__).parent),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    expected = 7 if store.shared_across_processes else 4
    assert done.stdout.strip() == str(expected), done.stderr


# --- the same members as EpisodicMemory -----------------------------------------------------

# Where the facade differs on purpose, the signature it has instead: ``open`` also takes the
# event loop's backend, and ``namespaces`` lists the facade's own store (a store's connection
# belongs to the facade's loop, so there is no call on a store of no facade).
_OWN_SIGNATURES = {
    "open": "(cls, backend: 'Any', *, backend_name: 'str' = 'asyncio', **options: 'Any') "
    "-> 'SyncEpisodicMemory'",
    "namespaces": "(self) -> 'list[str]'",
}


def _public(cls: type) -> dict[str, object]:
    return {
        name: inspect.getattr_static(cls, name) for name in dir(cls) if not name.startswith("_")
    }


def _function(member: object) -> Callable[..., object]:
    inner = member.__func__ if isinstance(member, (classmethod, staticmethod)) else member
    assert callable(inner)
    return inner


@pytest.mark.parametrize("name", sorted(_public(EpisodicMemory)))
def test_the_facade_has_every_public_member_of_the_memory_with_its_signature(name: str) -> None:
    mine = _public(SyncEpisodicMemory)
    assert name in mine, f"SyncEpisodicMemory has no {name!r}"
    theirs, ours = _public(EpisodicMemory)[name], mine[name]
    if isinstance(theirs, property):
        assert isinstance(ours, property), f"{name} is not a property of the facade"
        assert ours.fget is not None
        assert theirs.fget is not None
        assert inspect.getdoc(ours), f"the facade's {name} has no docstring"
        assert (
            inspect.signature(ours.fget).return_annotation
            == inspect.signature(theirs.fget).return_annotation
        )
        return
    assert not inspect.iscoroutinefunction(_function(ours)), f"the facade's {name} is a coroutine"
    assert inspect.getdoc(_function(ours)), f"the facade's {name} has no docstring"
    if name in _OWN_SIGNATURES:
        assert str(inspect.signature(_function(ours))) == _OWN_SIGNATURES[name]
        return
    assert type(ours) is type(theirs), f"{name}: {type(ours)} for {type(theirs)}"
    assert inspect.signature(_function(ours)) == inspect.signature(_function(theirs))


def test_the_facade_has_every_public_attribute_of_a_memory() -> None:
    memory = EpisodicMemory(InMemoryProvider())
    with SyncEpisodicMemory(InMemoryProvider()) as facade:
        missing = [name for name in vars(memory) if not name.startswith("_")]
        assert [name for name in missing if not hasattr(facade, name)] == []


def test_the_facade_fits_and_shows_every_setting_of_its_memory() -> None:
    from deepcrew_episodic.testing._embedder import ConceptEmbedder

    embedder = ConceptEmbedder()
    with SyncEpisodicMemory(
        InMemoryProvider(), recall_k=2, reflect_model=None, embedder=embedder
    ) as memory:
        assert memory.recall_k == 2
        assert memory.reflect_model is None
        assert memory.embedder is embedder
        assert memory.embedder_name == memory.memory.embedder_name
        assert memory.redactor is memory.memory.redactor is not None
        stored = memory.record(Episode(query="Rotate the billing API key", outcome="success"))
        block, shown = memory.fit(memory.recall("rotate the billing key"), max_chars=400)
        assert block == memory.render(memory.recall("rotate the billing key"), max_chars=400)
        assert [e.id for e in shown] == [stored.id]
        assert memory.uses() == {}
        assert memory.page(limit=1).total == 1
