"""Recall by meaning from the ``deepcrew-episodic`` command: ``--embedder``, ``backfill``,
``reembed``, ``recall -v``/``--json`` and ``stats``, run through the real entry point against a
JSON store and the scripted OpenAI-compatible server (``llm`` fixture), through litellm."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest
from llm_server import EmbedReply, ScriptedLLM

from deepcrew_episodic.cli import main

ENV_VARS = (
    "DEEPCREW_EPISODIC_STORE",
    "DEEPCREW_EPISODIC_NAMESPACE",
    "DEEPCREW_EPISODIC_MAX_EPISODES",
    "DEEPCREW_EPISODIC_MAX_AGE",
    "DEEPCREW_EPISODIC_EMBEDDER",
    "DEEPCREW_EPISODIC_EMBEDDER_API_BASE",
)
HASH = "openai/hash-64"
WORDLLAMA = "openai/wordllama"
EPISODES = (
    "Refund order 1182 for Acme",
    "Customer was charged twice for one purchase",
    "Deploy the api service",
    "Rotate the signing key",
)
# A number printed with more than 4 decimals: float noise such as 0.399999995668588.
NOISE = re.compile(r"\d\.\d{5,}")


@pytest.fixture(autouse=True)
def settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")


class Cli:
    """``main(argv)`` in this process on one store, with its output captured."""

    def __init__(self, store: str, capsys: pytest.CaptureFixture[str], llm: ScriptedLLM) -> None:
        self.store = store
        self.capsys = capsys
        self.llm = llm

    def __call__(self, *argv: str) -> tuple[int, str, str]:
        code = main(["--store", self.store, *argv])
        captured = self.capsys.readouterr()
        return code, captured.out, captured.err

    def embedder(self, model: str = HASH) -> list[str]:
        return ["--embedder", model, "--embedder-api-base", self.llm.base_url]

    def seed(self) -> None:
        for query in EPISODES:
            code, _, err = self("record", "-q", query, "--tag", "billing")
            assert code == 0, err


@pytest.fixture
def cli(tmp_path: Path, capsys: pytest.CaptureFixture[str], llm: ScriptedLLM) -> Cli:
    return Cli(str(tmp_path / "episodes.json"), capsys, llm)


def one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("deepcrew-episodic: error: "), err
    assert "Traceback" not in err
    return lines[0]


def stats_rows(out: str) -> dict[str, str]:
    return {line[:10].strip(): line[11:] for line in out.splitlines() if line[:1].isalpha()}


# --- backfill -----------------------------------------------------------------------------------


def test_backfill_embeds_a_log_recorded_without_an_embedder(cli: Cli) -> None:
    cli.seed()
    code, out, _ = cli("recall", "charged twice", "-v")
    assert code == 0
    assert "similarity" not in out
    code, out, err = cli("backfill", "--batch-size", "3", *cli.embedder())
    assert (code, out, err) == (0, "backfilled 4 vectors\n", "")
    # Every episode once, three texts per call.
    assert [len(call) for call in cli.llm.embedded] == [3, 1]
    assert sorted(t for call in cli.llm.embedded for t in call) == sorted(
        f"{q}\nbilling" for q in EPISODES
    )

    code, out, err = cli("recall", "customer charged twice", "-v", *cli.embedder())
    assert code == 0, err
    title, score = out.splitlines()[:2]  # (no answer or lesson line: none was recorded)
    assert "Customer was charged twice" in title
    assert re.search(r"keyword 0\.\d\d \+ meaning \d\.\d\d \(similarity 0\.\d\d\)", score)
    assert "recency 1.00" in score
    assert "outcome unknown x1" in score

    # Nothing left to do: no call at all.
    calls = len(cli.llm.embedded)
    code, out, _ = cli("backfill", "--json", *cli.embedder())
    assert (code, json.loads(out)) == (0, {"written": 0})
    assert len(cli.llm.embedded) == calls


def test_record_with_an_embedder_stores_a_vector_and_backfill_fills_the_rest(cli: Cli) -> None:
    code, _, err = cli("record", "-q", "Refund a duplicate charge", *cli.embedder())
    assert code == 0, err
    code, _, err = cli("record", "-q", "Deploy on friday")  # no embedder: no vector
    assert code == 0, err
    code, out, _ = cli("stats", *cli.embedder())
    assert stats_rows(out)["vectors"].startswith("1 of 2 episodes ('backfill' embeds the others")
    code, out, _ = cli("backfill", *cli.embedder())
    assert out == "backfilled 1 vector\n"
    code, out, _ = cli("stats", "--json", *cli.embedder())
    assert json.loads(out)["vectors"] == 2


def test_backfill_and_reembed_need_an_embedder(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    cli.seed()
    for argv in (["backfill"], ["reembed", "--yes"]):
        code, out, err = cli(*argv)
        assert (code, out) == (2, "")
        line = one_error_line(err)
        assert "--embedder MODEL" in line
        assert "DEEPCREW_EPISODIC_EMBEDDER" in line
    bad = [
        ["backfill", "--embedder-api-base", cli.llm.base_url],  # a server but no model
        ["backfill", "--embedder", " "],
        ["backfill", "--batch-size", "0", *cli.embedder()],
        ["backfill", "--batch-size", "4097", *cli.embedder()],
        ["recall", "x", "--embedder", HASH, "--embedder-api-base", "127.0.0.1:8000/v1"],
    ]
    for argv in bad:
        code, _, err = cli(*argv)
        assert code == 2, argv
        assert "--embedder" in one_error_line(err) or "--batch-size" in err
    assert cli.llm.embedded == []
    # The variables stand for the options.
    monkeypatch.setenv("DEEPCREW_EPISODIC_EMBEDDER", HASH)
    monkeypatch.setenv("DEEPCREW_EPISODIC_EMBEDDER_API_BASE", cli.llm.base_url)
    code, out, err = cli("backfill")
    assert (code, out) == (0, "backfilled 4 vectors\n"), err


def test_backfill_without_tqdm_says_how_to_install_it(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    cli.seed()
    monkeypatch.setitem(sys.modules, "tqdm", None)  # not installed
    code, out, err = cli("backfill", *cli.embedder())
    assert (code, out) == (1, "")
    assert "pip install 'deepcrew-episodic[embeddings]'" in one_error_line(err)
    assert cli.llm.embedded == []  # refused before any call


def test_backfill_shows_a_progress_bar_on_a_terminal(cli: Cli) -> None:
    cli.seed()
    leader, follower = pty.openpty()
    # A terminal 100 columns wide (a new pty has 0, where tqdm draws nothing).
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    bar = b""
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "deepcrew_episodic", "--store", cli.store, "backfill",
             "--batch-size", "2", *cli.embedder()],
            stdout=subprocess.PIPE,
            stderr=follower,
            env=dict(os.environ),
        )  # fmt: skip
        assert proc.stdout is not None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 0.2)
            if ready:
                bar += os.read(leader, 65536)
            elif proc.poll() is not None:
                break
        out = proc.communicate(timeout=10)[0].decode()
    finally:
        os.close(leader)
        os.close(follower)
    assert (proc.returncode, out) == (0, "backfilled 4 vectors\n")
    assert re.search(rb"backfill: +\d+%\|.*\| [0-4]/4 ", bar), bar


# --- a change of model --------------------------------------------------------------------------


def test_reembed_with_another_model_after_a_mismatch(cli: Cli) -> None:
    cli.seed()
    assert cli("backfill", *cli.embedder(HASH))[1] == "backfilled 4 vectors\n"
    for argv in (["recall", "charged twice"], ["backfill"]):
        code, out, err = cli(*argv, *cli.embedder(WORDLLAMA))
        assert (code, out) == (1, "")
        line = one_error_line(err)
        assert f"'{HASH}' (64 dimensions)" in line
        assert f"'{WORDLLAMA}'" in line
        assert "reembed" in line

    # Without a terminal the question is answered no: every vector stays.
    calls = len(cli.llm.embedded)
    code, out, err = cli("reembed", *cli.embedder(WORDLLAMA))
    assert code == 1
    assert "not confirmed" in one_error_line(err)
    assert len(cli.llm.embedded) == calls
    # --dry-run says what it would replace, and calls no model.
    code, out, err = cli("reembed", "--dry-run", *cli.embedder(WORDLLAMA))
    assert (code, out) == (0, "")
    assert "embedding all 4 episodes" in err
    assert "dry run" in err
    assert len(cli.llm.embedded) == calls
    assert stats_rows(cli("stats", *cli.embedder(HASH))[1])["vectors"] == "4 of 4 episodes"

    code, out, err = cli("reembed", "--yes", "--batch-size", "3", *cli.embedder(WORDLLAMA))
    assert (code, out) == (0, "reembedded 4 vectors\n"), err
    rows = stats_rows(cli("stats", *cli.embedder(WORDLLAMA))[1])
    assert rows["vectors"] == "4 of 4 episodes"
    assert rows["embedder"] == f"{WORDLLAMA} (256 dimensions)"
    code, out, err = cli(
        "recall", "customer charged twice", "--json", "-v", *cli.embedder(WORDLLAMA)
    )
    assert code == 0, err
    assert json.loads(out)[0]["recall"]["ranking"] == "hybrid"
    # The old model's vectors are gone for it too: told, not mixed.
    code, _, err = cli("recall", "charged twice", *cli.embedder(HASH))
    assert code == 1
    assert f"'{WORDLLAMA}' (256 dimensions)" in one_error_line(err)
    # reembed --json
    code, out, _ = cli("reembed", "--yes", "--json", *cli.embedder(HASH))
    assert (code, json.loads(out)) == (0, {"written": 4})


def test_a_failed_backfill_keeps_what_it_wrote_and_names_the_embedder(cli: Cli) -> None:
    cli.seed()
    # The first batch is embedded; the second fails on every attempt (litellm tries 3 times).
    cli.llm.script_embeddings(EmbedReply.real(), *[EmbedReply.error(500, "model overloaded")] * 3)
    code, out, err = cli("backfill", "--batch-size", "2", *cli.embedder())
    assert (code, out) == (1, "")
    line = one_error_line(err)
    assert f"embedder '{HASH}' failed (backfill)" in line
    assert "model overloaded" in line
    assert "2 vectors written before it are kept" in line
    code, out, _ = cli("backfill", *cli.embedder())
    assert out == "backfilled 2 vectors\n"


# --- recall -------------------------------------------------------------------------------------


def test_recall_json_carries_both_parts_rounded(cli: Cli) -> None:
    cli.seed()
    code, out, err = cli("recall", "refund order charged", "--json", "-v")
    assert code == 0, err
    keywords = [item["recall"] for item in json.loads(out)]
    assert keywords
    assert not NOISE.search(out)
    for parts in keywords:
        assert parts["ranking"] == "keywords"
        assert parts["embedder_error"] is None
        assert parts["similarity"] is None
        assert parts["meaning"] is None
        assert parts["keyword"] == parts["relevance"]

    cli("backfill", *cli.embedder())
    code, out, err = cli("recall", "customer charged twice", "--json", "-v", *cli.embedder())
    assert code == 0, err
    assert not NOISE.search(out)
    items = json.loads(out)
    assert items[0]["query"] == "Customer was charged twice for one purchase"
    for item in items:
        parts = item["recall"]
        assert parts["ranking"] == "hybrid"
        assert parts["embedder_error"] is None
        assert isinstance(parts["similarity"], float)
        assert isinstance(parts["meaning"], float)
        for name in ("score", "relevance", "keyword", "similarity", "meaning", "recency"):
            assert parts[name] == round(parts[name], 4), name
        # relevance = keyword + meaning * (1 - keyword), to the 4 decimals shown
        expected = parts["keyword"] + parts["meaning"] * (1 - parts["keyword"])
        assert abs(parts["relevance"] - expected) < 1e-3
    # Without -v: episodes exactly as before.
    code, out, _ = cli("recall", "customer charged twice", "--json", *cli.embedder())
    assert "recall" not in json.loads(out)[0]


def test_the_fallback_warns_once_and_still_answers(cli: Cli) -> None:
    cli.seed()
    cli("backfill", *cli.embedder())
    cli.llm.embed_fallback = EmbedReply.error(500, "model overloaded")
    code, out, err = cli("recall", "charged twice", "-v", *cli.embedder())
    assert code == 0
    assert "Customer was charged twice" in out.splitlines()[0]
    assert "similarity" not in out  # ranked by keywords
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("deepcrew-episodic: warning: ")
    assert "keywords only" in lines[0]
    assert "model overloaded" in lines[0]
    assert "Traceback" not in err

    code, out, _ = cli("recall", "charged twice", "-v", "--json", *cli.embedder())
    parts = json.loads(out)[0]["recall"]
    assert parts["ranking"] == "keywords-fallback"
    assert "model overloaded" in parts["embedder_error"]
    assert "Traceback" not in parts["embedder_error"]


# --- stats --------------------------------------------------------------------------------------


def test_stats_shows_the_vectors_and_the_embedder(cli: Cli) -> None:
    cli.seed()
    _code, out, _ = cli("stats")
    assert "vectors" not in stats_rows(out)
    assert "embedder" not in stats_rows(out)
    data = json.loads(cli("stats", "--json")[1])
    assert (data["vectors"], data["embedder"]) == (None, None)
    rows = stats_rows(cli("stats", *cli.embedder())[1])
    assert rows["vectors"].startswith("0 of 4 episodes ('backfill' embeds the others")
    assert rows["embedder"] == "none yet"

    cli("backfill", *cli.embedder())
    rows = stats_rows(cli("stats", *cli.embedder())[1])
    assert (rows["vectors"], rows["embedder"]) == ("4 of 4 episodes", f"{HASH} (64 dimensions)")
    data = json.loads(cli("stats", "--json", *cli.embedder())[1])
    assert (data["vectors"], data["embedder"]) == (4, f"{HASH} (64 dimensions)")
    # Without --embedder the log's model is still named; its vectors cannot be counted.
    rows = stats_rows(cli("stats")[1])
    assert rows["embedder"] == f"{HASH} (64 dimensions)"
    assert rows["vectors"].startswith("not counted")
    data = json.loads(cli("stats", "--json")[1])
    assert (data["vectors"], data["embedder"]) == (None, f"{HASH} (64 dimensions)")
    # Another model: not counted, and said why.
    rows = stats_rows(cli("stats", *cli.embedder(WORDLLAMA))[1])
    assert "another embedder's" in rows["vectors"]
    assert "reembed" in rows["vectors"]
    assert len(cli.llm.embedded) == 1  # the backfill's one call: stats never embeds


# --- secrets ------------------------------------------------------------------------------------


def test_a_password_in_the_api_base_is_never_printed(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    password = "S3cretPw"
    with_password = cli.llm.base_url.replace("http://", f"http://bob:{password}@")
    # Stored text holding the password (a pasted configuration) is scrubbed from every listing.
    code, _, err = cli("record", "-q", f"cannot reach refunds with {password} today")
    assert code == 0, err
    outputs = []
    given = ["--embedder", HASH, "--embedder-api-base", with_password]
    for argv in (
        ["recall", "reach refunds", "-v", *given],
        ["recall", "reach refunds", "-v", "--json", *given],
        ["backfill", *given],
        ["reembed", "--yes", *given],
        ["stats", *given],
        ["timeline", *given],
        ["recall", "x", "-k", "nope", *given],  # argparse's own error
    ):
        code, out, err = cli(*argv)
        outputs.append(out + err)
    # A password that makes the URL ambiguous is refused, and not echoed.
    code, out, err = cli("recall", "x", "--embedder", HASH, "--embedder-api-base",
                         f"http://bob:{password}#x@127.0.0.1:1/v1")  # fmt: skip
    assert code == 2
    assert "ambiguous" in one_error_line(err)
    outputs.append(out + err)
    # The variable's secret is known as well.
    monkeypatch.setenv("DEEPCREW_EPISODIC_EMBEDDER_API_BASE", with_password)
    for argv in (["recall", "reach refunds", "--json"], ["timeline", "--json"], ["timeline"]):
        code, out, err = cli(*argv)
        assert code == 0, err
        assert "refunds with *** today" in out
        outputs.append(out + err)
    for text in outputs:
        assert password not in text
        assert "S3cret" not in text


def test_an_embedder_command_reads_no_price_list_from_the_network(cli: Cli) -> None:
    # litellm fetches its price list on import unless LITELLM_LOCAL_MODEL_COST_MAP is set:
    # offline, seconds of retries and warning lines on stderr. The command sets it.
    cli.seed()
    env = {k: v for k, v in os.environ.items() if k != "LITELLM_LOCAL_MODEL_COST_MAP"}
    done = subprocess.run(
        [sys.executable, "-m", "deepcrew_episodic", "--store", cli.store, "recall",
         "charged twice", "--json", "-v", *cli.embedder()],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert (done.returncode, done.stderr) == (0, "")
    assert json.loads(done.stdout)[0]["recall"]["ranking"] == "hybrid"
