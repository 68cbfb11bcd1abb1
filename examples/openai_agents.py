"""Episodic memory for an OpenAI Agents SDK agent: ``run`` in place of ``Runner.run``.

python examples/openai_agents.py    (needs: pip install 'deepcrew-episodic[openai-agents]')

Offline: the SDK's own scripted test model (``agents.testing.ScriptedModel``) answers, so no
API key and no network. Run 1 answers without naming the carrier; the user's follow-up grades
it a failure. Run 2 is shown that run in its instructions, looks the order up, and an output
guardrail checks the answer: a verified success.
"""

from __future__ import annotations

from typing import Any

import anyio
from agents import (
    Agent,
    GuardrailFunctionOutput,
    RunContextWrapper,
    function_tool,
    output_guardrail,
    set_tracing_disabled,
)
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call

from deepcrew_episodic import EpisodicMemory
from deepcrew_episodic.integrations.openai_agents import run
from deepcrew_episodic.providers import InMemoryProvider

set_tracing_disabled(True)  # the SDK would otherwise send traces to OpenAI


@function_tool
def lookup_order(order_id: int) -> str:
    """Look up an order's shipping status."""
    return f"order {order_id}: shipped with DHL, tracking 00340434161094042557"


@output_guardrail
def names_the_carrier(
    ctx: RunContextWrapper[Any], agent: Agent[Any], output: str
) -> GuardrailFunctionOutput:
    named = any(carrier in output for carrier in ("DHL", "UPS", "FedEx"))
    return GuardrailFunctionOutput(output_info=None, tripwire_triggered=not named)


def second_answer(call: ModelCall) -> Any:
    # What a model does with past experience: the failed answer is in its instructions.
    if "## Relevant past experience" in (call.system_instructions or ""):
        return [function_call("lookup_order", {"order_id": 7}, call_id="call-1")]
    return [assistant_message("Order 7 has shipped.")]


async def main() -> None:
    model = ScriptedModel(
        [
            [assistant_message("Order 7 has shipped.")],  # run 1
            ModelStep.respond(second_answer),  # run 2, first turn
            [assistant_message("Order 7 shipped with DHL, tracking 00340434161094042557.")],
        ]
    )
    agent = Agent(name="support", instructions="You answer shipping questions.", model=model)
    memory = EpisodicMemory(InMemoryProvider(), namespace="support")

    first = await run(agent, "Where is order 7?", memory=memory)
    print(f"run 1: recalled {len(first.recalled_ids)}, recorded {first.outcome}")
    print(f"  answer: {first.final_output}")

    # The user's next message is the verdict: grade the run it is about.
    assert first.recorded_id is not None
    await memory.grade(
        first.recorded_id, outcome="failure", source="user", note="user: which carrier?"
    )
    print("  graded failure from the user's follow-up: 'Which carrier? I need tracking.'")

    checked = agent.clone(tools=[lookup_order], output_guardrails=[names_the_carrier])
    second = await run(checked, "Where is my order 7?", memory=memory)
    print(f"run 2: recalled {len(second.recalled_ids)}, recorded {second.outcome}")
    print(f"  tools used: {second.recorded.tools_used if second.recorded else []}")
    print(f"  answer: {second.final_output}")

    print("\nThe model saw in run 2:")
    print(model.calls[1].system_instructions)

    print("\nThe log:")
    for episode in await memory.load():
        print(f"  {episode.id} {episode.outcome:<15} verified={episode.verified} {episode.query!r}")


if __name__ == "__main__":
    anyio.run(main)
