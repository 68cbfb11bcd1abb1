"""Every Python block in README.md and docs/*.md runs as written.

Each ```python block is a complete program: it is written to a file and run with the test's
interpreter in a fresh subprocess, in an empty directory (so ``episodes.json`` and friends land
there), offline. Model calls go to the scripted OpenAI-compatible server of ``llm_server.py``
through litellm's own environment variables, so a block keeps a real model name such as
``openai/gpt-4o-mini``. A block that mentions ``REDIS_URL`` runs against the session's real
redis-server. The block's ``deepcrew_episodic`` log records at WARNING and above count as a
failure: a memory error the runner tolerates must not hide in a doc that claims it works.

Blocks that are not programs (signatures, shell sessions, output) use another fence; the fence
check below keeps a program from hiding under one.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from llm_server import Reply, ScriptedLLM, scripted_llm

ROOT = Path(__file__).parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

# Fences a doc may use. ``python`` blocks are run; the others are never executed.
FENCES = {"python", "bash", "console", "diff", "text", "json"}

FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<ticks>`{3,}|~{3,})(?P<info>[^\n`]*)$", re.M)

# A line that only a program has: an import of a name, or an await / async def at the margin.
PROGRAM_LINE = re.compile(r"^(?:from [\w.]+ import \w|import [\w.]+\s*$|await |async def )", re.M)

# The runner: configures logging so that the library's warnings reach stderr, then runs the
# block as __main__, as `python block.py` would.
RUNNER = """\
import logging, runpy, sys
logging.basicConfig(level=logging.WARNING, format="LOG %(name)s %(levelname)s: %(message)s")
runpy.run_path(sys.argv[1], run_name="__main__")
"""

TIMEOUT = 180


def fenced_blocks(path: Path) -> Iterator[tuple[int, str, str]]:
    """(line of the opening fence, info string, body) for every fenced block of *path*."""
    text = path.read_text(encoding="utf-8")
    opening: re.Match[str] | None = None
    for match in FENCE.finditer(text):
        if opening is None:
            opening = match
            continue
        ticks = opening["ticks"]
        if match["ticks"].startswith(ticks) and not match["info"].strip():
            line = text.count("\n", 0, opening.start()) + 1
            body = text[opening.end() + 1 : match.start()]
            yield line, opening["info"].strip(), body
            opening = None
    if opening is not None:
        line = text.count("\n", 0, opening.start()) + 1
        raise AssertionError(f"{path.name}:{line}: a fence that is never closed")


def block_id(path: Path, line: int) -> str:
    return f"{path.relative_to(ROOT)}:{line}"


def python_blocks() -> list[pytest.ParameterSet]:
    params = []
    for path in DOCS:
        for line, info, body in fenced_blocks(path):
            if info == "python":
                marks = [pytest.mark.redis] if "REDIS_URL" in body else []
                params.append(pytest.param(body, id=block_id(path, line), marks=marks))
    return params


@pytest.fixture(scope="module")
def llm() -> Iterator[ScriptedLLM]:
    """One scripted model for every block; it answers whatever it is asked."""
    with scripted_llm() as server:
        server.fallback = Reply.text(
            "Create a second key, move the clients to it, then revoke the old one."
        )
        yield server


@pytest.mark.parametrize("code", python_blocks())
def test_block_runs(
    code: str, llm: ScriptedLLM, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("OPENAI_", "ANTHROPIC_", "AZURE_", "GEMINI_", "REDIS_"))
    }
    env.update(
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        OPENAI_API_KEY="test",
        OPENAI_BASE_URL=llm.base_url,  # litellm's openai provider reads this first
        OPENAI_API_BASE=llm.base_url,
        PYTHONDONTWRITEBYTECODE="1",
        OPENAI_AGENTS_DISABLE_TRACING="1",  # the Agents SDK would send traces to its host
    )
    if "REDIS_URL" in code:
        env["REDIS_URL"] = request.getfixturevalue("clean_redis")
    script = tmp_path / "block.py"
    script.write_text(code, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, f"the block failed:\n{done.stderr[-4000:]}"
    logged = [line for line in done.stderr.splitlines() if line.startswith("LOG deepcrew_episodic")]
    assert not logged, "the block ran, but the library logged:\n" + "\n".join(logged)


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_python_fence_is_collected(path: Path) -> None:
    """The reader misses no ```python block (else its test would silently not exist)."""
    text = path.read_text(encoding="utf-8")
    written = len(re.findall(r"^[ \t]*```python[ \t]*$", text, re.M))
    collected = [body for _, info, body in fenced_blocks(path) if info == "python"]
    assert len(collected) == written
    if path.name == "README.md":
        assert written >= 2  # "Use" and "Agents"


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_fences_are_run_or_plainly_not_programs(path: Path) -> None:
    """A ```python block is run; any other fence is named, and holds no program."""
    problems = []
    for line, info, body in fenced_blocks(path):
        where = block_id(path, line)
        if info not in FENCES:
            problems.append(
                f"{where}: fence {info!r}; use python (run by this test) or one of "
                f"{sorted(FENCES - {'python'})}"
            )
        elif info != "python" and (found := PROGRAM_LINE.search(body)):
            problems.append(f"{where}: a program under ```{info} ({found[0]!r}); use ```python")
    assert not problems, "\n".join(problems)


def test_the_fence_reader_sees_what_a_renderer_sees(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(
        "text\n\n```python\nprint(1)\n```\n\n````text\n```python\nnot run\n```\n````\n\n"
        "```\nbare\n```\n",
        encoding="utf-8",
    )
    assert list(fenced_blocks(doc)) == [
        (3, "python", "print(1)\n"),
        (7, "text", "```python\nnot run\n```\n"),
        (13, "", "bare\n"),
    ]
