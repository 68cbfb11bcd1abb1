"""``EpisodicHook``: episodic memory for any agent loop, in two calls.

Before a run, :meth:`EpisodicHook.before_run` recalls relevant episodes and returns the
messages with the ``## Relevant past experience`` block inserted as a system message. After
the run, :meth:`EpisodicHook.after_run` records one episode (:meth:`EpisodicHook.failed` a
``failure`` episode naming the error, :meth:`EpisodicHook.unverified` an answer whose grading
failed). Memory never takes the agent down: a recall or record that fails is logged, counted
in ``memory.counters`` and reported as an event, and the run goes on.

A run that failed because the model provider could not be used (unreachable, timed out,
rate-limited, overloaded, refusing the credentials or the bill: :func:`infrastructure_error`)
says nothing about the task: :meth:`EpisodicHook.failed` records it as ``abandoned``, tag
``infrastructure``, which recall leaves out unless asked for.

With ``grade_followups``, the user's next message in the same conversation (the
``conversation_id`` given to each call) grades the run before it (:meth:`EpisodicHook.before_run`;
see docs/runner.md): a verdict is recorded with ``memory.grade``, and a message that is only a
thank-you is not recorded as a run of its own.

``run_agent`` and the refinement loop use this hook; nothing else in the runner touches memory.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import sys
from collections import OrderedDict
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio

from ._distill import message_text
from ._episode import OUTCOMES, Episode, Outcome, check_field, outcome_for_score
from ._events import EventType, StreamEvent, emit
from ._exceptions import ConfigurationError, FollowUpError
from ._followup import VERDICTS, FollowUp, FollowUpGrader, read_followup
from ._recall import INTENTS
from ._redact import redact_then_cut, safe_message
from ._source import OutcomeSource, check_source
from ._validate import number, optional_integer, optional_number, shown

if TYPE_CHECKING:
    from ._grade import Grade
    from ._memory import EpisodicMemory

__all__ = [
    "EpisodicHook",
    "EventCallback",
    "Recalled",
    "Recorded",
    "infrastructure_error",
    "message_text",
    "user_query",
]

log = logging.getLogger("deepcrew_episodic")

EventCallback = Callable[[StreamEvent], Any]
"""Receives each event; may be a plain function or a coroutine function."""

UNVERIFIED_TAG = "unverified"
INFRASTRUCTURE_TAG = "infrastructure"
# litellm's exceptions for a provider that could not be used, whatever the task: unreachable
# (APIConnectionError; Timeout is not one of its subclasses), overloaded or down (5xx,
# MidStreamFallbackError is a ServiceUnavailableError), rate-limited, refusing the key or the
# bill (402 is PaymentRequiredError, litellm's own budget BudgetExceededError). A request the
# provider refused for its content (BadRequestError and its kin: context window, content
# policy) or a model name it does not know (NotFoundError) is the agent's or its
# configuration's failure, and stays one.
INFRASTRUCTURE_ERRORS = (
    "APIConnectionError",
    "Timeout",
    "RateLimitError",
    "AuthenticationError",
    "PermissionDeniedError",
    "PaymentRequiredError",
    "BudgetExceededError",
    "InternalServerError",
    "BadGatewayError",
    "ServiceUnavailableError",
)
# Unauthorized, payment required, forbidden, request timeout, rate-limited (5xx: any).
INFRASTRUCTURE_STATUSES = frozenset({401, 402, 403, 408, 429})
ERROR_CHARS = 500
NOTE_CHARS = 300  # of the user's follow-up, kept in the note of the grade it gave
MAX_TURNS = 4096  # conversations whose latest message this hook remembers


@dataclass(frozen=True)
class Recalled:
    """What :meth:`EpisodicHook.before_run` found.

    ``messages`` is the conversation to send to the model: the input with the block inserted
    (or the input unchanged when nothing was recalled or recall failed). ``events`` are the
    stream events this call emitted (also sent to ``on_event``), for a runner to yield.

    With ``grade_followups`` and a ``conversation_id``: ``followup`` is what the message said
    of the conversation's previous run (``None`` when there was none, or it could not be
    read), ``grade`` the grade it gave that run. ``query`` is the task to record this run
    under: the message, or the previous run's task when the message only said it failed (the
    run is another try at that task).
    """

    messages: list[dict[str, Any]]
    query: str
    episodes: list[Episode] = field(default_factory=list)
    block: str = ""
    error: str | None = None
    events: tuple[StreamEvent, ...] = ()
    followup: FollowUp | None = None
    grade: Grade | None = None

    @property
    def count(self) -> int:
        return len(self.episodes)


@dataclass(frozen=True)
class Recorded:
    """What :meth:`EpisodicHook.after_run` stored: the episode (with its :attr:`id`, to grade
    it later with ``memory.grade``), or why it could not, and the stream events the call
    emitted (also sent to ``on_event``). ``error`` is also set when the episode was stored
    without something it should have had (the run's transcript file could not be written).
    Neither an episode nor an error: nothing was meant to be stored (with ``grade_followups``,
    a turn whose message only thanked for, or acknowledged, the run before)."""

    episode: Episode | None
    error: str | None = None
    events: tuple[StreamEvent, ...] = ()

    @property
    def id(self) -> str | None:
        """The stored episode's id, or ``None`` when nothing was stored."""
        return None if self.episode is None else self.episode.id


class EpisodicHook:
    """Recall before a run, record after it; framework-agnostic.

    Parameters
    ----------
    memory:
        The :class:`~deepcrew_episodic.EpisodicMemory` to recall from and record into.
    agent_id:
        Stored on every episode and on every event.
    on_event:
        Called with each :class:`StreamEvent` (``EPISODE_RECALLED``, ``EPISODE_RECORDED``,
        ``EPISODE_RECALL_FAILED``, ``EPISODE_RECORD_FAILED``). A plain or an async function.
    top_k:
        Episodes to recall (default: the memory's ``recall_k``).
    min_relevance:
        The relevance floor of the recall (default: the memory's ``min_relevance``): an
        episode less relevant than this is left out of the block (see docs/recall.md).
    max_block_chars:
        Budget for the injected block: the best episodes that fit, in rank order (one that
        does not fit is skipped whole).
    recall_timeout:
        Seconds to wait for recall before going on without it (``None``: no limit).
    record_timeout:
        Seconds to wait for a record (its reflection and embedding included) before giving
        it up as a record failure, so that a store that hangs cannot hold the run's answer
        back (``None``: no limit).
    tags:
        Added to every recorded episode.
    intent:
        What recall looks for among equally relevant episodes: ``"any"`` (the default),
        ``"what_worked"`` (planning a new approach: successes first) or ``"what_failed"``
        (avoiding a repeat mistake: failures first).
    grade_followups:
        ``True``: in a conversation (``conversation_id=`` on each call), the user's next
        message grades the conversation's previous run by the documented rule
        (:func:`~deepcrew_episodic.read_followup`), or by a grader given here (a
        :class:`~deepcrew_episodic.FollowUpModel`, or any function of the message and the
        previous episode returning a :class:`~deepcrew_episodic.FollowUp`). ``False``
        (default): a follow-up is a run like any other.

    Example (a plain litellm loop)::

        hook = EpisodicHook(memory, agent_id="support")
        recalled = await hook.before_run(messages)
        response = await litellm.acompletion(model=model, messages=recalled.messages)
        answer = response.choices[0].message.content
        await hook.after_run(recalled.query, answer, outcome="success", source="verifier")
    """

    def __init__(
        self,
        memory: EpisodicMemory,
        *,
        agent_id: str = "",
        on_event: EventCallback | None = None,
        top_k: int | None = None,
        max_block_chars: int | None = None,
        recall_timeout: float | None = 10.0,
        tags: Sequence[str] = (),
        record_timeout: float | None = 60.0,
        intent: str = "any",
        grade_followups: bool | FollowUpGrader = False,
        min_relevance: float | None = None,
    ) -> None:
        top_k = optional_integer("top_k", top_k, minimum=1)
        self.intent = check_intent(intent)
        min_relevance = optional_number("min_relevance", min_relevance, minimum=0.0, maximum=1.0)
        recall_timeout = optional_number(
            "recall_timeout", recall_timeout, minimum=0, exclusive_minimum=True
        )
        record_timeout = optional_number(
            "record_timeout", record_timeout, minimum=0, exclusive_minimum=True
        )
        max_block_chars = optional_integer("max_block_chars", max_block_chars, minimum=0)
        self.memory = memory
        self.agent_id = agent_id
        self.on_event = on_event
        self.top_k = top_k
        self.min_relevance = min_relevance
        self.max_block_chars = max_block_chars
        self.recall_timeout = recall_timeout
        self.record_timeout = record_timeout
        self.tags = list(tags)
        self.grade_followups = _grader(grade_followups)
        # What before_run read from each conversation's latest message, for the recording of
        # the same turn (bounded: a turn whose run is never recorded must not leak).
        self._turns: OrderedDict[str, FollowUp] = OrderedDict()

    async def before_run(
        self,
        messages: Sequence[dict[str, Any]],
        *,
        query: str | None = None,
        conversation_id: str | None = None,
        previous_id: str | None = None,
    ) -> Recalled:
        """Recall episodes relevant to *query* (default: the last user message) and return the
        messages with the block inserted after the leading system messages.

        With ``grade_followups`` and a *conversation_id*, the message first grades the
        conversation's previous run (its newest episode in the store, or the episode
        *previous_id* names), so that this run's recall already sees the grade; see
        :class:`Recalled` for what it reports, docs/runner.md for the rule.

        Never raises for a memory failure: the run goes on without past experience, and the
        failure is logged, counted (``memory.counters.recall_failures``) and emitted as
        ``EPISODE_RECALL_FAILED``. A follow-up that cannot be read or graded is logged and
        counted (``memory.counters.grading_failures``) and grades nothing.
        """
        original = list(messages)
        text = user_query(original) if query is None else query
        cid = conversation_arg(conversation_id)
        if previous_id is not None and (not isinstance(previous_id, str) or not previous_id):
            raise ConfigurationError(
                f"previous_id must be an episode id (a non-empty string), not {previous_id!r}"
            )
        followup: FollowUp | None = None
        grade: Grade | None = None
        # A new turn: what the conversation's last message said decides its own turn only.
        self._turns.pop(cid, None)
        if cid and self.grade_followups is not None and text.strip():
            followup, grade, task = await self._read_followup(text, cid, previous_id)
            text = task or text
        if not text.strip():
            return Recalled(original, text)
        if followup is not None and self._only_courtesy(cid):
            # A thank-you holds no task to recall for: its one word ("worked", "solved") would
            # bring in, and reinforce, whichever past run happens to share it.
            return Recalled(original, text, followup=followup, grade=grade)
        recalled = await self._recall(original, text)
        if followup is None:
            return recalled
        return dataclasses.replace(recalled, followup=followup, grade=grade)

    async def _recall(self, original: list[dict[str, Any]], text: str) -> Recalled:
        try:
            with anyio.fail_after(self.recall_timeout):
                ranking = await self.memory.explain(
                    text, self.top_k, intent=self.intent, min_relevance=self.min_relevance
                )
            episodes = [scored.episode for scored in ranking]
            # The renderer says which episodes it kept (one that does not fit is skipped whole
            # under max_block_chars), so the event names exactly what the model sees. recall
            # has already left out expired episodes, which memory.render would filter.
            block, shown = self.memory.fit(episodes, max_chars=self.max_block_chars)
        except Exception as exc:
            self.memory.counters.recall_failures += 1
            error = describe(exc)
            log.warning("episodic recall failed (%s); the run goes on without it", error)
            event = await self._emit(EventType.EPISODE_RECALL_FAILED, _error_data(exc))
            return Recalled(original, text, error=error, events=(event,))
        if shown:
            await self._count_uses([e.id for e in shown if e.id])
        if not block and ranking.embedder_error is None:
            return Recalled(original, text)
        # A fallback to keywords is said even when nothing was found: the application learns
        # that its embedder is failing from the stream, not only from the log.
        event = await self._emit(
            EventType.EPISODE_RECALLED,
            {
                "count": len(shown),
                "ids": [e.id for e in shown],
                "query": text,
                "ranking": ranking.by,
                "embedder_error": ranking.embedder_error,
            },
        )
        if not block:
            return Recalled(original, text, events=(event,))
        return Recalled(insert_system(original, block), text, shown, block, events=(event,))

    async def after_run(
        self,
        query: str,
        response: str,
        *,
        outcome: Outcome | None = None,
        score: float | None = None,
        tools_used: Collection[str] = (),
        tags: Sequence[str] = (),
        run_id: str | None = None,
        transcript_ref: str | None = None,
        source: str | None = None,
        conversation_id: str | None = None,
        phase: str = "",
    ) -> Recorded:
        """Record one episode for a finished run.

        Without *outcome*, a score stands for one (:func:`~deepcrew_episodic.outcome_for_score`:
        ``success`` from 0.7, ``failure`` below 0.3, ``partial`` between); without either, the
        outcome is ``unknown`` (an answer nobody checked). *source* says where the outcome
        came from: ``"verifier"`` (your tests, an exit code, a check), ``"user"``, ``"agent"``
        (the agent's own claim) or ``"judge"`` (a model grading the run); without it, a
        ``claimed_success`` is the agent's and any other outcome is recorded with no source
        (read as verified, as before sources existed). *score* must be in [0, 1], *outcome*
        one of the outcomes and *source* one of the sources: anything else raises
        ``ConfigurationError`` (a caller's mistake, not a memory failure). *run_id* groups the
        episodes of one run or refinement loop; *transcript_ref* says where the run's raw
        transcript is kept. *phase* names the subtask of a long run this episode is (see
        :meth:`record_phase`); *conversation_id* the chat it answered in. With
        ``grade_followups``, a run whose message was only a thank-you or an acknowledgement of
        the previous run is not recorded (the returned :class:`Recorded` has no episode and no
        error).

        Never raises for a memory failure: it is logged, counted
        (``memory.counters.record_failures``), emitted as ``EPISODE_RECORD_FAILED`` and
        returned in :attr:`Recorded.error`.
        """
        if score is not None:
            score = number("score", score, minimum=0.0, maximum=1.0)
        if outcome is None:
            outcome = "unknown" if score is None else outcome_for_score(score)
        elif outcome not in OUTCOMES:
            raise ConfigurationError(
                f"outcome must be one of {', '.join(OUTCOMES)} or None, not {outcome!r}"
            )
        return await self._record(
            query,
            response,
            outcome,
            score,
            tools_used,
            tags,
            run_id=run_id,
            transcript_ref=transcript_ref,
            source=given_source(outcome, source),
            conversation_id=conversation_arg(conversation_id),
            phase=phase_arg(phase),
            answer=True,
        )

    async def record_phase(
        self,
        run_id: str,
        phase: str,
        task: str,
        *,
        approach: str = "",
        lesson: str | None = None,
        response: str = "",
        outcome: Outcome | None = None,
        score: float | None = None,
        tools_used: Collection[str] = (),
        tags: Sequence[str] = (),
        conversation_id: str | None = None,
        transcript_ref: str | None = None,
        source: str | None = None,
    ) -> Recorded:
        """Record one phase of a long run as an episode of its own: *task* is the phase's own
        task (what this phase set out to do), *approach* how it went about it, *lesson* what it
        taught, *outcome*/*score*/*source* how it ended and who says so (as in
        :meth:`after_run`). Every phase of one
        run shares *run_id*; *phase* (one line, e.g. ``"reproduce the bug"``) tells them apart.

        Recall shows one item per run and phase: a query about one phase's work finds that
        phase's episode, and two episodes of the same phase (a phase tried again) are one item,
        the later first. Failures are tolerated as in :meth:`after_run`.

        Example::

            run = uuid.uuid4().hex
            await hook.record_phase(run, "reproduce", "Reproduce the CSV export timeout",
                                    approach="Exported a 2 GB account on staging",
                                    lesson="It times out at 30 s, in the PDF step", outcome="success")
            await hook.record_phase(run, "fix", "Make large CSV exports finish", ...)
        """
        if not isinstance(run_id, str) or not run_id:
            raise ConfigurationError(f"run_id must be a non-empty string, not {run_id!r}")
        if not phase_arg(phase):
            raise ConfigurationError("phase must name the phase (one line of text), not ''")
        if score is not None:
            score = number("score", score, minimum=0.0, maximum=1.0)
        if outcome is None:
            outcome = "unknown" if score is None else outcome_for_score(score)
        elif outcome not in OUTCOMES:
            raise ConfigurationError(
                f"outcome must be one of {', '.join(OUTCOMES)} or None, not {outcome!r}"
            )
        try:
            episode = Episode(
                query=task,
                response=response,
                outcome=outcome,
                score=score,
                tools_used=sorted(set(tools_used)),
                reflection=lesson,
                tags=list(tags),
                approach=approach,
                run_id=run_id,
                phase=phase,
                transcript_ref=transcript_ref,
                outcome_source=given_source(outcome, source),
            )
        except ValueError as exc:
            raise ConfigurationError(f"record_phase: {exc}") from None
        return await self.record(episode, conversation_id=conversation_id, answer=False)

    async def failed(
        self,
        query: str,
        error: BaseException,
        *,
        partial_response: str = "",
        tools_used: Collection[str] = (),
        tags: Sequence[str] = (),
        run_id: str | None = None,
        transcript_ref: str | None = None,
        infrastructure: bool | None = None,
        conversation_id: str | None = None,
        phase: str = "",
    ) -> Recorded:
        """Record a run that raised *error*; the response names the error (and keeps any
        partial answer). The caller re-raises.

        The outcome is ``failure`` (a tool's error, a crash in the agent's code, no answer
        within ``max_turns``), except when the model provider could not be used
        (:func:`infrastructure_error`): then it is ``abandoned``, tag ``infrastructure``, and
        the response starts ``Run abandoned: <ErrorClass>: ...``. Recall leaves abandoned
        episodes out unless its ``outcome`` filter names them.

        *infrastructure* is for a framework whose errors are not litellm's: ``True`` or
        ``False`` says what the framework's own error classes told the caller, ``None`` (the
        default) applies :func:`infrastructure_error`. The outcome's source is
        ``"verifier"``: the error was seen, not claimed."""
        extra: list[str] = []
        if infrastructure_error(error) if infrastructure is None else infrastructure:
            outcome: Outcome = "abandoned"
            response = f"Run abandoned: {describe(error)}"
            extra.append(INFRASTRUCTURE_TAG)
        else:
            outcome = "failure"
            response = f"Run failed with {describe(error)}"
        if partial_response.strip():
            response += f"\nPartial answer: {partial_response.strip()}"
        return await self._record(
            query,
            response,
            outcome,
            None,
            tools_used,
            [*extra, *tags],
            run_id=run_id,
            transcript_ref=transcript_ref,
            source="verifier",
            conversation_id=conversation_arg(conversation_id),
            phase=phase_arg(phase),
        )

    async def unverified(
        self,
        query: str,
        response: str,
        error: BaseException,
        *,
        tools_used: Collection[str] = (),
        tags: Sequence[str] = (),
        run_id: str | None = None,
        transcript_ref: str | None = None,
        conversation_id: str | None = None,
        phase: str = "",
    ) -> Recorded:
        """Record a finished run whose grading failed (*error*, e.g. a ``VerifierError``):
        outcome ``unknown``, no score, tag ``unverified``, the answer followed by a line naming
        the error. A verifier outage says nothing about the agent, so it is never recorded as
        the agent's ``failure``. With ``grade_followups``, a turn whose message only thanked
        for the run before is not recorded, as in :meth:`after_run`. The caller re-raises."""
        note = f"Not graded: the verifier failed with {describe(error)}"
        text = f"{response.rstrip()}\n{note}" if response.strip() else note
        return await self._record(
            query,
            text,
            "unknown",
            None,
            tools_used,
            [UNVERIFIED_TAG, *tags],
            run_id=run_id,
            transcript_ref=transcript_ref,
            conversation_id=conversation_arg(conversation_id),
            phase=phase_arg(phase),
            answer=True,  # a finished answer: a thank-you turn's is not recorded either
        )

    async def record(
        self, episode: Episode, *, conversation_id: str | None = None, answer: bool = True
    ) -> Recorded:
        """Store a prepared *episode* (for example one made by
        :func:`~deepcrew_episodic._distill.distill`) as this hook stores a run: with the
        hook's ``agent_id`` when the episode has none, the hook's tags added, in
        *conversation_id* when given, and a failure tolerated as in :meth:`after_run`
        (logged, counted, emitted, on :attr:`Recorded.error`). *answer* says the episode is a
        finished run's answer (which a thank-you turn does not record, as in :meth:`after_run`)."""
        cid = conversation_arg(conversation_id)
        episode = episode.copy()
        try:
            episode.agent_id = episode.agent_id or self.agent_id
            episode.tags = list(dict.fromkeys([*self.tags, *episode.tags]))
            if cid:
                episode.conversation_id = cid
        except Exception as exc:  # a tag of the hook's that no episode can hold
            return await self._failed_record(episode.outcome, exc)
        if answer and self._only_courtesy(episode.conversation_id):
            return Recorded(None)
        return await self._store(episode)

    # --- internals ------------------------------------------------------------------------

    async def _record(
        self,
        query: str,
        response: str,
        outcome: Outcome,
        score: float | None,
        tools_used: Collection[str],
        tags: Sequence[str],
        *,
        run_id: str | None = None,
        transcript_ref: str | None = None,
        source: OutcomeSource = "",
        conversation_id: str = "",
        phase: str = "",
        answer: bool = False,
    ) -> Recorded:
        if answer and self._only_courtesy(conversation_id):
            return Recorded(None)
        try:
            episode = Episode(
                query=query,
                response=response,
                outcome=outcome,
                score=None if score is None else float(score),
                tools_used=sorted(set(tools_used)),
                tags=list(dict.fromkeys([*self.tags, *tags])),
                agent_id=self.agent_id,
                run_id=run_id or "",
                transcript_ref=transcript_ref,
                outcome_source=source,
                conversation_id=conversation_id,
                phase=phase,
            )
        except Exception as exc:
            return await self._failed_record(outcome, exc)
        return await self._store(episode)

    # --- follow-ups -----------------------------------------------------------------------

    async def _read_followup(
        self, message: str, cid: str, previous_id: str | None
    ) -> tuple[FollowUp | None, Grade | None, str | None]:
        """Read *message* as a verdict on conversation *cid*'s previous run and grade it: the
        follow-up, the grade given, and the task to recall and record this run under when it
        is another try at the previous one."""
        try:
            with anyio.fail_after(self.record_timeout):
                previous = await self._previous(cid, previous_id)
                if previous is None or previous.outcome == "abandoned":
                    # An outage's turn gave the user no answer to judge.
                    return None, None, None
                followup = await self._judge(message, previous)
                grade = None
                if followup.outcome is not None:
                    grade = await self._grade(previous, followup, message)
        except Exception as exc:
            self.memory.counters.grading_failures += 1
            log.warning(
                "reading the follow-up in conversation %s failed (%s); it grades nothing",
                safe_message(cid, 140),
                describe(exc),
            )
            return None, None, None
        self._turns[cid] = followup
        while len(self._turns) > MAX_TURNS:
            self._turns.popitem(last=False)
        retry = followup.outcome in ("failure", "partial") and not followup.new_request
        return followup, grade, previous.query if retry else None

    async def _previous(self, cid: str, previous_id: str | None) -> Episode | None:
        if previous_id is None:
            previous = await self.memory.latest(cid)
            if previous is None:
                log.debug("conversation %s has no run to grade", safe_message(cid, 140))
            return previous
        found = [e for e in await self.memory.select(previous_id) if not self.memory.is_expired(e)]
        if not found:
            raise ConfigurationError(
                f"no episode {safe_message(previous_id, 140)!r} to grade (forgotten or expired?)"
            )
        return found[0]

    async def _judge(self, message: str, previous: Episode) -> FollowUp:
        grader = self.grade_followups
        assert grader is not None
        result = grader(message, previous)
        if inspect.isawaitable(result):
            result = await result
        if not isinstance(result, FollowUp):
            raise FollowUpError(
                f"the follow-up grader returned {type(result).__name__}, not a FollowUp"
            )
        # The user can say it worked, failed or partly worked: an "abandoned" grade would hide
        # the run from recall, an "unknown" one erase its outcome.
        if result.outcome not in (*VERDICTS, None) or not isinstance(result.new_request, bool):
            raise FollowUpError(
                f"the follow-up grader returned outcome={shown(result.outcome)}, new_request="
                f"{shown(result.new_request)}; expected success, failure, partial or None, and "
                f"True or False"
            )
        return result

    async def _grade(self, previous: Episode, followup: FollowUp, message: str) -> Grade | None:
        # Redacted before it is cut: a cut secret is no longer recognisable by its shape.
        note = "user follow-up: " + redact_then_cut(
            " ".join(message.split()), NOTE_CHARS, self.memory.redactor
        )
        if any(g.note == note for g in await self.memory.grades(previous.id)):
            return None  # this very message graded it already (a turn handled twice)
        assert followup.outcome is not None
        # The user's own word on the run: a verified grade (the outcome source "user").
        grade = await self.memory.grade(
            previous.id, outcome=followup.outcome, note=note, source="user"
        )
        log.info(
            "follow-up graded episode %s %s (read by %s)",
            previous.id,
            followup.outcome,
            safe_message(followup.by, 80),
        )
        return grade

    def _only_courtesy(self, cid: str) -> bool:
        """Whether this turn's message was only a thank-you or an acknowledgement of the
        conversation's previous run (not recorded: it holds no task)."""
        followup = self._turns.get(cid) if cid else None
        return (
            followup is not None
            and followup.outcome in (None, "success")
            and not followup.new_request
        )

    async def _store(self, episode: Episode) -> Recorded:
        try:
            # A deadline of its own (not fail_after): a TimeoutError raised inside record (an
            # embedder's) keeps its own message.
            with anyio.move_on_after(self.record_timeout) as deadline:
                stored = await self.memory.record(episode)
            if deadline.cancelled_caught:
                raise TimeoutError(f"the record took longer than {self.record_timeout:g} s")
        except Exception as exc:
            return await self._failed_record(episode.outcome, exc)
        event = await self._emit(
            EventType.EPISODE_RECORDED,
            {"outcome": stored.outcome, "score": stored.score, "id": stored.id},
        )
        return Recorded(stored, events=(event,))

    async def _failed_record(self, outcome: str, exc: Exception) -> Recorded:
        self.memory.counters.record_failures += 1
        error = describe(exc)
        log.warning("recording the %s episode failed (%s)", outcome, error)
        event = await self._emit(
            EventType.EPISODE_RECORD_FAILED, {"outcome": outcome, **_error_data(exc)}
        )
        return Recorded(None, error, events=(event,))

    async def _count_uses(self, ids: list[str]) -> None:
        # The episodes the model is shown count a use each (the reinforcement boost). Like
        # recall itself, a failure here costs the count, never the run or the block.
        try:
            with anyio.fail_after(self.recall_timeout):
                await self.memory.used(ids)
        except Exception as exc:
            self.memory.counters.recall_failures += 1
            log.warning(
                "counting the use of %d recalled episodes failed (%s)", len(ids), describe(exc)
            )

    async def _emit(self, kind: EventType, data: dict[str, Any]) -> StreamEvent:
        event = emit(kind, data, self.agent_id)
        if self.on_event is not None:
            result = self.on_event(event)
            if inspect.isawaitable(result):
                await result
        return event


def _grader(value: bool | FollowUpGrader) -> FollowUpGrader | None:
    if value is True:
        return read_followup
    if value is False or value is None:
        return None
    if not callable(value):
        raise ConfigurationError(
            f"grade_followups must be True, False, a FollowUpModel or a function of the message "
            f"and the previous episode, not {type(value).__name__}"
        )
    return value


def conversation_arg(value: str | None) -> str:
    return "" if value is None else _field_arg("conversation_id", value)


def phase_arg(value: str) -> str:
    return _field_arg("phase", value)


def _field_arg(name: str, value: object) -> str:
    """An episode field given as a call's argument, checked as the episode checks it; a bad
    one is the caller's mistake (``ConfigurationError``)."""
    try:
        checked: str = check_field(name, value)
    except ValueError as exc:
        raise ConfigurationError(str(exc)) from None
    return checked


def describe(error: BaseException) -> str:
    """``"TypeName: message"``, cut to a readable length."""
    text = str(error).strip()
    named = f"{type(error).__name__}: {text}" if text else type(error).__name__
    return safe_message(named, ERROR_CHARS)


def _error_data(error: BaseException) -> dict[str, Any]:
    return {"error": describe(error), "error_type": type(error).__name__}


def infrastructure_error(error: BaseException) -> bool:
    """Whether *error* says the model provider could not be used (unreachable, timed out,
    rate-limited, overloaded, refusing the credentials or the bill) rather than that the run
    failed its task. Only the error itself counts, not its cause: a tool that called a model
    and crashed (``ToolError``) is the tool's failure."""
    if _openai_outage(error) or _langchain_outage(error):
        return True
    litellm = sys.modules.get("litellm")  # an error from litellm means it is loaded
    if litellm is None:
        return False
    kinds = tuple(
        kind
        for kind in (getattr(litellm, name, None) for name in INFRASTRUCTURE_ERRORS)
        if isinstance(kind, type)
    )
    if isinstance(error, kinds):
        return True
    # litellm maps some statuses of some providers to its generic APIError (an OpenAI-style
    # provider's 403 is one): the HTTP status then says what happened.
    generic = getattr(litellm, "APIError", None)
    status = getattr(error, "status_code", None)
    return (
        isinstance(generic, type)
        and isinstance(error, generic)
        and isinstance(status, int)
        and (status in INFRASTRUCTURE_STATUSES or 500 <= status <= 599)
    )


def _openai_outage(error: BaseException) -> bool:
    """The same rule for the openai SDK's own errors (raised by the frameworks that call a model
    through it: LangGraph's ``ChatOpenAI``, the OpenAI Agents SDK): a connection that failed or
    timed out, or one of the statuses above. litellm's errors subclass the SDK's and keep the
    rule above, so only an error raised by the SDK itself is judged here."""
    openai = sys.modules.get("openai")  # an error from the SDK means it is loaded
    if openai is None or not type(error).__module__.startswith("openai"):
        return False
    connection = getattr(openai, "APIConnectionError", None)  # APITimeoutError is one
    if isinstance(connection, type) and isinstance(error, connection):
        return True
    status_error = getattr(openai, "APIStatusError", None)
    status = getattr(error, "status_code", None)
    return (
        isinstance(status_error, type)
        and isinstance(error, status_error)
        and isinstance(status, int)
        and (status in INFRASTRUCTURE_STATUSES or 500 <= status <= 599)
    )


# langchain-core's provider-neutral model errors (1.8) that say the provider could not be used;
# its ModelInvalidRequestError, ModelNotFoundError, ContextOverflowError and ModelRefusalError
# are the run's.
LANGCHAIN_OUTAGES = (
    "ModelAuthenticationError",
    "ModelPermissionDeniedError",
    "ModelRateLimitError",
    "ModelAPIError",
    "ModelConnectionError",
    "ModelTimeoutError",
)


def _langchain_outage(error: BaseException) -> bool:
    """The rule for the errors of a LangChain chat model (LangGraph's model nodes), whichever
    provider it calls."""
    exceptions = sys.modules.get("langchain_core.exceptions")
    if exceptions is None:
        return False
    kinds = tuple(
        kind
        for kind in (getattr(exceptions, name, None) for name in LANGCHAIN_OUTAGES)
        if isinstance(kind, type)
    )
    return isinstance(error, kinds)


def check_intent(intent: object, name: str = "intent") -> str:
    """*intent* if it is one of the recall intents, else ``ConfigurationError`` naming them."""
    if not isinstance(intent, str) or intent not in INTENTS:
        raise ConfigurationError(
            f"{name} must be one of {', '.join(map(repr, INTENTS))}, not {shown(intent)}"
        )
    return intent


def given_source(outcome: str, source: str | None) -> OutcomeSource:
    """The source an outcome is recorded with: *source* (checked) or, without one, ``agent``
    for a ``claimed_success`` and none for any other outcome."""
    if source is None:
        return "agent" if outcome == "claimed_success" else ""
    try:
        return check_source(source)
    except ValueError as exc:
        raise ConfigurationError(f"source: {exc}") from None


def user_query(messages: Sequence[dict[str, Any]]) -> str:
    """The text of the last user message ("" when there is none)."""
    for message in reversed(messages):
        if message.get("role") == "user":
            return message_text(message.get("content"))
    return ""


def insert_system(messages: list[dict[str, Any]], content: str) -> list[dict[str, Any]]:
    """*messages* with a system message holding *content* after the leading system messages,
    so the agent's own system prompt stays first."""
    at = 0
    while at < len(messages) and messages[at].get("role") == "system":
        at += 1
    return [*messages[:at], {"role": "system", "content": content}, *messages[at:]]
