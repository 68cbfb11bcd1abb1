"""Recall: terms, the stemmer, the score, the index and ``EpisodicMemory.recall``/``explain``."""

from __future__ import annotations

import math
import random
import time
from datetime import UTC, datetime, timedelta

import pytest

from deepcrew_episodic import ConfigurationError, Episode, EpisodicMemory, Scored
from deepcrew_episodic._episode import now_iso
from deepcrew_episodic._recall import (
    LENGTH_CAP,
    OUTCOME_WEIGHTS,
    RECENCY_WEIGHT,
    RecallIndex,
    episode_terms,
    fold,
    outcome_weight,
    relevance,
    stem,
    terms,
)
from deepcrew_episodic.providers import InMemoryProvider

DAY = 86400.0
NOW = 1_780_000_000.0  # a fixed "now" for index-level tests


def at(days_ago: float, now: float = NOW) -> str:
    return now_iso(now - days_ago * DAY)


def ep(query: str, days_ago: float = 0.0, now: float = NOW, **fields: object) -> Episode:
    return Episode(query=query, timestamp=at(days_ago, now), **fields)  # type: ignore[arg-type]


# --- morphology: what the stemmer promises ----------------------------------------------------

# Every word of a family must reduce to the same stem.
FAMILIES = [
    ("deploy", "deploys", "deployed", "deploying", "deployment", "deployments"),
    ("refund", "refunds", "refunded", "refunding", "refundable"),
    ("configure", "configures", "configured", "configuring", "configuration", "configurations"),
    ("rotate", "rotates", "rotated", "rotating", "rotation", "rotations"),
    ("migrate", "migrated", "migrating", "migration", "migrations"),
    ("install", "installs", "installed", "installing", "installation", "installer"),
    ("cancel", "cancels", "cancelled", "canceled", "cancelling", "cancellation"),
    ("retry", "retries", "retried", "retrying"),
    ("charge", "charges", "charged", "charging"),
    ("invoice", "invoices", "invoiced", "invoicing"),
    ("fail", "fails", "failed", "failing"),
    ("failure", "failures"),
    ("connect", "connects", "connected", "connecting", "connection", "connections"),
    ("authenticate", "authenticated", "authenticating", "authentication"),
    ("authorize", "authorized", "authorization"),
    ("encrypt", "encrypted", "encrypting", "encryption"),
    ("notify", "notifies", "notified", "notification", "notifications"),
    ("verify", "verified", "verifying", "verification"),
    ("duplicate", "duplicates", "duplicated", "duplication"),
    ("expire", "expires", "expired", "expiration"),
    ("update", "updates", "updated", "updating"),
    ("upgrade", "upgrades", "upgraded", "upgrading"),
    ("scale", "scales", "scaled", "scaling"),
    ("cache", "caches", "cached", "caching"),
    ("crash", "crashes", "crashed", "crashing"),
    ("throttle", "throttled", "throttling"),
    ("restart", "restarts", "restarted", "restarting"),
    ("timeout", "timeouts"),
    ("key", "keys"),
    ("query", "queries", "queried"),
    ("policy", "policies"),
    ("status", "statuses"),
    ("process", "processes", "processed", "processing"),
    ("log", "logs", "logged", "logging"),
    ("debug", "debugged", "debugging"),
    ("stop", "stops", "stopped", "stopping"),
    ("delay", "delays", "delayed"),
    ("renew", "renews", "renewed", "renewal"),
    ("delete", "deletes", "deleted", "deleting", "deletion"),
    ("embedding", "embeddings", "embedded"),
    ("user", "users"),
    ("order", "orders"),
    # French and German plurals that the English rules happen to fold
    ("facture", "factures", "facturation"),
    ("remboursement", "rembourser", "remboursements"),
]

# Words that must stay apart: different meanings that a careless stemmer would merge.
APART = [
    ("server", "serve"),
    ("port", "portal"),
    ("bill", "billion"),
    ("general", "gender"),
    ("deploy", "deplete"),
    ("invoice", "voice"),
    ("status", "stats"),
    ("wifi", "wife"),
    ("gas", "gap"),
]


