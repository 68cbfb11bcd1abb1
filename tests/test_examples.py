"""Every example runs offline and prints what it promises."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).parent.parent / "examples"


def run_example(name: str, timeout: float = 120) -> str:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
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
