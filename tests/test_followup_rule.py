"""The documented rule that reads the user's next message as a verdict on the answer before it."""

from __future__ import annotations

import pytest

from deepcrew_episodic import ConfigurationError, FollowUp, read_followup
from deepcrew_episodic._followup import FollowUpError, parse_verdict

# (message, outcome, new_request)
VERDICTS = [
    # clear successes
    ("Thanks, that fixed it!", "success", False),
    ("That worked, the file arrived in five minutes. Thanks!", "success", False),
    ("Solved, the new invoice is right.", "success", False),
    ("That was it, works now.", "success", False),
    ("Did the trick, thanks!", "success", False),
    ("solved", "success", False),
    ("Perfect, thanks", "success", False),
    ("Works like a charm 👍", "success", False),
    ("No errors now, thanks", "success", False),
    ("not broken any more", "success", False),
    ("THAT WORKED", "success", False),
    # clear failures, negations included
    ("Still broken, it times out at the same point.", "failure", False),
    ("Didn't help, still 401 on every delivery.", "failure", False),
    ("Nope, still blank.", "failure", False),
    ("not fixed", "failure", False),
    ("It\u2019s not fixed.", "failure", False),  # a typographic apostrophe
    ("no luck", "failure", False),
    ("Doesn't work.", "failure", False),
    ("does not work", "failure", False),
    ("Can't get it working", "failure", False),
    ("no longer works", "failure", False),
    ("Nothing works now", "failure", False),
    ("that didn't help at all", "failure", False),
    ("no, still the same error", "failure", False),
    ("it hasn't solved anything", "failure", False),
    # politeness does not outweigh a failure
    ("thanks, but it still fails", "failure", False),
    ("Thanks! Unfortunately it crashed again.", "failure", False),
    ("it worked until it crashed", "failure", False),
    # part of it worked
    ("fixed the first error, but now I get another one", "partial", False),
    ("it works but it's still slow", "partial", False),
    # a verdict and a new request
    ("Thanks, that fixed it! Now how do I do the same for invoices?", "success", True),
    ("That worked. Can you also rotate the webhook secret?", "success", True),
    ("Didn't help. Different thing: where do I change my email?", "failure", True),
    # a failure asking for another try is not a new request
    ("Still broken. Any other idea?", "failure", False),
    ("nope. what else can I try?", "failure", False),
    # no verdict: politeness
    ("ok", None, False),
    ("thanks", None, False),
    ("Thanks for the help", None, False),
    ("great, thank you so much", None, False),
    ("👍", None, False),
    ("", None, False),
    # no verdict: a question is never one, even one about failing
    ("How long does the change take?", None, True),
    ("this doesn't work?", None, True),
    ("why is it still failing?", None, True),
    ("Is it fixed in the next release?", None, True),
    ("I still have a question: can I export PDFs?", None, True),
    ("Great, how do I add a user?", None, True),
    ("Thanks! Please also rotate the key.", None, True),
    ("Export the March invoices as CSV", None, True),
    # a new problem told as a statement is not a verdict on the answer before
    ("The login page is broken for our EU users", None, True),
    ("Sync fails for files over 2 GB", None, True),
    ("The mobile app crashed on startup today", None, True),
    ("Our SSO setup works with Okta, how about Azure AD?", None, True),
    # ... but the same words referring back are
    ("The login page is still broken", "failure", False),
    ("the sync fails again with your settings", "failure", False),
]


@pytest.mark.parametrize(("message", "outcome", "new_request"), VERDICTS)
def test_the_rule_reads_a_follow_up(message: str, outcome: str | None, new_request: bool) -> None:
    assert read_followup(message) == FollowUp(outcome, new_request)  # type: ignore[arg-type]


def test_the_rule_reads_the_start_of_a_long_paste() -> None:
    log = "\n".join(f"line {n}: everything fine" for n in range(100_000))
    assert read_followup("still broken:\n" + log).outcome == "failure"