# Words a naive "strip the s / strip -ing" rule would damage.
KEPT_WHOLE = ["status", "gas", "bus", "focus", "string", "thing", "access", "wifi", "dns"]


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f[0])
def test_stemmer_conflates_each_family(family: tuple[str, ...]) -> None:
    stems = {w: stem(w) for w in family}
    assert len(set(stems.values())) == 1, stems


@pytest.mark.parametrize(("a", "b"), APART)
def test_stemmer_keeps_different_words_apart(a: str, b: str) -> None:
    assert stem(a) != stem(b)


@pytest.mark.parametrize("word", KEPT_WHOLE)
def test_stemmer_keeps_words_that_only_look_inflected(word: str) -> None:
    assert stem(word) == word


def test_stemmer_leaves_short_words_digits_and_scripts_it_has_no_stemmer_for_alone() -> None:
    for word in ("ci", "db", "s3", "ec2", "x86", "1182", "http2", "部署", "ทดสอบ", "테스트"):
        assert stem(word) == word


@pytest.mark.parametrize(
    "family",
    [
        ("ошибки", "ошибка", "ошибку"),  # Russian: errors / error (nominative, accusative)
        ("платежи", "платеж", "платежа"),  # payments / payment
        ("πληρωμές", "πληρωμή"),  # Greek: payments / payment (accents folded)
    ],
    ids=lambda f: f[0],
)
def test_other_scripts_are_stemmed_by_their_own_language(family: tuple[str, ...]) -> None:
    assert len({stem(w) for w in (fold(x) for x in family)}) == 1, family
    assert len({frozenset(terms(w)) for w in family}) == 1


def test_families_meet_through_terms() -> None:
    # the whole pipeline, not just stem(): case, punctuation and plurals together
    assert terms("DEPLOYING the api-gateway") == terms("api gateway deployments")
    assert terms("Refunds for orders") == terms("refund order")


# --- terms --------------------------------------------------------------------------------------


def test_terms_fold_case_and_accents() -> None:
    assert terms("Rückerstattung") == terms("RUCKERSTATTUNG") == {"ruckerstattung"}
    assert terms("Straße") == {"strass"}
    assert terms("Échéance dépassée") == terms("echeance depassee")
    assert terms("Ærø Œuvre Łódź") == terms("aero oeuvre lodz")


def test_terms_split_on_punctuation_hyphens_underscores_and_apostrophes() -> None:
    assert (
        terms("api-gateway") == terms("api_gateway") == terms("api.gateway") == {"api", "gateway"}
    )
    assert terms("l'abonnement d'essai") == {stem("abonnement"), "essai"}
    assert terms("user@example.com/v2?x=1") >= {"user", "exampl", "com", "v2"}


def test_terms_drop_stopwords_in_english_german_and_french() -> None:
    assert terms("what is the status of my order") == {"status", "order"}
    assert terms("Wie ist der Status meiner Bestellung") == {"status", "meiner", "bestellung"}
    assert terms("Quel est le statut de la commande") == {"quel", "statut", "command"}
    assert terms("the a an of to and") == set()
    assert terms("") == set()


def test_terms_keep_numbers_and_drop_single_characters() -> None:
    assert terms("error 502 on node 7 x") == {"error", "502", "node"}


def test_terms_split_line_separators_and_other_unicode_whitespace() -> None:
    assert terms("deploy\u2028rollback\u00a0canary\tnow\r\nok") == {"deploy", "rollback", "canari"}


def test_cjk_is_matched_by_bigrams() -> None:
    assert terms("部署服务失败") == {"部署", "署服", "服务", "务失", "失败"}
    assert terms("服务失败") <= terms("部署服务失败")
    assert terms("退款 钱") == {"退款", "钱"}  # a single Han character is a word
    assert terms("デプロイ") & terms("デプロイが失敗")


