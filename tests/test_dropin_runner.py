"""Our EpisodicMemory under deepcrew-ai 0.6.1's own runner and refinement loop, driven through
litellm's real HTTP path against the scripted loopback server."""

from __future__ import annotations

from pathlib import Path

import pytest
from llm_server import Reply, ScriptedLLM

deepcrew = pytest.importorskip("deepcrew", reason="the deepcrew extra is not installed")
from deepcrew.verifier import Verifier, VerifierConfig, VerifierFeedback  # noqa: E402

import deepcrew_episodic  # noqa: E402
from deepcrew_episodic.providers import FileMemoryProvider  # noqa: E402

pytestmark = pytest.mark.anyio


def memory_at(tmp_path: Path) -> deepcrew_episodic.EpisodicMemory:
    return deepcrew_episodic.EpisodicMemory(
        FileMemoryProvider(tmp_path / "episodes.json"), namespace="support-bot"
    )


def agent_with(memory: object, llm: ScriptedLLM, **fields: object) -> object:
    return deepcrew.Agent(
        name="assistant",
        model="openai/scripted",
        extra_params=dict(llm.params),
        episodic_memory=memory,
        **fields,
    )


async def test_deepcrew_run_agent_records_and_recalls_through_our_memory(
    llm: ScriptedLLM, tmp_path: Path
) -> None:
    memory = memory_at(tmp_path)
    agent = agent_with(memory, llm)
    llm.script(Reply.text("Create a second key, switch clients over, then revoke the old one."))
    first = await deepcrew.run_agent(
        agent, [{"role": "user", "content": "How do I rotate an API key?"}]
    )
    assert first.episodes_recalled == 0
    (stored,) = await memory.load()
    assert stored.query == "How do I rotate an API key?"
    assert stored.response.startswith("Create a second key")
    assert stored.agent_id == "assistant"
    assert stored.id  # filled by our record(), not deepcrew's dataclass

    llm.script(Reply.text("Yes, with two live keys there is no gap."))
    second = await deepcrew.run_agent(
        agent, [{"role": "user", "content": "Is API key rotation zero-downtime?"}]
    )
    assert second.episodes_recalled == 1
    system = llm.requests[-1].system_text
    assert "## Relevant past experience" in system
    assert "How do I rotate an API key?" in system
    assert [e.query for e in await memory.load()] == [
        "How do I rotate an API key?",
        "Is API key rotation zero-downtime?",
    ]


async def test_deepcrew_loop_records_one_episode_per_iteration(
    llm: ScriptedLLM, tmp_path: Path
) -> None:
    memory = memory_at(tmp_path)
    scores = iter([0.4, 0.9])

    async def grade(query: str, result: object) -> VerifierFeedback:
        score = next(scores)
        return VerifierFeedback(
            score=score,
            issues=[] if score > 0.8 else ["missing the revoke step"],
            converged=score >= 0.8,
        )

    loop = deepcrew.LoopConfig(
        max_iterations=3, verifier=Verifier(VerifierConfig(evaluate_fn=grade))
    )
    agent = agent_with(memory, llm, loop_config=loop)
    llm.script(Reply.text("Make a new key."), Reply.text("Make a new key, switch, revoke the old."))
    result = await deepcrew.run_agent(
        agent, [{"role": "user", "content": "Rotate the billing key"}]
    )
    assert result.loop_iterations == 2
    episodes = await memory.load()
    assert [(e.query, e.outcome, e.score) for e in episodes] == [
        ("Rotate the billing key", "partial", 0.4),
        ("Rotate the billing key", "success", 0.9),
    ]
    assert "missing the revoke step" in llm.requests[-1].last_user_text


async def test_deepcrew_loop_with_its_llm_verifier(
    llm: ScriptedLLM, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # deepcrew-ai's LLM verifier passes no api_base: point litellm's OpenAI route at the
    # scripted server the documented way, through the environment.
    monkeypatch.setenv("OPENAI_API_BASE", llm.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    memory = memory_at(tmp_path)
    loop = deepcrew.LoopConfig(
        max_iterations=2, verifier=Verifier(VerifierConfig(model="openai/judge", threshold=0.8))
    )
    agent = agent_with(memory, llm, loop_config=loop)
    judge = lambda request: request.model == "judge"  # noqa: E731
    llm.script(
        Reply.text("Refunded the duplicate charge.", when=lambda r: r.model == "scripted"),
        Reply.json({"score": 0.95, "issues": [], "suggestion": ""}, when=judge),
    )
    result = await deepcrew.run_agent(agent, [{"role": "user", "content": "Refund order 1182"}])
    assert result.text == "Refunded the duplicate charge."
    (episode,) = await memory.load()
    assert (episode.outcome, episode.score) == ("success", 0.95)


async def test_deepcrew_agent_accepts_our_memory_with_its_own_provider(
    llm: ScriptedLLM,
) -> None:
    import deepcrew.memory as dc_memory

    memory = deepcrew_episodic.EpisodicMemory(dc_memory.InMemoryProvider(), namespace="ops")
    agent = agent_with(memory, llm)
    llm.script(Reply.text("Deployed."), Reply.text("Deployed again."))
    await deepcrew.run_agent(agent, [{"role": "user", "content": "Deploy the search service"}])
    again = await deepcrew.run_agent(
        agent, [{"role": "user", "content": "Deploy search service again"}]
    )
    assert again.episodes_recalled == 1
    assert len(await memory.load()) == 2
