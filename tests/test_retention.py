"""Retention and deletion.

* An episode past its ``forget_after`` or older than ``max_age`` is never returned by any read
  path, even before ``sweep()`` deleted it: one test per read path (another memory library
  leaked expired records through exactly one forgotten path).
* ``sweep()`` and ``forget(...)`` delete for real: the payload is gone from the backend, checked
  on the provider's keys and values (every kind) and on the bytes of the file (file store).
"""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest
from conftest import Clock
from llm_server import Reply, ScriptedLLM
from stores import Store

from deepcrew_episodic import Agent, ConfigurationError, Episode, EpisodicMemory, run_agent
from deepcrew_episodic.cli import main
from deepcrew_episodic.providers import FileMemoryProvider, InMemoryProvider, MemoryProvider

pytestmark = pytest.mark.anyio

SECRET_WORD = "zanzibar"  # appears only in the expired episodes' text


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def ago(**delta: float) -> str:
    return iso(datetime.now(UTC) - timedelta(**delta))


def ahead(**delta: float) -> str:
    return iso(datetime.now(UTC) + timedelta(**delta))


async def seed(memory: EpisodicMemory) -> dict[str, Episode]:
    """A live episode, one past its forget_after, one too old for a 30-day max_age; all three
    match the query "deploy zanzibar"."""
    live = await memory.record(
        Episode(query="deploy the billing service", response="deployed", outcome="success")
    )
    forgotten = await memory.record(
        Episode(
            query=f"deploy {SECRET_WORD} with the admin password",
            response=f"the {SECRET_WORD} deploy worked",
            outcome="success",
            tags=["deploy"],
            forget_after=ago(minutes=1),
        )
    )
    old = await memory.record(
        Episode(
            query=f"deploy {SECRET_WORD} last quarter",
            response=f"old {SECRET_WORD} notes",
            outcome="failure",
            tags=["deploy"],
            timestamp=ago(days=45),
        )
    )
    return {"live": live, "forgotten": forgotten, "old": old}


def policy(provider: MemoryProvider, **kwargs: object) -> EpisodicMemory:
    return EpisodicMemory(provider, namespace="ret", max_age=timedelta(days=30), **kwargs)  # type: ignore[arg-type]


async def raw_text(provider: MemoryProvider) -> str:
    keys = await provider.keys("")
    values = await provider.retrieve_many(keys)
    return "\n".join(keys + [v or "" for v in values])


# --- every read path hides expired episodes ---------------------------------------------------


async def test_load_hides_expired(provider: MemoryProvider) -> None:
    seeded = await seed(policy(provider))
    assert [e.id for e in await policy(provider).load()] == [seeded["live"].id]


async def test_recall_hides_expired(provider: MemoryProvider) -> None:
    await seed(policy(provider))
    found = await policy(provider).recall("deploy zanzibar", top_k=10)
    assert [e.query for e in found] == ["deploy the billing service"]


async def test_recall_with_filters_hides_expired(provider: MemoryProvider) -> None:
    await seed(policy(provider))
    memory = policy(provider)
    assert await memory.recall("deploy zanzibar", 10, tags=["deploy"]) == []
    assert await memory.recall("deploy zanzibar", 10, outcome="failure") == []
    assert await memory.recall("zanzibar", 10, since=timedelta(days=365)) == []
    assert await memory.recall("zanzibar", 10, intent="what_failed") == []


async def test_explain_hides_expired(provider: MemoryProvider) -> None:
    await seed(policy(provider))
    scored = await policy(provider).explain("deploy zanzibar", top_k=10)
    assert [s.episode.query for s in scored] == ["deploy the billing service"]


async def test_render_drops_expired_episodes_it_is_handed(provider: MemoryProvider) -> None:
    seeded = await seed(policy(provider))
    block = policy(provider).render(list(seeded.values()))
    assert "deploy the billing service" in block
    assert SECRET_WORD not in block
    assert policy(provider).render([seeded["forgotten"], seeded["old"]]) == ""


async def test_stats_counts_expired_and_shows_none(provider: MemoryProvider) -> None:
    await seed(policy(provider))
    stats = await policy(provider).stats()
    assert stats.total == 1
    assert stats.expired == 2
    assert stats.by_outcome["failure"] == 0  # the old failure is not counted as live
    assert stats.oldest == stats.newest


async def test_max_age_is_a_policy_of_the_reader(provider: MemoryProvider) -> None:
    await seed(policy(provider))
    no_policy = EpisodicMemory(provider, namespace="ret")
    # forget_after travels with the episode; max_age belongs to the memory that reads.
    assert sorted(e.outcome for e in await no_policy.load()) == ["failure", "success"]