def test_marks_in_other_scripts_do_not_split_words() -> None:
    # Devanagari vowel signs are combining marks: the word must stay one term
    assert len(terms("परिनियोजन")) == 1
    assert terms("परिनियोजन विफल") & terms("परिनियोजन")


def test_episode_terms_cover_the_chosen_fields_only() -> None:
    episode = Episode(
        query="Rotate the API key",
        response="Done via the vault CLI",
        tags=["security", "billing-api"],
        reflection="Keep two live keys during rotation",
        tools_used=["vault"],
    )
    default = episode_terms(episode, ("query", "tags", "reflection"))
    assert {"rotat", "key", "secur", "bill", "live"} <= default
    assert "vault" not in default
    assert "cli" not in default
    assert "vault" in episode_terms(episode, ("response",))
    assert episode_terms(episode, ("tools_used",)) == {"vault"}


# --- the score ----------------------------------------------------------------------------------


def test_relevance_is_jaccard_below_the_cap() -> None:
    q, e = {"a", "b", "c"}, {"b", "c", "d", "e"}
    jaccard = len(q & e) / len(q | e)
    assert relevance(2, 3, 4, LENGTH_CAP) == pytest.approx(jaccard)
    assert relevance(2, 3, 4, None) == pytest.approx(jaccard)
    assert relevance(0, 3, 4, LENGTH_CAP) == 0.0


def test_relevance_caps_the_episode_side() -> None:
    # a 40-term episode matching all 3 query terms counts as a 12-term one
    assert relevance(3, 3, 40, 12) == pytest.approx(3 / 12)
    assert relevance(3, 3, 40, None) == pytest.approx(3 / 40)
    # never above 1, even when more than the cap matches
    assert relevance(20, 20, 40, 12) == 1.0


def index_of(*episodes: Episode, **options: object) -> RecallIndex:
    index = RecallIndex(**options)  # type: ignore[arg-type]
    for seq, episode in enumerate(episodes, start=1):
        index.add(seq, episode)
    return index


def queries_of(found: list[tuple[int, Scored]]) -> list[str]:
    return [s.episode.query for _, s in found]


def test_old_but_unique_match_beats_fresh_unrelated_episodes() -> None:
    fax = ep("configure the fax gateway", days_ago=900, reflection="It listens on port 8081.")
    fresh = [ep(f"unrelated task {i}: summarise the weekly report", days_ago=0) for i in range(20)]
    index = index_of(fax, *fresh)
    found = index.search("configure the fax gateway", 3, now=NOW)
    assert queries_of(found) == ["configure the fax gateway"]  # zero overlap: not returned
    assert found[0][1].recency < 1e-8
    assert found[0][1].score == pytest.approx(found[0][1].relevance * (1 - RECENCY_WEIGHT), 1e-6)


def test_old_exact_match_beats_fresh_partial_match() -> None:
    index = index_of(
        ep("configure the fax gateway", days_ago=900),
        ep("configure the VPN", days_ago=0),
        ep("fax machine out of paper", days_ago=0),
    )
    found = index.search("configure the fax gateway", 3, now=NOW)
    assert queries_of(found)[0] == "configure the fax gateway"


def test_recency_breaks_ties_from_the_timestamp_not_the_log_position() -> None:
    # recorded newest first: the log position would say the old one is newer
    new = ep("deploy the api", days_ago=1, reflection="use staging first")
    old = ep("deploy the api", days_ago=200, reflection="use staging first")
    index = index_of(new, old)
    found = index.search("deploy the api", 2, now=NOW)
    assert [s.episode.timestamp for _, s in found] == [new.timestamp, old.timestamp]
    assert found[0][1].relevance == found[1][1].relevance
    assert found[0][1].score > found[1][1].score


def test_exact_ties_go_to_the_newest_record() -> None:
    same = "2026-01-01T00:00:00Z"
    index = index_of(*(Episode(query="rotate the key", timestamp=same) for _ in range(3)))
    assert [seq for seq, _ in index.search("rotate key", 3, now=NOW)] == [3, 2, 1]


