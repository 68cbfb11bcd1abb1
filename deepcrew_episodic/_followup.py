"""Reading the user's next message as a verdict on the answer before it.

In a chat, the strongest free outcome signal arrives one turn late: "thanks, that worked",
"still broken". :func:`read_followup` is the documented rule (no model, no I/O);
:class:`FollowUpModel` asks a small model through litellm instead. Either answers with a
:class:`FollowUp`: what the message says of the previous answer (``success``, ``failure``,
``partial`` or nothing), and whether it also asks for something new.

The rule, clause by clause (a message is cut into clauses at ``. ! ? ;``, new lines, commas
and "but"/"however"/"though"):

- A clause that asks (ends with ``?``, or opens with a question word or "please") is never a
  verdict: "this doesn't work?" and "why is it still failing?" ask, the next message says.
- A clause longer than three words reports a verdict by one word only when it refers back to
  the answer ("it", "that", "still", "now", "again", "your", "the fix", ...): "the login page
  is broken" reports a new problem, "it is still broken" a verdict. Phrases ("no luck", "did
  the trick", "same error") always refer back.
- A clause reports a failure when it says "still" (not "still works"), "broken", "fails",
  "crashed", "nope", "no luck", "same error", "another error", "no change", "worse",
  "wrong", "not quite", or negates a success word ("not fixed", "didn't help", "doesn't
  work", "no longer works", "nothing works").
- A clause reports a success when it says "fixed", "solved", "resolved", "worked", "works",
  "helped", "perfect", "did the trick", "that was it", "all good", or negates a failure word
  ("not broken any more", "no errors").
- The message is a ``failure`` when some clause reports one and none a success ("thanks, but
  it still fails" is a failure: the thanks is politeness), a ``success`` when only successes,
  ``partial`` when both ("fixed the first error, but now I get another one").
- A clause of only "not" after a success turns it into a failure ("that totally fixed it.
  not.").
- "thanks", "ok", "great" alone are politeness, not proof: no verdict. A wrong grade misleads
  recall until another corrects it, so what is unclear stays ungraded: so does a clause that
  only hopes, plans or wonders ("if", "whether", "hopefully", "maybe", "will", "would",
  "should", "not sure", "I thought": "I'll see if it works", "not sure if that fixed it").
- What the user quotes is not the user's word: lines that open with ``>`` and fenced code
  blocks (a log, test output, the answer before) are left out before the message is read.
- :attr:`FollowUp.new_request`: a message with no verdict asks for something new unless it
  is only politeness; one with a verdict does only when another of its clauses asks ("that
  worked; how do I do the same for invoices?"), short asks for another try ("any other
  idea?") excepted, or, after a success, tells a new problem ("thanks, that fixed it. The
  login page is broken for our EU users").
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, get_args

import anyio

from ._episode import Episode
from ._exceptions import ConfigurationError, FollowUpError
from ._litellm import load_litellm
from ._validate import number

__all__ = ["FollowUp", "FollowUpGrader", "FollowUpModel", "FollowUpOutcome", "read_followup"]

FollowUpOutcome = Literal["success", "failure", "partial"]
VERDICTS: tuple[str, ...] = get_args(FollowUpOutcome)


@dataclass(frozen=True)
class FollowUp:
    """What the user's next message says of the previous answer.

    ``outcome`` is ``None`` when it says nothing about it (a new question, a plain "thanks").
    ``new_request`` says the message also asks for something new, to be answered and
    recorded as a task of its own; without one, a message with a verdict is only a verdict
    (a failure: the next answer is another try at the same task). ``by`` names what read it
    (``"rule"``, or the model's name).
    """

    outcome: FollowUpOutcome | None
    new_request: bool
    by: str = "rule"


FollowUpGrader = Callable[[str, Episode], "FollowUp | Awaitable[FollowUp]"]
"""Reads a follow-up: called with the user's message and the episode of the previous run,
returns a :class:`FollowUp` (a plain or an async function)."""


# --- the rule ---------------------------------------------------------------------------------

MAX_CHARS = 4000  # a pasted log after "still broken:" decides nothing the first lines do not
# Quotes and code blocks are left out of this much of a message before it is cut to MAX_CHARS:
# a verdict after a long pasted block ("```<a log>```\nstill broken") is still read.
QUOTED_CHARS = 200_000
_CLAUSE_END = re.compile(r"[.!?;\n]+")
_SPLIT = re.compile(r",|\bbut\b|\bhowever\b|\bthough\b|\balthough\b|\s[-\u2013\u2014]\s|:")
_WORD = re.compile(r"[a-z0-9']+")
_NEGATIONS = frozenset(
    {"not", "never", "no", "nothing", "none", "nobody", "neither", "nor", "hardly", "barely"}
)
_SUCCESS_WORDS = frozenset(
    {
        "fixed",
        "fixes",
        "solved",
        "solves",
        "resolved",
        "resolves",
        "worked",
        "works",
        "working",
        "helped",
        "helps",
        "perfect",
        "succeeded",
    }
)
_SUCCESS_PHRASES = (
    ("did", "the", "trick"),
    ("that", "was", "it"),
    ("that", "did", "it"),
    ("that's", "it"),
    ("all", "good"),
    ("problem", "solved"),
    ("sorted", "it"),
    ("like", "a", "charm"),
)
_FAILURE_WORDS = frozenset(
    {
        "broken",
        "broke",
        "fails",
        "failed",
        "failing",
        "crashes",
        "crashed",
        "crashing",
        "nope",
        "worse",
        "wrong",
        "errors",
    }
)
_FAILURE_PHRASES = (
    ("no", "luck"),
    ("not", "quite"),
    ("no", "change"),
    ("no", "difference"),
    ("nothing", "changed"),
    ("nothing", "happened"),
    ("same", "error"),
    ("same", "problem"),
    ("same", "issue"),
    ("same", "thing"),
    ("same", "result"),
    ("same", "message"),
    ("another", "error"),
    ("get", "another"),
    ("got", "another"),
    ("another", "problem"),
    ("another", "issue"),
    ("new", "error"),
    ("an", "error"),
)
# A clause of more words than this reports a verdict by a single word only when it refers back
# to the answer: "the login page is broken" is a new problem, not a verdict on the answer
# before; "it is still broken" and "not fixed" are verdicts. (A phrase such as "no luck" or
# "did the trick" always refers back.)
SHORT_CLAUSE = 3
_BACK_REFERENCES = frozenset(
    {
        "it",
        "it's",
        "its",
        "that",
        "that's",
        "this",
        "these",
        "those",
        "they",
        "them",
        "still",
        "same",
        "again",
        "now",
        "anymore",
        "more",
        "longer",
        "your",
        "you",
        "you're",
        "suggestion",
        "suggestions",
        "answer",
        "fix",
        "solution",
        "tip",
        "advice",
        "idea",
        "step",
        "steps",
        "trick",
        "tried",
        "first",
        "either",
    }
)
# A clause with one of these only hopes, plans or wonders whether it worked: no verdict.
_HEDGES = frozenset(
    {
        "if",
        "whether",
        "unless",
        "hopefully",
        "hope",
        "maybe",
        "perhaps",
        "might",
        "should",
        "would",
        "will",
        "i'll",
        "we'll",
        "unsure",
        "thought",
        "supposed",
    }
)
# What the user quotes: a fenced code block (to its closing fence, or the end), a quoted line.
_QUOTED = re.compile(r"^[ \t]*(```|~~~).*?(?:^[ \t]*\1[ \t]*$|\Z)|^[ \t]*>[^\n]*$", re.M | re.S)
# "still" reports that the problem is still there, except in these.
_STILL_FINE = frozenset({"works", "working", "work", "fine", "good", "holds", "valid"})
_STILL_ASIDE = frozenset({"need", "needs", "want", "wants", "have", "has", "had", "wonder"})
# Politeness and acknowledgement: a message of these words only says nothing.
_COURTESY = frozenset(
    {
        "ok",
        "okay",
        "k",
        "kk",
        "thanks",
        "thank",
        "you",
        "thx",
        "ty",
        "tysm",
        "cheers",
        "great",
        "cool",
        "nice",
        "got",
        "it",
        "alright",
        "sure",
        "awesome",
        "appreciate",
        "appreciated",
        "much",
        "very",
        "so",
        "a",
        "lot",
        "understood",
        "noted",
        "will",
        "do",
        "yes",
        "yeah",
        "yep",
        "and",
        "again",
        "for",
        "the",
        "help",
        "that",
        "is",
        "good",
        "to",
        "know",
        "i",
        "see",
        "makes",
        "sense",
        "oh",
        "ah",
        "hm",
        "hmm",
        "well",
        "anyway",
        "bye",
        "lol",
    }
)
# Verbs that report a failure when negated only ("didn't help", "does not work"); alone they
# say nothing ("thanks for the help").
_NEGATED_ONLY = frozenset({"help", "work", "fix", "solve", "resolve", "change", "error"})
# A clause that opens with one of these asks, question mark or not.
_ASK_OPENERS = frozenset(
    {
        "how",
        "what",
        "what's",
        "why",
        "where",
        "when",
        "which",
        "who",
        "please",
        "also",
        "next",
        "tell",
        "show",
        "let's",
    }
)
_ASK_PAIRS = frozenset(
    {
        ("can", "you"),
        ("could", "you"),
        ("would", "you"),
        ("will", "you"),
        ("can", "i"),
        ("could", "i"),
        ("can", "we"),
        ("help", "me"),
        ("i", "need"),
        ("i", "want"),
        ("i'd", "like"),
        ("is", "there"),
        ("are", "there"),
        ("do", "you"),
        ("does", "it"),
        ("is", "it"),
    }
)
# A question that asks for another try at the same task, not for something new.
_RETRY_WORDS = frozenset(
    {
        "any",
        "other",
        "another",
        "idea",
        "ideas",
        "anything",
        "else",
        "what",
        "now",
        "suggestion",
        "suggestions",
        "option",
        "options",
        "alternative",
        "alternatives",
        "i",
        "we",
        "can",
        "could",
        "should",
        "try",
        "do",
        "then",
        "so",
        "way",
        "ways",
        "something",
    }
)


@dataclass(frozen=True)
class _Clause:
    words: tuple[str, ...]
    asks: bool


def read_followup(message: str, previous: Episode | None = None) -> FollowUp:
    """The documented rule (see this module's docstring): what *message*, the user's next
    message, says of the previous answer. *previous* is not read (a custom grader may use
    it); no model, no I/O.

    >>> read_followup("Thanks, that fixed it!")
    FollowUp(outcome='success', new_request=False, by='rule')
    >>> read_followup("thanks, but it still fails")
    FollowUp(outcome='failure', new_request=False, by='rule')
    >>> read_followup("ok").outcome is None, read_followup("How do I export to PDF?")
    (True, FollowUp(outcome=None, new_request=True, by='rule'))
    """
    if not isinstance(message, str):
        raise ConfigurationError(f"a follow-up is a string, not {type(message).__name__}")
    clauses = _clauses(message)
    if not clauses and _WORD.search(message.casefold()):
        return FollowUp(None, new_request=True)  # only a quote or a paste: not politeness
    said: list[str] = []
    rest: list[_Clause] = []
    for clause in clauses:
        verdict = None if clause.asks else _verdict(clause.words)
        if clause.words == ("not",) and said and said[-1] == "success":
            said[-1] = "failure"  # "that totally fixed it. not." says the opposite
        elif verdict is not None:
            said.append(verdict)
        else:
            rest.append(clause)
    worked = "success" in said or "both" in said
    failed = "failure" in said or "both" in said
    outcome: FollowUpOutcome | None = (
        ("partial" if worked else "failure") if failed else ("success" if worked else None)
    )
    if outcome is None:
        polite = all(set(c.words) <= _COURTESY for c in rest)
        return FollowUp(None, new_request=not polite)
    asks = any(c.asks and not set(c.words) <= _RETRY_WORDS for c in rest if c.words)
    # "That worked. The login page is broken": after a success, a problem told as a statement
    # is a new one (after a failure it tells how the answer failed: "nope. the export crashed").
    told = outcome == "success" and any(
        not c.asks and _verdict(c.words, referring=True) for c in rest if c.words
    )
    return FollowUp(outcome, new_request=asks or told)


def _clauses(message: str) -> list[_Clause]:
    text = unicodedata.normalize("NFKC", message[:QUOTED_CHARS]).casefold()
    text = _QUOTED.sub("", text)[:MAX_CHARS]
    text = text.replace("\u2019", "'").replace("`", "'")
    text = re.sub(r"n't\b", " not", text).replace("cannot", "can not")
    clauses: list[_Clause] = []
    position = 0
    for end in [*_CLAUSE_END.finditer(text), None]:
        stop = len(text) if end is None else end.start()
        sentence = text[position:stop]
        question = end is not None and "?" in end.group()
        position = len(text) if end is None else end.end()
        parts = [p for p in _SPLIT.split(sentence) if _WORD.search(p)]
        for i, part in enumerate(parts):
            words = tuple(_WORD.findall(part))
            # The question mark belongs to the clause it ends; an opener asks anywhere.
            asks = (question and i == len(parts) - 1) or _opens_an_ask(words)
            clauses.append(_Clause(words, asks))
    return clauses


def _opens_an_ask(words: tuple[str, ...]) -> bool:
    if words[:2] == ("what", "a"):  # "what a relief"
        return False
    return words[0] in _ASK_OPENERS or tuple(words[:2]) in _ASK_PAIRS


def _verdict(words: tuple[str, ...], *, referring: bool = False) -> str | None:
    """``"success"``, ``"failure"``, ``"both"`` or ``None`` for one clause's words (as if it
    referred back to the answer, with *referring*)."""
    worked = failed = False
    if not _HEDGES.isdisjoint(words) or _has(words, ("not", "sure")):
        return None
    refers = referring or len(words) <= SHORT_CLAUSE or not _BACK_REFERENCES.isdisjoint(words)
    for i, word in enumerate(words if refers else ()):
        negated = bool(_NEGATIONS.intersection(words[max(0, i - 3) : i])) or (
            i >= 2 and words[i - 2 : i] == ("no", "longer")
        )
        if word in _SUCCESS_WORDS:
            if negated:
                failed = True
            else:
                worked = True
        elif word in _NEGATED_ONLY:
            if negated and word == "error":
                worked = True  # "no error now"
            elif negated:
                failed = True
        elif word in _FAILURE_WORDS:
            if negated:
                worked = True  # "not broken any more", "no errors"
            else:
                failed = True
        elif word == "still":
            after = words[i + 1 : i + 2]
            if not (after and (after[0] in _STILL_FINE or after[0] in _STILL_ASIDE)):
                failed = True
    for phrase in _SUCCESS_PHRASES:
        if _has(words, phrase):
            worked = True
    for phrase in _FAILURE_PHRASES:
        if _has(words, phrase):
            failed = True
    if worked and failed:
        # Within one clause a failure word wins ("fixed? no, still broken" is cut at the
        # "?"; "it worked until it crashed" is a failure): a partial needs two clauses.
        return "failure"
    return "success" if worked else "failure" if failed else None


def _has(words: tuple[str, ...], phrase: tuple[str, ...]) -> bool:
    n = len(phrase)
    return any(words[i : i + n] == phrase for i in range(len(words) - n + 1))


# --- a model --------------------------------------------------------------------------------

SYSTEM_PROMPT = (
    "You read the user's next message in a chat with an AI assistant and say what it tells "
    "about the assistant's previous answer. Answer with one JSON object only: "
    '{"verdict": "success" | "failure" | "partial" | "none", "new_request": true | false}. '
    '"success": the user says the answer worked or solved the problem. "failure": it did not '
    '(still broken, did not help). "partial": part of it worked. "none": the message says '
    "nothing about whether it worked (politeness such as a plain thanks, a new question, a "
    'question about the answer). "new_request": the message also asks for something new, '
    "beyond another try at the same problem. Never guess a verdict the user did not give."
)
ANSWER_CHARS = 1500
MESSAGE_CHARS = 2000


class FollowUpModel:
    """A grader for ``grade_followups=`` that asks a litellm *model* (one small call per
    follow-up) instead of the rule.

    The model is shown the previous task, the start of its answer and the user's message, and
    answers with a JSON verdict. An answer that is not one, a call that fails or takes longer
    than *timeout* seconds raises :class:`FollowUpError`: the hook then grades nothing (logged,
    counted in ``memory.counters.grading_failures``) and the run goes on. *params* go to
    ``litellm.acompletion`` (``api_base``, ``api_key``, ``num_retries``, ...).

    Example::

        hook = EpisodicHook(memory, grade_followups=FollowUpModel("openai/gpt-4o-mini"))
    """

    def __init__(self, model: str, *, timeout: float = 20.0, **params: Any) -> None:
        if not isinstance(model, str) or not model:
            raise ConfigurationError(f"model must be a litellm model name, not {model!r}")
        if "messages" in params:
            raise ConfigurationError(
                "FollowUpModel writes the messages itself: give only litellm's other "
                "parameters as keywords (api_base, api_key, num_retries, ...)"
            )
        self.model = model
        self.timeout = number("timeout", timeout, minimum=0, exclusive_minimum=True)
        self.params = params

    def __repr__(self) -> str:
        return f"FollowUpModel({self.model!r})"

    async def __call__(self, message: str, previous: Episode) -> FollowUp:
        litellm = await load_litellm()
        user = (
            f"Previous task: {previous.query[:ANSWER_CHARS]}\n"
            f"Previous answer: {previous.response[:ANSWER_CHARS]}\n"
            f"The user's next message: {message[:MESSAGE_CHARS]}"
        )
        # ours last: a caller's params cannot turn the call into a stream or drop the timeout
        kwargs = {**self.params, "stream": False, "timeout": self.timeout}
        try:
            with anyio.fail_after(self.timeout):
                response = await litellm.acompletion(
                    model=self.model,
                    messages=[
                        {"role": "system", "content": SYSTEM_PROMPT},
                        {"role": "user", "content": user},
                    ],
                    **kwargs,
                )
            text = response.choices[0].message.content
        except Exception as exc:
            raise FollowUpError(
                f"the grading model {self.model!r} failed: {type(exc).__name__}"
            ) from exc
        return parse_verdict(text, by=self.model)


_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$")


def parse_verdict(text: Any, *, by: str) -> FollowUp:
    """A model's JSON answer as a :class:`FollowUp`; :class:`FollowUpError` when it is not
    one (a verdict outside the four, ``new_request`` not a boolean, no JSON object)."""
    if not isinstance(text, str) or not text.strip():
        raise FollowUpError(f"the grading model {by!r} gave no answer")
    body = _FENCE.sub("", text.strip())
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        raise FollowUpError(f"the grading model {by!r} did not answer with JSON") from None
    if not isinstance(data, dict):
        raise FollowUpError(f"the grading model {by!r} answered a JSON {type(data).__name__}")
    verdict, new = data.get("verdict"), data.get("new_request", False)
    if verdict not in (*VERDICTS, "none", None) or not isinstance(new, bool):
        raise FollowUpError(
            f"the grading model {by!r} answered verdict={str(verdict)[:40]!r}, "
            f"new_request={str(new)[:20]!r}; expected success, failure, partial or none, "
            f"and true or false"
        )
    outcome: FollowUpOutcome | None = None if verdict in ("none", None) else verdict
    return FollowUp(outcome, new_request=new, by=by)
