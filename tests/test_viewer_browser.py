"""``deepcrew-episodic serve`` in a real headless Chromium (issue 15).

The server is the real command in a subprocess over a SQLite store filled through the public API
(see ``tests/browser.py``); what a page shows is checked against what the API says the store
holds. Every page visited must load with no console error, no page error and no dialog. The
screenshots in ``docs/images/viewer-*.png`` are written here.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote as url_quote
from urllib.parse import urlsplit

import pytest
from browser import (
    HIDDEN_CHARS,
    HOSTILE,
    WIDTH,
    Seeded,
    Viewer,
    Watched,
    chromium,
    on_store,
    run,
    screenshot,
    seed,
    seed_unwired,
    serve,
    watch,
)
from playwright.sync_api import Browser, BrowserContext, Page, Response

from deepcrew_episodic import Episode, EpisodicMemory, parse_time
from deepcrew_episodic._episode import stored_texts
from deepcrew_episodic.providers import open_provider

# One worker runs the whole module: one browser to start, and the forget tests run in order on
# the store they share.
pytestmark = pytest.mark.xdist_group("browser")

NOT_WIRED = "outcome signal not wired"


# --- fixtures ------------------------------------------------------------------------------


@pytest.fixture(scope="module")  # Playwright's loop must end with the module
def browser() -> Iterator[Browser]:
    with chromium() as launched:
        yield launched


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Seeded]:
    store = tmp_path_factory.mktemp("viewer") / "episodes.db"
    return store, run(seed, store)


@pytest.fixture(scope="module")
def viewer(seeded: tuple[Path, Seeded]) -> Iterator[Viewer]:
    """The read-only server (no ``--allow-forget``) over the seeded store."""
    with serve(seeded[0]) as server:
        yield server


@pytest.fixture(scope="module")
def forgetting(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Seeded, Viewer]]:
    """A server started with ``--allow-forget`` over a seeded store of its own."""
    store = tmp_path_factory.mktemp("viewer-forget") / "episodes.db"
    seeded = run(seed, store)
    with serve(store, "--allow-forget") as server:
        yield store, seeded, server


@pytest.fixture
def context(browser: Browser) -> Iterator[BrowserContext]:
    """A fresh browser context (no cookie), 1280 pixels wide."""
    opened = browser.new_context(viewport={"width": WIDTH, "height": 900})
    yield opened
    opened.close()


def signed_in(context: BrowserContext, server: Viewer) -> Watched:
    """A page that opened the server's URL with its token, as a user does."""
    watched = watch(context.new_page())
    response = watched.page.goto(server.url("/", token=True))
    assert response is not None
    assert response.status == 200
    assert "token=" not in watched.page.url, "the token must leave the address bar"
    return watched


@pytest.fixture(scope="module")
def signed_in_page(browser: Browser, viewer: Viewer) -> Iterator[Watched]:
    """One signed-in page on the read-only server for the module (a context costs time)."""
    opened = browser.new_context(viewport={"width": WIDTH, "height": 900})
    yield signed_in(opened, viewer)
    opened.close()


@pytest.fixture
def page(signed_in_page: Watched) -> Iterator[Watched]:
    """The signed-in page on the read-only server; clean (no error, no dialog) at the end."""
    signed_in_page.console_errors.clear()
    signed_in_page.page_errors.clear()
    signed_in_page.dialogs.clear()
    signed_in_page.expected_errors.clear()
    yield signed_in_page
    signed_in_page.assert_clean()


def visit(watched: Watched, server: Viewer, path: str, status: int = 200) -> Response:
    response = watched.page.goto(server.url(path))
    assert response is not None
    assert response.status == status, f"{path}: HTTP {response.status}"
    if status != 200:
        watched.expect_error_status(response.url, status)
    watched.assert_clean()
    return response


def episodes_of(store: Path) -> list[Episode]:
    """What a fresh process reading *store* sees now."""

    async def load(memory: EpisodicMemory) -> list[Episode]:
        return await memory.load()

    return on_store(store, load)


def newest_first(episodes: list[Episode]) -> list[str]:
    return [ep.id for ep in sorted(episodes, key=lambda ep: ep.time() or 0.0, reverse=True)]


def row_ids(page: Page) -> list[str]:
    ids: list[str] = page.eval_on_selector_all(
        "#timeline tr.episode", "rows => rows.map(r => r.dataset.id)"
    )
    return ids


def all_rows(watched: Watched, server: Viewer, path: str) -> list[str]:
    """The ids of every row of a filtered timeline, following ``a#next`` to the last page."""
    visit(watched, server, path)
    ids = row_ids(watched.page)
    while watched.page.locator("a#next").count():
        with watched.page.expect_navigation():
            watched.page.click("a#next")
        watched.assert_clean()
        ids += row_ids(watched.page)
    return ids


