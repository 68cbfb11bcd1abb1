"""Phases: a long run recorded as one episode per phase (one run_id, each phase its own task,
approach, outcome and lesson), from the hook and the runner. Recall shows one item per run and
phase: a query about one phase's work finds that phase, never collapsed into the run's last
phase; two episodes of one phase (the phase tried again) are one item, the later."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from llm_server import Reply, ScriptedLLM
from stores import Store

from deepcrew_episodic import (
    Agent,
    ConfigurationError,
    Episode,
    EpisodicHook,
    EpisodicMemory,
    EventType,
    InvalidEpisodeError,
    run_agent,
    stream_agent,
)
from deepcrew_episodic._episode import run_key
from deepcrew_episodic.providers import FileMemoryProvider, InMemoryProvider

pytestmark = pytest.mark.anyio

RUN = "incident-311"
PHASES = [
    (
        "reproduce",
        "Reproduce the CSV export timeout on a large account",
        "Exported a 2 GB account on staging",
        "It times out at 30 s, always in the PDF rendering step",
        "success",
    ),
    (
        "find the cause",
        "Find why PDF rendering of invoices is slow",
        "Profiled the renderer with py-spy",
        "Fonts were re-embedded for every page; cache them per document",
        "success",
    ),
    (
        "ship the fix",
        "Deploy the font cache to production",
        "Rolled it out behind a flag",
        "Flip the flag per region, EU first",
        "failure",
    ),
]


async def record_phases(hook: EpisodicHook) -> list[Episode]:
    recorded = []
    for phase, task, approach, lesson, outcome in PHASES:
        done = await hook.record_phase(
            RUN, phase, task, approach=approach, lesson=lesson, outcome=outcome
        )
        assert done.episode is not None, done.error
        recorded.append(done.episode)
    return recorded


async def test_a_query_about_one_phase_finds_that_phase_on_every_store(store: Store) -> None:
    async with store.open() as provider:
        memory = EpisodicMemory(provider, namespace="phases")
        recorded = await record_phases(EpisodicHook(memory, agent_id="oncall"))
        assert [(e.run_id, e.phase) for e in recorded] == [(RUN, p[0]) for p in PHASES]
        # Read back by a second memory: the phase is stored, not only held in the process.
        again = EpisodicMemory(provider, namespace="phases")
        found = await again.recall("why is invoice PDF rendering slow", top_k=3)
        assert [e.phase for e in found][:1] == ["find the cause"]
        [cause] = [e for e in await again.load() if e.phase == "find the cause"]
        assert cause.approach == "Profiled the renderer with py-spy"
        assert cause.reflection.startswith("Fonts were re-embedded")
        assert cause.outcome == "success"
        # A query that matches every phase shows each once, not one item for the run.
        every = await again.recall("CSV export PDF rendering font cache timeout", top_k=5)
        assert sorted(e.phase for e in every) == sorted(p[0] for p in PHASES)


async def test_a_phase_tried_again_is_one_item_its_latest_try_with_the_earlier_lesson() -> None:
    memory = EpisodicMemory(InMemoryProvider())
    hook = EpisodicHook(memory)
    await record_phases(hook)
    retry = await hook.record_phase(
        RUN,
        "ship the fix",
        "Deploy the font cache to production",
        approach="Flipped the flag region by region",
        lesson="Done in two hours",
        outcome="success",
    )
    found = await memory.explain("deploy the font cache to production", top_k=5)
    shipped = [hit for hit in found if hit.episode.phase == "ship the fix"]
    assert [hit.episode.id for hit in shipped] == [retry.id]
    assert shipped[0].iterations == 2
    assert "Earlier attempts: Flip the flag per region, EU first" in shipped[0].episode.reflection
    # The other phases of the run are still items of their own.
    assert {hit.episode.phase for hit in found} >= {"ship the fix", "find the cause"}


@pytest.mark.parametrize("run", ["", RUN])
async def test_explain_says_when_another_phase_of_a_shown_run_fell_under_the_floor(
    run: str,
) -> None:
    # One item per run and phase under the floor too, as for two runs of their own.
    memory = EpisodicMemory(InMemoryProvider())
    tasks = [
        ("reproduce", "Reproduce the CSV export timeout for large accounts"),
        ("notify", "Tell the support team the status of the accounts"),
    ]
    for phase, task in tasks:
        await memory.record(
            Episode(query=task, response="done", run_id=run, phase=phase if run else "")
        )
    ranking = await memory.explain("why does the CSV export time out for large accounts", 5)
    assert [s.episode.query for s in ranking] == [tasks[0][1]]
    assert [s.episode.query for s in ranking.under_floor] == [tasks[1][1]]


async def test_a_phase_whose_secrets_lengthen_it_is_recorded_redacted_within_its_limit() -> None:
    # A marker is longer than the secret it replaces: the phase is redacted, then cut.
    memory = EpisodicMemory(InMemoryProvider())
    phase = " ".join(["password=hunter2"] * 11)  # 186 characters, 417 once redacted
    done = await EpisodicHook(memory).record_phase(RUN, phase, "Rotate the keys")
    assert done.error is None
    assert done.episode is not None
    assert len(done.episode.phase) <= 200
    assert "hunter2" not in done.episode.phase
    [episode] = await memory.load(graded=False)
    copy = EpisodicMemory(InMemoryProvider())
    assert (await copy.restore(episode)).phase == episode.phase  # a backup restores


async def test_a_phase_named_with_other_spacing_is_the_same_phase() -> None:
    memory = EpisodicMemory(InMemoryProvider())
    hook = EpisodicHook(memory)
    for phase, outcome in (("find  the cause", "failure"), (" find the cause ", "success")):
        done = await hook.record_phase(
            RUN, phase, "Find why PDF rendering is slow", outcome=outcome
        )
        assert done.episode is not None
        assert done.episode.phase == "find the cause"
    [item] = await memory.recall("why is PDF rendering slow?")
    assert (item.phase, item.outcome) == ("find the cause", "success")  # one item, the later
    with pytest.raises(ConfigurationError, match="phase must name the phase"):
        await hook.record_phase(RUN, "   ", "Find why PDF rendering is slow")


async def test_without_phases_a_run_is_still_one_item() -> None:
    memory = EpisodicMemory(InMemoryProvider())
    for outcome in ("failure", "success"):
        await memory.record(Episode(query="deploy the api", run_id="r", outcome=outcome))
    assert [e.outcome for e in await memory.recall("deploy the api")] == ["success"]


def test_run_keys_tell_every_run_and_phase_apart() -> None:
    pairs = [("r", ""), ("r", "a"), ("r\x00a", ""), ("r\x00", ""), ("r", "b"), ("", "a")]
    keys = [run_key(Episode(query="q", run_id=run, phase=phase)) for run, phase in pairs]
    assert keys[-1] == ""  # no run: no group, phase or not
    assert len(set(keys[:-1])) == len(keys) - 1


@pytest.mark.parametrize(
    ("phase", "why"),
    [
        ("line one\nline two", "one line of visible characters"),
        ("tab\there", "one line of visible characters"),
        ("x" * 201, "at most 200 characters"),
        ("\u202eevil", "one line of visible characters"),
        (7, "expected a string"),
    ],
)
async def test_a_bad_phase_is_refused_with_its_name(phase: Any, why: str) -> None:
    with pytest.raises(InvalidEpisodeError, match=f"phase: .*{why}"):
        Episode(query="q", phase=phase)
    hook = EpisodicHook(EpisodicMemory(InMemoryProvider()))
    with pytest.raises(ConfigurationError, match=why):
        await hook.record_phase(RUN, phase, "task")
    with pytest.raises(ConfigurationError, match=why):
        await hook.after_run("task", "answer", run_id=RUN, phase=phase)


async def test_record_phase_needs_a_run_and_a_phase() -> None:
    hook = EpisodicHook(EpisodicMemory(InMemoryProvider()))
    with pytest.raises(ConfigurationError, match="run_id must be a non-empty string"):
        await hook.record_phase("", "plan", "task")
    with pytest.raises(ConfigurationError, match="phase must name the phase"):
        await hook.record_phase(RUN, "", "task")
    with pytest.raises(ConfigurationError, match="outcome must be one of"):
        await hook.record_phase(RUN, "plan", "task", outcome="great")  # type: ignore[arg-type]


async def test_a_stored_phase_that_is_unreadable_decodes_as_no_phase() -> None:
    raw = json.dumps({"query": "q", "id": "e1", "run_id": "r", "phase": "bad\nphase"})
    assert Episode.from_json(raw).phase == ""
    assert Episode.from_json('{"query": "q"}').phase == ""
    assert Episode.from_json('{"query": "q"}').conversation_id == ""


# --- the runner -------------------------------------------------------------------------------


class TestTheRunner:
    """Through litellm (asyncio only) to the scripted server."""

    @pytest.fixture
    def anyio_backend(self) -> str:
        return "asyncio"

    async def test_run_agent_records_each_phase_of_one_run(
        self, llm: ScriptedLLM, tmp_path: Path
    ) -> None:
        memory = EpisodicMemory(InMemoryProvider())
        agent = Agent(
            name="oncall",
            model="openai/scripted",
            extra_params={**llm.params, "max_retries": 0},
            episodic_memory=memory,
            transcript_dir=tmp_path,
        )
        results = []
        for phase, task, _, _, _ in PHASES:
            llm.script(Reply.text(f"Done: {phase}."))
            results.append(
                await run_agent(agent, [{"role": "user", "content": task}], run_id=RUN, phase=phase)
            )
        episodes = [r.recorded[0] for r in results]
        assert {r.run_id for r in results} == {RUN}
        assert [(e.run_id, e.phase, e.query) for e in episodes] == [
            (RUN, p[0], p[1]) for p in PHASES
        ]
        # Each call keeps its own transcript: the phases of one run never overwrite one another.
        refs = [e.transcript_ref for e in episodes]
        assert len(set(refs)) == 3
        assert all(ref is not None and Path(ref).exists() for ref in refs)
        found = await memory.recall("why is PDF rendering of invoices slow", top_k=3)
        assert found[0].phase == "find the cause"

    async def test_run_agent_records_a_failed_phase_with_its_phase(self, llm: ScriptedLLM) -> None:
        memory = EpisodicMemory(InMemoryProvider())
        agent = Agent(
            name="oncall",
            model="openai/scripted",
            extra_params={**llm.params, "max_retries": 0},
            episodic_memory=memory,
        )
        llm.script(Reply.error(400, "bad request"))
        with pytest.raises(Exception, match="bad request"):
            await run_agent(
                agent, [{"role": "user", "content": "ship it"}], run_id=RUN, phase="ship"
            )
        [episode] = await memory.load()
        assert (episode.outcome, episode.run_id, episode.phase) == ("failure", RUN, "ship")

    async def test_run_agent_checks_the_run_and_the_phase(self) -> None:
        agent = Agent(
            name="a", model="openai/x", episodic_memory=EpisodicMemory(InMemoryProvider())
        )
        ask = [{"role": "user", "content": "task"}]
        with pytest.raises(ConfigurationError, match="run_id must be a non-empty string"):
            await run_agent(agent, ask, run_id="")
        with pytest.raises(ConfigurationError, match="one line of visible characters"):
            await run_agent(agent, ask, run_id=RUN, phase="a\nb")


class TestTheModelEndsPhases:
    """``Agent(record_phases=True)``: the model's finish_phase calls record the phases of one
    run, through litellm (asyncio only) to the scripted server."""

    @pytest.fixture
    def anyio_backend(self) -> str:
        return "asyncio"

    def agent(self, llm: ScriptedLLM, memory: EpisodicMemory | None, **options: Any) -> Agent:
        return Agent(
            name="oncall",
            model="openai/scripted",
            extra_params={**llm.params, "max_retries": 0},
            episodic_memory=memory,
            record_phases=True,
            **options,
        )

    async def test_each_finish_phase_call_records_a_phase_of_the_run(
        self, llm: ScriptedLLM
    ) -> None:
        memory = EpisodicMemory(InMemoryProvider())
        first = {
            "phase": "reproduce",
            "task": PHASES[0][1],
            "approach": PHASES[0][2],
            "outcome": "success",
            "lesson": PHASES[0][3],
        }
        second = {"phase": "find the cause", "task": PHASES[1][1], "outcome": "failure"}
        llm.script(
            Reply.tool_call("finish_phase", first),
            Reply.tool_call("finish_phase", second),
            Reply.text("Reproduced it; the cause is still open."),
        )
        events = []
        stream = stream_agent(
            self.agent(llm, memory), [{"role": "user", "content": "Fix the CSV export timeout"}]
        )
        async for event in stream:
            events.append(event)
        result = stream.result
        assert result is not None
        reproduce, cause, final = result.recorded
        assert [(e.phase, e.run_id) for e in (reproduce, cause, final)] == [
            ("reproduce", result.run_id),
            ("find the cause", result.run_id),
            ("", result.run_id),
        ]
        # The model's own word: a success it claims is claimed_success.
        assert (reproduce.query, reproduce.outcome) == (PHASES[0][1], "claimed_success")
        assert (reproduce.approach, reproduce.reflection) == (PHASES[0][2], PHASES[0][3])
        assert (cause.outcome, cause.reflection) == ("failure", None)
        assert final.query == "Fix the CSV export timeout"
        assert final.tools_used == []  # finish_phase is bookkeeping, not the agent's tool
        recorded = [e.data["id"] for e in events if e.event == EventType.EPISODE_RECORDED]
        assert recorded == [reproduce.id, cause.id, final.id]
        [tool] = llm.requests[0].tools
        assert tool["function"]["name"] == "finish_phase"
        assert "phase 'reproduce' recorded" in llm.requests[1].texts("tool")[0]
        found = await memory.recall("reproduce the CSV export timeout", top_k=3)
        assert reproduce.id in [e.id for e in found]

    async def test_a_call_that_does_not_fit_is_sent_back_to_the_model(
        self, llm: ScriptedLLM
    ) -> None:
        memory = EpisodicMemory(InMemoryProvider())
        llm.script(
            Reply.tool_call("finish_phase", {"phase": "plan", "outcome": "great"}),
            Reply.tool_call(
                "finish_phase", {"phase": "x" * 300, "task": "t", "outcome": "partial"}
            ),
            Reply.tool_call("finish_phase", {"phase": "a\n b", "task": "t", "outcome": "partial"}),
            Reply.text("Done."),
        )
        result = await run_agent(self.agent(llm, memory), [{"role": "user", "content": "task"}])
        errors = [c["error"] for c in result.tool_calls]
        assert "'phase' and 'task' are required" in errors[0]
        assert "'outcome' must be one of success, partial, failure" in errors[0]
        assert "at most 200 characters" in errors[1]
        assert errors[2] is None  # white space in a model's phase name is folded
        assert [e.phase for e in result.recorded] == ["a b", ""]

    async def test_without_memory_the_tool_is_not_offered(self, llm: ScriptedLLM) -> None:
        llm.script(Reply.text("Done."))
        await run_agent(self.agent(llm, None), [{"role": "user", "content": "task"}])
        assert llm.requests[0].tools == []

    def test_a_tool_of_the_same_name_is_refused(self) -> None:
        def finish_phase(phase: str) -> str:
            return phase

        with pytest.raises(ConfigurationError, match="a tool is named 'finish_phase'"):
            Agent(name="a", model="openai/x", tools=[finish_phase], record_phases=True)
        with pytest.raises(ConfigurationError, match=r"Agent\.record_phases must be True or False"):
            Agent(name="a", model="openai/x", record_phases="yes")  # type: ignore[arg-type]


def test_the_command_line_says_which_phase_each_episode_is(tmp_path: Path) -> None:
    store = str(tmp_path / "episodes.json")

    async def fill() -> None:
        async with FileMemoryProvider(store) as backend:
            hook = EpisodicHook(EpisodicMemory(backend))
            await hook.record_phase("run-1", "reproduce", "Reproduce the CSV export timeout")
            await hook.record_phase("run-1", "fix", "Make large CSV exports finish")

    anyio.run(fill)
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    for argv in (["timeline"], ["recall", "CSV export", "-v"]):
        done = subprocess.run(
            [sys.executable, "-m", "deepcrew_episodic", "--store", store, *argv],
            capture_output=True, text=True, env=env, timeout=60, check=True,
        )  # fmt: skip
        assert "reproduce" in done.stdout, done.stdout
        lines = [line for line in done.stdout.splitlines() if "phase" in line]
        assert len(lines) == 2, done.stdout