def test_undated_episodes_rank_at_the_floor() -> None:
    index = index_of(Episode(query="reset the password"), ep("reset the password", days_ago=5))
    found = index.search("password reset", 2, now=NOW)
    assert [seq for seq, _ in found] == [2, 1]
    assert found[1][1].age_days is None
    assert found[1][1].score == pytest.approx(1 - RECENCY_WEIGHT)


def test_a_long_lesson_does_not_bury_an_exact_match() -> None:
    lesson = (
        "The fax gateway listens on port 8081 behind the legacy firewall; the vendor portal "
        "needs the static egress address, the TLS certificate from the old keystore and a "
        "restart of the spooler after every change, otherwise queued documents are lost."
    )
    target = ep("configure the fax gateway", days_ago=30, reflection=lesson)
    other = ep("configure the VPN client", days_ago=0)
    assert len(episode_terms(target, ("query", "tags", "reflection"))) > 3 * LENGTH_CAP // 2
    capped = index_of(target, other).search("configure the fax gateway", 2, now=NOW)
    assert queries_of(capped)[0] == "configure the fax gateway"
    # plain Jaccard (no cap) lets the long lesson dilute the match: the reason for the cap
    plain = index_of(target, other, length_cap=None).search("configure the fax gateway", 2, now=NOW)
    assert queries_of(plain)[0] == "configure the VPN client"


def test_the_more_specific_short_episode_wins() -> None:
    index = index_of(
        ep("refund a duplicate charge for an EU customer paying by card via Stripe", days_ago=1),
        ep("refund a duplicate charge", days_ago=1),
    )
    found = index.search("refund the duplicate charge", 2, now=NOW)
    assert queries_of(found)[0] == "refund a duplicate charge"


def test_tags_count_as_terms() -> None:
    index = index_of(ep("Customer asked about last month", tags=["invoice", "vat"]))
    found = index.search("VAT invoices", 1, now=NOW)
    assert len(found) == 1
    assert found[0][1].matched == ("invoic", "vat")


def test_a_query_of_stopwords_only_recalls_nothing() -> None:
    index = index_of(ep("what is this"), ep("deploy the api"))
    assert index.search("what is the", 3, now=NOW) == []
    assert index.search("", 3, now=NOW) == []


@pytest.mark.parametrize(
    ("intent", "first"),
    [("what_failed", "failure"), ("what_worked", "success"), ("any", "success")],
)
def test_intent_reorders_equally_relevant_episodes_whatever_their_age(
    intent: str, first: str
) -> None:
    # the success is fresh, the failure 3 years old: only the intent can put the failure first
    index = index_of(
        ep("migrate the orders schema", days_ago=1100, outcome="failure", reflection="locks"),
        ep("migrate the orders schema", days_ago=0, outcome="success", reflection="fast"),
    )
    found = index.search("migrate orders schema", 2, now=NOW, intent=intent)
    assert next(s.episode.outcome for _, s in found) == first
    assert found[0][1].outcome_weight == OUTCOME_WEIGHTS[intent][first]


def test_intent_does_not_let_an_unrelated_episode_in() -> None:
    index = index_of(ep("rotate the api key", outcome="failure"), ep("migrate the schema"))
    found = index.search("migrate schema", 3, now=NOW, intent="what_failed")
    assert queries_of(found) == ["migrate the schema"]


def test_since_and_accept_narrow_the_candidates() -> None:
    index = index_of(
        ep("restart the worker", days_ago=40),
        ep("restart the worker pool", days_ago=2),
        Episode(query="restart the worker"),  # undated: excluded by since
        ep("restart the worker queue", days_ago=1, outcome="failure"),
    )
    found = index.search("restart worker", 5, now=NOW, since=NOW - 10 * DAY)
    assert sorted(seq for seq, _ in found) == [2, 4]
    asked: list[int] = []

    def only_failures(seq: int) -> bool:
        asked.append(seq)
        return index.episode(seq).outcome == "failure"

    found = index.search("restart worker", 5, now=NOW, accept=only_failures)
    assert [seq for seq, _ in found] == [4]
    assert set(asked) == {1, 2, 3, 4}


