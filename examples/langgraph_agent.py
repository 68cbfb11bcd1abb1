"""A LangGraph agent that remembers: a prebuilt ReAct agent, then a hand-made graph with a check.

python examples/langgraph_agent.py

Runs offline: the model is langchain-core's scripted fake chat model, so no API key and no
network are needed. Swap in ``ChatOpenAI(model="gpt-4o-mini")`` (or any chat model) for real
runs. Needs ``pip install 'deepcrew-episodic[langgraph]'``.
"""

from __future__ import annotations

import asyncio
import warnings
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from langgraph.prebuilt import create_react_agent
from pydantic import Field

from deepcrew_episodic import EpisodicMemory
from deepcrew_episodic.integrations.langgraph import (
    EpisodicAgentState,
    EpisodicNodes,
    EpisodicState,
)
from deepcrew_episodic.providers import InMemoryProvider

# LangGraph 1.x marks create_react_agent as moved to langchain's create_agent; it still works.
warnings.filterwarnings("ignore", message="create_react_agent has been moved")


class ScriptedModel(GenericFakeChatModel):
    """The fake chat model, keeping what it was sent and accepting tools (it answers from its
    script whatever tools it is given)."""

    seen: list[list[BaseMessage]] = Field(default_factory=list)

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        self.seen.append(list(messages))
        return super()._generate(messages, *args, **kwargs)


@tool
def lookup_runbook(topic: str) -> str:
    """Look up the team's runbook for a topic."""
    return "create a second key, move the clients to it, then revoke the first"


async def prebuilt_agent(memory: EpisodicMemory) -> None:
    model = ScriptedModel(
        messages=iter(
            [
                AIMessage(
                    "",
                    tool_calls=[
                        {"name": "lookup_runbook", "args": {"topic": "keys"}, "id": "call-1"}
                    ],
                ),
                AIMessage("Create a second key, move the clients, then revoke the old one."),
                AIMessage("Yes: both keys stay valid while the clients switch over."),
            ]
        )
    )
    nodes = EpisodicNodes(memory, agent_id="platform-bot")
    agent = create_react_agent(
        model,
        [lookup_runbook],
        prompt="You are a concise platform engineer.",
        state_schema=EpisodicAgentState,
        pre_model_hook=nodes.pre_model_hook,  # recall once per turn, the block on each call
        post_model_hook=nodes.post_model_hook,  # record after the final answer
    )
    for n, question in enumerate(
        ["How do I rotate an API key?", "Is API key rotation zero-downtime?"], start=1
    ):
        state = await nodes.ainvoke(agent, {"messages": [("user", question)]})
        run = state["episodic"]
        print(f"run {n}: recalled {len(run['recalled_ids'])}, recorded {run['recorded_id']}")
    print("\nInjected before run 2:\n")
    print(model.seen[-1][1].text)  # after the agent's own prompt


async def graph_with_a_check(memory: EpisodicMemory) -> None:
    model = ScriptedModel(messages=iter([AIMessage("Revoke the key, then make a new one.")]))
    nodes = EpisodicNodes(memory, agent_id="platform-bot")

    async def call_model(state: EpisodicState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(nodes.model_input(state))]}

    async def check(state: EpisodicState) -> dict[str, Any]:
        # A verdict from outside the model: it is recorded as verified.
        answer = state["messages"][-1].text.lower()
        if answer.startswith("revoke"):
            lesson = "Revoke the old key only after every client uses the new one."
            return {"episodic": {"outcome": "failure", "score": 0.1, "lesson": lesson}}
        return {"episodic": {"outcome": "success", "score": 1.0}}

    builder = StateGraph(EpisodicState)
    builder.add_node("recall", nodes.recall)
    builder.add_node("model", call_model)
    builder.add_node("check", check)
    builder.add_node("record", nodes.record)
    builder.add_edge(START, "recall")
    builder.add_edge("recall", "model")
    builder.add_edge("model", "check")
    builder.add_edge("check", "record")
    builder.add_edge("record", END)
    graph = builder.compile()

    state = await nodes.ainvoke(graph, {"messages": [("user", "Rotate the billing API key")]})
    recorded = state["episodic"]["recorded_id"]
    [episode] = [e for e in await memory.load() if e.id == recorded]
    print(f"\nchecked run: outcome={episode.outcome} score={episode.score}")
    print(f'lesson: "{episode.reflection}"')

    # A verdict that arrives later (the user: "that broke the clients") grades the run by id.
    await memory.grade(recorded, outcome="failure", note="the clients broke")
    print(f"graded {recorded} from the user's follow-up")


async def main() -> None:
    memory = EpisodicMemory(InMemoryProvider(), namespace="platform")
    await prebuilt_agent(memory)
    await graph_with_a_check(memory)


if __name__ == "__main__":
    asyncio.run(main())
