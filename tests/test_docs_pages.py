"""What the user pages may not hold: the names of the tests behind them (those live in docs/design/)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
USER_PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])


@pytest.mark.parametrize("page", USER_PAGES, ids=lambda p: p.name)
def test_a_user_page_names_no_test(page: Path) -> None:
    named = re.findall(r"\btest_\w+", page.read_text("utf-8"))
    assert named == [], f"{page.name} names tests (move them to docs/design/): {named}"