def test_accept_is_asked_lazily() -> None:
    # 500 episodes share the query's term; the top 3 need only a few of them checked
    index = index_of(*(ep(f"deploy service {i}", days_ago=i / 10) for i in range(500)))
    asked: list[int] = []

    def accept(seq: int) -> bool:
        asked.append(seq)
        return True

    found = index.search("deploy", 3, now=NOW, accept=accept)
    assert len(found) == 3
    assert len(asked) < 20


def test_explanations_say_why() -> None:
    index = index_of(ep("Refund order 1182", days_ago=3, outcome="success", tags=["billing"]))
    [(_, hit)] = index.search("how do I refund an order?", 3, now=NOW, intent="what_worked")
    assert hit.matched == ("order", "refund")
    assert hit.age_days == pytest.approx(3.0)
    assert hit.recency == pytest.approx(0.5 ** (3 / 30))
    why = hit.why()
    assert "matched order, refund" in why
    assert "age 3d" in why
    assert "outcome=success x1" in why


def test_index_follows_adds_replacements_and_removals() -> None:
    index = index_of(ep("rotate the api key"), ep("deploy the api"))
    assert len(index) == 2
    index.add(1, ep("migrate the schema"))  # the same seq again replaces it
    assert queries_of(index.search("rotate key", 3, now=NOW)) == []
    assert queries_of(index.search("migrate", 3, now=NOW)) == ["migrate the schema"]
    index.remove(2)
    index.remove(99)  # unknown: nothing to do
    assert index.search("api", 3, now=NOW) == []
    assert 2 not in index
    assert 1 in index
    index.reset()
    assert len(index) == 0
    assert index.search("migrate", 3, now=NOW) == []


def test_bad_index_options_are_rejected() -> None:
    for fields in ((), ("query", "nope"), "query"):
        with pytest.raises(ValueError, match="recall fields"):
            RecallIndex(fields)
    with pytest.raises(ValueError, match="length_cap"):
        RecallIndex(length_cap=0)
    with pytest.raises(ValueError, match="recency_weight"):
        RecallIndex(recency_weight=1.5)


# --- the pruned search returns exactly the brute-force top k ------------------------------------

VOCABULARY = [
    "deploy",
    "refund",
    "invoice",
    "customer",
    "charge",
    "api",
    "key",
    "rotate",
    "gateway",
    "timeout",
    "schema",
    "migrate",
    "worker",
    "queue",
    "redis",
    "postgres",
    "billing",
    "stripe",
    "webhook",
    "cache",
    "nginx",
    "certificate",
    "dns",
    "backup",
    "restore",
    "export",
    "report",
    "dashboard",
    "login",
    "password",
    "token",
    "quota",
    "latency",
]


def brute_force(
    index: RecallIndex,
    episodes: dict[int, Episode],
    query: str,
    k: int,
    *,
    intent: str,
    since: float | None,
    cap: int | None,
) -> list[tuple[int, float]]:
    q = terms(query)
    ranked = []
    for seq, episode in episodes.items():
        e = episode_terms(episode, index.fields)
        m = len(q & e)
        if not m:
            continue
        when = episode.time()
        if since is not None and (when is None or when < since):
            continue
        size = len(e) if cap is None else max(m, min(len(e), cap))
        rel = m / (len(q) + size - m)
        f = 1 - RECENCY_WEIGHT
        if when is not None:
            f += RECENCY_WEIGHT * 0.5 ** (max(0.0, NOW - when) / DAY / 30.0)
        score = rel * f * outcome_weight(intent, episode)
        ranked.append((score, -math.inf if when is None else when, seq))
    ranked.sort(reverse=True)
    return [(seq, score) for score, _, seq in ranked[:k]]


