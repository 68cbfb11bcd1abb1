"""The bench scripts the docs tell a reader to run do run: each documented script in a small
form of a documented command (the figures are not checked here; bench/ prints them)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


def _run(*args: str) -> str:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    done = subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_recall_scale_with_the_ancestor_prints_both_rows() -> None:
    out = _run(
        "bench/recall_scale.py", "--sizes", "100", "--providers", "dict", "--ancestor",
        "--rounds", "5",
    )  # fmt: skip
    assert "| dict " in out
    assert "| deepcrew-ai 0.6.1 " in out


def test_recall_quality_prints_this_library_and_the_ancestor() -> None:
    out = _run("bench/recall_quality.py")
    assert "recall@3" in out
    assert "| deepcrew-episodic " in out
    assert "| deepcrew-ai 0.6.1 " in out
