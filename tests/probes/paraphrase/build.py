"""Build the paraphrase probe set: ``episodes.jsonl`` and ``queries.json`` next to this file.

    python tests/probes/paraphrase/build.py [--out DIR]

It measures recall by meaning: each ``paraphrase`` query asks for one or two episodes of the
log in words that share no term (as :func:`deepcrew_episodic._recall.terms` sees them: stopwords
dropped, Snowball stems) with anything those episodes say: their query, response, lesson or
tags. Keyword recall cannot find them by construction; an embedder has to. The wording is
what a person would type for a new task (synonyms, abbreviations, a broader word, a symptom
for its cause), written before any model saw it.

The episodes are an agent's work log in five areas (support, billing, devops, coding, data),
hand-written and deterministic, with families of look-alike tasks (the same ticket for
another customer or service) as the noise a ranking has to see through. Each carries
``age_days``, stamped relative to the time the suite runs, as in ``tests/probes/``.

The other kinds:

- ``near-miss``: shares a word with a ``decoys`` episode (listed by key) but means something
  else ("bank" the river, "python" the snake). A few have a real target by meaning in
  ``relevant``; most have none.
- ``unrelated``: nothing in the log is relevant (recipes, trivia, travel, poetry).

The schema is ``tests/probes/``'s, so ``tests/recall_probes.py``'s loaders read it;
``decoys`` is the one addition. The build refuses to write (and exits non-zero) while a
paraphrase query shares a term with one of its targets or another invariant is broken.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
EPISODES: list[dict[str, Any]] = []
QUERIES: list[dict[str, Any]] = []

# The fields whose terms a paraphrase query must avoid, and the ones a near-miss query must
# touch in its decoy (the fields keyword recall matches by default).
DISJOINT_FIELDS = ("query", "response", "reflection", "tags")
DECOY_FIELDS = ("query", "reflection", "tags")

MIN_EPISODES = 70
MIN_KIND = {"paraphrase": 55, "near-miss": 12, "unrelated": 20}


def add(
    key: str,
    age: float,
    query: str,
    response: str = "",
    outcome: str = "unknown",
    *,
    score: float | None = None,
    tools: tuple[str, ...] | list[str] = (),
    tags: tuple[str, ...] | list[str] = (),
    lesson: str | None = None,
) -> str:
    assert all(e["key"] != key for e in EPISODES), key
    EPISODES.append(
        {
            "key": key,
            "age_days": round(age, 3),
            "episode": {
                "query": query,
                "response": response,
                "outcome": outcome,
                "score": score,
                "tools_used": list(tools),
                "tags": list(tags),
                "reflection": lesson,
            },
        }
    )
    return key


def ask(
    qid: str,
    kind: str,
    query: str,
    relevant: list[str],
    *,
    decoys: list[str] | None = None,
    note: str = "",
) -> None:
    row: dict[str, Any] = {
        "id": qid,
        "kind": kind,
        "query": query,
        "relevant": relevant,
        "first": None,
        "intent": "any",
        "note": note,
    }
    if decoys is not None:
        row["decoys"] = decoys
    QUERIES.append(row)


# =============================================================================================
# The log, area by area
# =============================================================================================

# --- support -----------------------------------------------------------------------------------

add(
    "sup-login-acme",
    12,
    "Login failure for every Acme Corp admin after their SAML certificate rotation",
    "The IdP had rotated its certificate; uploaded the new one into the SAML settings and "
    "access was restored for the tenant.",
    "success",
    score=0.9,
    tools=["admin-console"],
    tags=["support", "sso"],
    lesson="When a whole tenant's login fails at once, check the IdP certificate expiry first.",
)
add(
    "sup-login-globex",
    40,
    "Login failure for Globex users after the password policy change",
    "The new policy expired every password older than 90 days; sent the affected users a reset "
    "link and a note explaining the change.",
    "success",
    score=0.8,
    tools=["admin-console", "mailer"],
    tags=["support", "passwords"],
)
add(
    "sup-login-initech",
    133,
    "Login failure for an Initech user, account disabled",
    "Their admin had deactivated the account by mistake; reactivated it on their request.",
    "success",
    score=0.9,
    tools=["admin-console"],
    tags=["support"],
)
add(
    "sup-2fa-phone-lost",
    9,
    "Reset 2FA for a user who lost their phone",
    "Verified identity over a video call with their manager, then cleared the authenticator "
    "enrolment so they could enrol again.",
    "success",
    score=0.9,
    tools=["admin-console", "zoom"],
    tags=["support", "2fa"],
    lesson="Never reset 2FA on an email request alone; confirm identity on a second channel.",
)
add(
    "sup-2fa-clock",
    77,
    "2FA codes rejected at sign-in for a Hooli user",
    "Their phone's clock had drifted by four minutes; enabling network sync fixed it.",
    "success",
    score=0.85,
    tags=["support", "2fa"],
    lesson="Ask about the device clock before resetting 2FA.",
)
add(
    "sup-gdpr-erasure",
    210,
    "Delete all personal data of a former customer under GDPR",
    "Ran the erasure script, confirmed by email; backups age out within 30 days.",
    "success",
    score=0.95,
    tools=["erasure-script", "mailer"],
    tags=["support", "privacy", "gdpr"],
    lesson="Erasure requests have a 30-day deadline; log the request date in the ticket.",
)
add(
    "sup-slow-dashboard",
    18,
    "Customer reports the dashboard takes 20 seconds to load",
    "A missing index on events.account_id; added it and load time dropped to 800 ms.",
    "success",
    score=0.9,
    tools=["psql"],
    tags=["support", "performance"],
    lesson="Read the slow query log before blaming the frontend.",
)
add(
    "sup-export-limit",
    95,
    "User cannot export the usage report to Excel",
    "The job hit the 10,000-row limit; raised it for their plan.",
    "success",
    score=0.8,
    tools=["admin-console"],
    tags=["support", "export"],
)
add(
    "sup-reset-mail-spf",
    301,
    "Password reset emails not arriving for contoso.com",
    "Their mail server rejected our SPF record; sent their IT team the sending IP range to "
    "allowlist.",
    "partial",
    score=0.6,
    tools=["mxtoolbox"],
    tags=["support", "email"],
    lesson="For a single domain that gets no mail from us, ask for their gateway's reject logs.",
)
add(
    "sup-locale-german",
    260,
    "Switch the interface language to German for a whole team",
    "Set locale de-DE on the workspace; individual users can override it in their profile.",
    "success",
    score=0.9,
    tools=["admin-console"],
    tags=["support", "i18n"],
)
add(
    "sup-sla-breach",
    55,
    "Enterprise ticket breached the 4-hour response SLA",
    "It was routed to the wrong queue overnight; moved it, apologised and credited the month.",
    "partial",
    score=0.5,
    tools=["zendesk"],
    tags=["support", "sla"],
    lesson="Route enterprise tickets to the on-call queue outside office hours.",
)
add(
    "sup-bot-signups",
    150,
    "Bot sign-ups flooding the free trial",
    "Added a CAPTCHA on registration and blocked disposable email domains.",
    "success",
    score=0.85,
    tools=["cloudflare"],
    tags=["support", "abuse"],
    lesson="Rate-limit registrations per IP before adding friction for humans.",
)
add(
    "sup-cancel-price",
    33,
    "Customer wants to cancel and asks why the price went up",
    "Explained the March plan change and offered the old price for three months; they stayed.",
    "success",
    score=0.9,
    tools=["zendesk"],
    tags=["support", "retention"],
)
add(
    "sup-screen-reader",
    402,
    "Screen reader cannot announce the checkout form labels",
    "Inputs had placeholders but no aria-label; filed it with the frontend team, fix pending.",
    "partial",
    score=0.4,
    tools=["nvda"],
    tags=["support", "a11y"],
    lesson="Test forms with a screen reader before release, not after a complaint.",
)
add(
    "sup-session-cookie",
    120,
    "Session cookie not set in Safari, users bounced back to the start page",
    "The cookie lacked SameSite=None; Secure for the embedded iframe; set both.",
    "success",
    score=0.85,
    tags=["support", "browser"],
    lesson="Embedded iframes need third-party cookie attributes; test in Safari first.",
)
add(
    "sup-scanner-app",
    66,
    "Handheld barcode scanner app crashes for a logistics customer",
    "The Android build ran out of heap on older Zebra devices; shipped a build with smaller "
    "image caches; waiting for their confirmation.",
    "unknown",
    tools=["adb", "crashlytics"],
    tags=["support", "mobile"],
)
add(
    "sup-badge-reader",
    480,
    "Office door badges stopped working for the new hires",
    "Facilities had not synced the HR roster to the access control system; triggered a manual "
    "sync.",
    "success",
    score=0.9,
    tags=["office", "facilities"],
)
add(
    "sup-deck-shared",
    350,
    "Internal pricing deck shared publicly through a link",
    "Revoked the public link, checked the access log (two outside views) and told legal.",
    "partial",
    score=0.5,
    tools=["google-drive"],
    tags=["security", "office"],
    lesson="Default sharing to the organisation only; public links need an owner's approval.",
)
add(
    "sup-webhook-retries",
    5,
    "Customer asks why our webhooks arrive out of order",
    "Explained at-least-once delivery and pointed them to the sequence field to reorder.",
    "unknown",
    tags=["support", "webhooks"],
)
# a family: the same routine ticket for other customers (noise)
for i, (who, age) in enumerate([("Umbrella", 3), ("Stark", 29), ("Wayne", 88), ("Tyrell", 610)]):
    add(
        f"sup-password-{i}",
        age,
        f"Password reset for a {who} user",
        "Sent a reset link after checking the account owner.",
        "success",
        score=0.9,
        tools=["admin-console"],
        tags=["support", "passwords"],
    )

# --- billing -----------------------------------------------------------------------------------

add(
    "bill-charged-twice",
    14,
    "Customer charged twice for the annual subscription",
    "Stripe showed two captures a minute apart from a retried checkout; refunded the duplicate "
    "and added an idempotency key.",
    "success",
    score=0.9,
    tools=["stripe"],
    tags=["billing", "stripe", "refund"],
    lesson="Send an idempotency key with every capture so a client retry cannot bill again.",
)
add(
    "bill-vat-number",
    190,
    "Add the VAT number to an EU customer's invoices",
    "Stored their VAT ID on the billing profile so reverse charge applies.",
    "success",
    score=0.9,
    tools=["stripe"],
    tags=["billing", "eu"],
)
add(
    "bill-card-declined",
    47,
    "Card declined at renewal because the bank flagged it",
    "The issuer's fraud check blocked the recurring charge; the customer called the bank and "
    "we retried it.",
    "success",
    score=0.8,
    tools=["stripe"],
    tags=["billing", "dunning"],
    lesson="Send a dunning email with a card update link on the first decline.",
)
add(
    "bill-refund-downgrade",
    71,
    "Partial refund for a customer who downgraded mid-month",
    "Refunded the unused 12 days pro rata through Stripe.",
    "success",
    score=0.9,
    tools=["stripe"],
    tags=["billing", "refund"],
)
add(
    "bill-promo-expired",
    23,
    "Discount code rejected at checkout",
    "The promo had expired on the 1st; issued a one-off credit instead.",
    "success",
    score=0.8,
    tools=["stripe"],
    tags=["billing", "promo"],
)
add(
    "bill-yen",
    540,
    "Customer in Japan wants to pay in yen",
    "Enabled JPY pricing for their account; Stripe handles the conversion.",
    "success",
    score=0.9,
    tools=["stripe"],
    tags=["billing", "fx"],
)
add(
    "bill-nonprofit-exempt",
    330,
    "Remove sales tax for a nonprofit with an exemption certificate",
    "Uploaded the certificate to the tax provider and marked the customer exempt.",
    "success",
    score=0.9,
    tools=["avalara"],
    tags=["billing", "tax"],
    lesson="Exemptions expire; put the certificate's end date in the customer notes.",
)
add(
    "bill-overage-fee",
    61,
    "Customer disputes an overage fee for API calls",
    "Their integration retried in a loop after 429s; waived the fee and shared backoff guidance.",
    "success",
    score=0.8,
    tools=["stripe", "grafana"],
    tags=["billing", "usage"],
    lesson="Explain rate limits and retries in the overage notice itself.",
)
add(
    "bill-chargeback",
    160,
    "Chargeback opened for a renewal the customer forgot about",
    "Submitted the signed order form and the reminder emails as evidence; the dispute was won.",
    "success",
    score=0.85,
    tools=["stripe"],
    tags=["billing", "dispute"],
    lesson="Keep renewal reminders on file; they win most disputes.",
)
add(
    "bill-invoice-address",
    280,
    "Wrong company address printed on invoices after a merger",
    "Updated the billing entity and regenerated the last two invoices.",
    "success",
    score=0.9,
    tools=["stripe"],
    tags=["billing", "invoices"],
)
add(
    "bill-seat-count",
    8,
    "Seat count higher than active users on the invoice",
    "Deactivated users still held seats; removing them lowers the next invoice, no refund due.",
    "partial",
    score=0.6,
    tools=["admin-console"],
    tags=["billing", "seats"],
    lesson="Deactivation should release the seat; raised it with product.",
)
add(
    "bill-revenue-recognition",
    720,
    "Annual prepayments booked as revenue in the month paid",
    "Moved them to deferred revenue and recognised them monthly from the ledger export.",
    "success",
    score=0.85,
    tools=["netsuite"],
    tags=["billing", "accounting"],
    lesson="Prepaid plans are deferred revenue; recognise them over the service period.",
)
# a family: resending invoices (noise)
for i, (who, month, age) in enumerate(
    [("Initech", "March", 31), ("Hooli", "April", 60), ("Soylent", "June", 390)]
):
    add(
        f"bill-resend-{i}",
        age,
        f"Resend the {month} invoice to {who}",
        "Resent the PDF from Stripe to the billing contact.",
        "success",
        score=0.9,
        tools=["stripe"],
        tags=["billing", "invoices"],
    )

# --- devops ------------------------------------------------------------------------------------

add(
    "dev-crashloop",
    4,
    "Kubernetes pods in CrashLoopBackOff after a ConfigMap change",
    "A missing environment variable made the app exit on start; added it to the ConfigMap and "
    "rolled out again.",
    "success",
    score=0.9,
    tools=["kubectl"],
    tags=["devops", "kubernetes"],
    lesson="Validate required environment variables at startup with a clear message.",
)
add(
    "dev-disk-full",
    100,
    "Disk full on the logging server",
    "Log rotation had stopped after a cron change; compressed old logs and fixed logrotate.",
    "success",
    score=0.85,
    tools=["ssh", "logrotate"],
    tags=["devops", "storage"],
    lesson="Alert on disk usage at 80%, not when it is full.",
)
add(
    "dev-db-failover",
    170,
    "Database failover to the replica during a primary outage",
    "Promoted the standby after the primary's volume failed; 3 minutes without writes.",
    "partial",
    score=0.7,
    tools=["patroni", "psql"],
    tags=["devops", "postgres"],
    lesson="Rehearse promotion quarterly; the runbook was out of date.",
)
add(
    "dev-cert-expired",
    36,
    "TLS certificate expired on api.example.com",
    "Auto-renewal had been failing since a DNS change; issued a new cert by hand and fixed the "
    "ACME challenge.",
    "success",
    score=0.8,
    tools=["certbot"],
    tags=["devops", "tls"],
    lesson="Alert 14 days before any certificate expires.",
)
add(
    "dev-bastion-ssh",
    250,
    "Lost SSH access to the bastion after a firewall rule change",
    "Rolled back the security group through the cloud console.",
    "success",
    score=0.8,
    tools=["aws-console"],
    tags=["devops", "aws"],
    lesson="Keep a second way in (session manager) before editing the rules that guard the first.",
)
add(
    "dev-worker-leak",
    52,
    "Memory leak in the worker process, RSS grows until OOM",
    "A heap profile showed an unbounded in-process cache; capped it with an LRU.",
    "success",
    score=0.9,
    tools=["memray"],
    tags=["devops", "python"],
    lesson="Every cache needs a size bound.",
)
add(
    "dev-p99-search",
    27,
    "p99 latency spike on the search API",
    "Suspect a noisy neighbour on the shared node; moved the pods to a dedicated node pool.",
    "unknown",
    tools=["grafana", "kubectl"],
    tags=["devops", "latency"],
)
add(
    "dev-restore-table",
    410,
    "Restore a deleted table from last night's backup",
    "PITR to 02:00 into a scratch instance, then copied the rows back.",
    "success",
    score=0.9,
    tools=["pgbackrest", "psql"],
    tags=["devops", "postgres"],
    lesson="Restore into a scratch instance first, never over production.",
)
add(
    "dev-dns-ttl",
    300,
    "DNS change for the docs domain not visible",
    "The TTL was 24 h on the old record; waited it out and lowered it to 5 minutes for next time.",
    "partial",
    score=0.6,
    tools=["route53"],
    tags=["devops", "dns"],
    lesson="Lower the TTL a day before a planned cut-over.",
)
add(
    "dev-rollback-checkout",
    16,
    "Roll back checkout-service after the error rate doubled",
    "Reverted to the previous image; the cause was a null pointer in the new tax code.",
    "failure",
    score=0.3,
    tools=["argocd"],
    tags=["devops", "checkout"],
    lesson="Gate deploys on error rate for ten minutes before full traffic.",
)
add(
    "dev-cpu-throttle",
    85,
    "CPU throttling on the API pods",
    "Limits were 500m while bursts needed 2 cores; raised limits and removed the throttled "
    "alert noise.",
    "success",
    score=0.8,
    tools=["kubectl", "grafana"],
    tags=["devops", "kubernetes"],
)
add(
    "dev-botnet-flood",
    140,
    "Traffic flood from a botnet took down the login page",
    "Turned on WAF rate limiting and challenge mode at the CDN.",
    "success",
    score=0.85,
    tools=["cloudflare"],
    tags=["devops", "ddos"],
    lesson="Keep the WAF rules for auth routes ready to switch on.",
)
add(
    "dev-website-outage",
    200,
    "Website outage: www returned 503 for 40 minutes",
    "The CDN origin pool pointed at a decommissioned host; repointed it to the new load balancer.",
    "failure",
    score=0.2,
    tools=["cloudflare"],
    tags=["devops", "cdn", "incident"],
    lesson="Remove hosts from the CDN origin pool before decommissioning them.",
)
add(
    "dev-migration-lock",
    62,
    "Migration held a lock on the users table for four minutes",
    "ALTER TABLE with a default rewrote the table; API writes queued until it finished.",
    "failure",
    score=0.1,
    tools=["alembic", "psql"],
    tags=["devops", "postgres"],
    lesson="Set lock_timeout on migrations and add columns without a default.",
)
add(
    "dev-backup-cron",
    560,
    "Nightly backup cron did not run for a week",
    "The host's crontab was wiped by a reimage; moved it into the config management repo.",
    "failure",
    score=0.2,
    tools=["ansible"],
    tags=["devops", "backups"],
    lesson="Monitor that backups exist, not only that the cron ran.",
)
add(
    "dev-ci-runner-cost",
    430,
    "Self-hosted CI runners idle most of the day",
    "Switched to autoscaled spot runners; monthly bill fell by 60%.",
    "success",
    score=0.9,
    tools=["terraform"],
    tags=["devops", "ci", "cost"],
)
add(
    "dev-kafka-lag",
    22,
    "Kafka consumer lag growing on the events topic",
    "One partition was hot because of a skewed key; rekeyed by account and added consumers.",
    "success",
    score=0.8,
    tools=["kafka-ui"],
    tags=["devops", "kafka"],
)
# a family: routine deploys (noise)
for i, (svc, ver, age, outcome) in enumerate(
    [
        ("orders-service", "3.2", 2, "success"),
        ("search-service", "1.9", 11, "success"),
        ("billing-service", "5.0", 45, "failure"),
        ("notifications-service", "2.4", 180, "success"),
        ("orders-service", "3.1", 220, "success"),
    ]
):
    add(
        f"dev-deploy-{i}",
        age,
        f"Deploy {svc} v{ver} to production",
        "Rolled out through ArgoCD."
        if outcome == "success"
        else "Health checks failed; rolled back.",
        outcome,
        score=0.9 if outcome == "success" else 0.2,
        tools=["argocd"],
        tags=["devops", "deploy"],
    )

# --- coding ------------------------------------------------------------------------------------

add(
    "code-avatar-none",
    19,
    "Fix NoneType error when a user has no avatar",
    "Added a default image fallback in the serializer.",
    "success",
    score=0.9,
    tools=["pytest"],
    tags=["coding", "bug"],
)
add(
    "code-stock-race",
    90,
    "Race condition in the inventory counter lets stock go negative",
    "Two requests decremented concurrently; switched to an atomic UPDATE with a qty > 0 guard.",
    "success",
    score=0.9,
    tools=["pytest", "psql"],
    tags=["coding", "concurrency"],
    lesson="Do read-modify-write in the database, not in Python.",
)
add(
    "code-flaky-scheduler",
    30,
    "Flaky test in test_scheduler fails 1 in 20 runs",
    "It depended on wall-clock time; injected a fake clock.",
    "success",
    score=0.9,
    tools=["pytest"],
    tags=["coding", "tests"],
    lesson="Tests that read the clock must get it injected.",
)
add(
    "code-python-312",
    240,
    "Upgrade the service from Python 3.8 to 3.12",
    "Replaced distutils and fixed asyncio.get_event_loop warnings; the suite passes.",
    "success",
    score=0.9,
    tools=["pyenv", "pytest"],
    tags=["coding", "python"],
)
add(
    "code-sqli-search",
    370,
    "SQL injection in the search endpoint",
    "The query string was concatenated into the WHERE clause; switched to bound parameters.",
    "success",
    score=0.95,
    tools=["semgrep"],
    tags=["coding", "security"],
    lesson="Never build SQL with f-strings.",
)
add(
    "code-n-plus-one",
    110,
    "N+1 queries on the orders page",
    "Added select_related for customer and items; the page went from 300 queries to 3.",
    "success",
    score=0.9,
    tools=["django-debug-toolbar"],
    tags=["coding", "performance"],
)
add(
    "code-dst-reports",
    305,
    "Reports scheduled for 9am arrive at 8am in winter",
    "Times were stored in UTC without the user's zone, so the DST shift moved them.",
    "success",
    score=0.85,
    tools=["pytest"],
    tags=["coding", "timezones"],
    lesson="Store the wall time and the zone name for anything scheduled by a person.",
)
add(
    "code-pdf-accents",
    455,
    "Names with accents garbled in PDF exports",
    "The font had no Latin-1 glyphs; embedded DejaVu Sans.",
    "success",
    score=0.9,
    tools=["weasyprint"],
    tags=["coding", "pdf"],
)
add(
    "code-regex-redos",
    620,
    "Regex backtracking froze the email validator",
    "The pattern had nested quantifiers, so a crafted input pinned the CPU; replaced it with a "
    "linear check.",
    "success",
    score=0.9,
    tools=["regex101"],
    tags=["coding", "security"],
    lesson="Avoid nested quantifiers in validation patterns; fuzz them.",
)
add(
    "code-log4j",
    880,
    "Critical CVE in the log4j dependency",
    "Bumped to 2.17.1 in every affected service and rebuilt the images.",
    "success",
    score=0.95,
    tools=["dependabot", "maven"],
    tags=["coding", "security", "cve"],
)
add(
    "code-api-rename",
    175,
    "Renaming customer_ref in the public API broke a partner integration",
    "Restored the old key as an alias and announced a deprecation window.",
    "failure",
    score=0.3,
    tools=["openapi-diff"],
    tags=["coding", "api"],
    lesson="Add, never rename: keep old keys until a versioned removal.",
)
add(
    "code-retry-storm",
    265,
    "Client retries without backoff overloaded the auth service",
    "Added exponential backoff with jitter to the SDK and a circuit breaker.",
    "success",
    score=0.85,
    tools=["locust"],
    tags=["coding", "resilience"],
)
add(
    "code-secret-commit",
    515,
    "AWS key committed to a public repository",
    "Revoked the key within minutes, rewrote history and enabled secret scanning.",
    "partial",
    score=0.6,
    tools=["gitleaks", "aws-console"],
    tags=["coding", "security"],
    lesson="Pre-commit secret scanning on every repo.",
)
add(
    "code-slow-ci",
    43,
    "Test suite takes 25 minutes in CI",
    "Split it across 4 workers with pytest-xdist and cached the wheels; now 7 minutes.",
    "success",
    score=0.9,
    tools=["pytest-xdist", "github-actions"],
    tags=["coding", "ci"],
)
add(
    "code-float-money",
    680,
    "Invoice totals off by one cent",
    "Amounts were floats; moved to integer cents and Decimal for tax rounding.",
    "success",
    score=0.9,
    tools=["pytest"],
    tags=["coding", "billing"],
    lesson="Money is never a float.",
)
# a family: dependency bumps (noise)
for i, (dep, age) in enumerate([("Django", 7), ("requests", 64), ("SQLAlchemy", 300)]):
    add(
        f"code-bump-{i}",
        age,
        f"Bump {dep} to the latest minor version",
        "Dependabot PR merged after the suite passed.",
        "success",
        score=0.9,
        tools=["dependabot"],
        tags=["coding", "dependencies"],
    )

# --- data --------------------------------------------------------------------------------------

add(
    "data-etl-rename",
    26,
    "Nightly ETL failed after an upstream column rename",
    "The source renamed customer_id to client_id; mapped client_id in the loader and re-ran it.",
    "success",
    score=0.8,
    tools=["airflow", "dbt"],
    tags=["data", "etl"],
    lesson="Contract-test upstream schemas so a rename fails their CI, not our nightly run.",
)
add(
    "data-revenue-mismatch",
    50,
    "Revenue dashboard shows 3% less than Stripe",
    "Refunds were subtracted twice in the dbt model; fixed the join.",
    "success",
    score=0.9,
    tools=["dbt", "stripe"],
    tags=["data", "finance"],
)
add(
    "data-dup-events",
    80,
    "Duplicate rows in the events warehouse table",
    "At-least-once delivery from Kafka; deduplicated on event_id in the staging model.",
    "success",
    score=0.9,
    tools=["dbt"],
    tags=["data", "warehouse"],
    lesson="Deduplicate at staging; every stream delivers at least once.",
)
add(
    "data-pii-export",
    235,
    "PII found in the analytics export",
    "Raw email addresses were in the BI extract; hashed them upstream and purged old files.",
    "partial",
    score=0.6,
    tools=["dbt", "s3"],
    tags=["data", "privacy"],
    lesson="Scan exports for emails and phone numbers before they leave the warehouse.",
)
add(
    "data-churn-drift",
    130,
    "Churn model accuracy dropped over three months",
    "Feature distribution shifted after the pricing change; retrained on recent data.",
    "success",
    score=0.8,
    tools=["mlflow"],
    tags=["data", "ml"],
    lesson="Monitor feature drift, not only accuracy.",
)
add(
    "data-bq-cost",
    38,
    "BigQuery cost spike from a dashboard query",
    "A Looker tile scanned the full events table every 5 minutes; added a partition filter.",
    "success",
    score=0.9,
    tools=["bigquery", "looker"],
    tags=["data", "cost"],
    lesson="Require partition filters on large tables.",
)
add(
    "data-csv-encoding",
    145,
    "CSV import shows garbled characters",
    "The file was Windows-1252; detect the encoding before parsing.",
    "success",
    score=0.85,
    tools=["python"],
    tags=["data", "import"],
)
add(
    "data-ab-test",
    225,
    "A/B test result for the new onboarding flow",
    "Conversion +2.1% but the sample ratio was off (52/48); the test was rerun.",
    "partial",
    score=0.5,
    tools=["jupyter"],
    tags=["data", "experiments"],
    lesson="Check sample ratio mismatch before reading any result.",
)
add(
    "data-forecast",
    760,
    "Quarterly sales forecast for the board",
    "Prophet model per region with holidays; MAPE 8% on the holdout.",
    "unknown",
    tools=["prophet", "jupyter"],
    tags=["data", "forecasting"],
)
add(
    "data-null-ids",
    15,
    "dbt not_null test failing on orders.customer_id",
    "Guest checkouts have no customer_id; made the test conditional on account orders.",
    "success",
    score=0.85,
    tools=["dbt"],
    tags=["data", "dbt"],
)
add(
    "data-gps-outliers",
    900,
    "Delivery GPS traces jump across the map",
    "Dropped points implying speeds over 200 km/h before map matching.",
    "success",
    score=0.8,
    tools=["python", "postgis"],
    tags=["data", "geo"],
)
add(
    "data-late-dashboard",
    0.5,
    "Morning KPI dashboard not refreshed",
    "The upstream Airflow DAG was paused after maintenance; unpaused and backfilled.",
    "success",
    score=0.8,
    tools=["airflow"],
    tags=["data", "airflow"],
)
# a family: nightly ETL runs (noise)
for i, (table, age, outcome) in enumerate(
    [("orders", 1, "success"), ("invoices", 13, "failure"), ("sessions", 140, "success")]
):
    add(
        f"data-etl-{i}",
        age,
        f"Nightly ETL load of the {table} table",
        "Loaded and validated." if outcome == "success" else "Timed out; re-ran in the morning.",
        outcome,
        score=0.9 if outcome == "success" else 0.3,
        tools=["airflow"],
        tags=["data", "etl"],
    )


# =============================================================================================
# Paraphrase queries: every term differs from every term of the targets
# =============================================================================================

P = "paraphrase"

# support
ask(
    "para-signin-tenant",
    P,
    "staff at one client company couldn't sign in after their identity provider swapped keys",
    ["sup-login-acme"],
    note="symptom for cause; sign in = login",
)
ask(
    "para-mfa-device",
    P,
    "employee misplaced the mobile with their MFA app, locked out",
    ["sup-2fa-phone-lost"],
    note="MFA = 2FA",
)
ask(
    "para-otp-refused",
    P,
    "one-time passcodes keep being refused, what's wrong?",
    ["sup-2fa-clock"],
    note="synonyms",
)
ask(
    "para-forgotten",
    P,
    "an ex-client asks us to wipe everything we hold on them",
    ["sup-gdpr-erasure"],
    note="describes the request, not the law",
)
ask(
    "para-sluggish-overview",
    P,
    "the main overview screen is sluggish for a client",
    ["sup-slow-dashboard"],
    note="synonyms",
)
ask(
    "para-spreadsheet",
    P,
    "a subscriber can't pull their figures out as a spreadsheet",
    ["sup-export-limit"],
    note="Excel = spreadsheet",
)
ask(
    "para-recovery-inbox",
    P,
    "messages to recover a forgotten passphrase never land in one firm's inbox",
    ["sup-reset-mail-spf"],
    note="synonyms",
)
ask(
    "para-deutsch-ui",
    P,
    "change the UI to Deutsch for a group",
    ["sup-locale-german"],
    note="UI = interface; Deutsch = German",
)
ask(
    "para-premium-waited",
    P,
    "a premium account waited far too long for our first reply",
    ["sup-sla-breach"],
    note="symptom for the contract term",
)
ask(
    "para-fake-accounts",
    P,
    "scripts are creating thousands of bogus new accounts",
    ["sup-bot-signups"],
    note="synonyms",
)
ask(
    "para-leave-cost",
    P,
    "a client is threatening to leave over the higher cost",
    ["sup-cancel-price"],
    note="synonyms",
)
ask(
    "para-blind-shoppers",
    P,
    "blind shoppers can't complete a purchase, assistive tech skips the fields",
    ["sup-screen-reader"],
    note="hypernym / symptom",
)
ask(
    "para-kicked-iphone",
    P,
    "iPhone visitors keep getting logged out of a widget hosted on a partner's site",
    ["sup-session-cookie"],
    note="symptom for cause",
)
ask(
    "para-ooo-webhooks",
    P,
    "why do our callback notifications show up shuffled",
    ["sup-webhook-retries"],
    note="synonyms",
)

# billing
ask(
    "para-paid-two-times",
    P,
    "payment taken two times from a buyer's card",
    ["bill-charged-twice"],
    note="synonyms",
)
ask(
    "para-tax-id-receipts",
    P,
    "put the firm's sales-tax registration code on its receipts",
    ["bill-vat-number"],
    note="hypernym: sales tax for VAT",
)
ask(
    "para-lender-refused",
    P,
    "yearly plan didn't go through, the lender refused the transaction",
    ["bill-card-declined"],
    note="synonyms",
)
ask(
    "para-money-back-tier",
    P,
    "give some money back to a client who moved to a cheaper tier halfway through",
    ["bill-refund-downgrade"],
    note="synonyms",
)
ask(
    "para-voucher",
    P,
    "voucher doesn't work when paying",
    ["bill-promo-expired"],
    note="voucher = discount code",
)
ask(
    "para-tokyo-currency",
    P,
    "a Tokyo client would rather settle in their home currency",
    ["bill-yen"],
    note="Tokyo for Japan, home currency for yen",
)
ask(
    "para-charity-vat",
    P,
    "a charity says it shouldn't pay VAT and sent us paperwork",
    ["bill-nonprofit-exempt"],
    note="charity = nonprofit",
)
ask(
    "para-quota-extra",
    P,
    "client is angry about an extra charge for going over the request quota",
    ["bill-overage-fee"],
    note="synonyms",
)
ask(
    "para-cardholder-bank",
    P,
    "the cardholder told their issuer they never authorised the yearly payment",
    ["bill-chargeback"],
    note="describes a chargeback without naming it",
)
ask(
    "para-merger-letterhead",
    P,
    "after the acquisition our statements still show the old firm's location",
    ["bill-invoice-address"],
    note="synonyms",
)
ask(
    "para-licences-inactive",
    P,
    "we pay for licences that nobody uses anymore",
    ["bill-seat-count"],
    note="licence = seat",
)
ask(
    "para-prepaid-accrual",
    P,
    "upfront yearly payments are being counted as income straight away",
    ["bill-revenue-recognition"],
    note="synonyms",
)
ask(
    "para-penny-rounding",
    P,
    "sums on receipts are a penny wrong",
    ["code-float-money"],
    note="penny = cent; symptom for cause",
)

# devops
ask(
    "para-k8s-restarting",
    P,
    "k8s containers keep dying over and over right after boot",
    ["dev-crashloop"],
    note="k8s = Kubernetes",
)
ask(
    "para-out-of-space",
    P,
    "the machine collecting our audit trails ran out of space",
    ["dev-disk-full"],
    note="symptom; synonyms",
)
ask(
    "para-main-db-died",
    P,
    "main DB died, we switched over to the secondary",
    ["dev-db-failover"],
    note="DB = database; primary/replica synonyms",
)
ask(
    "para-padlock-warning",
    P,
    "browsers throw a scary padlock warning when visitors open the service",
    ["dev-cert-expired"],
    note="symptom for cause",
)
ask(
    "para-jump-box",
    P,
    "can't get into the jump box anymore since the network ACL update",
    ["dev-bastion-ssh"],
    note="jump box = bastion; ACL = firewall rule",
)
ask(
    "para-ram-climbs",
    P,
    "the background job's RAM climbs steadily till it's killed",
    ["dev-worker-leak"],
    note="symptom for cause",
)
ask(
    "para-tail-lookups",
    P,
    "worst-case response times of lookups went through the roof",
    ["dev-p99-search"],
    note="p99 described in words",
)
ask(
    "para-records-dump",
    P,
    "accidentally removed records, need them recovered from yesterday's dump",
    ["dev-restore-table"],
    note="synonyms",
)
ask(
    "para-hostname-resolving",
    P,
    "help pages' new address isn't resolving yet for some people",
    ["dev-dns-ttl"],
    note="symptom for cause",
)
ask(
    "para-undo-release",
    P,
    "undo the latest release of the payment page, failures spiked",
    ["dev-rollback-checkout"],
    note="synonyms",
)
ask(
    "para-starved-processor",
    P,
    "web containers starved of processor time",
    ["dev-cpu-throttle"],
    note="processor = CPU",
)
ask(
    "para-ddos-signin",
    P,
    "a massive wave of malicious requests knocked out sign-in",
    ["dev-botnet-flood"],
    note="DDoS described",
)
ask(
    "para-site-down",
    P,
    "the site is down, people just see an error",
    ["dev-website-outage"],
    note="site down = website outage",
)
ask(
    "para-schema-change-blocked",
    P,
    "changing a big relation's structure blocked every insert for a while",
    ["dev-migration-lock"],
    note="symptom for cause",
)
ask(
    "para-snapshots-skipped",
    P,
    "the scheduled overnight snapshots silently stopped happening",
    ["dev-backup-cron"],
    note="synonyms",
)
ask(
    "para-build-agents-idle",
    P,
    "our own build agents sit unused for hours and waste money",
    ["dev-ci-runner-cost"],
    note="build agents = CI runners",
)
ask(
    "para-stream-backlog",
    P,
    "the message stream's backlog keeps piling up",
    ["dev-kafka-lag"],
    note="hypernym: message stream for Kafka",
)

# coding
ask(
    "para-photo-crash",
    P,
    "app crashes for people who never uploaded a photo",
    ["code-avatar-none"],
    note="symptom for cause",
)
ask(
    "para-oversold",
    P,
    "we oversold items because simultaneous purchases grabbed the last unit",
    ["code-stock-race"],
    note="symptom for cause",
)
ask(
    "para-intermittent-red",
    P,
    "a CI check is intermittently red for no reason",
    ["code-flaky-scheduler"],
    note="flaky described",
)
ask(
    "para-newer-interpreter",
    P,
    "move the codebase to a newer interpreter version",
    ["code-python-312"],
    note="hypernym",
)
ask(
    "para-smuggle-commands",
    P,
    "an attacker could smuggle DB commands through the lookup box",
    ["code-sqli-search"],
    note="SQL injection described",
)
ask(
    "para-round-trips",
    P,
    "listing purchases fires hundreds of database round trips",
    ["code-n-plus-one"],
    note="N+1 described",
)
ask(
    "para-clocks-changed",
    P,
    "since the clocks changed, morning digests go out sixty minutes early",
    ["code-dst-reports"],
    note="DST described",
)
ask(
    "para-umlaut-boxes",
    P,
    "umlauts show up as little boxes in generated documents",
    ["code-pdf-accents"],
    note="symptom for cause",
)
ask(
    "para-checker-hangs",
    P,
    "the address checker hangs forever on certain strange strings",
    ["code-regex-redos"],
    note="ReDoS described",
)
ask(
    "para-java-hole",
    P,
    "severe vulnerability in a Java logging library we ship",
    ["code-log4j"],
    note="hypernym",
)
ask(
    "para-reseller-connector",
    P,
    "a reseller's connector stopped working after we changed a field's label",
    ["code-api-rename"],
    note="synonyms",
)
ask(
    "para-hammering-login",
    P,
    "the mobile library hammers the sign-in backend with immediate repeats",
    ["code-retry-storm"],
    note="synonyms",
)
ask(
    "para-leaked-credential",
    P,
    "cloud credentials pushed to GitHub by mistake",
    ["code-secret-commit"],
    note="hypernym: cloud for AWS",
)
ask(
    "para-pipeline-slow",
    P,
    "our build pipeline is painfully long, how to speed it up",
    ["code-slow-ci"],
    note="synonyms",
)

# data
ask(
    "para-overnight-pipeline",
    P,
    "the overnight pipeline broke because the producing team changed a field",
    ["data-etl-rename"],
    note="synonyms",
)
ask(
    "para-finance-mismatch",
    P,
    "accounting numbers don't match the payment processor",
    ["data-revenue-mismatch"],
    note="hypernym",
)
ask(
    "para-same-record",
    P,
    "the analytics store holds the same record several times",
    ["data-dup-events"],
    note="synonyms",
)
ask(
    "para-personal-details",
    P,
    "personal details of people ended up in a spreadsheet we sent out",
    ["data-pii-export"],
    note="PII described",
)
ask(
    "para-attrition",
    P,
    "the attrition predictor is getting worse",
    ["data-churn-drift"],
    note="attrition = churn",
)
ask(
    "para-warehouse-bill",
    P,
    "the cloud analytics bill jumped because one chart kept reading everything",
    ["data-bq-cost"],
    note="hypernym",
)
ask(
    "para-umlaut-nonsense",
    P,
    "umlauts turn into nonsense when loading a spreadsheet",
    ["data-csv-encoding"],
    note="symptom for cause",
)
ask(
    "para-split-experiment",
    P,
    "outcome of the split trial on the signup wizard",
    ["data-ab-test"],
    note="A/B = split",
)
ask(
    "para-projection",
    P,
    "projection of next year's turnover for the directors",
    ["data-forecast"],
    note="synonyms",
)
ask(
    "para-missing-key",
    P,
    "a quality check says some purchases have an empty client reference",
    ["data-null-ids"],
    note="synonyms",
)
ask(
    "para-teleporting-couriers",
    P,
    "couriers seem to teleport around town in the location feed",
    ["data-gps-outliers"],
    note="symptom for cause",
)
ask(
    "para-stale-metrics",
    P,
    "the daily metrics board still shows yesterday's figures",
    ["data-late-dashboard"],
    note="synonyms",
)

# two targets: a kind of task that happened twice
ask(
    "para-two-signin-waves",
    P,
    "entire organisations unable to sign in",
    ["sup-login-acme", "sup-login-globex"],
    note="two of the login family",
)
ask(
    "para-two-postgres-outages",
    P,
    "times our relational DB stopped taking inserts",
    ["dev-db-failover", "dev-migration-lock"],
    note="hypernym",
)


# =============================================================================================
# Near misses: a word in common with a decoy, another meaning
# =============================================================================================

N = "near-miss"
ask(
    "near-bank-river",
    N,
    "best spot on the river bank for fishing",
    [],
    decoys=["bill-card-declined"],
)
ask(
    "near-python-snake",
    N,
    "is the python in the terrarium too cold at night?",
    [],
    decoys=["code-python-312", "dev-worker-leak"],
)
ask(
    "near-lock-door",
    N,
    "remember to lock the front door of the shop",
    [],
    decoys=["dev-migration-lock"],
)
ask(
    "near-charge-phone",
    N,
    "how long does it take to charge a phone battery?",
    [],
    decoys=["bill-charged-twice"],
)
ask(
    "near-migrate-birds",
    N,
    "which birds migrate south in autumn?",
    [],
    decoys=["dev-migration-lock"],
)
ask(
    "near-leak-sink",
    N,
    "fix the leak under the kitchen sink",
    [],
    decoys=["dev-worker-leak"],
)
ask(
    "near-cookie-recipe",
    N,
    "chewy chocolate chip cookie recipe",
    [],
    decoys=["sup-session-cookie"],
)
ask(
    "near-table-furniture",
    N,
    "swap the kitchen table for a round oak one",
    [],
    decoys=["dev-restore-table", "data-etl-0"],
)
ask(
    "near-replica-tower",
    N,
    "where can I buy a replica of the Eiffel Tower?",
    [],
    decoys=["dev-db-failover"],
)
ask(
    "near-train-ticket",
    N,
    "my train ticket to Paris was cancelled",
    [],
    decoys=["sup-sla-breach", "sup-cancel-price"],
)
ask(
    "near-screen-tv",
    N,
    "the TV screen has a dead pixel",
    [],
    decoys=["sup-screen-reader"],
)
ask(
    "near-flood-basement",
    N,
    "the basement flooded after the storm",
    [],
    decoys=["dev-botnet-flood", "sup-bot-signups"],
)
ask(
    "near-badge-door",
    N,
    "new hires are locked out of the building, door cards refused",
    ["sup-badge-reader"],
    decoys=["dev-migration-lock", "bill-card-declined"],
    note="a physical lock, not a table lock; cards at the door, not payment cards",
)
ask(
    "near-warehouse-scanner",
    N,
    "warehouse staff say the handheld scanner keeps crashing",
    ["sup-scanner-app"],
    decoys=["data-dup-events"],
    note="a goods warehouse, not the data warehouse",
)
ask(
    "near-leaked-slides",
    N,
    "an employee leaked our pricing slides to the public",
    ["sup-deck-shared"],
    decoys=["dev-worker-leak"],
    note="leaked documents, not a memory leak",
)


# =============================================================================================
# Unrelated: nothing in the log is relevant
# =============================================================================================

for i, text in enumerate(
    [
        "What's a good recipe for banana bread?",
        "Who won the football World Cup in 1998?",
        "How far is the moon from earth?",
        "Translate 'good morning' into Japanese",
        "How many calories are in an avocado?",
        "Which planet has the most moons?",
        "Write a sonnet about the sea at dusk",
        "How do I fold a paper crane?",
        "Best hiking trails near Innsbruck",
        "What temperature should I roast a chicken at?",
        "Who painted the Mona Lisa?",
        "Tips for growing tomatoes on a balcony",
        "Cheap flights from Madrid to Athens in August",
        "What is offside in football?",
        "What rhymes with orange?",
        "How long should I steep green tea?",
        "Which castles are worth visiting in Scotland?",
        "Recommend a novel about whales",
        "How do you tune a violin?",
        "Why is the sky blue?",
        "Ideas for a kid's birthday celebration",
        "Learn to juggle three balls",
    ]
):
    ask(f"unrelated-{i:02d}", "unrelated", text, [])


# =============================================================================================
# Checks and output
# =============================================================================================


def field_terms(episode: dict[str, Any], fields: tuple[str, ...]) -> set[str]:
    from deepcrew_episodic._recall import terms

    found: set[str] = set()
    for name in fields:
        value = episode[name]
        for text in value if isinstance(value, list) else [value or ""]:
            found |= terms(text)
    return found


def problems(episodes: list[dict[str, Any]], queries: list[dict[str, Any]]) -> list[str]:
    """Every way *episodes* and *queries* break the probe's invariants (empty: none)."""
    from deepcrew_episodic._recall import terms

    found: list[str] = []
    by_key: dict[str, dict[str, Any]] = {}
    for row in episodes:
        if row["key"] in by_key:
            found.append(f"episode key {row['key']} is used twice")
        by_key[row["key"]] = row["episode"]
    if len(by_key) < MIN_EPISODES:
        found.append(f"{len(by_key)} episodes, fewer than {MIN_EPISODES}")
    ids = [q["id"] for q in queries]
    found.extend(
        f"query id {i} is used twice" for i in sorted({i for i in ids if ids.count(i) > 1})
    )
    for kind, least in MIN_KIND.items():
        have = sum(1 for q in queries if q["kind"] == kind)
        if have < least:
            found.append(f"{have} {kind} queries, fewer than {least}")
    for q in queries:
        qid, words = q["id"], terms(q["query"])
        for key in [*q["relevant"], *q.get("decoys", [])]:
            if key not in by_key:
                found.append(f"{qid}: {key} is not an episode")
        if q["kind"] == "paraphrase":
            if not 1 <= len(q["relevant"]) <= 2:
                found.append(f"{qid}: a paraphrase query needs one or two relevant episodes")
            for key in q["relevant"]:
                if key in by_key:
                    shared = words & field_terms(by_key[key], DISJOINT_FIELDS)
                    if shared:
                        found.append(f"{qid}: shares {sorted(shared)} with its target {key}")
        elif q["kind"] == "near-miss":
            if not q.get("decoys"):
                found.append(f"{qid}: a near-miss query needs a decoy")
            for key in q.get("decoys", []):
                if key in by_key and not words & field_terms(by_key[key], DECOY_FIELDS):
                    found.append(f"{qid}: shares no term with its decoy {key}")
        elif q["kind"] == "unrelated":
            if q["relevant"]:
                found.append(f"{qid}: an unrelated query has relevant episodes")
        else:
            found.append(f"{qid}: unknown kind {q['kind']!r}")
    return found


def write(folder: Path) -> None:
    """Write ``episodes.jsonl`` and ``queries.json`` into *folder*."""
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "episodes.jsonl").open("w", encoding="utf-8") as out:
        for e in EPISODES:
            out.write(json.dumps(e, ensure_ascii=False) + "\n")
    (folder / "queries.json").write_text(
        json.dumps(QUERIES, ensure_ascii=False, indent=1) + "\n", encoding="utf-8"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the paraphrase probe set.")
    parser.add_argument("--out", type=Path, default=HERE, help="folder to write (default: here)")
    args = parser.parse_args(argv)
    found = problems(EPISODES, QUERIES)
    if found:
        for line in found:
            print(f"FAIL {line}", file=sys.stderr)
        print(f"{len(found)} problems; nothing written", file=sys.stderr)
        return 1
    write(args.out)
    kinds = {k: sum(1 for q in QUERIES if q["kind"] == k) for k in MIN_KIND}
    print(f"{len(EPISODES)} episodes, {len(QUERIES)} queries {kinds}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