async def test_an_episode_expires_while_a_reader_holds_it_in_cache(
    provider: MemoryProvider, clock: Clock
) -> None:
    memory = EpisodicMemory(provider, namespace="soon", clock=clock)
    await memory.record(Episode(query="rotate the signing key", forget_after=ahead(seconds=1.2)))
    assert len(await memory.recall("rotate signing key")) == 1  # cached and indexed now
    clock.now += 1.5  # no write happens in between: the cache must not keep it alive
    assert await memory.recall("rotate signing key") == []
    assert await memory.load() == []
    assert (await memory.stats()).expired == 1


async def test_an_episode_recorded_already_expired_is_never_returned(
    provider: MemoryProvider,
) -> None:
    memory = EpisodicMemory(provider, namespace="late", max_age=timedelta(days=1))
    stored = await memory.record(Episode(query="refund order 9", timestamp=ago(days=2)))
    assert stored.id
    assert await memory.load() == []
    assert await memory.recall("refund order") == []


# --- the CLI's read paths ---------------------------------------------------------------------


def run_cli(*argv: str) -> tuple[int, str]:
    buffer = io.StringIO()
    with redirect_stdout(buffer):
        code = main(list(argv))
    return code, buffer.getvalue()


@pytest.fixture
def expired_file(tmp_path: Path) -> Path:
    path = tmp_path / "ret.json"

    async def fill() -> None:
        async with FileMemoryProvider(path) as provider:
            await seed(policy(provider))

    anyio.run(fill)
    return path


@pytest.mark.parametrize(
    "command",
    [
        ["recall", "deploy zanzibar", "-k", "10"],
        ["recall", "deploy zanzibar", "-k", "10", "--json", "-v"],
        ["timeline"],
        ["timeline", "--json", "--since", "365d"],
        ["export"],
        ["stats", "--json"],
        ["forget", "--containing", "deploy", "--dry-run"],
    ],
)
def test_cli_read_paths_hide_expired(expired_file: Path, command: list[str]) -> None:
    code, output = run_cli(
        "--store", str(expired_file), "--namespace", "ret", "--max-age", "30d", *command
    )
    assert code == 0
    assert SECRET_WORD not in output
    if command[0] == "stats":
        assert json.loads(output)["total"] == 1
    else:
        assert "deploy the billing service" in output


def test_cli_without_max_age_still_hides_forget_after(expired_file: Path) -> None:
    code, output = run_cli("--store", str(expired_file), "-n", "ret", "export")
    assert code == 0
    rows = [json.loads(line) for line in output.splitlines()]
    assert [r["outcome"] for r in rows] == ["success", "failure"]  # the 45-day-old one shows
    assert "admin password" not in output  # the forget_after one never does


def test_cli_export_to_a_file_hides_expired(expired_file: Path, tmp_path: Path) -> None:
    target = tmp_path / "out.jsonl"
    code, _ = run_cli(
        "--store", str(expired_file), "-n", "ret", "--max-age", "30d", "export", "-o", str(target)
    )
    assert code == 0
    assert SECRET_WORD not in target.read_text()
    assert len(target.read_text().splitlines()) == 1


# --- sweep and forget delete for real ---------------------------------------------------------


async def test_sweep_deletes_expired_payloads(store: Store, provider: MemoryProvider) -> None:
    memory = policy(provider)
    seeded = await seed(memory)
    assert SECRET_WORD in await raw_text(provider)  # hidden, but still stored before a sweep
    assert await memory.sweep() == 2
    assert SECRET_WORD not in await raw_text(provider)
    assert [e.id for e in await EpisodicMemory(provider, namespace="ret").load()] == [
        seeded["live"].id
    ]
    assert await memory.sweep() == 0
    if store.kind == "file":
        assert SECRET_WORD not in Path(store.target).read_text()


async def test_forget_by_id_deletes_the_payload(store: Store, provider: MemoryProvider) -> None:
    memory = EpisodicMemory(provider, namespace="fg")
    keep = await memory.record(Episode(query="rotate the api key", response="done"))
    gone = await memory.record(Episode(query=f"call {SECRET_WORD} support", response="sorry"))
    assert await memory.forget([gone.id]) == 1
    assert await memory.forget(gone.id) == 0  # a bare id works too; already gone
    assert SECRET_WORD not in await raw_text(provider)
    assert [e.id for e in await EpisodicMemory(provider, namespace="fg").load()] == [keep.id]
    assert await memory.recall(f"{SECRET_WORD} support") == []
    if store.kind == "file":
        assert SECRET_WORD not in Path(store.target).read_text()