def quote(text: str) -> str:
    return url_quote(text, safe="")


def dom_text(page: Page) -> str:
    text: str = page.evaluate("document.documentElement.textContent")
    return text


# --- each page -----------------------------------------------------------------------------


def test_each_page_loads_clean_and_is_photographed(
    page: Watched, viewer: Viewer, seeded: tuple[Path, Seeded]
) -> None:
    store, seed_info = seeded
    shown = episodes_of(store)
    by_id = {ep.id: ep for ep in shown}

    visit(page, viewer, "/?per=20")
    rows = page.page.locator("#timeline tr.episode")
    assert rows.count() == 20
    first = rows.first
    newest = by_id[newest_first(shown)[0]]
    assert first.get_attribute("data-id") == newest.id
    for cell in ("date", "outcome", "score", "task", "lesson"):
        assert first.locator(f"td.{cell}").count() == 1, f"no td.{cell} in a row"
    assert newest.query in first.locator("td.task").inner_text()
    assert newest.outcome in first.locator("td.outcome").inner_text()
    screenshot(page.page, "timeline")

    # The episode page of the run's last iteration: every field, its grades, the run.
    last = by_id[seed_info.run_ids[-1]]
    with page.page.expect_navigation():
        page.page.click(f'#timeline tr.episode[data-id="{last.id}"] td.task a')
    page.assert_clean()
    fields = dict(
        zip(
            page.page.locator("#episode dt").all_inner_texts(),
            page.page.locator("#episode dd").all_inner_texts(),
            strict=True,
        )
    )
    for name in ("query", "response", "outcome", "reflection", "run_id", "approach", "id"):
        assert any(name in key for key in fields), f"no {name} in {list(fields)}"
    assert last.query in page.page.locator("#episode").inner_text()
    assert last.approach in page.page.locator("#episode").inner_text()
    assert "nightly export green" in page.page.locator("#grades").inner_text()
    run_rows = page.page.locator("#run tr:has(td)")
    assert run_rows.count() == 3
    iterations = page.page.eval_on_selector_all(
        "#run tr:has(td)", "rows => rows.map(r => r.dataset.id)"
    )
    assert iterations == seed_info.run_ids
    screenshot(page.page, "episode")

    visit(page, viewer, "/playground")
    page.page.fill("#p-task", "The nightly CSV export times out")
    page.page.select_option("#p-intent", "what_worked")
    page.page.fill("#p-topk", "4")
    with page.page.expect_navigation():
        page.page.click("#p-go")
    page.assert_clean()
    assert page.page.locator("#block").inner_text().startswith("## Relevant past experience")
    screenshot(page.page, "playground")

    visit(page, viewer, "/overview")
    assert page.page.locator("svg#outcomes-chart").count() == 1
    assert page.page.locator("#histogram").count() == 1
    screenshot(page.page, "overview")


def test_an_unknown_episode_is_a_404_page(page: Watched, viewer: Viewer) -> None:
    visit(page, viewer, "/episode/no-such-episode", 404)
    assert page.page.locator("#episode").count() == 0


# --- the token -----------------------------------------------------------------------------


TOKENLESS = [
    "/",
    "/?token=wrong",
    "/?token=",
    "/episode/{id}",
    "/playground?task=refund+the+duplicate+charge&top_k=5",
    "/overview",
    "/overview?by=week",
    "/forget?ids={id}",
    "/static/style.css/../../",
]


def test_the_token_is_required(
    context: BrowserContext, viewer: Viewer, seeded: tuple[Path, Seeded]
) -> None:
    store, _ = seeded
    shown = episodes_of(store)
    watched = watch(context.new_page())
    for path in TOKENLESS:
        response = watched.page.goto(viewer.url(path.format(id=quote(shown[-1].id))))
        assert response is not None
        assert response.status == 403, path
        text = dom_text(watched.page)
        assert "token" in text.lower(), path
        for ep in shown:
            assert ep.query not in text, path
            assert ep.id not in text, path
        assert watched.page.locator("tr.episode").count() == 0
        assert context.cookies() == [], path
        watched.expect_error_status(response.url, 403)
    watched.assert_clean()


def test_the_token_signs_the_browser_in_with_a_strict_cookie(
    context: BrowserContext, viewer: Viewer, seeded: tuple[Path, Seeded]
) -> None:
    watched = signed_in(context, viewer)
    assert watched.page.locator("#timeline tr.episode").count() == 50
    (cookie,) = context.cookies()
    assert cookie["name"] == "dce_token"
    assert cookie["httpOnly"] is True
    assert cookie["sameSite"] == "Strict"
    assert cookie["path"] == "/"
    # Scripts cannot read it (were any to run).
    assert "dce_token" not in watched.page.evaluate("document.cookie")
    # The cookie authenticates later requests on its own.
    visit(watched, viewer, "/overview")
    watched.assert_clean()