@pytest.mark.parametrize("seed", range(12))
def test_pruned_search_equals_brute_force(seed: int) -> None:
    rng = random.Random(seed)
    cap = rng.choice([LENGTH_CAP, 3, None])
    index = RecallIndex(length_cap=cap)
    episodes: dict[int, Episode] = {}
    outcomes = ["success", "failure", "partial", "unknown", "claimed_success"]
    sources = ["", "verifier", "user", "agent", "judge"]
    for seq in range(1, 400):
        words = rng.sample(VOCABULARY, rng.randint(1, 9))
        lesson = " ".join(rng.sample(VOCABULARY, rng.randint(0, 14)))
        stamp = "" if rng.random() < 0.05 else at(rng.choice([0, 1, 5, 30, 400, 900]) + seq / 1000)
        episode = Episode(
            query=" ".join(words),
            reflection=lesson or None,
            outcome=rng.choice(outcomes),  # type: ignore[arg-type]
            tags=rng.sample(VOCABULARY, rng.randint(0, 2)),
            timestamp=stamp,
            outcome_source=rng.choice(sources),
        )
        episodes[seq] = episode
        index.add(seq, episode)
    for seq in rng.sample(sorted(episodes), 60):  # ring evictions and forgets
        index.remove(seq)
        del episodes[seq]
    for _ in range(40):
        query = " ".join(rng.sample(VOCABULARY, rng.randint(1, 6)))
        k = rng.choice([1, 3, 10])
        intent = rng.choice(["any", "what_failed", "what_worked"])
        since = rng.choice([None, NOW - 31 * DAY])
        got = [
            (seq, s.score) for seq, s in index.search(query, k, now=NOW, intent=intent, since=since)
        ]
        want = brute_force(index, episodes, query, k, intent=intent, since=since, cap=cap)
        assert len(got) == len(want)
        for (g_seq, g_score), (w_seq, w_score) in zip(got, want, strict=True):
            assert g_score == pytest.approx(w_score, rel=1e-9), (query, got, want)
            if g_seq != w_seq:  # only a floating-point tie may swap two episodes
                assert episodes[g_seq].time() == episodes[w_seq].time()


# --- EpisodicMemory.recall / explain --------------------------------------------------------------


async def memory_with(*episodes: Episode, **options: object) -> EpisodicMemory:
    memory = EpisodicMemory(InMemoryProvider(), max_episodes=1000, **options)  # type: ignore[arg-type]
    for episode in episodes:
        await memory.record(episode)
    return memory


def live(query: str, days_ago: float = 0.0, **fields: object) -> Episode:
    return ep(query, days_ago=days_ago, now=time.time(), **fields)


@pytest.mark.anyio
async def test_recall_old_fax_gateway_through_the_memory() -> None:
    memory = await memory_with(
        live("configure the fax gateway", days_ago=900, reflection="port 8081"),
        *(live(f"unrelated task {i}") for i in range(20)),
    )
    found = await memory.recall("configure the fax gateway", top_k=1)
    assert [e.query for e in found] == ["configure the fax gateway"]
    assert await memory.recall("quarterly tax filing") == []


@pytest.mark.anyio
async def test_response_is_not_matched_unless_configured() -> None:
    episode = live("Customer cannot log in", response="Cleared the SAML session cookie in Okta")
    default = await memory_with(episode)
    assert await default.recall("okta saml cookie") == []
    wider = await memory_with(episode, recall_fields=("query", "response"))
    assert [e.query for e in await wider.recall("okta saml cookie")] == ["Customer cannot log in"]


