"""Outcomes that carry information, through the command (issue 14): ``grade``, ``record`` from a
transcript (distilled over litellm's real HTTP path to the scripted server), scores in [0, 1]
with one rule, and what ``stats``, ``timeline``, ``recall`` and ``export`` show of it. In this
process through ``main(argv)``, on a JSON file, SQLite and a real redis-server."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from llm_server import Reply, ScriptedLLM

from deepcrew_episodic import Episode, EpisodicMemory
from deepcrew_episodic.cli import main
from deepcrew_episodic.providers import open_provider

STORE_VARS = ("DEEPCREW_EPISODIC_STORE", "DEEPCREW_EPISODIC_NAMESPACE")
RUN = [
    {"role": "system", "content": "You are the deploy bot."},
    {"role": "user", "content": "Deploy the api to staging"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "kubectl", "arguments": '{"cmd": "apply -f api.yaml"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "deployment.apps/api configured"},
    {"role": "assistant", "content": "Deployed: api is configured on staging."},
]


def distilled(outcome: str = "success", lesson: str = "wait for the rollout") -> Reply:
    return Reply.text(
        f"TASK: deploy the api to staging\nAPPROACH: kubectl apply\nOUTCOME: {outcome}\n"
        f"LESSON: {lesson}"
    )


@pytest.fixture(autouse=True)
def no_ambient_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in STORE_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")


class Run:
    def __init__(self, capsys: pytest.CaptureFixture[str], store: str) -> None:
        self.capsys = capsys
        self.store = store

    def __call__(self, *argv: str) -> tuple[int, str, str]:
        code = main(["--store", self.store, *argv])
        captured = self.capsys.readouterr()
        return code, captured.out, captured.err

    def ok(self, *argv: str) -> str:
        code, out, err = self(*argv)
        assert code == 0, err
        return out

    def json(self, *argv: str) -> Any:
        return json.loads(self.ok(*argv, "--json"))

    def record(self, *flags: str) -> str:
        return self.ok("record", *flags).split()[1]

    def episodes(self) -> list[dict[str, Any]]:
        code, out, err = self("timeline", "--json")
        if code == 1 and "does not exist" in err:
            return []  # a file store that nothing created
        assert code == 0, err
        return list(json.loads(out))


@pytest.fixture(params=["file", "sqlite", pytest.param("redis", marks=pytest.mark.redis)])
def run(request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> Run:
    kind = request.param
    if kind == "redis":
        store = request.getfixturevalue("clean_redis")
    else:
        store = str(tmp_path / ("episodes.json" if kind == "file" else "episodes.db"))
    return Run(capsys, store)


def one_error_line(err: str, code: int, status: int = 1) -> str:
    assert code == status, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("deepcrew-episodic: error: "), err
    return lines[0]


def library(store: str, work: Any) -> Any:
    """Run *work(memory)* with the library itself, on the same store."""

    async def go() -> Any:
        async with open_provider(store) as provider:
            return await work(await EpisodicMemory.open(provider))

    return anyio.run(go)


# --- grade ------------------------------------------------------------------------------------


def test_a_grade_is_what_every_listing_shows(run: Run) -> None:
    episode_id = run.record("-q", "Rotate the signing key", "-r", "Rotated")
    assert run.episodes()[0]["outcome"] == "unknown"

    out = run.ok("grade", episode_id, "--outcome", "success", "--note", "tests pass")
    assert out.splitlines()[0] == f"graded {episode_id}: success (verified)"
    assert out.splitlines()[1].startswith("now reads: success  Rotate the signing key  (1 grade)")

    [line] = run.ok("timeline").splitlines()
    assert " success (graded) " in line
    assert " success (graded) " in run.ok("recall", "rotate signing key", "-v").splitlines()[0]
    stats = run.json("stats")
    assert stats["by_outcome"]["success"] == 1
    assert stats["by_outcome"]["unknown"] == 0
    assert stats["grades"] == 1
    assert "grades     1" in run.ok("stats")

    [item] = run.json("timeline")
    assert item["outcome"] == "success"
    assert [(g["outcome"], g["note"], g["verified"]) for g in item["grades"]] == [
        ("success", "tests pass", True)
    ]
    grades = item.pop("grades")
    assert grades[0]["timestamp"]
    Episode.coerce(item)  # the rest is a whole episode
    # the filters read the graded outcome too
    assert [e["id"] for e in run.json("timeline", "--outcome", "success")] == [episode_id]
    assert run.json("timeline", "--outcome", "unknown") == []


def test_a_verified_outcome_beats_a_claimed_one(run: Run) -> None:
    failed = run.record("-q", "Refund order 77", "--outcome", "failure")
    out = run.ok("grade", failed, "--outcome", "success", "--claimed")
    assert out.splitlines()[0] == f"graded {failed}: success (claimed)"
    assert "now reads: failure" in out
    assert "a verified outcome outweighs this claim" in out
    assert run.json("timeline")[0]["outcome"] == "failure"
    # an outweighed claim decides nothing: no mark
    [line] = run.ok("timeline").splitlines()
    assert " failure " in line
    assert "(graded)" not in line

    out = run.ok("grade", failed, "--outcome", "success", "--note", "customer confirmed")
    assert "now reads: success" in out
    assert "outweighs" not in out
    [item] = run.json("timeline")
    assert item["outcome"] == "success"
    assert [g["verified"] for g in item["grades"]] == [False, True]

    # a claim on an unlabelled episode is only a claim
    unknown = run.record("-q", "Restart the worker")
    assert "now reads: claimed_success" in run.ok(
        "grade", unknown, "--outcome", "success", "--claimed"
    )
    # and a later claim does not undo a verified grade
    run.ok("grade", failed, "--outcome", "failure", "--claimed")
    assert run.json("timeline")[0]["outcome"] == "success"


def test_grade_takes_an_id_prefix_and_refuses_an_unknown_id(run: Run) -> None:
    episode_id = run.record("-q", "Rotate the signing key")
    code, _out, err = run("grade", "nope", "--outcome", "success")
    line = one_error_line(err, code)
    assert "no episode with id 'nope'" in line
    assert "nothing was graded" in line
    code, _out, err = run("grade", "0" * 32, "--outcome", "failure", "--json")
    one_error_line(err, code)
    assert run.json("stats")["grades"] == 0

    out = run.ok("grade", episode_id[:12], "--score", "0.2")
    assert out.splitlines()[0] == f"graded {episode_id}: failure (verified, score 0.20)"
    result = run.json("grade", episode_id[:12], "--outcome", "partial")
    assert result["id"] == episode_id
    assert result["grade"]["outcome"] == "partial"
    assert result["episode"]["outcome"] == "partial"
    assert [g["outcome"] for g in result["grades"]] == ["failure", "partial"]


def test_grade_needs_an_outcome_or_a_score(run: Run) -> None:
    episode_id = run.record("-q", "Rotate the signing key")
    code, _out, err = run("grade", episode_id)
    assert "give --outcome, --score or both" in one_error_line(err, code, 2)


# --- scores: in [0, 1], one rule -----------------------------------------------------------


@pytest.mark.parametrize("value", ["7", "-0.1", "1.01", "nan", "inf", "abc", "0x1"])
@pytest.mark.parametrize("command", ["record", "grade"])
def test_a_score_outside_0_to_1_is_a_usage_error(run: Run, command: str, value: str) -> None:
    episode_id = run.record("-q", "Rotate the signing key")
    argv = ["record", "-q", "Another run"] if command == "record" else ["grade", episode_id]
    code, _out, err = run(*argv, "--score", value)
    assert "--score" in one_error_line(err, code, 2)
    assert len(run.episodes()) == 1
    assert run.json("stats")["grades"] == 0


def test_a_transcript_score_is_checked_before_any_model_call(run: Run, tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    path.write_text("".join(json.dumps(m) + "\n" for m in RUN))
    code, _out, err = run("record", str(path), "--distill-model", "openai/x", "--score", "2")
    assert "--score" in one_error_line(err, code, 2)


@pytest.mark.parametrize(
    ("score", "outcome"),
    [("0.9", "success"), ("0.7", "success"), ("0.5", "partial"), ("0.3", "partial"), ("0.1", "failure"), ("0", "failure")],
)  # fmt: skip
def test_a_score_without_an_outcome_follows_the_one_rule(
    run: Run, score: str, outcome: str
) -> None:
    recorded = run.ok("record", "-q", "Rotate the signing key", "--score", score)
    assert recorded.endswith(f"({outcome})\n")
    episode_id = recorded.split()[1]
    assert run.ok("grade", episode_id, "--score", score).startswith(
        f"graded {episode_id}: {outcome} (verified, score "
    )
    # an outcome given with the score is kept as given
    assert run.ok("record", "-q", "x", "--score", score, "--outcome", "partial").endswith(
        "(partial)\n"
    )


# --- stats ----------------------------------------------------------------------------------


def test_stats_warns_and_shows_the_most_used(run: Run) -> None:
    ids = [run.record("-q", f"Answer ticket {n}") for n in range(10)]

    async def use(memory: EpisodicMemory) -> None:
        await memory.used([ids[3], ids[7]])
        await memory.used(ids[7])

    library(run.store, use)
    code, out, err = run("stats")
    assert code == 0
    warnings = [line for line in err.splitlines() if line.strip()]
    assert len(warnings) == 1
    assert warnings[0].startswith("deepcrew-episodic: warning: outcome signal not wired: 10 of 10")
    assert f"most used  {ids[7][:12]} 2x, {ids[3][:12]} 1x" in out
    histogram = out.split("\n\n")[-1].split()
    for outcome in ("success", "failure", "partial", "unknown", "claimed_success", "abandoned"):
        assert outcome in histogram
    code, out, err = run("stats", "--json")
    stats = json.loads(out)
    assert stats["most_used"] == [{"id": ids[7], "uses": 2}, {"id": ids[3], "uses": 1}]
    assert stats["warnings"] == [warnings[0].removeprefix("deepcrew-episodic: warning: ")]
    assert "outcome signal not wired" in err  # on stderr with --json too
    assert set(stats["by_outcome"]) == {
        "success", "failure", "partial", "unknown", "claimed_success", "abandoned"
    }  # fmt: skip

    # a real signal wired: the warning goes
    for episode_id in ids[:5]:
        run.ok("grade", episode_id, "--outcome", "success")
    code, out, err = run("stats", "--json")
    assert json.loads(out)["warnings"] == []
    assert err == ""
    assert json.loads(out)["grades"] == 5


def test_recall_shows_uses_and_one_item_per_run(run: Run, tmp_path: Path) -> None:
    loop = tmp_path / "loop.jsonl"
    loop.write_text(
        "".join(
            json.dumps(
                {
                    "query": "Write the release notes",
                    "outcome": outcome,
                    "run_id": "run-1",
                    "reflection": lesson,
                }
            )
            + "\n"
            for outcome, lesson in [
                ("failure", "list the breaking changes first"),
                ("success", None),
            ]
        )
    )
    run.ok("record", "--file", str(loop))
    latest = run.episodes()[-1]["id"]
    library(run.store, lambda memory: memory.used(latest))
    lines = run.ok("recall", "release notes", "-v").splitlines()
    assert lines[0].startswith("1. ")
    assert " success " in lines[0]
    assert not any(line.startswith("2. ") for line in lines)  # one item per run
    assert "used 1x run of 2 iterations" in lines[-1]
    [item] = run.json("recall", "release notes", "-v")
    assert (item["recall"]["uses"], item["recall"]["iterations"]) == (1, 2)
    assert len(run.episodes()) == 2  # timeline keeps both iterations


def test_abandoned_runs_are_recalled_only_when_asked_for(run: Run) -> None:
    run.record("-q", "Deploy the api", "--outcome", "abandoned")
    assert run.json("recall", "deploy api") == []
    [item] = run.json("recall", "deploy api", "--outcome", "abandoned")
    assert item["outcome"] == "abandoned"


# --- export and import --------------------------------------------------------------------


def test_an_export_carries_the_grades_and_import_restores_them(
    run: Run, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    graded = run.record("-q", "Rotate the signing key")
    run.record("-q", "Refund order 77", "--outcome", "failure")
    run.ok("grade", graded, "--outcome", "success", "--note", "verified by the on-call")
    backup = tmp_path / "backup.jsonl"
    run.ok("export", "-o", str(backup))
    lines = [json.loads(line) for line in backup.read_text().splitlines()]
    assert [len(item["grades"]) for item in lines] == [1, 0]
    assert lines[0]["grades"][0]["note"] == "verified by the on-call"
    # as recorded: the claim stays a claim in the backup, the grade travels beside it
    assert [item["outcome"] for item in lines] == ["unknown", "failure"]

    other = Run(capsys, str(tmp_path / "restored.json"))
    code, out, err = other("import", str(backup))
    assert code == 0, err
    assert out == f"imported 2 episodes from {backup}\n"
    restored = other.episodes()
    assert [e["outcome"] for e in restored] == ["success", "failure"]  # the grade applies
    assert [len(e["grades"]) for e in restored] == [1, 0]
    assert restored[0]["grades"][0] == {**lines[0]["grades"][0]}
    # A second import of the same backup adds nothing, and rewrites nothing.
    code, out, err = other("import", str(backup))
    assert (code, out) == (0, f"imported 0 episodes from {backup}, 2 already present\n")
    assert other.episodes() == restored


# --- record a transcript ----------------------------------------------------------------------


def transcript(tmp_path: Path, messages: list[dict[str, Any]], name: str = "run.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(json.dumps(m) + "\n" for m in messages))
    return path


def distill_argv(llm: ScriptedLLM, path: Path, *extra: str) -> list[str]:
    return ["record", str(path), "--distill-model", "openai/x", "--api-base", llm.base_url, *extra]


def test_a_command_that_called_the_model_leaves_no_connection_to_it_open(
    run: Run, llm: ScriptedLLM, tmp_path: Path
) -> None:
    llm.script(distilled("success"))
    assert run.ok(*distill_argv(llm, transcript(tmp_path, RUN))).startswith("recorded ")
    for _ in range(500):  # the server sees the connection close a moment later (10 s at most)
        if llm.open_connections == 0:
            break
        time.sleep(0.02)
    assert llm.open_connections == 0, "the command left its connection to the model open"


def test_a_transcript_is_distilled_into_a_claimed_episode(
    run: Run, llm: ScriptedLLM, tmp_path: Path
) -> None:
    path = transcript(tmp_path, RUN)
    llm.script(distilled("success"))
    out = run.ok(*distill_argv(llm, path, "--tag", "deploy"))
    assert out.startswith("recorded ")
    assert out.endswith("(claimed_success from judge)\n")
    [episode] = run.episodes()
    assert episode["query"] == "deploy the api to staging"
    assert episode["approach"] == "kubectl apply"
    assert episode["reflection"] == "wait for the rollout"
    assert episode["response"] == "Deployed: api is configured on staging."
    assert episode["tools_used"] == ["kubectl"]
    assert episode["tags"] == ["deploy"]
    assert episode["transcript_ref"] == str(path.resolve())
    [request] = llm.requests
    assert "deployment.apps/api configured" in request.last_user_text


def test_a_verified_outcome_overrides_the_model(run: Run, llm: ScriptedLLM, tmp_path: Path) -> None:
    path = transcript(tmp_path, RUN)
    llm.script(distilled("success"), distilled("failure"))
    assert run.ok(*distill_argv(llm, path, "--outcome", "failure")).endswith("(failure)\n")
    # a score given on the command line is a real signal too: the one rule gives its outcome
    assert run.ok(*distill_argv(llm, path, "--score", "0.8")).endswith("(success)\n")
    assert [(e["outcome"], e["score"]) for e in run.episodes()] == [
        ("failure", None),
        ("success", 0.8),
    ]


@pytest.mark.parametrize("lesson", ["NONE", "none.", '"NONE"', "NONE - nothing new"])
def test_a_none_lesson_is_stored_empty(
    run: Run, llm: ScriptedLLM, tmp_path: Path, lesson: str
) -> None:
    llm.script(distilled("partial", lesson))
    run.ok(*distill_argv(llm, transcript(tmp_path, RUN)))
    [episode] = run.episodes()
    assert episode["reflection"] is None
    assert episode["outcome"] == "partial"


@pytest.mark.parametrize(
    "messages",
    [
        [],
        [{"role": "user", "content": "Deploy the api"}],
        [RUN[0], {"role": "user", "content": "Deploy the api"}],
        [{"role": "assistant", "content": "Hello"}, {"role": "assistant", "content": "Bye"}],
    ],
)
def test_a_trivial_run_is_not_recorded(
    run: Run, llm: ScriptedLLM, tmp_path: Path, messages: list[dict[str, Any]]
) -> None:
    code, out, err = run(*distill_argv(llm, transcript(tmp_path, messages)))
    assert (code, err) == (0, "")
    assert out.startswith("not recorded: ")
    assert "trivial run" in out
    assert llm.requests == []
    assert run.episodes() == []


@pytest.mark.parametrize(
    "reply",
    [
        "I deployed it, all good!",
        "TASK: \nAPPROACH: x\nOUTCOME: success\nLESSON: y",
        "TASK: a\nOUTCOME: success\nLESSON: y",
    ],
)
def test_a_garbage_reply_stores_nothing(
    run: Run, llm: ScriptedLLM, tmp_path: Path, reply: str
) -> None:
    run.record("-q", "An earlier run")
    llm.script(Reply.text(reply))
    code, _out, err = run(*distill_argv(llm, transcript(tmp_path, RUN)))
    line = one_error_line(err, code)
    assert "run.jsonl" in line
    assert "nothing was recorded" in line
    assert [e["query"] for e in run.episodes()] == ["An earlier run"]


def test_a_model_error_stores_nothing(run: Run, llm: ScriptedLLM, tmp_path: Path) -> None:
    llm.script(Reply.error(401, "Incorrect API key provided"))
    code, _out, err = run(*distill_argv(llm, transcript(tmp_path, RUN)))
    assert "nothing was recorded" in one_error_line(err, code)
    assert run.episodes() == []


def test_a_transcript_may_be_a_json_array(run: Run, llm: ScriptedLLM, tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    path.write_text(json.dumps(RUN, indent=2))
    llm.script(distilled("failure"))
    assert run.ok(*distill_argv(llm, path)).endswith("(failure from judge)\n")
    assert run.episodes()[0]["transcript_ref"] == str(path.resolve())


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('{"role": "user", "content": "hi"}\nnot json\n', "line 2 is not JSON"),
        ('{"role": "user", "content": "hi"}\n[1, 2]\n', "line 2: not a chat message"),
        ('{"content": "no role"}\n', "line 1: not a chat message"),
        ('[{"role": "user"}, 3]', "item 2: not a chat message"),
        ("[1, 2", "not a JSON array of messages"),
    ],
)
def test_a_bad_transcript_is_named_and_nothing_is_asked(
    run: Run, llm: ScriptedLLM, tmp_path: Path, text: str, says: str
) -> None:
    path = tmp_path / "run.jsonl"
    path.write_text(text)
    code, _out, err = run(*distill_argv(llm, path))
    assert says in one_error_line(err, code)
    assert llm.requests == []
    assert run.episodes() == []


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["record", "run.jsonl"], "needs --distill-model MODEL"),
        (["record", "-q", "x", "--distill-model", "openai/x"], "--distill-model applies to a transcript"),
        (["record", "-q", "x", "--api-base", "http://h/v1"], "--api-base applies to a transcript"),
        (["record", "run.jsonl", "--distill-model", "openai/x", "-q", "x"], "give no --file, --query"),
        (["record", "run.jsonl", "--distill-model", "openai/x", "--file", "e.jsonl"], "give no --file"),
        (["record", "--file", "e.jsonl", "--outcome", "success"], "either --file or the episode's flags"),
        (["record", "run.jsonl", "--distill-model", "openai/x", "--api-base", "localhost"], "--api-base: not a URL"),
    ],
)  # fmt: skip
def test_the_record_grammar_is_unambiguous(run: Run, argv: list[str], says: str) -> None:
    code, _out, err = run(*argv)
    assert says in one_error_line(err, code, 2)
    assert run.episodes() == []


def test_a_grade_without_a_score_drops_the_recorded_one_everywhere(run: Run) -> None:
    episode_id = run.record("-q", "Rotate the signing key", "-r", "Rotated", "--score", "0.1")
    out = run.ok("grade", episode_id, "--outcome", "success")
    assert out.splitlines()[1].startswith("now reads: success  Rotate")  # no "success 0.10"
    assert "0.10" not in run.ok("timeline")
    [item] = run.json("recall", "rotate signing key")
    assert (item["outcome"], item["score"]) == ("success", None)
    [listed] = run.json("timeline")
    assert (listed["outcome"], listed["score"]) == ("success", None)
    assert "0.10" not in run.ok("recall", "rotate signing key", "-v")


def test_a_recorded_score_that_contradicts_its_outcome_is_shown_nowhere(run: Run) -> None:
    episode_id = run.record(
        "-q", "Rotate the signing key", "--outcome", "success", "--score", "0.1"
    )
    assert "0.10" not in run.ok("timeline")
    assert "0.10" not in run.ok("recall", "rotate signing key", "-v")
    assert "0.10" not in run.ok("stats")
    [item] = run.json("recall", "rotate signing key")
    assert (item["outcome"], item["score"]) == ("success", None)
    [listed] = run.json("timeline")
    assert (listed["id"], listed["outcome"], listed["score"]) == (episode_id, "success", None)
    # The backup keeps the pair as stored: restoring it changes nothing.
    (line,) = run.ok("export").splitlines()
    assert json.loads(line)["score"] == 0.1


@pytest.mark.parametrize(("outcome", "score"), [("success", "0.2"), ("failure", "0.9")])
def test_grade_refuses_an_outcome_and_a_score_that_disagree(
    run: Run, outcome: str, score: str
) -> None:
    episode_id = run.record("-q", "Rotate the signing key", "--score", "0.5")
    code, _, err = run("grade", episode_id, "--outcome", outcome, "--score", score)
    line = one_error_line(err, code)
    assert "disagree" in line
    assert "nothing was graded" in line
    assert run.json("timeline")[0]["grades"] == []


# --- outcome sources ------------------------------------------------------------------------


def test_stats_warns_when_every_success_comes_from_no_check(run: Run) -> None:
    ids = [run.record("-q", f"Answer ticket {n}", "--outcome", "success") for n in range(10)]
    code, out, err = run("stats")
    assert code == 0
    [warning] = [line for line in err.splitlines() if line.strip()]
    assert warning.startswith("deepcrew-episodic: warning: everything is success: 10 of 10")
    assert "sources    verifier 0, user 0, agent 0, judge 0, none 10" in out
    stats = run.json("stats")
    assert stats["by_source"] == {"": 10}
    assert stats["warnings"] == [warning.removeprefix("deepcrew-episodic: warning: ")]
    # One success in ten confirmed by the user: the labels carry a signal.
    run.ok("grade", ids[0], "--outcome", "success", "--source", "user")
    code, out, err = run("stats")
    assert err == ""
    assert "sources    verifier 0, user 1, agent 0, judge 0, none 9" in out


def test_record_grade_and_the_listings_show_the_source(run: Run) -> None:
    tested = run.record("-q", "Deploy the api", "--outcome", "failure", "--source", "verifier")
    claim = run.record("-q", "Deploy the api again", "--outcome", "claimed_success")
    assert run.ok("grade", claim, "--outcome", "failure", "--source", "user").startswith(
        f"graded {claim}: failure (verified by user)"
    )
    outweighed = run.ok("grade", claim, "--outcome", "success", "--claimed")
    assert "(a verified outcome outweighs this claim)" in outweighed
    timeline = run.ok("timeline")
    assert "failure (verifier)" in timeline
    assert "failure (user, graded)" in timeline
    recalled = run.ok("recall", "deploy the api")
    assert "failure (verifier)" in recalled
    by_id = {e["id"]: e for e in run.episodes()}
    assert by_id[tested]["outcome_source"] == "verifier"
    assert (by_id[claim]["outcome"], by_id[claim]["outcome_source"]) == ("failure", "user")
    assert [g["source"] for g in by_id[claim]["grades"]] == ["user", ""]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("grade", "ID", "--outcome", "success", "--claimed", "--source", "verifier"), "contra"),
        (("record", "-q", "x", "--source", "ci"), "invalid choice"),
    ],
)
def test_a_source_that_contradicts_or_is_unknown_is_refused(
    run: Run, argv: tuple[str, ...], message: str
) -> None:
    episode_id = run.record("-q", "Deploy the api")
    code, _out, err = run(*(episode_id if a == "ID" else a for a in argv))
    assert code != 0
    assert message in err
    assert [e["grades"] for e in run.episodes()] == [[]]


def test_export_and_import_keep_the_sources(run: Run, tmp_path: Path) -> None:
    judged = run.record("-q", "Deploy the api", "--outcome", "success", "--source", "judge")
    run.ok("grade", judged, "--outcome", "failure", "--source", "user")
    backup = tmp_path / "backup.jsonl"
    run.ok("export", "-o", str(backup))
    copy = Run(run.capsys, str(tmp_path / "copy.json"))
    copy.ok("import", str(backup))
    [episode] = copy.episodes()
    assert (episode["outcome"], episode["outcome_source"]) == ("failure", "user")
    assert [(g["outcome"], g["source"], g["verified"]) for g in episode["grades"]] == [
        ("failure", "user", True)
    ]
    [line] = backup.read_text().splitlines()
    assert json.loads(line)["outcome_source"] == "judge"  # as recorded