# --- filters, search and pages ---------------------------------------------------------------


def _day(value: str) -> float:
    return datetime.fromisoformat(value).replace(tzinfo=UTC).timestamp()


def _expected(episodes: list[Episode], **wanted: Any) -> list[str]:
    def keep(ep: Episode) -> bool:
        if "outcome" in wanted and ep.outcome not in wanted["outcome"]:
            return False
        if "tag" in wanted and wanted["tag"] not in ep.tags:
            return False
        if "agent" in wanted and ep.agent_id != wanted["agent"]:
            return False
        if "run" in wanted and ep.run_id != wanted["run"]:
            return False
        when = ep.time() or 0.0
        if "since" in wanted and when < _day(wanted["since"]):
            return False
        # A date given as `until` includes that day, as the CLI's `timeline --until` does.
        if "until" in wanted and when >= _day(wanted["until"]) + timedelta(days=1).total_seconds():
            return False
        if "q" in wanted:
            # The search looks in every text the episode stores (the id, the run, the tools...).
            text = " ".join(stored_texts(ep))
            if wanted["q"].casefold() not in text.casefold():
                return False
        return True

    return newest_first([ep for ep in episodes if keep(ep)])


FORM_FILTERS: list[dict[str, str]] = [
    {"outcome": "failure"},
    {"outcome": "abandoned"},
    {"outcome": "claimed_success"},
    {"tag": "billing"},
    {"agent": "ops-agent"},
    {"run": "run-2025-04-20-export"},
    {"since": "2025-03-20", "until": "2025-03-27"},
    {"q": "STRIPE"},
    {"q": "<script>"},
    {"outcome": "success", "tag": "export", "agent": "ops-agent"},
]


def test_filters_and_search_change_the_rows(
    page: Watched, viewer: Viewer, seeded: tuple[Path, Seeded]
) -> None:
    store, seed_info = seeded
    shown = episodes_of(store)
    everything = newest_first(shown)
    for wanted in FORM_FILTERS:
        visit(page, viewer, "/")
        for name, value in wanted.items():
            if name == "outcome":
                page.page.select_option("#f-outcome", value)
            else:
                page.page.fill(f"#f-{name}", value)
        with page.page.expect_navigation():
            page.page.click("#f-apply")
        page.assert_clean()
        expected = _expected(
            shown, **{k: ({v} if k == "outcome" else v) for k, v in wanted.items()}
        )
        assert expected, f"{wanted} selects nothing in the seeded store: a useless case"
        assert len(expected) < len(everything), f"{wanted} selects everything: a useless case"
        got = row_ids(page.page)
        assert got == expected, wanted
        # The form shows the filter it applied.
        for name, value in wanted.items():
            if name != "outcome":
                assert page.page.input_value(f"#f-{name}") == value
    # The graded episode is filtered by its graded outcome (a verified failure now).
    assert seed_info.graded in _expected(shown, outcome={"failure"})


@pytest.mark.parametrize(
    "query",
    [
        "outcome=failure&outcome=partial",
        "tag=export&since=2025-04-01",
        "until=2025-03-10",
        "since=2025-04-20T00:00:00%2B00:00",
        "q=refund&agent=support-bot",
        "tag=no-such-tag",
    ],
)
def test_filters_in_the_url(
    page: Watched, viewer: Viewer, seeded: tuple[Path, Seeded], query: str
) -> None:
    shown = episodes_of(seeded[0])
    wanted: dict[str, Any] = {}
    for pair in query.split("&"):
        name, value = pair.split("=")
        value = value.replace("%2B", "+")
        if name == "outcome":
            wanted.setdefault("outcome", set()).add(value)
        else:
            wanted[name] = value[:10] if name in ("since", "until") else value
    expected = _expected(shown, **wanted)
    assert all_rows(page, viewer, "/?" + query) == expected
    if not expected:
        assert page.page.locator("#timeline tr.episode").count() == 0


def test_pages_follow_next_and_prev(
    page: Watched, viewer: Viewer, seeded: tuple[Path, Seeded]
) -> None:
    shown = episodes_of(seeded[0])
    everything = newest_first(shown)
    visit(page, viewer, "/")
    first = row_ids(page.page)
    assert first == everything[:50]
    assert page.page.locator("a#prev").count() == 0
    with page.page.expect_navigation():
        page.page.click("a#next")
    assert row_ids(page.page) == everything[50:]
    assert page.page.locator("a#next").count() == 0
    with page.page.expect_navigation():
        page.page.click("a#prev")
    assert row_ids(page.page) == first

    # The pages of a filtered timeline stay filtered.
    ops = _expected(shown, agent="ops-agent")
    assert len(ops) > 10
    assert all_rows(page, viewer, "/?agent=ops-agent&per=7") == ops
    assert all_rows(page, viewer, "/?per=500") == everything


