"""``distill``: a transcript to a TASK / APPROACH / OUTCOME / LESSON episode, with its guards.

The design essay's required recorder tests, ported: an unverified "success" is only claimed,
a verified outcome beats the model, ``LESSON: NONE`` stays empty, a trivial run is not
recorded, an unparseable reply stores no stub. The model calls go over real HTTP to the
scripted server (``tests/llm_server.py``).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from llm_server import Reply, ScriptedLLM

from deepcrew_episodic import ConfigurationError
from deepcrew_episodic._distill import (
    DistillationError,
    distill,
    format_transcript,
    is_trivial,
    model_outcome,
    parse_distilled,
    write_transcript,
)
from deepcrew_episodic._redact import Redactor

SECRET = "AKIAIOSFODNN7EXAMPLE"
RUN = [
    {"role": "system", "content": "You are the deploy bot."},
    {"role": "user", "content": "Deploy the api to staging"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "kubectl", "arguments": '{"cmd": "apply -f api.yaml"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "deployment.apps/api configured"},
    {"role": "assistant", "content": "Deployed: api is configured on staging."},
]
RECORD = "TASK: deploy the api to staging\nAPPROACH: kubectl apply\nOUTCOME: {}\nLESSON: {}"


def reply(outcome: str = "success", lesson: str = "apply the manifest, then wait") -> Reply:
    return Reply.text(RECORD.format(outcome, lesson))


def params(llm: ScriptedLLM) -> dict[str, Any]:
    return {**llm.params, "max_retries": 0}


# --- the essay's required tests -------------------------------------------------------------


@pytest.mark.anyio
async def test_unverified_success_is_downgraded_to_claimed(llm: ScriptedLLM) -> None:
    llm.script(reply("success"))
    episode = await distill("openai/distiller", RUN, params=params(llm))
    assert episode is not None
    assert episode.outcome == "claimed_success"
    assert not episode.verified
    assert (episode.query, episode.approach) == ("deploy the api to staging", "kubectl apply")
    assert episode.reflection == "apply the manifest, then wait"
    assert episode.response == "Deployed: api is configured on staging."
    assert episode.tools_used == ["kubectl"]


@pytest.mark.anyio
@pytest.mark.parametrize("verified", ["failure", "abandoned", "success", "partial"])
async def test_a_verified_outcome_overrides_the_model(llm: ScriptedLLM, verified: Any) -> None:
    llm.script(reply("success" if verified != "success" else "failure"))
    episode = await distill("openai/distiller", RUN, verified=verified, params=params(llm))
    assert episode is not None
    assert episode.outcome == verified


@pytest.mark.anyio
@pytest.mark.parametrize("lesson", ["NONE", "none.", '"NONE"', "", "NONE - nothing new"])
async def test_a_none_lesson_is_stored_empty_not_invented(llm: ScriptedLLM, lesson: str) -> None:
    llm.script(reply("unknown", lesson))
    episode = await distill("openai/distiller", RUN, params=params(llm))
    assert episode is not None
    assert episode.reflection is None
    assert episode.outcome == "unknown"


@pytest.mark.anyio
@pytest.mark.parametrize(
    "messages",
    [
        [{"role": "user", "content": "hi"}],
        [{"role": "system", "content": "x"}, {"role": "user", "content": "hi"}],
        [{"role": "user", "content": "   "}, {"role": "assistant", "content": "ok"}],
        [{"role": "assistant", "content": "ok"}, {"role": "assistant", "content": "ok"}],
        [],
    ],
)
async def test_a_trivial_run_is_not_recorded(llm: ScriptedLLM, messages: Any) -> None:
    assert await distill("openai/distiller", messages, params=params(llm)) is None
    assert llm.requests == []  # not even asked


@pytest.mark.anyio
@pytest.mark.parametrize(
    "text",
    [
        "The agent deployed the api. It went well.",  # prose, no record
        "TASK: deploy\nAPPROACH: kubectl\nOUTCOME: success",  # no LESSON
        "TASK:\nAPPROACH: kubectl\nOUTCOME: success\nLESSON: NONE",  # empty TASK
        "TASK: a\nTASK: b\nAPPROACH: x\nOUTCOME: success\nLESSON: NONE",  # two TASKs
        "",
    ],
)
async def test_an_unparseable_reply_stores_no_stub(llm: ScriptedLLM, text: str) -> None:
    llm.script(Reply.text(text))
    with pytest.raises(DistillationError, match="distillation"):
        await distill("openai/distiller", RUN, params=params(llm))


# --- the model call -------------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_transcript_sent_is_redacted_and_shows_the_tool_calls(llm: ScriptedLLM) -> None:
    run = [*RUN[:1], {"role": "user", "content": f"Deploy with key {SECRET}"}, *RUN[2:]]
    llm.script(reply())
    await distill("openai/distiller", run, params=params(llm))
    [request] = llm.requests
    sent = json.dumps(request.body)
    assert SECRET not in sent
    assert "[REDACTED:aws-access-key]" in request.last_user_text
    assert 'assistant calls kubectl({"cmd": "apply -f api.yaml"})' in request.last_user_text
    assert "tool kubectl: deployment.apps/api configured" in request.last_user_text
    assert "You are the deploy bot." not in sent  # system messages are not the run
    assert not request.stream


@pytest.mark.anyio
async def test_the_distilled_episode_holds_no_secret_of_the_transcript(llm: ScriptedLLM) -> None:
    """The final answer comes from the transcript itself: the episode
    distill returns is redacted like what it sent, whatever memory records it."""
    run = [
        {"role": "user", "content": "Deploy the api"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "kubectl", "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        {"role": "assistant", "content": f"Deployed with the key {SECRET}."},
    ]
    llm.script(reply(), reply())
    episode = await distill("openai/distiller", run, params=params(llm))
    assert episode is not None
    assert episode.tools_used == ["kubectl"]
    assert SECRET not in json.dumps(episode.to_dict())
    assert "[REDACTED:aws-access-key]" in episode.response
    plain = await distill("openai/distiller", run, params=params(llm), redactor=None)
    assert plain is not None
    assert SECRET in plain.response


@pytest.mark.anyio
async def test_redaction_can_be_turned_off_by_the_caller(llm: ScriptedLLM) -> None:
    run = [{"role": "user", "content": f"Deploy with key {SECRET}"}, RUN[-1]]
    llm.script(reply())
    await distill("openai/distiller", run, params=params(llm), redactor=None)
    assert SECRET in llm.requests[0].last_user_text


@pytest.mark.anyio
async def test_a_failing_model_is_a_distillation_error(llm: ScriptedLLM) -> None:
    llm.script(Reply.error(500, "distiller down"))
    with pytest.raises(DistillationError, match="InternalServerError") as caught:
        await distill("openai/distiller", RUN, params=params(llm))
    assert caught.value.__cause__ is not None


@pytest.mark.anyio
async def test_a_hanging_model_is_bounded_by_the_timeout(llm: ScriptedLLM) -> None:
    llm.script(Reply.text(RECORD.format("success", "NONE"), delay=5))
    with pytest.raises(DistillationError):
        await distill("openai/distiller", RUN, params=params(llm), timeout=0.3)


@pytest.mark.anyio
async def test_bad_arguments_are_configuration_errors() -> None:
    with pytest.raises(ConfigurationError, match="model"):
        await distill("", RUN)
    with pytest.raises(ConfigurationError, match="verified"):
        await distill("openai/x", RUN, verified="great")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="timeout"):
        await distill("openai/x", RUN, timeout=0)
    with pytest.raises(ConfigurationError, match="min_turns"):
        await distill("openai/x", RUN, min_turns=0)
    with pytest.raises(ConfigurationError, match="list of message dicts"):
        await distill("openai/x", "user: hi")  # type: ignore[arg-type]


# --- parsing and formatting, offline ---------------------------------------------------------


def test_the_parser_tolerates_layout_but_not_a_missing_record() -> None:
    fields = parse_distilled(
        "Here is the record:\n```\n**TASK:** deploy the api\n- APPROACH: kubectl apply\n"
        "OUTCOME: partial success\nLESSON: wait for the rollout;\nit takes two minutes\n```"
    )
    assert fields == {
        "TASK": "deploy the api",
        "APPROACH": "kubectl apply",
        "OUTCOME": "partial success",
        "LESSON": "wait for the rollout; it takes two minutes",
    }


@pytest.mark.parametrize(
    ("said", "outcome"),
    [
        ("success", "claimed_success"),
        ("Success.", "claimed_success"),
        ("claimed_success", "claimed_success"),
        ("partial success", "partial"),
        ("partial", "partial"),
        ("failed", "failure"),
        ("failure", "failure"),
        ("abandoned", "failure"),  # the agent gave up: the task's failure, not an outage
        ("gave_up", "failure"),
        ("gave up", "failure"),
        ("Gave up.", "failure"),
        ("unknown", "unknown"),
        ("great!", "unknown"),
        ("not a success", "unknown"),
    ],
)
def test_the_models_outcome_word(said: str, outcome: str) -> None:
    assert model_outcome(said, None) == outcome
    assert model_outcome(said, "failure") == "failure"


def test_a_long_run_keeps_its_task_and_final_answer_within_the_cap() -> None:
    task = "Migrate the billing schema " + "with care " * 100
    middle = [
        {"role": "assistant" if i % 2 else "user", "content": f"step {i} " + "x" * 3000}
        for i in range(40)
    ]
    answer = "Migrated: 14 tables, 0 errors. " + "detail " * 50
    text = format_transcript(
        [{"role": "user", "content": task}, *middle, {"role": "assistant", "content": answer}]
    )
    assert len(text) <= 8_000
    assert text.startswith(f"user: {task.strip()}")  # the task, whole
    assert text.endswith(f"assistant: {answer.strip()}")  # the final answer, whole
    assert "messages left out" in text
    assert "characters cut" in text
    assert "step 0" in text
    assert "step 39" in text  # the run's start and end both


def test_each_message_is_cut_in_its_middle() -> None:
    long = "head " + "y" * 5000 + " tail"
    text = format_transcript(
        [
            {"role": "user", "content": "task"},
            {"role": "assistant", "content": long},
            {"role": "assistant", "content": "done"},
        ]
    )
    assert "head" in text
    assert "tail" in text
    assert len(text) < 2_000


def test_triviality() -> None:
    assert is_trivial([{"role": "user", "content": "hi"}], 2)
    assert not is_trivial(RUN, 2)
    assert is_trivial(RUN, 5)  # four turns: system messages do not count
    assert is_trivial([{"role": "user", "content": [{"type": "text", "text": " "}]}] * 3, 2)


# --- transcript files -----------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_transcript_file_is_private_redacted_and_never_overwritten(tmp_path: Path) -> None:
    run = [
        {"role": "user", "content": f"use {SECRET}"},
        *RUN[2:],
        {"role": "user", "content": "\udc80"},
    ]
    directory = tmp_path / "transcripts"
    path = await write_transcript(directory, "r1.jsonl", run, redactor=Redactor())
    assert Path(path) == (directory / "r1.jsonl").resolve()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    raw = Path(path).read_text(encoding="utf-8")
    assert SECRET not in raw
    lines = [json.loads(line) for line in raw.splitlines()]
    assert len(lines) == len(run)
    assert lines[1]["tool_calls"][0]["function"]["name"] == "kubectl"
    assert lines[-1]["content"] == "\udc80"  # escaped in the file, the same text read back
    with pytest.raises(FileExistsError):
        await write_transcript(directory, "r1.jsonl", [{"role": "user", "content": "other"}])
    assert Path(path).read_text(encoding="utf-8") == raw
    with pytest.raises(ConfigurationError):
        await write_transcript(directory, "../escape.jsonl", run)
