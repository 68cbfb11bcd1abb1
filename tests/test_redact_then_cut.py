"""Redact first, then cut, on every path that shortens text: a secret placed right at a cut
boundary leaves no fragment in what is shown, injected or stored. A cut secret is no longer
recognisable by its shape, so a path that cut first would print its head.

The paths: a run's joined "earlier attempts" lessons (recall, the CLI's ``recall --json``), the
reflection model's lesson (cut at 300), a distilled episode's fields (cut at 1,000), the viewer's
table cells (cut at 160), and the error messages that quote a model's or a store's text."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from pathlib import Path

import anyio
import httpx
import pytest
from llm_server import Reply, ScriptedLLM

from deepcrew_episodic import ConfigurationError, Episode, EpisodicMemory, Redactor, distill
from deepcrew_episodic._redact import redact_then_cut
from deepcrew_episodic._reflect import LESSON_CHARS
from deepcrew_episodic.cli import main
from deepcrew_episodic.providers import FileMemoryProvider, InMemoryProvider
from deepcrew_episodic.viewer import COOKIE, create_app

pytestmark = pytest.mark.anyio

PASSWORD = "Hx7qLm2vRt9wZk"  # 14 characters, as in the report
SECRET = f"postgres://app:{PASSWORD}@db:5432/orders"


def fragments(text: str, secret: str = PASSWORD, size: int = 4) -> list[str]:
    """The pieces of *secret* (of *size* characters or more) that *text* holds."""
    return [
        secret[i : i + size] for i in range(len(secret) - size + 1) if secret[i : i + size] in text
    ]


def straddling(limit: int, offset: int) -> str:
    """Text whose password starts *offset* characters before *limit*."""
    at = limit - offset - len("postgres://app:")
    return "x" * max(0, at) + " " + SECRET + " and more words after it"


@pytest.mark.parametrize("offset", range(0, len(PASSWORD) + 2))
def test_redact_then_cut_leaves_no_fragment(offset: int) -> None:
    text = straddling(100, offset)
    cut = redact_then_cut(text, 100, Redactor())
    assert len(cut) <= 100
    assert fragments(cut) == []
    # A cut never splits the marker either.
    assert "[REDACTED:url-password" not in cut or "[REDACTED:url-password]" in cut


@pytest.mark.parametrize("offset", [0, 3, 7, 11, 13, 14])
def test_a_runs_earlier_lessons_never_show_part_of_a_secret(tmp_path: Path, offset: int) -> None:
    """A run stored without redaction (deepcrew-ai, or ``redact=False``): its failed
    iterations' lessons are joined under the final one, within 1,200 characters. A lesson that
    does not fit is left out whole, never cut."""
    store = tmp_path / "runs.json"

    async def fill() -> None:
        async with FileMemoryProvider(store) as backend:
            memory = EpisodicMemory(backend, redact=False)
            first = "y" * 600
            second = straddling(1200 - len("Earlier attempts: ") - 602, offset)
            for lesson in (first, second):
                await memory.record(
                    Episode(
                        query="migrate orders db", outcome="failure", reflection=lesson, run_id="r1"
                    )
                )
            await memory.record(Episode(query="migrate orders db", outcome="success", run_id="r1"))

    anyio.run(fill)
    buffer = io.StringIO()
    with redirect_stdout(buffer):
        code = main(["--store", str(store), "recall", "migrate orders db", "--json", "-v"])
    assert code == 0
    output = buffer.getvalue()
    assert fragments(output) == [], output[-300:]
    [item] = json.loads(output)
    assert item["reflection"].startswith("Earlier attempts: yyy")
    assert len(item["reflection"]) <= 1200

    async def recalled() -> str:
        async with FileMemoryProvider(store) as backend:
            [found] = await EpisodicMemory(backend, redact=False).recall("migrate orders db")
            return found.reflection or ""

    assert fragments(anyio.run(recalled)) == []


@pytest.mark.parametrize("offset", [0, 5, 13])
async def test_the_reflection_models_lesson_is_redacted_before_it_is_cut(
    llm: ScriptedLLM, offset: int
) -> None:
    lesson = straddling(LESSON_CHARS, offset).replace("x" * 10, "word " * 2)
    llm.script(Reply.text(lesson))
    memory = EpisodicMemory(
        InMemoryProvider(),
        reflect_model="openai/reflector",
        reflect_params={**llm.params, "max_retries": 0},
    )
    stored = await memory.record(Episode(query="deploy", response="done", outcome="success"))
    assert stored.reflection is not None
    assert len(stored.reflection) <= LESSON_CHARS
    assert fragments(stored.reflection) == []


@pytest.mark.parametrize("offset", [0, 7, 14])
async def test_a_distilled_task_is_redacted_before_it_is_cut(llm: ScriptedLLM, offset: int) -> None:
    task = straddling(1000, offset)
    llm.script(Reply.text(f"TASK: {task}\nAPPROACH: {task}\nOUTCOME: success\nLESSON: {task}"))
    messages = [
        {"role": "user", "content": "migrate the orders db"},
        {"role": "assistant", "content": "done"},
    ]
    episode = await distill("openai/distiller", messages, params={**llm.params, "max_retries": 0})
    assert episode is not None
    for text in (episode.query, episode.approach, episode.reflection or ""):
        assert fragments(text) == [], text[-60:]


@pytest.mark.parametrize("offset", [0, 4, 9, 14])
async def test_the_viewers_cells_are_redacted_before_they_are_cut(offset: int) -> None:
    memory = EpisodicMemory(InMemoryProvider(), redact=False)
    task = straddling(160, offset)
    await memory.record(Episode(query=task, reflection=task))
    app = create_app(memory, token="t" * 32, label="test")
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8765") as c:
        c.cookies.set(COOKIE, "t" * 32)
        page = await c.get("/")
    assert page.status_code == 200
    assert fragments(page.text) == []


def test_a_verifier_reply_quoted_in_an_error_is_redacted_before_it_is_cut() -> None:
    from deepcrew_episodic import VerifierError
    from deepcrew_episodic._verify import RAW_CHARS, parse_verdict

    for offset in (0, 6, 14):
        raw = straddling(RAW_CHARS - 1, offset)
        with pytest.raises(VerifierError) as caught:
            parse_verdict(raw)
        assert fragments(str(caught.value)) == []
    with pytest.raises(VerifierError, match="very large integer"):
        parse_verdict('{"score": ' + "9" * 50 + "}")
    with pytest.raises(VerifierError, match="not a JSON object"):
        parse_verdict('{"score": ' + "9" * 5000 + "}")


def test_short_text_is_only_redacted() -> None:
    assert redact_then_cut("short", 10, None) == "short"
    assert (
        redact_then_cut(SECRET, 200, Redactor())
        == "postgres://app:[REDACTED:url-password]@db:5432/orders"
    )


@pytest.mark.parametrize("offset", [0, 5, 9, 13])
@pytest.mark.parametrize(("key", "limit"), [("__grades__", 40), ("__seq__", 40), ("__meta__", 60)])
async def test_a_garbled_counter_quoted_in_a_warning_shows_no_part_of_a_secret(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, key: str, limit: int, offset: int
) -> None:
    """A counter or index another tool garbled is quoted in the warning that repairs it: the
    quote is redacted, then cut at the message's limit."""
    path = tmp_path / "store.json"
    garbled = straddling(limit, offset)
    path.write_text(json.dumps({f"episodic:default:{key}": garbled}))
    async with FileMemoryProvider(path) as provider:
        memory = EpisodicMemory(provider)
        episode = await memory.record(Episode(query="rotate the key"))
        await memory.grade(episode.id, outcome="success")
    quoted = [r.getMessage() for r in caplog.records if "xxx" in r.getMessage()]
    assert quoted  # the warning was given, with the value
    for message in quoted:
        assert fragments(message) == [], message