def test_every_row_links_to_its_episode(
    page: Watched, viewer: Viewer, seeded: tuple[Path, Seeded]
) -> None:
    """Ids holding ``/``, ``?``, ``#``, ``%``, quotes and markup survive the link."""
    _, seed_info = seeded
    for episode_id in (seed_info.slash_id, seed_info.hostile["id"], seed_info.run_ids[0]):
        visit(page, viewer, "/?per=500")
        row = page.page.locator("#timeline tr.episode").filter(has=page.page.locator("td.task a"))
        links = [r for r in row.all() if r.get_attribute("data-id") == episode_id]
        assert len(links) == 1, f"no row for {episode_id!r}"
        with page.page.expect_navigation():
            links[0].locator("td.task a").click()
        page.assert_clean()
        assert episode_id in page.page.locator("#episode").inner_text()


# --- the recall playground -----------------------------------------------------------------

PLAYGROUND = [
    ("Customer was charged twice; refund the duplicate charge", "any", 5),
    ("The nightly CSV export times out", "what_worked", 3),
    ("The nightly CSV export times out", "what_failed", 10),
    ("Password reset emails are not arriving", "any", 1),
    ("Render the invoice template <script>", "what_failed", 8),
    ("Fix the export path on the Windows runner", "any", 2),
    ("xyzzy plugh", "any", 5),
]


def test_the_playground_shows_the_exact_block(
    page: Watched, viewer: Viewer, seeded: tuple[Path, Seeded]
) -> None:
    store, _ = seeded
    for task, intent, top_k in PLAYGROUND:

        async def expected(
            memory: EpisodicMemory, task: str = task, intent: str = intent, top_k: int = top_k
        ) -> tuple[str, int]:
            found = await memory.recall(task, top_k, intent=intent)
            return memory.render(found), len(found)

        block, count = on_store(store, expected)
        visit(page, viewer, "/playground")
        page.page.fill("#p-task", task)
        page.page.select_option("#p-intent", intent)
        page.page.fill("#p-topk", str(top_k))
        with page.page.expect_navigation():
            page.page.click("#p-go")
        page.assert_clean()
        assert page.page.input_value("#p-task") == task
        shown = page.page.locator("#block")
        if block:
            # textContent: the characters as the server sent them, not as laid out.
            assert shown.text_content() == block, (task, intent, top_k)
        else:
            assert shown.count() == 0 or shown.text_content() == ""
        rows = page.page.locator("#scores tr:has(td)")
        assert rows.count() == count, (task, intent, top_k)
        numbers = " ".join(rows.all_inner_texts())
        assert not re.search(r"\d\.\d{4,}", numbers), f"float noise in the scores: {numbers}"


# --- hostile episodes ----------------------------------------------------------------------

ESCAPED = "\\\\(?:x|u|U)0*{hex}|U\\+0*{hex}"


def _shown_escaped(text: str, char: str) -> bool:
    code = f"{ord(char):x}"
    return bool(re.search(ESCAPED.format(hex=code), text, re.IGNORECASE))


def _inert(watched: Watched, where: str) -> None:
    page = watched.page
    watched.assert_clean()
    assert page.evaluate("typeof window.__pwned") == "undefined", where
    assert page.evaluate("document.scripts.length") == 0, where
    markup = page.evaluate(
        """() => document.querySelectorAll(
            'img[src="x"], iframe, [onerror], [onload], [onclick], a[href^="javascript:" i]'
        ).length"""
    )
    assert markup == 0, f"{where}: stored markup became elements"
    text = dom_text(page)
    raw = [hex(ord(c)) for c in HIDDEN_CHARS if c in text]
    assert not raw, f"{where}: hidden characters shown raw: {raw}"
    # A raw NUL becomes U+FFFD in the DOM.
    assert "\ufffd" not in text, f"{where}: a NUL was sent raw"