@pytest.mark.anyio
async def test_recall_filters_narrow_the_candidates() -> None:
    memory = await memory_with(
        live("refund order 1", days_ago=60, outcome="success", tags=["Billing"]),
        live("refund order 2", days_ago=3, outcome="failure", tags=["billing", "eu"]),
        live("refund order 3", days_ago=1, outcome="partial", tags=["support"]),
        live("refund order 4", outcome="success"),
    )

    async def numbers(**filters: object) -> set[int]:
        found = await memory.recall("refund order", top_k=10, **filters)  # type: ignore[arg-type]
        return {int(e.query.split()[-1]) for e in found}

    assert await numbers() == {1, 2, 3, 4}
    assert await numbers(tags=["billing"]) == {1, 2}  # tags compare case-insensitively
    assert await numbers(tags={"EU", "support"}) == {2, 3}
    assert await numbers(outcome="success") == {1, 4}
    assert await numbers(outcome=["failure", "partial"]) == {2, 3}
    for since in (
        timedelta(days=7),
        datetime.now(UTC) - timedelta(days=7),
        time.time() - 7 * DAY,
        (datetime.now(UTC) - timedelta(days=7)).isoformat(),
    ):
        assert await numbers(since=since) == {2, 3, 4}
    assert await numbers(since=timedelta(days=30), outcome="success") == {4}
    assert await numbers(tags=["billing"], outcome="success", since=timedelta(days=7)) == set()


@pytest.mark.anyio
async def test_recall_intent_through_the_memory() -> None:
    memory = await memory_with(
        live("deploy the search service", days_ago=400, outcome="failure"),
        live("deploy the search service", days_ago=1, outcome="success"),
        live("deploy the search service", days_ago=2, outcome="unknown"),
    )
    q = "deploying search service"
    assert (await memory.recall(q, top_k=1))[0].outcome == "success"
    assert (await memory.recall(q, top_k=1, intent="what_failed"))[0].outcome == "failure"
    worked = await memory.recall(q, intent="what_worked")
    assert [e.outcome for e in worked] == ["success", "unknown", "failure"]


@pytest.mark.anyio
async def test_recall_default_and_explicit_top_k() -> None:
    memory = await memory_with(*(live(f"rotate key {i}", days_ago=i) for i in range(6)))
    assert len(await memory.recall("rotate key")) == 3  # recall_k
    assert len(await memory.recall("rotate key", 5)) == 5
    assert await memory.recall("rotate key", top_k=0) == []
    newest_first = [e.query for e in await memory.recall("rotate key", top_k=6)]
    assert newest_first == [f"rotate key {i}" for i in range(6)]


@pytest.mark.anyio
async def test_explain_gives_scores_and_reasons_in_recall_order() -> None:
    memory = await memory_with(
        live("Refund a duplicate charge", days_ago=10, outcome="success", tags=["billing"]),
        live("Refund order 1182", days_ago=1, outcome="failure"),
    )
    hits = await memory.explain("refund the duplicate charge", intent="what_failed")
    assert [h.episode.query for h in hits] == [
        e.query for e in await memory.recall("refund the duplicate charge", intent="what_failed")
    ]
    assert hits[0].score >= hits[1].score
    assert hits[0].matched == ("charg", "duplic", "refund")
    assert "matched charg, duplic, refund" in hits[0].why()
    assert "outcome=success x0.4" in hits[0].why()


@pytest.mark.anyio
async def test_expired_episodes_are_never_recalled() -> None:
    kept = live("reset the vpn token", days_ago=2)
    memory = await memory_with(
        live("reset the vpn token", days_ago=100),  # older than max_age
        live("reset the vpn token", forget_after=now_iso(time.time() - 1)),  # past its date
        kept,
        max_age=timedelta(days=30),
    )
    found = await memory.recall("vpn token", top_k=10)
    assert [e.timestamp for e in found] == [kept.timestamp]