@pytest.mark.parametrize("offset", [0, 5, 9, 13])
async def test_an_unknown_id_quoted_in_an_error_shows_no_part_of_a_secret(offset: int) -> None:
    memory = EpisodicMemory(InMemoryProvider())
    wanted = straddling(140, offset).replace(" ", "-")
    with pytest.raises(ConfigurationError, match="no episode with id") as raised:
        await memory.grade(wanted, outcome="success")
    assert fragments(str(raised.value)) == []


@pytest.mark.parametrize(
    ("page", "name", "limit"),
    [
        ("/", "since", 60),
        ("/", "per", 60),
        ("/playground", "intent", 40),
        ("/playground", "top_k", 60),
        ("/overview", "by", 20),
    ],
)
@pytest.mark.parametrize("offset", [0, 6, 13])
async def test_a_bad_viewer_parameter_quoted_in_its_error_shows_no_part_of_a_secret(
    page: str, name: str, limit: int, offset: int
) -> None:
    memory = EpisodicMemory(InMemoryProvider())
    app = create_app(memory, token="t" * 32, label="test")
    transport = httpx.ASGITransport(app=app)
    params = {name: straddling(limit, offset)}
    if page == "/playground":
        params["task"] = "rotate the key"
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8765") as c:
        c.cookies.set(COOKIE, "t" * 32)
        answer = await c.get(page, params=params)
    assert answer.status_code == 400, answer.text[:300]
    assert "postgres://ap" in answer.text  # the value is quoted
    assert fragments(answer.text) == []
    assert "[REDACTED:url-password" not in answer.text or "[REDACTED:url-password]" in answer.text


@pytest.mark.parametrize("offset", [0, 6, 13])
async def test_a_wrong_grades_argument_quoted_in_restores_error_shows_no_part_of_a_secret(
    offset: int,
) -> None:
    from deepcrew_episodic import InvalidEpisodeError

    memory = EpisodicMemory(InMemoryProvider())
    with pytest.raises(InvalidEpisodeError, match="grades must be a list") as raised:
        await memory.restore(Episode(query="q"), grades=straddling(80, offset))  # type: ignore[arg-type]
    assert fragments(str(raised.value)) == []
    assert await memory.load() == []