def test_hostile_episodes_render_as_inert_text(
    page: Watched, viewer: Viewer, seeded: tuple[Path, Seeded]
) -> None:
    _, seed_info = seeded
    pages = ["/?page=2", "/?tag=hostile", "/?q=window.__pwned", "/overview", "/overview?by=week"]
    for path in pages:
        visit(page, viewer, path)
        _inert(page, path)
    visit(page, viewer, "/?tag=hostile")
    text = page.page.locator("#timeline").inner_text()
    assert "<script>window.__pwned=1</script>" in text
    assert '<img src=x onerror="window.__pwned=1">' in text
    assert "[dashboard](javascript:window.__pwned=1)" in text
    # Each hostile episode's page, reached through its row's link.
    for what, episode_id in seed_info.hostile.items():
        visit(page, viewer, "/?tag=hostile")
        row = next(
            r
            for r in page.page.locator("#timeline tr.episode").all()
            if r.get_attribute("data-id") == episode_id
        )
        with page.page.expect_navigation():
            row.locator("td.task a").click()
        _inert(page, f"episode {what}")
        details = page.page.locator("#episode").inner_text()
        if what == "script":
            assert "<script>alert(document.domain)</script>" in details
        if what == "heading":
            assert "## System" in details
        if what == "id":
            assert episode_id in details
        stored = "".join(v or "" for v in HOSTILE.get(what, {}).values())
        for char in set(stored) & set(HIDDEN_CHARS):
            if char in "\r\x00":
                continue  # the HTML parser rewrites these: checked by _inert
            assert _shown_escaped(details, char), f"{what}: {hex(ord(char))} not shown escaped"
    for task in (
        "Render the invoice template",
        "Attach the logo to the email",
        "Open the dashboard link",
        "Summarise the refund policy",
        "Terminal output cleared the screen",
        "Refund invoice for the customer",
    ):
        visit(page, viewer, "/playground")
        page.page.fill("#p-task", task)
        with page.page.expect_navigation():
            page.page.click("#p-go")
        _inert(page, f"playground {task!r}")
        assert page.page.locator("#scores tr:has(td)").count() > 0, task


# --- forget --------------------------------------------------------------------------------


def test_without_allow_forget_there_is_no_forget(
    page: Watched, viewer: Viewer, seeded: tuple[Path, Seeded]
) -> None:
    store, _ = seeded
    before = [ep.id for ep in episodes_of(store)]
    target = before[-1]
    for path in ("/", f"/episode/{target}", "/?tag=billing"):
        visit(page, viewer, path)
        assert page.page.locator('a[href*="forget"]').count() == 0, path
        assert "Forget" not in page.page.inner_text("body"), path
    response = page.page.request.get(viewer.url(f"/forget?ids={target}"))
    assert response.status == 404
    response = page.page.request.post(
        viewer.url("/forget"),
        form={"ids": target},
        headers={"Origin": viewer.origin},
        max_redirects=0,
    )
    assert response.status == 404
    assert [ep.id for ep in episodes_of(store)] == before


def _confirm_page(watched: Watched, count: int, episodes: list[Episode]) -> None:
    page = watched.page
    watched.assert_clean()
    assert page.locator("#confirm-forget").count() == 1
    text = page.inner_text("body")
    assert re.search(rf"\b{count}\b", text), f"the count {count} is not shown"
    for ep in episodes:
        assert ep.query.splitlines()[0][:40] in text


def test_forget_one_episode_after_confirming(
    context: BrowserContext, forgetting: tuple[Path, Seeded, Viewer]
) -> None:
    store, seed_info, server = forgetting
    watched = signed_in(context, server)
    for target in (seed_info.run_ids[0], seed_info.slash_id, seed_info.hostile["id"]):
        before = {ep.id: ep for ep in episodes_of(store)}
        visit(watched, server, "/?per=500")
        row = next(
            r
            for r in watched.page.locator("#timeline tr.episode").all()
            if r.get_attribute("data-id") == target
        )
        with watched.page.expect_navigation():
            row.locator("td.task a").click()
        with watched.page.expect_navigation():
            watched.page.get_by_role("link", name=re.compile("Forget")).click()
        _confirm_page(watched, 1, [before[target]])
        if target == seed_info.run_ids[0]:
            screenshot(watched.page, "forget")
        # Nothing is deleted before the confirmation.
        assert set(before) == {ep.id for ep in episodes_of(store)}
        with watched.page.expect_navigation():
            watched.page.click("#confirm-forget")
        watched.assert_clean()
        assert urlsplit(watched.page.url).path == "/"
        assert target not in row_ids(watched.page)
        after = {ep.id for ep in episodes_of(store)}
        assert after == set(before) - {target}, target

        async def selected(memory: EpisodicMemory, target: str = target) -> list[Episode]:
            return await memory.select([target])

        assert on_store(store, selected) == []
        visit(watched, server, f"/episode/{quote(target)}", 404)


def test_forget_a_filtered_set_after_confirming(
    context: BrowserContext, forgetting: tuple[Path, Seeded, Viewer]
) -> None:
    store, _, server = forgetting
    watched = signed_in(context, server)
    before = episodes_of(store)
    expected = _expected(before, tag="billing", outcome={"failure", "partial"})
    assert 1 < len(expected) < len(before)
    shown = all_rows(watched, server, "/?tag=billing&outcome=failure&outcome=partial&per=2")
    assert shown == expected
    visit(watched, server, "/?tag=billing&outcome=failure&outcome=partial&per=2")
    with watched.page.expect_navigation():
        watched.page.get_by_role("link", name=re.compile("Forget")).click()
    by_id = {ep.id: ep for ep in before}
    _confirm_page(watched, len(expected), [by_id[i] for i in expected])
    with watched.page.expect_navigation():
        watched.page.click("#confirm-forget")
    watched.assert_clean()
    after = {ep.id for ep in episodes_of(store)}
    assert after == {ep.id for ep in before} - set(expected)