async def test_forget_and_sweep_are_seen_by_a_reader_with_a_warm_cache(
    provider: MemoryProvider,
) -> None:
    writer = policy(provider)
    reader = EpisodicMemory(provider, namespace="ret")  # no max_age: sees the old one
    seeded = await seed(writer)
    assert len(await reader.recall("deploy zanzibar", 10)) == 2  # cached and indexed
    await writer.sweep()
    assert [e.id for e in await reader.recall("deploy zanzibar", 10)] == [seeded["live"].id]
    await writer.forget([seeded["live"].id])
    assert await reader.recall("deploy zanzibar", 10) == []
    assert await reader.load() == []


async def test_forget_by_filter(provider: MemoryProvider) -> None:
    memory = EpisodicMemory(provider, namespace="flt")
    a = await memory.record(
        Episode(
            query="refund Acme order", outcome="failure", tags=["billing"], timestamp=ago(days=100)
        )
    )
    b = await memory.record(
        Episode(query="refund Initech order", outcome="failure", tags=["billing"])
    )
    c = await memory.record(
        Episode(query="deploy api", outcome="success", tags=["ops"], response="for ACME corp")
    )
    d = await memory.record(Episode(query="deploy web", outcome="partial", tags=["ops"]))

    async def ids() -> set[str]:
        return {e.id for e in await EpisodicMemory(provider, namespace="flt").load()}

    assert await memory.forget(containing="acme", outcome="success") == 1  # both criteria
    assert await ids() == {a.id, b.id, d.id}
    assert await memory.forget(outcome="failure", before=timedelta(days=30)) == 1
    assert await ids() == {b.id, d.id}
    assert await memory.forget(tags=["OPS"]) == 1  # tags match case-insensitively
    assert await ids() == {b.id}
    assert await memory.forget([b.id, c.id], outcome="success") == 0  # ids AND filter
    assert await memory.forget(before=datetime.now(UTC) + timedelta(minutes=1)) == 1
    assert await ids() == set()
    assert "Acme" not in await raw_text(provider)
    assert "Initech" not in await raw_text(provider)


async def test_forget_by_filter_reaches_expired_unswept_episodes(provider: MemoryProvider) -> None:
    await seed(policy(provider))
    assert await policy(provider).forget(containing=SECRET_WORD) == 2
    assert SECRET_WORD not in await raw_text(provider)


async def test_forget_needs_a_criterion(provider: MemoryProvider) -> None:
    memory = EpisodicMemory(provider, namespace="none")
    await memory.record(Episode(query="keep me"))
    with pytest.raises(ConfigurationError, match="clear"):
        await memory.forget()
    with pytest.raises(ConfigurationError, match="outcome"):
        await memory.forget(outcome="great")
    assert len(await memory.load()) == 1


async def test_forget_deletes_a_deepcrew_ai_slot(provider: MemoryProvider) -> None:
    # deepcrew-ai's layout (slots plus __meta__), read in place: forgetting one removes its slot.
    for slot, query in enumerate(["legacy refund", f"legacy {SECRET_WORD}"]):
        body = {"query": query, "response": "r", "timestamp": f"2026-01-0{slot + 1}T00:00:00Z"}
        await provider.store(f"episodic:old:{slot}", json.dumps(body))
    await provider.store("episodic:old:__meta__", json.dumps({"count": 2, "next": 2}))
    memory = EpisodicMemory(provider, namespace="old")
    assert await memory.forget(containing=SECRET_WORD) == 1
    assert SECRET_WORD not in await raw_text(provider)
    assert [e.query for e in await EpisodicMemory(provider, namespace="old").load()] == [
        "legacy refund"
    ]


async def test_clear_then_stats(provider: MemoryProvider) -> None:
    memory = policy(provider)
    await seed(memory)
    await memory.clear()
    stats = await memory.stats()
    assert (stats.total, stats.expired, stats.corrupt) == (0, 0, 0)
    assert SECRET_WORD not in await raw_text(provider)


# --- the runner hook ----------------------------------------------------------------------------


async def test_run_agent_never_injects_an_expired_episode(llm: ScriptedLLM) -> None:
    """The whole run, over litellm's real HTTP path: the block sent to the model holds the live
    episode and none of the expired ones, and the run's result does not list them."""
    provider = InMemoryProvider()
    seeded = await seed(policy(provider))
    llm.script(Reply.text("Deployed it the same way as last time."))
    agent = Agent(
        name="ops",
        model="openai/scripted",
        extra_params={**llm.params, "max_retries": 0},
        episodic_memory=policy(provider),
    )
    result = await run_agent(agent, [{"role": "user", "content": "deploy zanzibar again"}])
    [request] = llm.requests
    sent = json.dumps(request.body)
    assert "deploy the billing service" in request.system_text
    assert SECRET_WORD not in sent.replace("deploy zanzibar again", "")
    assert [e.id for e in result.recalled] == [seeded["live"].id]
    assert result.episodes_recalled == 1