@pytest.mark.anyio
async def test_an_episode_recorded_elsewhere_is_found_on_the_next_recall() -> None:
    provider = InMemoryProvider()
    reader = EpisodicMemory(provider, namespace="shared")
    writer = EpisodicMemory(provider, namespace="shared")
    assert await reader.recall("rotate the signing key") == []
    await writer.record(live("Rotate the JWT signing key"))
    assert [e.query for e in await reader.recall("rotate the signing key")] == [
        "Rotate the JWT signing key"
    ]
    removed = await writer.forget([(await writer.load())[0].id])
    assert removed == 1
    assert await reader.recall("rotate the signing key") == []


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"top_k": -1}, "top_k"),
        ({"top_k": 2.5}, "top_k"),
        ({"top_k": True}, "top_k"),
        ({"intent": "what_broke"}, "intent"),
        ({"outcome": "great"}, "outcome"),
        ({"tags": "billing"}, "tags"),
        ({"since": datetime(2026, 1, 1)}, "naive"),
        ({"since": "the day after never"}, "since"),
    ],
)
async def test_bad_recall_arguments_raise_configuration_error(
    kwargs: dict[str, object], named: str
) -> None:
    memory = await memory_with(live("rotate the key"))
    with pytest.raises(ConfigurationError, match=named):
        await memory.recall("rotate", **kwargs)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="query"):
        await memory.recall(None)  # type: ignore[arg-type]


def test_bad_recall_fields_raise_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="recall fields"):
        EpisodicMemory(InMemoryProvider(), recall_fields=("query", "answer"))


@pytest.mark.parametrize("seed", range(12))
def test_pruned_search_with_a_relevance_floor_equals_brute_force(seed: int) -> None:
    # The floor only removes: the result is the brute-force top k of the episodes at or above
    # it, and what it reports under the floor is exactly the unfloored top k's episodes below.
    rng = random.Random(1000 + seed)
    cap = rng.choice([LENGTH_CAP, 3, None])
    index = RecallIndex(length_cap=cap)
    episodes: dict[int, Episode] = {}
    for seq in range(1, 500):
        words = rng.sample(VOCABULARY, rng.randint(1, 9))
        lesson = " ".join(rng.sample(VOCABULARY, rng.randint(0, 14)))
        stamp = "" if rng.random() < 0.05 else at(rng.choice([0, 1, 5, 30, 400]) + seq / 1000)
        episode = Episode(
            query=" ".join(words),
            reflection=lesson or None,
            outcome=rng.choice(["success", "failure", "partial"]),  # type: ignore[arg-type]
            timestamp=stamp,
        )
        episodes[seq] = episode
        index.add(seq, episode)
    for _ in range(60):
        query = " ".join(rng.sample(VOCABULARY, rng.randint(1, 12)))
        k = rng.choice([1, 3, 10])
        intent = rng.choice(["any", "what_failed", "what_worked"])
        floor = rng.choice([0.0, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0])
        every = brute_force(index, episodes, query, 10_000, intent=intent, since=None, cap=cap)
        q = terms(query)

        def rel(seq: int, q: set[str] = q) -> float:
            e = episode_terms(episodes[seq], index.fields)
            m = len(q & e)
            return m / (len(q) + (len(e) if cap is None else max(m, min(len(e), cap))) - m)

        under: list[tuple[int, Scored]] = []
        got = index.search(query, k, now=NOW, intent=intent, min_relevance=floor, under=under)
        want = [(seq, score) for seq, score in every if rel(seq) >= floor][:k]
        assert [s.score for _, s in got] == pytest.approx([s for _, s in want], rel=1e-9)
        for (g_seq, _), (w_seq, _) in zip(got, want, strict=True):
            if g_seq != w_seq:  # only a floating-point tie may swap two episodes
                assert episodes[g_seq].time() == episodes[w_seq].time()
        assert all(s.relevance >= floor for _, s in got)
        fell = [(seq, score) for seq, score in every[:k] if rel(seq) < floor]
        assert [s.score for _, s in under] == pytest.approx([s for _, s in fell], rel=1e-9)
        assert all(s.relevance < floor for _, s in under)
        plain = index.search(query, k, now=NOW, intent=intent, min_relevance=floor)
        assert [seq for seq, _ in plain] == [seq for seq, _ in got]  # without *under*: the same
