"""Every example runs offline and prints what it promises."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).parent.parent / "examples"


def run_example(name: str, timeout: float = 120, env: dict[str, str] | None = None) -> str:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", **(env or {})}
    for key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
        env.pop(key, None)
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_quickstart_recalls_the_relevant_episode_only() -> None:
    out = run_example("quickstart.py")
    assert "1 relevant past episode(s)" in out
    assert "## Relevant past experience" in out
    assert "rotate the billing API key" in out
    assert "Refund" not in out
    assert "Unrelated question recalls 0 episodes." in out


@pytest.mark.parametrize("path", sorted(p.name for p in EXAMPLES.glob("*.py")))
def test_every_example_has_a_test(path: str) -> None:
    tested = Path(__file__).read_text() + "".join(
        p.read_text() for p in Path(__file__).parent.glob("test_*.py")
    )
    assert f'"{path}"' in tested, f"examples/{path} is not run by any test"


def test_agent_quickstart_recalls_the_first_run_in_the_second() -> None:
    out = run_example("agent_quickstart.py")
    assert "(offline mock)" in out
    assert "run 1: episodes_recalled=0" in out
    recalled = int(out.split("run 2: episodes_recalled=")[1].split()[0])
    assert recalled >= 1
    block = out.split("Injected before run 2:")[1]
    assert "## Relevant past experience" in block
    assert 'asked: "How do I rotate an API key?"' in block
    assert "2 episodes in episodes.json" in out


def test_refinement_loop_records_one_episode_per_iteration() -> None:
    out = run_example("refinement_loop.py")
    scored = [line for line in out.splitlines() if line.startswith("iteration ")]
    recorded = [line for line in out.splitlines() if line.strip().startswith("recorded episode")]
    assert len(scored) == len(recorded) >= 2
    assert "-> failure" in scored[0]
    assert "-> success" in scored[-1]
    assert "Add the timeline." in scored[0]
    assert f"loop_iterations={len(scored)}" in out
    episodes = out.split("Episodes recorded")[1].strip().splitlines()[1:]
    assert len(episodes) == len(scored)
    assert len({line.split("query=")[1] for line in episodes}) == 1  # the original query


def test_streaming_prints_episode_events_only_when_verbose() -> None:
    out = run_example("streaming.py")
    verbose, standard, sse = (
        out.split("== verbose ==")[1].split("== standard")[0],
        out.split("== standard")[1].split("== one event")[0],
        out.split("== one event as Server-Sent Events ==")[1],
    )
    kinds = [line.split()[0] for line in verbose.splitlines() if line and "{" in line]
    assert kinds[:2] == ["episode_recalled", "agent_start"]
    assert kinds[-2:] == ["episode_recorded", "done"]
    assert "'count': 1" in verbose
    assert "result: episodes_recalled=1" in verbose
    assert "episode_" not in standard
    assert "text_delta" in standard
    assert sse.strip().startswith("event: done\ndata: {")


def test_bare_litellm_hook_recalls_and_records() -> None:
    out = run_example("bare_litellm.py")
    run1, run2 = out.split("run 2:")[0], out.split("run 2:")[1].split("The block")[0]
    assert "0 episode(s) recalled" in run1
    assert "episode_recorded {'outcome': 'success', 'score': 0.9" in run1
    assert "episode_recalled {'count': 1" in run2
    assert "sending 3 messages, 1 episode(s) recalled" in run2
    block = out.split("The block a third run would get:")[1]
    assert block.count("asked:") == 2


def test_privacy_example_redacts_hides_and_deletes() -> None:
    out = run_example("privacy.py")
    assert "[REDACTED:url-password]" in out
    assert "[REDACTED:customer-id]" in out
    assert "[REDACTED:aws-access-key]" in out
    assert "hunter2" not in out.split("secret ever written")[0]
    assert "recall 'billing': 1 episode(s)" in out
    assert "in the file before sweep: True" in out
    assert "sweep deleted 2 expired episode(s)" in out
    assert "in the file after sweep:  False" in out
    assert "episodes left: 0" in out
    assert "secret ever written to disk: False" in out


def test_recall_by_meaning_finds_the_paraphrase_that_keywords_miss() -> None:
    out = run_example("recall_by_meaning.py")
    assert "keywords only: 0 episode(s)" in out
    assert "keywords + meaning (hybrid): 1 episode(s)" in out
    hits = out.split("keywords + meaning")[1].split("## Relevant past experience")[0]
    assert "'Password reset email never arrives'" in hits
    why = next(line for line in hits.splitlines() if "meaning" in line)
    assert "no term matched" in why
    meaning = re.search(r"meaning[= ]([0-9.]+)", why)
    assert meaning is not None, why
    assert float(meaning[1]) > 0, why
    block = out.split("## Relevant past experience")[1]
    assert 'asked: "Password reset email never arrives"' in block
    assert "'order 51174' first: ['Customer was charged twice for order 51174']" in out
    assert "unrelated 'how long should I boil an egg?': 0 episode(s)" in out
    assert (
        "4 of 4 episodes have a vector; embedder wordllama/l2_supercat-256 (256 dimensions)" in out
    )


def test_grade_from_followup_wires_the_outcome_signal() -> None:
    out = run_example("grade_from_followup.py")
    before, graded = out.split("== 2.")[0], out.split("== 2.")[1].split("== 3.")[0]
    after_block = out.split("== 3.")[1]

    # Nobody checked an answer: every run is unknown, and stats says the signal is missing.
    assert before.count("(unknown):") == 10
    assert "stats: 10 episodes {'unknown': 10}, 0 grade(s)" in before
    assert "outcome signal not wired: 10 of 10" in before
    worked = before.split("intent='what_worked'")[1]
    assert "[unknown] 'Raise the export timeout" in worked.split("\n")[1]  # the one used once

    # The hook's rule, turn by turn, each turn in a fresh process-like worker: a clear verdict
    # grades the conversation's own previous run, anything unclear leaves it ungraded.
    assert "chat-1 'Thanks, that fixed it!': graded success; the reply is not a run" in graded
    assert (
        "chat-0 'Still broken, it times out at the same point.': graded failure; reply recorded "
        "as a run of 'The CSV export times out for large accounts'" in graded
    )
    assert 'chat-5 "Didn\'t help, still 401 on every delivery.": graded failure' in graded
    assert "chat-9 'thanks': no verdict, stays unknown; the reply is not a run" in graded
    assert "chat-3 'ok': no verdict, stays unknown; the reply is not a run" in graded
    assert (
        "chat-6 'How long does the change take?': no verdict, stays unknown; reply recorded as a "
        "run of 'How long does the change take?'" in graded
    )
    assert graded.count(": graded ") == 7
    assert graded.count("the reply is not a run of its own") == 6

    # Applied on every read: stats, recall under both intents, the next run's block.
    assert "stats: 14 episodes {'success': 4, 'failure': 3, 'unknown': 7}, 7 grade(s)" in graded
    assert "warnings: none" in graded
    first_worked = graded.split("intent='what_worked'")[1].split("\n")[1]
    assert '[success] "Use the background export' in first_worked
    first_failed = graded.split("intent='what_failed'")[1].split("\n")[1]
    assert "[failure] 'Raise the export timeout" in first_failed
    assert (
        '; failed (reported by the user)] asked: "The CSV export times out for large accounts"'
        in after_block
    )
    assert (
        '; worked (confirmed by the user)] asked: "CSV export of a large account times out"'
        in after_block
    )

    # The grade is a record of its own, with the user's words as its note.
    assert "outcome='failure'" in after_block
    assert "verified=True" in after_block
    assert "note='user follow-up: Still broken" in after_block