def test_forget_refuses_a_forged_request(
    context: BrowserContext, browser: Browser, forgetting: tuple[Path, Seeded, Viewer]
) -> None:
    store, seed_info, server = forgetting
    watched = signed_in(context, server)
    before = [ep.id for ep in episodes_of(store)]
    target = seed_info.graded
    assert target in before

    def confirmation() -> dict[str, str]:
        visit(watched, server, f"/forget?ids={quote(target)}")
        fields: list[list[str]] = watched.page.eval_on_selector(
            "form:has(#confirm-forget)", "f => Array.from(new FormData(f).entries())"
        )
        form = dict(fields)
        assert form.get("csrf"), "the confirmation form carries no csrf field"
        return form

    # A wrong csrf, then none, submitted by the browser itself from the confirmation page.
    for forge in ("e => e.value = 'forged' + e.value", "e => e.remove()"):
        confirmation()
        watched.page.eval_on_selector('form:has(#confirm-forget) [name="csrf"]', forge)
        with watched.page.expect_response(
            lambda r: r.request.method == "POST" and "/forget" in r.url
        ) as answer:
            watched.page.click("#confirm-forget")
        assert answer.value.status == 403, forge
        watched.page.wait_for_load_state()
        watched.expect_error_status(answer.value.url, 403)
        watched.assert_clean()

    form = confirmation()
    # A valid csrf from another site, and from a browser without the cookie.
    for headers in (
        {"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"},
        {"Origin": "https://evil.example"},
        {"Sec-Fetch-Site": "cross-site"},
    ):
        response = watched.page.request.post(
            server.url("/forget"), form=form, headers=headers, max_redirects=0
        )
        assert response.status == 403, headers
    stranger = browser.new_context()
    try:
        response = stranger.request.post(
            server.url("/forget"), form=form, headers={"Origin": server.origin}, max_redirects=0
        )
        assert response.status == 403
    finally:
        stranger.close()
    assert [ep.id for ep in episodes_of(store)] == before


# --- overview ------------------------------------------------------------------------------


CHART_TITLE = re.compile(
    r"^(?P<period>\S+): (?P<count>\d+) (?P<outcome>[a-z_]+) of (?P<total>\d+)$"
)


def _chart_bars(page: Page) -> dict[str, dict[str, int]]:
    """The chart's segments, from their ``<title>`` tooltips: counts by outcome, by period."""
    titles: list[str] = page.eval_on_selector_all(
        "svg#outcomes-chart rect title", "ts => ts.map(t => t.textContent)"
    )
    bars: dict[str, dict[str, int]] = {}
    for title in titles:
        match = CHART_TITLE.match(title)
        assert match, f"a segment's tooltip does not say what it counts: {title!r}"
        segments = bars.setdefault(match["period"], {})
        assert match["outcome"] not in segments, f"two {match['outcome']} segments: {title}"
        segments[match["outcome"]] = int(match["count"])
        assert int(match["total"]) >= int(match["count"])
    for period, segments in bars.items():
        totals = {
            int(m["total"]) for t in titles if (m := CHART_TITLE.match(t)) and m["period"] == period
        }
        assert totals == {sum(segments.values())}, f"{period}: the segments do not add up"
    return bars


@pytest.mark.parametrize("by", ["day", "week"])
def test_the_overview_chart_adds_up(
    page: Watched, viewer: Viewer, seeded: tuple[Path, Seeded], by: str
) -> None:
    store, _ = seeded

    async def stats(memory: EpisodicMemory) -> Any:
        return await memory.stats()

    facts = on_store(store, stats)
    shown = episodes_of(store)
    visit(page, viewer, f"/overview?by={by}")
    bars = _chart_bars(page.page)
    period = (lambda ep: ep.day()) if by == "day" else (lambda ep: _week(ep.timestamp))
    assert set(bars) == {period(ep) for ep in shown}
    for name, segments in bars.items():
        assert segments == dict(Counter(ep.outcome for ep in shown if period(ep) == name)), name
    assert sum(sum(s.values()) for s in bars.values()) == facts.total == len(shown)
    by_outcome = {k: v for k, v in facts.by_outcome.items() if v}
    histogram = page.page.locator("#histogram").inner_text()
    for outcome, count in by_outcome.items():
        assert re.search(rf"{outcome}\s+{count}\b", histogram), (outcome, histogram)
    assert NOT_WIRED not in page.page.locator("#warnings").inner_text()


