"""Distillation: one litellm call turns a run's transcript into a TASK / APPROACH / OUTCOME /
LESSON episode.

The guards matter more than the prompt: a reply that does not have the four lines stores no
stub, a lesson the model declines (``NONE``) stays empty, a model's "success" that nothing
checked is only ``claimed_success``, and a verified outcome (a verifier's verdict, an
infrastructure failure, an outcome given on the command line) beats whatever the model says.
The transcript is redacted before it is sent, and cut to a bounded size that keeps the task
(the first user message) and the final answer. litellm is imported on the first call only.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

import anyio

from ._episode import OUTCOMES, Episode, Outcome
from ._exceptions import ConfigurationError, DistillationError
from ._litellm import load_litellm
from ._redact import Redactor, as_redactor, redact_then_cut, safe_message
from ._reflect import parse_lesson
from ._source import OutcomeSource
from ._validate import integer, number

__all__ = [
    "DistillationError",
    "distill",
    "distill_prompt",
    "format_transcript",
    "is_trivial",
    "message_text",
    "parse_distilled",
    "write_transcript",
]

DISTILL_PROMPT = """\
You summarise one run of an AI agent as a single episode record, for the agent's future runs.
Reply with exactly four lines, each starting with its label as shown. Be concrete: name files,
commands, identifiers and error messages verbatim. Text shown as [REDACTED:...] was removed on
purpose; do not guess it.

TASK: what the agent was asked to do, one line
APPROACH: what it actually did, one line
OUTCOME: one of success / partial / failure / gave_up / unknown (gave_up: the agent stopped
without finishing the task; say why in the LESSON)
LESSON: the one thing a future run of a similar task should know. If there is genuinely nothing
worth carrying forward, write exactly: NONE"""

# The transcript sent to the model: each message cut to MESSAGE_CHARS, the task (first user
# message) and the final answer to ENDS_CHARS, the whole to TRANSCRIPT_CHARS.
MESSAGE_CHARS = 1_200
ENDS_CHARS = 2_500
TRANSCRIPT_CHARS = 8_000
FIELD_CHARS = 1_000
REPLY_CHARS = 300
DEFAULT_TIMEOUT = 30.0

_FIELDS = ("TASK", "APPROACH", "OUTCOME", "LESSON")
_FIELD_LINE = re.compile(
    r"^\s*(?:[-*]\s*)?[*_]{0,2}(TASK|APPROACH|OUTCOME|LESSON)[*_]{0,2}\s*:[*_]{0,2}\s*(.*)$",
    re.IGNORECASE,
)
# What a model may write on the OUTCOME line, and the outcome it stands for before the
# claimed/verified rule is applied.
_MODEL_OUTCOMES: dict[str, Outcome] = {
    "success": "success",
    "succeeded": "success",
    "successful": "success",
    "claimed_success": "claimed_success",
    "partial": "partial",
    "partial_success": "partial",
    "partially": "partial",
    "failure": "failure",
    "failed": "failure",
    "fail": "failure",
    # The agent gave up on the task: the task's failure, and a lesson for the next run. Not
    # ``abandoned``, which is kept for a run that never got to the task (the model provider
    # was down: the runner's tag ``infrastructure``) and which recall leaves out.
    "gave_up": "failure",
    "giving_up": "failure",
    "given_up": "failure",
    "abandoned": "failure",
    "unknown": "unknown",
}
# The tag of a distilled episode whose model said the agent gave up.
GAVE_UP_TAG = "gave-up"
_GAVE_UP = frozenset({"gave_up", "giving_up", "given_up", "abandoned"})


def message_text(content: Any) -> str:
    """The text of a message ``content``: a string, or the text parts of a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            str(p.get("text", ""))
            for p in content
            if isinstance(p, dict) and p.get("type") == "text"
        ]
        return "\n".join(p for p in parts if p)
    return ""


def is_trivial(messages: Sequence[Mapping[str, Any]], min_turns: int) -> bool:
    """Whether a run is not worth recording: fewer than *min_turns* messages that are not
    system messages (the instructions and the recall block say nothing about the run), or no
    user message with text (no task)."""
    turns = [m for m in messages if m.get("role") != "system"]
    has_task = any(
        m.get("role") == "user" and message_text(m.get("content")).strip() for m in turns
    )
    return len(turns) < min_turns or not has_task