async def test_the_hook_records_through_redaction(llm: ScriptedLLM) -> None:
    provider = InMemoryProvider()
    key = "ghp_" + "aB3" * 12
    llm.script(Reply.text(f"Use the token {key} next time."))
    agent = Agent(
        name="ops",
        model="openai/scripted",
        extra_params={**llm.params, "max_retries": 0},
        episodic_memory=EpisodicMemory(provider, namespace="hook"),
    )
    await run_agent(agent, [{"role": "user", "content": f"why does {key} fail?"}])
    raw = await raw_text(provider)
    assert key not in raw
    assert "[REDACTED:github-token]" in raw


# --- no output path shows an expired episode, not for a second ------------------------------


async def test_grade_refuses_an_expired_episode(provider: MemoryProvider, clock: Clock) -> None:
    memory = EpisodicMemory(provider, namespace="g", clock=clock, max_age=timedelta(days=30))
    soon = await memory.record(
        Episode(
            query=f"{SECRET_WORD} refund",
            forget_after=iso(datetime.fromtimestamp(clock.now + 5, UTC)),
        )
    )
    old = await memory.record(Episode(query=f"old {SECRET_WORD}", timestamp=ago(days=45)))
    clock.now += 10
    for episode in (soon, old):
        with pytest.raises(ConfigurationError, match="has expired") as caught:
            await memory.grade(episode.id, outcome="success", note="late")
        assert SECRET_WORD not in str(caught.value)
    assert await memory.grades() == []


def test_cli_grade_and_record_never_print_an_expired_episode(expired_file: Path) -> None:
    store = str(expired_file)

    async def ids() -> list[str]:
        async with FileMemoryProvider(store) as provider:
            memory = EpisodicMemory(provider, namespace="ret")
            return [e.id for e in await memory.load(include_expired=True)]

    for episode_id in anyio.run(ids)[1:]:  # the forgotten one and the 45-day-old one
        for extra in ([], ["--json"]):
            argv = ["--store", store, "-n", "ret", "--max-age", "30d", "grade", episode_id]
            buffer, errors = io.StringIO(), io.StringIO()
            with redirect_stdout(buffer), redirect_stderr(errors):
                code = main([*argv, "--outcome", "success", *extra])
            assert code == 1
            assert "has expired" in errors.getvalue()
            assert SECRET_WORD not in buffer.getvalue() + errors.getvalue()
    for extra in ([], ["--json"]):
        code, output = run_cli(
            "--store", store, "record", "-q", f"{SECRET_WORD} again", "--forget-after",
            "2020-01-01", *extra,
        )  # fmt: skip
        assert code == 0
        assert SECRET_WORD not in output
        assert "expired" in output


async def test_the_viewer_hides_an_episode_the_moment_it_expires(clock: Clock) -> None:
    """On a log large enough that the viewer keeps its snapshot between pages, an episode that
    expires is gone from the very next page: the timeline, its search, the episode page."""
    import httpx

    from deepcrew_episodic.viewer import COOKIE, create_app

    memory = EpisodicMemory(InMemoryProvider(), max_episodes=20_000, clock=clock)
    for i in range(12_000):
        await memory.record(Episode(query=f"filler {i}", timestamp=ago(hours=1)))
    soon = await memory.record(
        Episode(
            query=f"{SECRET_WORD} task",
            forget_after=iso(datetime.fromtimestamp(clock.now + 30, UTC)),
        )
    )
    app = create_app(memory, token="t" * 32, allow_forget=True, label="test")
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8765") as c:
        c.cookies.set(COOKIE, "t" * 32)
        assert SECRET_WORD in (await c.get("/", params={"q": SECRET_WORD})).text
        assert SECRET_WORD in (await c.get("/")).text
        clock.now += 31  # no write: only the clock says it expired
        for path, params in (("/", {}), ("/", {"q": SECRET_WORD}), (f"/episode/{soon.id}", {})):
            page = await c.get(path, params=params)
            shown = page.text.replace(f'value="{SECRET_WORD}"', "")  # the search box's echo
            assert SECRET_WORD not in shown, path
        episode_page = await c.get(f"/episode/{soon.id}")
        assert 'id="expired"' in episode_page.text
        preview = await c.get("/forget", params={"ids": soon.id})
        assert preview.status_code == 200
        assert SECRET_WORD not in preview.text