def _week(timestamp: str) -> str:
    year, week, _ = datetime.fromisoformat(timestamp).isocalendar()
    return f"{year}-W{week:02d}"


def test_the_overview_warns_when_the_outcome_signal_is_not_wired(
    context: BrowserContext, tmp_path: Path
) -> None:
    store = tmp_path / "unwired.db"
    run(seed_unwired, store)
    with serve(store) as server:
        watched = signed_in(context, server)
        visit(watched, server, "/overview")
        assert NOT_WIRED in watched.page.locator("#warnings").inner_text()
        watched.assert_clean()


# --- history and phrases ---------------------------------------------------------------------

HISTORY_TASK = "deploy the checkout service to staging"


async def seed_history(store: Path) -> list[str]:
    """A deploy that worked for weeks and broke three days ago (a graded run among them,
    one of three iterations), recorded relative to now: the phrases the page takes are."""
    now = datetime.now(UTC)
    async with open_provider(str(store)) as backend:
        memory = EpisodicMemory(backend)
        ids = []
        for days, outcome in [(40, "success"), (25, "success"), (9, "failure"), (6, "success"),
                              (3, "failure"), (1, "failure")]:  # fmt: skip
            episode = await memory.record(
                Episode(
                    query=f"{HISTORY_TASK} (build {days})",
                    outcome=outcome,
                    reflection=f"lesson of the build {days} days ago",
                    timestamp=(now - timedelta(days=days)).isoformat(),
                )
            )
            ids.append(episode.id)
        # A run of two iterations: the second, a success, is what the history shows of it.
        for n, outcome in enumerate(["failure", "success"]):
            stamp = (now - timedelta(days=12, minutes=-n)).isoformat()
            await memory.record(
                Episode(
                    query=f"{HISTORY_TASK} (retried)",
                    outcome=outcome,
                    run_id="run-retried",
                    timestamp=stamp,
                )
            )
        # The failure of nine days ago was a success after all, a test said later.
        await memory.grade(ids[2], outcome="success", note="the smoke test passed on retry")
        await memory.record(Episode(query="refund the duplicate charge", outcome="failure"))
        return ids


@pytest.fixture(scope="module")
def history_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Viewer]]:
    store = tmp_path_factory.mktemp("viewer-history") / "episodes.db"
    run(seed_history, store)
    with serve(store, "--tz", "Asia/Tokyo") as server:
        yield store, server


def test_the_history_page_shows_when_it_started_failing(
    context: BrowserContext, history_server: tuple[Path, Viewer]
) -> None:
    store, server = history_server
    watched = signed_in(context, server)
    page = watched.page
    page.click("#nav-history")
    page.wait_for_url("**/history")
    page.fill("#h-task", HISTORY_TASK)
    with page.expect_navigation():
        page.click("#h-go")
    watched.assert_clean()

    async def expected(memory: EpisodicMemory, **period: str) -> tuple[list[str], str | None]:
        found = await memory.history(HISTORY_TASK, **period)
        return [s.episode.id for s in found], found.broke.episode.id if found.broke else None

    ids, broke = on_store(store, expected)
    rows = page.locator("#runs tr.run")
    assert [rows.nth(i).get_attribute("data-id") for i in range(rows.count())] == ids
    assert len(ids) == 7  # six builds and the retried run, once; not the refund
    outcomes = page.locator("#runs td.outcome").all_inner_texts()
    assert outcomes == ["success", "success", "success", "success", "success", "failure", "failure"]
    assert page.locator("#runs td.iterations").all_inner_texts()[2] == "2"
    assert page.locator("tr.broke").get_attribute("data-id") == broke
    summary = page.inner_text("#summary")
    assert summary.startswith("Started failing on ")
    assert "2 failed runs since the last success" in summary
    # A phrase narrows it, read by the server (in its zone, on its clock).
    page.fill("#h-since", "last 7 days")
    with page.expect_navigation():
        page.click("#h-go")
    watched.assert_clean()
    recent, _ = on_store(store, lambda m: expected(m, since="last 7 days"))
    rows = page.locator("#runs tr.run")
    assert [rows.nth(i).get_attribute("data-id") for i in range(rows.count())] == recent
    assert len(recent) == 3
    assert page.input_value("#h-since") == "last 7 days"
    # The break links to its episode.
    with page.expect_navigation():
        page.click("#broke")
    assert page.url.endswith("/episode/" + url_quote(broke or "", safe=""))
    watched.assert_clean()
    # A phrase no one can read is said, not ignored.
    visit(watched, server, "/history?task=deploy&since=someday", status=400)
    assert "since: 'someday' is not a time" in page.inner_text("#error")