def format_transcript(
    messages: Sequence[Mapping[str, Any]],
    *,
    redactor: Redactor | None = None,
    limit: int = TRANSCRIPT_CHARS,
) -> str:
    """The run as the distillation model reads it: one block per message (``user:``,
    ``assistant:``, ``assistant calls name({...})``, ``tool name:``), system messages left out.

    Each message is cut in its middle to a readable length; the first user message (the task)
    and the last message (the final answer) get a larger share. When the whole is longer than
    *limit*, messages are left out from the middle (a line says how many), keeping the start
    and the end of the run. Secrets are redacted with *redactor* before anything is cut.
    """
    names: dict[str, str] = {}
    blocks: list[str] = []
    kept = [m for m in messages if m.get("role") != "system"]
    first_user = next((i for i, m in enumerate(kept) if m.get("role") == "user"), None)
    for i, message in enumerate(kept):
        share = ENDS_CHARS if i in (first_user, len(kept) - 1) else MESSAGE_CHARS
        blocks.append(_block(message, names, redactor, share))
    return _fit(blocks, first_user or 0, limit)


def _block(
    message: Mapping[str, Any], names: dict[str, str], redactor: Redactor | None, share: int
) -> str:
    role = str(message.get("role") or "unknown")
    text = message_text(message.get("content")).strip()
    lines: list[str] = []
    if role == "tool":
        name = names.get(str(message.get("tool_call_id") or ""), "") or str(
            message.get("name") or ""
        )
        lines.append(f"tool {name}:".replace("tool :", "tool:") + (f" {text}" if text else ""))
    elif text:
        lines.append(f"{role}: {text}")
    for call in message.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping):
            continue
        name = str(function.get("name") or "")
        names[str(call.get("id") or "")] = name
        args = function.get("arguments")
        if not isinstance(args, str):
            args = json.dumps(args, default=str)
        lines.append(f"{role} calls {name}({args})")
    if not lines:
        lines.append(f"{role}: (empty)")
    block = "\n".join(lines)
    if redactor is not None:
        block = redactor.redact(block)
    return _cut(block, share)