def test_a_follow_up_must_be_text() -> None:
    with pytest.raises(ConfigurationError, match="a follow-up is a string, not bytes"):
        read_followup(b"thanks")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ('{"verdict": "success", "new_request": false}', FollowUp("success", False, "m")),
        ('```json\n{"verdict": "none", "new_request": true}\n```', FollowUp(None, True, "m")),
        ('{"verdict": "partial"}', FollowUp("partial", False, "m")),
    ],
)
def test_a_models_verdict_is_read(answer: str, expected: FollowUp) -> None:
    assert parse_verdict(answer, by="m") == expected


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ("", "gave no answer"),
        (None, "gave no answer"),
        ("It worked, I think.", "did not answer with JSON"),
        ("[1, 2]", "answered a JSON list"),
        ('{"verdict": "great"}', "verdict='great'"),
        ('{"verdict": "success", "new_request": "yes"}', "new_request='yes'"),
    ],
)
def test_a_models_answer_that_is_no_verdict_is_refused(answer: str | None, why: str) -> None:
    with pytest.raises(FollowUpError, match=why):
        parse_verdict(answer, by="m")


# A wrong grade misleads recall until another corrects it, and a "success" also drops the turn:
# a message that only hopes, plans or wonders whether it worked is no verdict.
UNSURE = [
    "Not sure if it worked",
    "no idea if that worked yet",
    "I will try it and let you know if it works",
    "I'll see if it works tomorrow",
    "Hopefully that fixes it",
    "let me check whether it works",
    "will test if this fixes it",
    "If that works I will be happy",
    "it would have worked if the server was up",
    "I thought it worked",
]


@pytest.mark.parametrize("message", UNSURE)
def test_a_message_that_is_unsure_whether_it_worked_is_no_verdict(message: str) -> None:
    found = read_followup(message)
    assert found.outcome is None
    assert found.new_request  # recorded as a turn of its own, not dropped as a thank-you


def test_an_unsure_clause_leaves_the_sure_one_its_verdict() -> None:
    assert read_followup("Not sure about the rest, but it still fails").outcome == "failure"
    assert read_followup("That worked, I'll see if the others do too").outcome == "success"


# What the user quotes (the answer before, a log, test output) is not the user's verdict.
@pytest.mark.parametrize(
    ("message", "outcome"),
    [
        ("Thanks, it works now!\n```\nPASSED 10, FAILED 0\n```", "success"),
        ("> it should be fixed now\nnope, still broken", "failure"),
        ("> Try restarting, that fixed it for others\n\nno luck", "failure"),
        ("Still broken:\n```text\nall checks passed, fixed 3 files\n```", "failure"),
        ("still failing\n~~~\nworks on staging\n~~~", "failure"),
    ],
)
def test_quoted_text_and_code_blocks_are_not_the_users_verdict(message: str, outcome: str) -> None:
    assert read_followup(message).outcome == outcome


def test_a_message_that_is_only_a_code_block_is_a_request_not_politeness() -> None:
    pasted = "```\nTraceback (most recent call last):\n  ValueError: bad header\n```"
    assert read_followup(pasted) == FollowUp(None, new_request=True)
    assert read_followup("> your answer, quoted") == FollowUp(None, new_request=True)


# A new problem told as a statement is a task (see VERDICTS above), after a verdict too.
@pytest.mark.parametrize(
    "message",
    [
        "Thanks, that fixed it. The login page is broken for our EU users",
        "That worked! Sync fails for files over 2 GB though",
    ],
)
def test_a_verdict_then_a_new_problem_is_a_new_request(message: str) -> None:
    assert read_followup(message) == FollowUp("success", new_request=True)


def test_a_failure_told_in_detail_is_another_try_at_the_task() -> None:
    assert read_followup("nope. the export crashed at 80%") == FollowUp("failure", False)
    assert read_followup("Didn't help, the export crashed at 80%") == FollowUp("failure", False)


def test_the_verdict_after_a_long_pasted_block_is_read() -> None:
    log = "\n".join(f"line {n}: request failed with status 500" for n in range(2000))
    assert read_followup(f"```\n{log}\n```\nstill broken").outcome == "failure"
    assert read_followup(f"> {'x' * 10_000}\nthat fixed it, thanks").outcome == "success"


@pytest.mark.parametrize(
    "message", ["oh great, that totally fixed it. not.", "Worked like a charm... NOT!"]
)
def test_a_success_taken_back_by_a_lone_not_is_a_failure(message: str) -> None:
    assert read_followup(message) == FollowUp("failure", new_request=False)


def test_a_grading_model_refuses_messages_among_its_params() -> None:
    # Else every follow-up's call would fail at run time, one grading failure per turn.
    from deepcrew_episodic import FollowUpModel

    with pytest.raises(ConfigurationError, match="messages"):
        FollowUpModel("openai/gpt-4o-mini", messages=[])