def test_the_history_page_over_the_seeded_store_is_photographed(
    page: Watched, viewer: Viewer, seeded: tuple[Path, Seeded]
) -> None:
    # Over the seeded store (fixed times), so that the picture in the docs is the same each run.
    task = "refund the duplicate charge"
    visit(page, viewer, "/history?task=" + url_quote(task))

    async def expected(memory: EpisodicMemory) -> tuple[list[str], str | None]:
        found = await memory.history(task)
        return [s.episode.id for s in found], found.broke.episode.id if found.broke else None

    ids, broke = on_store(seeded[0], expected)
    got = page.page.locator("#runs tr.run").evaluate_all("rows => rows.map(r => r.dataset.id)")
    assert got == ids
    assert broke is not None
    assert page.page.locator("tr.broke").get_attribute("data-id") == broke
    screenshot(page.page, "history")


def test_the_timeline_filter_takes_phrases(
    context: BrowserContext, history_server: tuple[Path, Viewer]
) -> None:
    store, server = history_server
    watched = signed_in(context, server)
    page = watched.page
    page.fill("#f-since", "2 weeks ago")
    page.fill("#f-until", "5 days ago")
    page.fill("#f-q", "checkout")
    with page.expect_navigation():
        page.click("#f-apply")
    watched.assert_clean()
    got = page.locator("#timeline tr.episode").evaluate_all("rows => rows.map(r => r.dataset.id)")

    async def expected(memory: EpisodicMemory) -> list[str]:
        start, _ = parse_time("2 weeks ago", tz="Asia/Tokyo")
        _, end = parse_time("5 days ago", tz="Asia/Tokyo")
        return [
            e.id
            for e in reversed(await memory.load())
            if "checkout" in e.query and start <= (e.time() or 0) < end
        ]

    assert got == on_store(store, expected)
    # 12 days ago (both iterations), 9 and 6 days ago: "2 weeks ago" starts on the Monday of
    # that week, 14 to 20 days ago, so never before the build of 25 days ago.
    assert len(got) == 4
    assert page.input_value("#f-since") == "2 weeks ago"


# --- outcome cells -------------------------------------------------------------------------

# Each outcome cell of a table: its outcome, how tall its content is laid out against the
# height of one line, and the style a reader tells outcomes apart by.
OUTCOME_CELLS = """cells => cells.map(cell => {
    const range = document.createRange();
    range.selectNodeContents(cell);
    const style = getComputedStyle(cell);
    return {
        outcome: [...cell.classList].find(c => c.startsWith('o-')).slice(2),
        text: cell.innerText,
        height: range.getBoundingClientRect().height,
        line: parseFloat(style.lineHeight),
        color: style.color,
        shape: [style.fontStyle, style.fontWeight, style.textDecorationLine,
                style.textDecorationStyle, style.borderTopStyle, style.borderLeftStyle],
    };
})"""


def _rgb(color: str) -> tuple[int, ...]:
    found = re.fullmatch(r"rgba?\((\d+), (\d+), (\d+)(?:, [\d.]+)?\)", color)
    assert found is not None, color
    return tuple(int(part) for part in found.groups())


@pytest.mark.parametrize("width", [WIDTH, 1024, 800])
def test_outcome_cells_keep_one_line_and_a_claim_does_not_look_like_a_success(
    context: BrowserContext, viewer: Viewer, width: int
) -> None:
    watched = signed_in(context, viewer)
    watched.page.set_viewport_size({"width": width, "height": 900})
    visit(watched, viewer, "/?per=100")
    cells: list[dict[str, Any]] = watched.page.eval_on_selector_all(
        "#timeline td.outcome", OUTCOME_CELLS
    )
    by_outcome: dict[str, list[dict[str, Any]]] = {}
    for cell in cells:
        by_outcome.setdefault(cell["outcome"], []).append(cell)
    assert {"success", "claimed_success"} <= set(by_outcome), set(by_outcome)
    # One line each: "claimed_success (agent)" never breaks, whatever the width.
    wrapped = [(c["text"], c["height"]) for c in cells if c["height"] > c["line"]]
    assert not wrapped, f"outcome cells on more than one line at {width}px: {wrapped}"
    # A claim is told from a success by more than colour (by its shape too), and its colour
    # is far from a success's, not a shade of it.
    claim, success = by_outcome["claimed_success"][0], by_outcome["success"][0]
    assert claim["shape"] != success["shape"], (claim["shape"], success["shape"])
    distance = math.dist(_rgb(claim["color"]), _rgb(success["color"]))
    assert distance > 100, (claim["color"], success["color"])
    # The same on every page that shows outcomes: the playground, a run, the grades.
    visit(watched, viewer, "/playground?task=refund+the+duplicate+charge&top_k=20")
    for cell in watched.page.eval_on_selector_all("#scores td.outcome", OUTCOME_CELLS):
        assert cell["height"] <= cell["line"], (width, cell["text"])