def _cut(text: str, limit: int) -> str:
    """*text* cut in its middle to about *limit* characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    tail = limit - head
    return f"{text[:head]} […{len(text) - head - tail} characters cut…] {text[-tail:]}"


def _fit(blocks: list[str], task_at: int, limit: int) -> str:
    """The blocks joined, within *limit*: always the start up to the task and the last block;
    then from both ends towards the middle while they fit."""
    joined = "\n\n".join(blocks)
    if len(joined) <= limit or len(blocks) <= 2:
        return joined  # each block is already cut: two of them stay within ENDS_CHARS each
    head = blocks[: task_at + 1]
    tail = [blocks[-1]]
    used = sum(len(b) + 2 for b in head + tail)
    lo, hi = task_at + 1, len(blocks) - 2
    take_front = True
    while lo <= hi:
        index = lo if take_front else hi
        size = len(blocks[index]) + 2
        if used + size > limit:
            break
        used += size
        if take_front:
            head.append(blocks[lo])
            lo += 1
        else:
            tail.insert(0, blocks[hi])
            hi -= 1
        take_front = not take_front
    left_out = hi - lo + 1
    middle = [f"[… {left_out} message{'s' * (left_out != 1)} left out …]"] if left_out else []
    return "\n\n".join([*head, *middle, *tail])


def distill_prompt(transcript: str) -> list[dict[str, str]]:
    """The messages sent to the distillation model for a formatted *transcript*."""
    return [
        {"role": "system", "content": DISTILL_PROMPT},
        {"role": "user", "content": f"The run:\n\n{transcript}"},
    ]


def parse_distilled(reply: str | None) -> dict[str, str]:
    """The four fields of a distillation reply, as written (``TASK``, ``APPROACH``,
    ``OUTCOME``, ``LESSON``).

    Strict where it matters: each label must appear exactly once and ``TASK`` must not be
    empty, else :class:`DistillationError` quoting the reply (a reply that is not the record
    stores no stub). Tolerated: a line of prose before the first label, code fences, bullets
    or bold around a label, and a value that goes on over the following lines.
    """
    text = (reply or "").strip()
    if not text:
        raise DistillationError("the distillation model answered nothing")
    found: dict[str, list[str]] = {}
    current: str | None = None
    for line in text.splitlines():
        if line.strip().startswith("```"):
            continue
        match = _FIELD_LINE.match(line)
        if match:
            current = match.group(1).upper()
            if current in found:
                raise _unparseable(f"{current} is given twice", text)
            found[current] = [match.group(2).strip()]
        elif current is not None and line.strip():
            found[current].append(line.strip())
    missing = [name for name in _FIELDS if name not in found]
    if missing:
        raise _unparseable(f"no {', '.join(missing)} line", text)
    fields = {name: " ".join(" ".join(found[name]).split()) for name in _FIELDS}
    if not fields["TASK"]:
        raise _unparseable("TASK is empty", text)
    return fields


def _unparseable(why: str, reply: str) -> DistillationError:
    return DistillationError(
        f"the distillation reply is not a TASK/APPROACH/OUTCOME/LESSON record ({why}): "
        f"{safe_message(reply, REPLY_CHARS)!r}"
    )


def model_outcome(value: str, verified: Outcome | None) -> Outcome:
    """The episode's outcome: *verified* when given (a real signal beats the model's
    self-report); else the model's word, with ``success`` downgraded to ``claimed_success``
    (nothing checked it) and a word it should not have used read as ``unknown``."""
    if verified is not None:
        return verified
    said = _MODEL_OUTCOMES.get(_outcome_word(value), "unknown")
    return "claimed_success" if said == "success" else said


def gave_up(value: str) -> bool:
    """Whether the model's OUTCOME word says the agent gave up on the task (``gave_up``, or
    ``abandoned`` from a prompt of its own): a failure of the task, tagged ``gave-up``."""
    return _outcome_word(value) in _GAVE_UP


def _outcome_word(value: str) -> str:
    words = re.findall(r"[a-z]+", value.lower())
    two = "_".join(words[:2])
    return two if two in _MODEL_OUTCOMES else "_".join(words[:1])


async def distill(
    model: str,
    messages: Sequence[Mapping[str, Any]],
    *,
    verified: Outcome | None = None,
    params: Mapping[str, Any] | None = None,
    timeout: float = DEFAULT_TIMEOUT,  # noqa: ASYNC109 (litellm's own timeout gets it too)
    min_turns: int = 2,
    redactor: Redactor | bool | None = True,
) -> Episode | None:
    """Turn one run's transcript into an episode (not stored: record it yourself).

    *messages* is the run in OpenAI chat format, as a list of dicts: the user's messages, the
    assistant's (with ``tool_calls``), the tools' results (``role: "tool"``), ending with the
    final answer; system messages are skipped. One call to the litellm *model* (with
    *params*, e.g. ``api_base``, ``num_retries``; bounded by *timeout* seconds in all) reads
    the transcript, redacted with *redactor* (``True``: the built-in rules; ``None``/``False``:
    sent as it is) and cut to about 8,000 characters, and answers four lines.

    Returns ``None`` for a trivial run, without calling the model: fewer than *min_turns*
    non-system messages, or no user message with text. Otherwise an :class:`Episode` with
    ``query`` = the model's TASK, ``approach`` = APPROACH, ``reflection`` = LESSON (``None``
    when the model answered ``NONE``: a lesson is never invented), ``response`` = the final
    answer (the last assistant message's text), ``tools_used`` = the tools the transcript
    calls, and ``outcome``:

    - *verified* when given (any outcome: a verifier's verdict, a test result, ``abandoned``
      for an infrastructure failure); it overrides the model;
    - else the model's word: ``success`` becomes ``claimed_success``; ``partial``,
      ``failure`` and ``unknown`` stay; ``gave_up`` (or ``abandoned``: the agent gave up on
      the task) is the task's ``failure``, tagged ``gave-up``, so that the next run of the
      task recalls why; anything else is ``unknown``. (``abandoned`` episodes are the
      runner's, for a run the model provider's outage stopped before it began.) The model's
      word is a model judging the transcript: ``outcome_source`` is ``"judge"``. With
      *verified*, ``outcome_source`` is left for the caller to set (``""``).

    Raises :class:`DistillationError` when the model fails, times out, or answers without the
    four lines or with an empty TASK (store the plain run instead, never a stub), and
    ``ConfigurationError`` for a bad argument.

    Example::

        episode = await distill("openai/gpt-4o-mini", transcript, verified="failure")
        if episode is not None:
            await memory.record(episode)
    """
    if not isinstance(model, str) or not model:
        raise ConfigurationError(f"distill needs a litellm model name, not {model!r}")
    if isinstance(messages, str | bytes) or not all(isinstance(m, Mapping) for m in messages):
        raise ConfigurationError("distill takes the transcript as a list of message dicts")
    if verified is not None and verified not in OUTCOMES:
        raise ConfigurationError(
            f"verified must be one of {', '.join(OUTCOMES)} or None, not {verified!r}"
        )
    if params is not None and not isinstance(params, Mapping):
        raise ConfigurationError(
            f"distill params must be a dict of litellm arguments, not {type(params).__name__}"
        )
    timeout = number("distill timeout", timeout, minimum=0, exclusive_minimum=True)
    min_turns = integer("min_turns", min_turns, minimum=1)
    rules = redactor if isinstance(redactor, Redactor) else as_redactor(bool(redactor))
    if is_trivial(messages, min_turns):
        return None
    transcript = format_transcript(messages, redactor=rules)
    litellm = await load_litellm()
    # ours last: a caller's params cannot turn the call into a stream or drop the timeout
    kwargs = {**(params or {}), "stream": False, "timeout": timeout}
    try:
        with anyio.fail_after(timeout):
            response = await litellm.acompletion(
                model=model, messages=distill_prompt(transcript), **kwargs
            )
        reply = response.choices[0].message.content
    except TimeoutError:
        raise DistillationError(
            f"distillation model {model} did not answer within {timeout:g} s"
        ) from None
    except Exception as exc:
        named = f"{type(exc).__name__}: {str(exc).strip()}"
        raise DistillationError(
            f"distillation model {model} failed: {safe_message(named)}"
        ) from exc
    fields = parse_distilled(reply if isinstance(reply, str) else None)
    outcome = model_outcome(fields["OUTCOME"], verified)
    # The model read the outcome from the transcript: a judge's word. A verified outcome's
    # source is the caller's to set.
    source: OutcomeSource = "judge" if verified is None and outcome != "unknown" else ""
    # The model's words are redacted before they are cut: it may repeat a secret of its own
    # context, and a cut secret is no longer recognisable by its shape.
    return Episode(
        query=redact_then_cut(fields["TASK"], FIELD_CHARS, rules),
        approach=redact_then_cut(fields["APPROACH"], FIELD_CHARS, rules),
        outcome=outcome,
        outcome_source=source,
        reflection=parse_lesson(fields["LESSON"], rules),
        # The answer comes from the transcript, not the model: redacted like what was sent.
        response=rules.redact(_final_answer(messages)) if rules else _final_answer(messages),
        tools_used=_tools_called(messages),
        tags=[GAVE_UP_TAG] if verified is None and gave_up(fields["OUTCOME"]) else [],
    )


def _final_answer(messages: Sequence[Mapping[str, Any]]) -> str:
    last = messages[-1] if messages else {}
    if last.get("role") != "assistant" or last.get("tool_calls"):
        return ""  # the transcript stops before an answer
    return message_text(last.get("content")).strip()


def _tools_called(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    names: set[str] = set()
    for message in messages:
        for call in message.get("tool_calls") or []:
            function = call.get("function") if isinstance(call, Mapping) else None
            if isinstance(function, Mapping) and function.get("name"):
                names.add(str(function["name"]))
    return sorted(names)


# --- transcripts on disk ------------------------------------------------------------------------


async def write_transcript(
    directory: str | os.PathLike[str],
    name: str,
    messages: Sequence[Mapping[str, Any]],
    *,
    redactor: Redactor | None = None,
) -> str:
    """Write *messages* as JSONL (one message a line) to a new file *name* in *directory*
    (made if missing, mode 0700) and return the file's absolute path.

    The file is created with mode 0600 and never overwritten: an existing file raises
    ``FileExistsError``. Every string in the messages is redacted with *redactor* first. The
    file system work runs in a worker thread, off the event loop.
    """
    if not name or os.sep in name or (os.altsep and os.altsep in name) or name in (".", ".."):
        raise ConfigurationError(f"a transcript file name must be a plain name, not {name!r}")
    lines = [
        json.dumps(_redacted(dict(m), redactor), ensure_ascii=False, default=str) for m in messages
    ]
    text = "".join(f"{line}\n" for line in lines)
    return await anyio.to_thread.run_sync(_write_new, os.fspath(directory), name, text)


def _write_new(directory: str, name: str, text: str) -> str:
    os.makedirs(directory, mode=0o700, exist_ok=True)
    path = os.path.abspath(os.path.join(directory, name))
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags, 0o600)
    try:
        # a lone surrogate becomes the JSON escape it reads as
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as file:
            fd = -1  # the file object owns it now
            file.write(text)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        os.unlink(path)  # a half-written transcript is worse than none
        raise
    return path


def _redacted(value: Any, redactor: Redactor | None) -> Any:
    if redactor is None:
        return value
    if isinstance(value, str):
        return redactor.redact(value)
    if isinstance(value, Mapping):
        return {key: _redacted(item, redactor) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_redacted(item, redactor) for item in value]
    return value
