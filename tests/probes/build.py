"""Build the recall probe set: ``episodes.jsonl`` and ``queries.json`` next to this file.

    python tests/probes/build.py

Deterministic (a fixed seed). The episodes are an agent's work log over three years in five
areas (support, billing, devops, coding, data), some in German and French, about half with a
lesson. Hand-written episodes are the targets of the queries; recurring task families (the
same kind of ticket with another customer, order or service) are the realistic noise that a
ranking has to see through, and are targets themselves where a query asks for the kind.

Each episode carries ``age_days`` instead of a timestamp: the suite stamps it relative to the
time it runs, so that rankings do not drift as the calendar moves.

Each query lists its relevant episodes by key. ``kind`` says what it probes; ``first`` (for
recency ties and intents) names the episode that must rank first; ``intent`` is passed to
recall. Queries of kind ``unrelated`` share no word with the log and must recall nothing;
queries of kind ``near-miss`` are off-topic but share one ordinary word with it, and are only
reported.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
EPISODES: list[dict[str, Any]] = []
QUERIES: list[dict[str, Any]] = []


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
    first: str | None = None,
    intent: str = "any",
    note: str = "",
) -> None:
    QUERIES.append(
        {
            "id": qid,
            "kind": kind,
            "query": query,
            "relevant": relevant,
            "first": first,
            "intent": intent,
            "note": note,
        }
    )


# =============================================================================================
# Hand-written episodes (the targets), area by area
# =============================================================================================

# --- devops ------------------------------------------------------------------------------------

add(
    "dev-deploy-payments-1",
    21,
    "Deploy payments-service v2.14 to prod",
    "Deployment failed: readiness probe timed out after 30 s on 3 of 6 pods; rolled back to v2.13.",
    "failure",
    score=0.2,
    tools=["kubectl", "argocd"],
    tags=["devops", "payments"],
    lesson="Raise the readiness probe initial delay for payments-service; the JVM needs about 40 s to warm up.",
)
add(
    "dev-deploy-payments-2",
    3,
    "Deployment of payments-service v2.15 to production",
    "Canary at 10% for 15 minutes, no error budget burn, then full rollout.",
    "success",
    score=0.95,
    tools=["argocd"],
    tags=["devops", "payments"],
    lesson="The canary step catches probe and config mistakes before they reach every pod.",
)
add(
    "dev-migration-lock",
    62,
    "Migrate users table to add the email_verified column",
    "Migration took an ACCESS EXCLUSIVE lock on users; the API timed out for 4 minutes until it finished.",
    "failure",
    score=0.1,
    tools=["alembic", "psql"],
    tags=["devops", "postgres"],
    lesson="Add columns without a default first, backfill in batches, and set lock_timeout on migrations.",
)
add(
    "dev-fax",
    900,
    "Configure the fax gateway for the Hamburg office",
    "Set up the T.38 gateway, registered it with the SIP trunk and sent a test fax to the office.",
    "success",
    score=0.9,
    tools=["ssh"],
    tags=["telephony"],
    lesson="The gateway only accepts SIP from the trunk's IP range; open UDP 5060 and 4000-4999 on the firewall.",
)
add(
    "dev-vpn-gateway",
    2,
    "Configure the VPN gateway for the new Lisbon contractors",
    "Added a WireGuard peer per contractor and pushed the configs through the password manager.",
    "success",
    score=0.9,
    tools=["wireguard"],
    tags=["network"],
)
add(
    "dev-api-gateway-timeouts",
    5,
    "API gateway returns 504 for the reports endpoint",
    "Raised the gateway integration timeout from 29 s to the maximum and moved report generation to a job.",
    "partial",
    score=0.6,
    tools=["aws"],
    tags=["devops", "aws"],
    lesson="Long-running report requests belong in a background job, not behind the API gateway.",
)
add(
    "dev-apns",
    700,
    "Renew the Apple push notification (APNs) certificate",
    "Generated a new CSR, uploaded the .p12 to the notifications service and verified a test push.",
    "success",
    score=0.85,
    tools=["openssl"],
    tags=["mobile", "certificates"],
    lesson="Move to token-based APNs auth with a .p8 key; the certificate expires every year and nobody remembers.",
)
add(
    "dev-502-keepalive",
    48,
    "502 errors from the nginx ingress after the search-service deploy",
    "Pods were healthy; nginx reused connections the app had already closed. Raised the app keepalive.",
    "success",
    score=0.8,
    tools=["kubectl", "grafana"],
    tags=["devops", "incident", "nginx"],
    lesson="The upstream keepalive timeout must be longer than nginx's (75 s), or every deploy shows 502 bursts.",
)
add(
    "dev-pg-upgrade-1",
    410,
    "Upgrade Postgres 12 to 13 on the orders cluster",
    "pg_upgrade aborted: postgis on the old cluster was 2.5, the new binaries only ship 3.1. Rolled back.",
    "failure",
    score=0.1,
    tools=["pg_upgrade", "psql"],
    tags=["devops", "postgres"],
    lesson="Upgrade extensions on the old cluster first and rehearse pg_upgrade on a snapshot before the real run.",
)
add(
    "dev-pg-upgrade-2",
    395,
    "Upgrade Postgres 12 to 13 on the orders cluster (second attempt)",
    "Upgraded postgis first, rehearsed on a snapshot, then pg_upgrade --link in 6 minutes of downtime.",
    "success",
    score=0.9,
    tools=["pg_upgrade", "psql"],
    tags=["devops", "postgres"],
    lesson="Replication slots are not carried over by pg_upgrade; recreate them before restarting the replicas.",
)
add(
    "dev-celery-1",
    95,
    "Restart the stuck Celery worker on prod-worker-2",
    "Worker was blocked on a dead Redis connection; restarted it with supervisorctl.",
    "success",
    score=0.8,
    tools=["ssh", "supervisorctl"],
    tags=["devops", "celery"],
)
add(
    "dev-celery-2",
    4,
    "Restart the stuck Celery worker on prod-worker-2",
    "Worker was blocked on a dead Redis connection again; restarted it and set broker heartbeats.",
    "success",
    score=0.85,
    tools=["ssh", "supervisorctl"],
    tags=["devops", "celery"],
)
add(
    "dev-staging-pw-old",
    300,
    "Where is the staging database password stored?",
    "In Vault under secret/staging/db; the ops group has read access.",
    "success",
    score=0.9,
    tools=["vault"],
    tags=["devops", "secrets"],
)
add(
    "dev-staging-pw-new",
    9,
    "Where is the staging database password stored?",
    "It moved to AWS Secrets Manager as staging/db/main during the Vault shutdown.",
    "success",
    score=0.9,
    tools=["aws"],
    tags=["devops", "secrets"],
)
add(
    "dev-pgbouncer",
    130,
    "Intermittent 'prepared statement S_1 does not exist' errors in the API",
    "Disabled server-side prepared statements in the driver; errors stopped.",
    "success",
    score=0.9,
    tools=["psql"],
    tags=["devops", "postgres"],
    lesson="PgBouncer in transaction pooling mode breaks server-side prepared statements.",
)
add(
    "dev-oom-fail",
    33,
    "Search pods OOMKilled during the nightly reindex",
    "Doubled the memory limit; pods were still killed at 03:10.",
    "failure",
    score=0.2,
    tools=["kubectl"],
    tags=["devops", "kubernetes"],
    lesson="More memory only moved the kill later; the reindex loads every document into one batch.",
)
add(
    "dev-oom-success",
    30,
    "Search pods OOMKilled during the nightly reindex",
    "Streamed the reindex in batches of 5,000 documents; memory stays under 1.2 GiB.",
    "success",
    score=0.9,
    tools=["kubectl", "python"],
    tags=["devops", "kubernetes"],
    lesson="Batch the reindex instead of raising limits.",
)
add(
    "dev-redis-evict",
    75,
    "Sessions disappearing: Redis evicting keys",
    "maxmemory was reached and the policy was allkeys-lru; sessions were evicted first.",
    "success",
    score=0.8,
    tools=["redis-cli"],
    tags=["devops", "redis"],
    lesson="Use volatile-lru with TTLs on cache keys so that session keys without a TTL are never evicted.",
)
add(
    "dev-hpa",
    58,
    "Horizontal pod autoscaler not scaling the checkout deployment",
    "HPA showed <unknown> for CPU: the pods had no CPU requests. Added requests; it scales now.",
    "success",
    score=0.85,
    tools=["kubectl"],
    tags=["devops", "kubernetes"],
)
add(
    "dev-dns",
    160,
    "Point www.example.com at the new marketing site",
    "Lowered the TTL a day early, switched the CNAME to the Netlify target, verified in three regions.",
    "success",
    score=0.9,
    tools=["cloudflare"],
    tags=["devops", "dns"],
    lesson="Lower the DNS TTL a day before a cut-over so a rollback takes minutes, not hours.",
)
add(
    "dev-restore",
    220,
    "Restore the invoices table after an accidental DELETE without WHERE",
    "Restored from the 02:00 snapshot into a side database and copied back the missing 3,112 rows.",
    "success",
    score=0.8,
    tools=["pg_restore", "psql"],
    tags=["devops", "postgres", "incident"],
    lesson="Point-in-time recovery needs WAL archiving turned on; we only had nightly snapshots.",
)
add(
    "dev-rds-resize",
    140,
    "Increase the orders database instance size",
    "Changed the instance class to db.r6g.2xlarge in the module and applied during the window.",
    "success",
    score=0.9,
    tools=["terraform"],
    tags=["terraform", "aws", "rds"],
)
add(
    "dev-s3-private",
    260,
    "Make the exports bucket private",
    "Blocked public access, replaced the public links with pre-signed URLs valid for 24 h.",
    "success",
    score=0.9,
    tools=["terraform", "aws"],
    tags=["terraform", "s3", "security"],
)
add(
    "dev-backup-verify",
    180,
    "Weekly backup restore drill for the billing database",
    "Restored last night's snapshot into a scratch instance; row counts matched production.",
    "success",
    score=0.95,
    tools=["pg_restore"],
    tags=["devops", "backup"],
)

# --- billing -----------------------------------------------------------------------------------

add(
    "bill-rotate-whsec",
    200,
    "Rotate the webhook signing secret for Stripe",
    "Rolled the secret with a 24 h overlap, deployed the new value, then expired the old one.",
    "success",
    score=0.9,
    tools=["stripe", "vault"],
    tags=["billing", "stripe", "security"],
    lesson="Deploy the new signing secret before expiring the old one; Stripe keeps both valid during the overlap.",
)
add(
    "bill-invoice-email-retry",
    45,
    "Invoice emails not retried after the SendGrid outage",
    "Found 212 invoices whose email was dropped; resent them in batches.",
    "partial",
    score=0.6,
    tools=["sendgrid", "python"],
    tags=["billing", "email"],
    lesson="The mailer retried only 5xx responses; SendGrid answered 429, so 429 must be retryable too.",
)
add(
    "bill-double-charge-retry",
    70,
    "Customer charged twice after the checkout request timed out",
    "The client retried the checkout after a timeout and created a second payment; refunded it.",
    "success",
    score=0.8,
    tools=["stripe"],
    tags=["billing", "stripe"],
    lesson="Send an idempotency key with every payment request so client retries cannot charge twice.",
)
add(
    "bill-vat-berlin",
    120,
    "Customer in Berlin charged German VAT on a B2B invoice",
    "Their VAT ID was valid; issued a credit note and a new invoice without VAT.",
    "success",
    score=0.85,
    tools=["billing-admin"],
    tags=["billing", "vat", "eu"],
    lesson="EU B2B customers with a valid VAT ID get the reverse charge; validate the ID against VIES before invoicing.",
)
add(
    "bill-leapday",
    800,
    "Leap-day bug: annual plans that renewed on Feb 29 were billed twice",
    "Renewal date math added 365 days; customers who started on Feb 29 got charged on Feb 28 and Mar 1.",
    "failure",
    score=0.3,
    tools=["python"],
    tags=["billing", "bug"],
    lesson="Compute renewal dates with calendar arithmetic (relativedelta), never by adding 365 days.",
)
add(
    "bill-dispute-1",
    90,
    "Customer disputed a payment with their bank",
    "Uploaded the signed order form and usage logs as evidence; we won the dispute.",
    "success",
    score=0.8,
    tools=["stripe"],
    tags=["chargeback", "stripe"],
)
add(
    "bill-dispute-2",
    25,
    "Kunde hat die Zahlung bei seiner Bank zurückgebucht",
    "Nachweise (Vertrag, Nutzungsprotokolle) bei Stripe hochgeladen; Entscheidung steht aus.",
    "unknown",
    tools=["stripe"],
    tags=["chargeback", "de"],
)
add(
    "bill-proration",
    110,
    "Customer upgraded from Team to Business mid-cycle and was charged the full price",
    "Proration was off for the plan change; refunded the difference and enabled proration.",
    "success",
    score=0.85,
    tools=["stripe"],
    tags=["billing", "plans"],
    lesson="Plan changes must use proration_behavior=create_prorations or customers pay twice for the overlap.",
)
add(
    "bill-coupon",
    66,
    "Coupon code SPRING24 not applied at checkout",
    "The coupon was restricted to monthly plans; the customer chose yearly. Applied it manually.",
    "success",
    score=0.7,
    tools=["stripe"],
    tags=["billing", "coupons"],
)
add(
    "bill-3ds",
    18,
    "Card declined: 3D Secure authentication not completed",
    "The bank required SCA; the payment link was opened in an in-app browser that blocked the 3DS popup.",
    "partial",
    score=0.5,
    tools=["stripe"],
    tags=["billing", "payments", "sca"],
    lesson="Send SCA payment links by email; in-app browsers block the 3D Secure challenge.",
)
add(
    "bill-fr-facture-double",
    40,
    "Facture en double pour le client Dupont SARL",
    "Deux factures générées pour la même commande ; la seconde a été annulée par un avoir.",
    "success",
    score=0.8,
    tools=["billing-admin"],
    tags=["billing", "fr"],
    lesson="La double facturation venait d'un webhook reçu deux fois ; vérifier l'identifiant d'événement.",
)
add(
    "bill-fr-smtp",
    650,
    "Configurer le relais SMTP pour l'envoi des factures",
    "Relais configuré avec authentification ; SPF et DKIM ajoutés au domaine de facturation.",
    "success",
    score=0.9,
    tools=["postfix"],
    tags=["billing", "email", "fr"],
)
add(
    "bill-de-rechnung-erneut",
    14,
    "Kunde aus Österreich hat die Rechnung für März nicht erhalten, Rechnung erneut senden",
    "Rechnung RE-2025-0312 erneut per E-Mail gesendet; die alte Adresse war ungültig.",
    "success",
    score=0.9,
    tools=["billing-admin"],
    tags=["billing", "de"],
    lesson="Vor dem erneuten Senden die Rechnungsadresse und die E-Mail-Adresse im Konto prüfen.",
)
add(
    "bill-de-addr-1",
    200,
    "Rechnungsadresse ändern für Kunde 3391",
    "Adresse im Kundenkonto geändert; künftige Rechnungen gehen an die neue Adresse.",
    "success",
    score=0.9,
    tools=["billing-admin"],
    tags=["billing", "de"],
)
add(
    "bill-de-addr-2",
    15,
    "Rechnungsadresse ändern für Kunde 7710",
    "Adresse geändert und die letzte Rechnung mit der neuen Adresse neu ausgestellt.",
    "success",
    score=0.9,
    tools=["billing-admin"],
    tags=["billing", "de"],
)

# --- support -----------------------------------------------------------------------------------

add(
    "sup-saml-okta",
    120,
    "Configuration of SAML single sign-on for Acme Corp using Okta",
    "Set up the SAML app in Okta, exchanged metadata, tested with two users.",
    "success",
    score=0.9,
    tools=["okta"],
    tags=["support", "sso"],
    lesson="Okta needs the ACS URL with the trailing slash, and the entity ID must match exactly.",
)
add(
    "sup-azure-loop",
    35,
    "SSO login loop for a customer on Azure AD",
    "The customer's conditional access policy blocked our redirect URI; they added it.",
    "success",
    score=0.8,
    tools=["azure"],
    tags=["support", "sso"],
)
add(
    "sup-gdpr-delete",
    150,
    "Delete all personal data for customer 8812 on request",
    "Erased profile, tickets and chat transcripts; kept invoices for the legal retention period.",
    "success",
    score=0.9,
    tools=["admin", "zendesk"],
    tags=["gdpr", "privacy"],
    lesson="Invoices must be kept for ten years; erase everything else and tell the customer what was kept.",
)
add(
    "sup-de-loeschung",
    60,
    "Löschung aller Kundendaten auf Anfrage (Kunde 4120)",
    "Profil, Tickets und Chatverläufe gelöscht, Rechnungen wegen Aufbewahrungspflicht behalten.",
    "success",
    score=0.9,
    tools=["admin"],
    tags=["gdpr", "dsgvo", "de"],
)
add(
    "sup-card-in-chat",
    85,
    "Customer pasted a full card number into the support chat",
    "Redacted the message, purged it from the transcript store and told the customer to cancel the card.",
    "success",
    score=0.9,
    tools=["zendesk"],
    tags=["pci", "compliance", "security"],
)
add(
    "sup-lang",
    100,
    "Support bot replied in English to a French-speaking customer",
    "Answered again in French and flagged the ticket.",
    "partial",
    score=0.5,
    tags=["support", "bot"],
    lesson="Detect the language from the ticket body, not from the account locale.",
)
add(
    "sup-2fa-lost",
    27,
    "Customer locked out after losing their 2FA phone",
    "Verified identity with the billing contact and a recent invoice number, then reset 2FA.",
    "success",
    score=0.9,
    tools=["admin"],
    tags=["support", "2fa", "security"],
    lesson="Never reset 2FA on email alone; verify with a second channel such as the billing contact.",
)
add(
    "sup-export",
    50,
    "How can a customer export all their projects as CSV?",
    "Settings > Data > Export; large accounts get a download link by email.",
    "success",
    score=0.9,
    tags=["support", "export"],
)
add(
    "sup-webhook-setup",
    140,
    "Customer asks how to receive webhooks for new orders",
    "Pointed them to Settings > Webhooks and the signature verification guide.",
    "success",
    score=0.8,
    tags=["support", "api"],
)
add(
    "sup-rate-limit",
    44,
    "Customer hitting 429 Too Many Requests on the public API",
    "They polled every second; suggested webhooks and raised their limit temporarily.",
    "success",
    score=0.8,
    tags=["support", "api"],
    lesson="Customers who poll usually want webhooks; offer them before raising limits.",
)
add(
    "sup-fr-mdp",
    33,
    "Le client n'arrive pas à réinitialiser son mot de passe",
    "L'e-mail de réinitialisation était dans les spams ; renvoyé et confirmé.",
    "success",
    score=0.8,
    tags=["support", "fr"],
)
add(
    "sup-app-crash",
    12,
    "iOS app crashes on launch after the 5.2 update",
    "Crash in the migration of the local cache; hotfix 5.2.1 submitted with the migration guarded.",
    "success",
    score=0.8,
    tools=["xcode", "sentry"],
    tags=["mobile", "ios"],
)

# --- coding ------------------------------------------------------------------------------------

add(
    "code-webp",
    80,
    "Checkout page slow on mobile",
    "Largest contentful paint was 6.8 s; the hero image was the culprit.",
    "success",
    score=0.8,
    tools=["lighthouse"],
    tags=["frontend", "performance"],
    lesson="The hero image was 4 MB; serve WebP through the CDN with responsive widths.",
)
add(
    "code-pydantic-fail",
    150,
    "Upgrade pydantic to v2 in the orders service",
    "Tests failed in 40 places: validators, .dict() calls and Config classes. Reverted the upgrade.",
    "failure",
    score=0.1,
    tools=["pytest"],
    tags=["coding", "python", "dependencies"],
    lesson="Run bump-pydantic first and upgrade module by module; a big-bang upgrade cannot be reviewed.",
)
add(
    "code-pydantic-ok",
    120,
    "Upgrade pydantic to v2 in the orders service (module by module)",
    "Ran bump-pydantic, fixed validators by hand, merged in five PRs.",
    "success",
    score=0.9,
    tools=["pytest", "bump-pydantic"],
    tags=["coding", "python", "dependencies"],
)
add(
    "code-n-plus-one",
    64,
    "Orders list endpoint takes 4 s for large accounts",
    "Each order loaded its customer and line items separately: 1,200 queries per page.",
    "success",
    score=0.9,
    tools=["django-debug-toolbar"],
    tags=["coding", "performance"],
    lesson="N+1 queries: use select_related / prefetch_related and assert the query count in a test.",
)
add(
    "code-sqli",
    230,
    "SQL injection in the search endpoint reported by a pentester",
    "The sort parameter was concatenated into the query; switched to a whitelist of columns.",
    "success",
    score=0.9,
    tools=["python"],
    tags=["coding", "security"],
    lesson="Identifiers cannot be bound as parameters; map user input to a fixed set of column names.",
)
add(
    "code-secret-leak",
    180,
    "AWS access key committed to the public repo in config.py",
    "Revoked the key within 10 minutes, rewrote the history, added gitleaks to pre-commit.",
    "success",
    score=0.8,
    tools=["git", "aws"],
    tags=["coding", "security", "incident"],
    lesson="Revoke first, clean history second: a pushed secret is compromised the moment it is public.",
)
add(
    "code-tz",
    90,
    "Scheduled reports arrive an hour late for customers in Sydney",
    "The scheduler stored local times without a zone; converted the schedule to the customer's IANA zone.",
    "success",
    score=0.8,
    tools=["python"],
    tags=["coding", "bug"],
    lesson="Store schedules as wall-clock time plus an IANA timezone, and compute the next run in that zone.",
)
add(
    "code-flaky-order",
    40,
    "Flaky test test_order_total in CI",
    "Fails one run in ten; the expected list was built from a set.",
    "success",
    score=0.9,
    tools=["pytest"],
    tags=["coding", "ci", "tests"],
    lesson="Never compare against a list built from a set; sort both sides first.",
)
add(
    "code-rate-limit",
    100,
    "Add rate limiting to the /search endpoint",
    "Token-bucket middleware plus three tests; CI failed because it has no Redis.",
    "failure",
    score=0.3,
    tools=["pytest"],
    tags=["coding", "api"],
    lesson="CI has no Redis; limiter tests need the fakeredis fixture.",
)
add(
    "code-unicode-filenames",
    210,
    "Uploads with umlauts in the file name fail (Größe.pdf)",
    "The S3 key was built from the raw name; now NFC-normalised and percent-encoded.",
    "success",
    score=0.8,
    tools=["python"],
    tags=["coding", "bug"],
)

# --- data --------------------------------------------------------------------------------------

add(
    "data-etl-dst",
    210,
    "Nightly ETL job missing rows for 2024-03-31",
    "One hour of events was missing from the partition.",
    "success",
    score=0.8,
    tools=["airflow", "sql"],
    tags=["data", "etl"],
    lesson="The daylight saving time switch skips an hour in local time; partition by UTC.",
)
add(
    "data-revenue-mismatch",
    55,
    "Revenue dashboard 3% below Stripe for May",
    "The dashboard used payout dates; Stripe reports by charge date. Refunds in transit explained the rest.",
    "success",
    score=0.85,
    tools=["sql", "looker"],
    tags=["data", "finance", "dashboard"],
    lesson="Reconcile on charge date, and list refunds in transit separately.",
)
add(
    "data-dbt-null",
    38,
    "dbt model fct_orders failing on a not_null test for customer_id",
    "Guest checkouts have no customer_id since the April release; the test was too strict.",
    "success",
    score=0.8,
    tools=["dbt"],
    tags=["data", "dbt"],
    lesson="Model guest checkouts explicitly instead of relaxing the not_null test.",
)
add(
    "data-csv-encoding",
    70,
    "CSV import fails with UnicodeDecodeError for a customer file",
    "The file was Windows-1252 from Excel; detected the encoding and re-read it.",
    "success",
    score=0.8,
    tools=["python", "pandas"],
    tags=["data", "import"],
    lesson="Excel exports CSV as Windows-1252 on many machines; detect the encoding before parsing.",
)
add(
    "data-fr-csv",
    20,
    "Import CSV échoue : accents cassés et séparateur point-virgule",
    "Fichier en Windows-1252 avec « ; » comme séparateur ; import relancé avec les bons paramètres.",
    "success",
    score=0.8,
    tools=["python"],
    tags=["data", "import", "fr"],
)
add(
    "data-bq-backfill",
    95,
    "Backfill missing clickstream events into BigQuery for 12-14 June",
    "Replayed the raw files from GCS into the events table with a dedup on event_id.",
    "success",
    score=0.9,
    tools=["bq", "gsutil"],
    tags=["data", "bigquery"],
)
add(
    "data-retention-cohort",
    130,
    "Monthly retention cohorts for customers who signed up in 2024",
    "Built the cohort table with first-order month and active months; shared the chart with growth.",
    "success",
    score=0.9,
    tools=["sql"],
    tags=["data", "analytics"],
)
add(
    "data-warehouse-erasure",
    45,
    "Purge user 8812 from the warehouse tables",
    "Deleted rows in 14 tables and the raw bucket; the nightly snapshot rotates out in 30 days.",
    "success",
    score=0.9,
    tools=["bq"],
    tags=["gdpr", "warehouse"],
)
add(
    "data-report-old",
    120,
    "Export the monthly revenue report for the board",
    "Exported the report as PDF from Looker and sent it to the CFO.",
    "success",
    score=0.9,
    tools=["looker"],
    tags=["data", "finance"],
)
add(
    "data-report-new",
    11,
    "Export the monthly revenue report for the board",
    "Exported the report; the board now wants it as a spreadsheet too.",
    "success",
    score=0.9,
    tools=["looker"],
    tags=["data", "finance"],
)

# =============================================================================================
# Recurring task families: the same kind of work, again and again
# =============================================================================================

rng = random.Random(20260514)

CUSTOMERS = [
    "Acme Corp",
    "Globex",
    "Initech",
    "Umbrella Health",
    "Hooli",
    "Vandelay Industries",
    "Stark Logistics",
    "Wayne Foods",
    "Tyrell Systems",
    "Soylent GmbH",
    "Müller & Söhne",
    "Boulangerie Martin",
    "Nordlicht AG",
    "Cyberdyne",
    "Oceanic Air",
    "Pied Piper",
    "Massive Dynamic",
    "Wonka Sweets",
    "Gekko & Co",
    "Duff Brewing",
]


def age(low: float = 0.5, high: float = 700.0) -> float:
    # most work is recent: a log-uniform spread between low and high days
    return float(round(low * (high / low) ** rng.random(), 2))


def order_no() -> int:
    return rng.randint(10000, 99999)


# refunds of a duplicate charge
DUP_KEYS = []
for i, (reason, lesson) in enumerate(
    [
        ("the customer double-clicked Pay", None),
        ("the bank retried the authorisation", None),
        (
            "the webhook handler created the charge twice",
            "Make the webhook handler idempotent on the event id.",
        ),
        ("two browser tabs submitted the same cart", None),
        (
            "a manual charge was added on top of the automatic one",
            "Do not charge manually while an automatic retry is pending.",
        ),
        ("the payment was retried after a gateway timeout", None),
        ("the customer paid the invoice by card and by bank transfer", None),
        (
            "a subscription was created twice by the signup form",
            "Disable the submit button until the signup request returns.",
        ),
    ]
):
    c = rng.choice(CUSTOMERS)
    n = order_no()
    DUP_KEYS.append(
        add(
            f"bill-refund-dup-{i:02d}",
            age(1, 500),
            f"Refund duplicate charge on order {n} for {c}",
            f"Confirmed two succeeded charges ({reason}); refunded the second one.",
            "success",
            score=round(rng.uniform(0.75, 0.95), 2),
            tools=["stripe"],
            tags=["billing", "refund"],
            lesson=lesson,
        )
    )
DUP_KEYS.append(
    add(
        "bill-refund-dup-de",
        8,
        "Rückerstattung einer doppelten Abbuchung für Bestellung 48213",
        "Zwei erfolgreiche Zahlungen gefunden; die zweite erstattet und den Kunden informiert.",
        "success",
        score=0.9,
        tools=["stripe"],
        tags=["billing", "refund", "de"],
    )
)
DUP_KEYS.append(
    add(
        "bill-refund-dup-fr",
        29,
        "Remboursement d'un double prélèvement pour la commande 55120",
        "Deux paiements validés ; le second a été remboursé.",
        "success",
        score=0.9,
        tools=["stripe"],
        tags=["billing", "refund", "fr"],
    )
)

# refunds of cancelled subscriptions
CANCEL_REFUND_KEYS = []
for i in range(7):
    c = rng.choice(CUSTOMERS)
    plan = rng.choice(["Team", "Business", "Starter", "Enterprise"])
    months = rng.randint(1, 10)
    CANCEL_REFUND_KEYS.append(
        add(
            f"bill-refund-cancelled-{i:02d}",
            age(2, 600),
            f"Refund the unused part of a cancelled {plan} subscription for {c}",
            f"Cancelled with {months} months left; refunded the unused months pro rata.",
            "success",
            score=round(rng.uniform(0.7, 0.95), 2),
            tools=["stripe"],
            tags=["billing", "refund", "cancellation"],
            lesson=(
                "Annual plans are refundable pro rata only within 30 days of renewal."
                if i in (1, 4)
                else None
            ),
        )
    )

# other refunds (not duplicates, not cancellations)
for i, (what, outcome) in enumerate(
    [
        ("a late delivery of the onboarding workshop", "success"),
        ("a service outage of 6 hours", "success"),
        ("an unused add-on seat", "success"),
        ("a shipping fee on a digital product", "success"),
        ("an order paid by SEPA debit that bounced", "failure"),
        ("a gift card purchase", "failure"),
    ]
):
    add(
        f"bill-refund-other-{i:02d}",
        age(1, 600),
        f"Customer asks for a refund for {what}",
        "Refunded after checking the policy."
        if outcome == "success"
        else "Could not refund: not allowed by policy.",
        outcome,
        score=0.8 if outcome == "success" else 0.3,
        tools=["stripe"],
        tags=["billing", "refund"],
    )

# resending invoices
INVOICE_RESEND_KEYS = []
for i in range(9):
    c = rng.choice(CUSTOMERS)
    inv = f"INV-{rng.randint(2023, 2026)}-{rng.randint(1000, 9999)}"
    INVOICE_RESEND_KEYS.append(
        add(
            f"bill-invoice-resend-{i:02d}",
            age(1, 700),
            f"Resend invoice {inv} to the accounts team at {c}",
            f"Resent {inv} as PDF to the billing contact.",
            "success",
            score=0.9,
            tools=["billing-admin"],
            tags=["billing", "invoices"],
        )
    )

# card declines
for i, why in enumerate(
    [
        "insufficient funds",
        "the card expired last month",
        "the bank flagged the charge as fraud",
        "a corporate card with a 500 EUR limit",
        "a prepaid card not accepted for subscriptions",
        "a wrong postcode in the billing address",
    ]
):
    c = rng.choice(CUSTOMERS)
    add(
        f"bill-declined-{i:02d}",
        age(1, 500),
        f"Renewal payment declined for {c}",
        f"Decline reason: {why}. Sent the update-card link; payment succeeded on retry."
        if i % 3
        else f"Decline reason: {why}. Customer has not updated the card yet; dunning continues.",
        "success" if i % 3 else "partial",
        score=0.8 if i % 3 else 0.4,
        tools=["stripe"],
        tags=["billing", "dunning"],
    )

# invoice address / VAT id changes
for i in range(5):
    c = rng.choice(CUSTOMERS)
    add(
        f"bill-address-{i:02d}",
        age(1, 600),
        f"Update the billing address and VAT number for {c}",
        "Updated both in the customer record; the next invoice shows them.",
        "success",
        score=0.9,
        tools=["billing-admin"],
        tags=["billing"],
    )

# password resets
PASSWORD_KEYS = []
for i, (cause, fix) in enumerate(
    [
        ("the reset email was in spam", "Resent the email and asked them to allow our domain."),
        ("a typo in the account email", "Corrected the email after verifying the account owner."),
        (
            "the account uses SSO, so there is no password",
            "Explained that login goes through their Okta.",
        ),
        ("the reset link expired after 1 hour", "Sent a new link."),
        ("the corporate mail filter stripped the link", "Sent the link as plain text."),
        ("the account was deactivated by their admin", "Asked their admin to reactivate it."),
        ("they were using the old login page", "Sent the new login URL."),
    ]
):
    c = rng.choice(CUSTOMERS)
    PASSWORD_KEYS.append(
        add(
            f"sup-password-{i:02d}",
            age(0.5, 400),
            f"User at {c} cannot reset their password",
            f"Cause: {cause}. {fix}",
            "success",
            score=0.85,
            tools=["zendesk"],
            tags=["support", "login"],
        )
    )
PASSWORD_DE_KEYS = []
for i, (ursache, c) in enumerate(
    [
        ("die E-Mail lag im Spam-Ordner", "Nordlicht AG"),
        ("der Link war abgelaufen", "Müller & Söhne"),
        ("das Konto nutzt SSO", "Soylent GmbH"),
    ]
):
    PASSWORD_DE_KEYS.append(
        add(
            f"sup-de-passwort-{i:02d}",
            age(1, 300),
            f"Kunde ({c}) kann sein Passwort nicht zurücksetzen",
            f"Ursache: {ursache}. Neuen Link gesendet.",
            "success",
            score=0.85,
            tools=["zendesk"],
            tags=["support", "de"],
        )
    )

# 2FA lockouts (besides the hand-written one)
TWOFA_KEYS = []
for i in range(4):
    c = rng.choice(CUSTOMERS)
    TWOFA_KEYS.append(
        add(
            f"sup-2fa-{i:02d}",
            age(1, 500),
            f"2FA codes rejected for an admin at {c}",
            "The phone clock was 4 minutes off; turning on automatic time fixed the codes."
            if i % 2 == 0
            else "Reset 2FA after verifying the admin through the billing contact.",
            "success",
            score=0.85,
            tools=["admin"],
            tags=["support", "2fa", "security"],
        )
    )

# how-to questions
for i, (q, a) in enumerate(
    [
        ("How do I add a teammate to my workspace?", "Settings > Members > Invite; admins only."),
        (
            "How do I change the workspace owner?",
            "The current owner transfers it under Settings > Ownership.",
        ),
        (
            "Can I get invoices in German?",
            "Yes: set the invoice language under Billing > Preferences.",
        ),
        (
            "How do I connect the Slack integration?",
            "Integrations > Slack > Connect, then pick a channel.",
        ),
        ("Where do I find my API token?", "Settings > API; tokens are shown once at creation."),
        (
            "How do I turn off email notifications?",
            "Profile > Notifications; per-project settings override it.",
        ),
        ("Can we get a sandbox environment?", "Business plans include one; created it for them."),
        (
            "How do I archive old projects?",
            "Project menu > Archive; archived projects are read-only.",
        ),
        ("Do you support SCIM provisioning?", "Yes, on Enterprise with Okta and Azure AD."),
        ("How do I download the audit log?", "Settings > Security > Audit log > Export CSV."),
        ("Wie lade ich Teammitglieder ein?", "Einstellungen > Mitglieder > Einladen."),
        ("Comment changer la langue de l'interface ?", "Profil > Préférences > Langue."),
    ]
):
    add(
        f"sup-howto-{i:02d}",
        age(0.5, 700),
        q,
        a,
        "success",
        score=0.9,
        tags=["support", "howto"],
    )

# routine deploys
SERVICES = [
    "search-service",
    "frontend",
    "notifications",
    "auth-service",
    "reporting",
    "orders-api",
]
for i in range(16):
    svc = rng.choice(SERVICES)
    version = f"v{rng.randint(1, 4)}.{rng.randint(0, 30)}.{rng.randint(0, 9)}"
    env = rng.choice(["staging", "production", "production", "prod-eu"])
    failed = i in (3, 9)
    add(
        f"dev-deploy-routine-{i:02d}",
        age(0.3, 500),
        f"Deploy {svc} {version} to {env}",
        "Rolled back: smoke tests failed on the login flow."
        if failed
        else "Rolled out; smoke tests green.",
        "failure" if failed else "success",
        score=0.3 if failed else 0.9,
        tools=["argocd"],
        tags=["devops", "deploy"],
        lesson="Run the smoke tests against staging before promoting." if failed else None,
    )

# crash-looping pods
for i, (svc, cause) in enumerate(
    [
        ("notifications", "a missing SMTP_HOST environment variable"),
        ("reporting", "a failed database migration at start-up"),
        ("auth-service", "a malformed JWKS URL in the config map"),
        ("orders-api", "the liveness probe hitting a slow endpoint"),
        ("frontend", "an image built for arm64 on amd64 nodes"),
    ]
):
    add(
        f"dev-crashloop-{i:02d}",
        age(1, 500),
        f"{svc} pods in CrashLoopBackOff",
        f"Cause: {cause}. Fixed and redeployed.",
        "success",
        score=0.85,
        tools=["kubectl"],
        tags=["devops", "kubernetes"],
    )

# TLS certificate renewals
TLS_KEYS = []
for i, domain in enumerate(
    ["api.example.com", "app.example.com", "status.example.com", "example.de", "sso.example.com"]
):
    TLS_KEYS.append(
        add(
            f"dev-tls-{i:02d}",
            age(0.5, 400),
            f"Renew the TLS certificate for {domain}",
            "cert-manager renewal was stuck on the HTTP-01 challenge; fixed the ingress class and it renewed."
            if i == 1
            else "Renewed through cert-manager; expiry now in 90 days.",
            "success",
            score=0.9,
            tools=["cert-manager", "kubectl"],
            tags=["devops", "certificates"],
        )
    )

# disk alerts
for i in range(6):
    host = f"db-{rng.randint(1, 6)}" if i % 2 else f"worker-{rng.randint(1, 9)}"
    add(
        f"dev-disk-{i:02d}",
        age(0.5, 400),
        f"Disk usage alert at 90% on {host}",
        "Rotated and compressed old logs; usage at 55%."
        if i % 3
        else "WAL files piled up behind a stale replication slot; dropped the slot.",
        "success",
        score=0.85,
        tools=["ssh"],
        tags=["devops", "alerts"],
        lesson="An inactive replication slot keeps every WAL file; alert on slot lag."
        if i % 3 == 0
        else None,
    )

# bug fixes
for i, (bug, where) in enumerate(
    [
        ("off-by-one in pagination", "the projects list"),
        ("wrong currency symbol for CHF", "PDF invoices"),
        ("race condition when two users edit a comment", "the comments service"),
        ("memory leak in the websocket handler", "the realtime gateway"),
        ("emoji breaking the CSV export", "the export job"),
        ("session not invalidated after password change", "the auth service"),
        ("date picker showing US format to EU users", "the settings page"),
        ("404 on deep links after the router upgrade", "the frontend"),
        ("duplicate notifications on retry", "the notifications worker"),
        ("rounding error in tax totals", "the invoice generator"),
        ("search ignoring accented characters", "the search service"),
        ("broken unsubscribe link", "marketing emails"),
    ]
):
    add(
        f"code-bugfix-{i:02d}",
        age(1, 700),
        f"Fix {bug} in {where}",
        "Fixed with a regression test; merged.",
        "success" if i % 5 else "partial",
        score=0.9 if i % 5 else 0.5,
        tools=["git", "pytest"],
        tags=["coding", "bug"],
    )

# code reviews and small features
for i, what in enumerate(
    [
        "Review the PR that adds audit logging to the admin panel",
        "Add a dark mode toggle to the settings page",
        "Add pagination to the /v2/invoices API",
        "Write a migration script for the new pricing tables",
        "Review the PR that replaces requests with httpx",
        "Add OpenTelemetry tracing to the orders API",
        "Add a feature flag for the new onboarding flow",
        "Refactor the email templates into one base layout",
        "Add type hints to the billing module and enable mypy",
        "Speed up the test suite by running it in parallel",
    ]
):
    add(
        f"code-task-{i:02d}",
        age(1, 600),
        what,
        "Done and merged after review.",
        "success",
        score=0.85,
        tools=["git"],
        tags=["coding"],
    )

# flaky tests (besides the hand-written one)
FLAKY_KEYS = ["code-flaky-order"]
for i, (test, cause) in enumerate(
    [
        ("test_webhook_delivery", "a fixed 1 s sleep instead of waiting for the event"),
        ("test_export_job", "a shared temp directory between parallel workers"),
        ("test_login_throttle", "the wall clock crossing a minute boundary"),
    ]
):
    FLAKY_KEYS.append(
        add(
            f"code-flaky-{i:02d}",
            age(1, 400),
            f"Flaky test {test} fails intermittently in CI",
            f"Cause: {cause}. Fixed.",
            "success",
            score=0.85,
            tools=["pytest"],
            tags=["coding", "ci", "tests"],
        )
    )

# data pulls
for i, (metric, dim, period) in enumerate(
    [
        ("weekly active users", "plan", "Q1"),
        ("churn", "country", "last quarter"),
        ("average order value", "acquisition channel", "2025"),
        ("trial conversion", "signup source", "the last 90 days"),
        ("support tickets", "category", "March"),
        ("net revenue retention", "segment", "2024"),
        ("refund rate", "payment method", "H1"),
        ("API calls", "customer", "last month"),
        ("signups", "landing page", "the spring campaign"),
        ("failed payments", "card brand", "the last 6 months"),
    ]
):
    add(
        f"data-pull-{i:02d}",
        age(1, 600),
        f"Pull {metric} by {dim} for {period}",
        "Query written and the table shared in the analytics channel.",
        "success",
        score=0.9,
        tools=["sql"],
        tags=["data", "analytics"],
    )

# pipeline failures
for i, (job, cause) in enumerate(
    [
        ("the hourly sessions job", "the upstream S3 prefix was renamed"),
        ("the Salesforce sync", "an expired OAuth token"),
        ("the nightly snapshot export", "a full disk on the Airflow worker"),
        ("the currency rates loader", "the rates API changed its JSON format"),
        ("the marketing attribution model", "a schema change in the events table"),
    ]
):
    add(
        f"data-pipeline-{i:02d}",
        age(1, 500),
        f"Airflow: {job} failed",
        f"Cause: {cause}. Fixed and re-ran the missed intervals.",
        "success",
        score=0.85,
        tools=["airflow"],
        tags=["data", "airflow"],
    )

# incident write-ups
for i, what in enumerate(
    [
        "Write the postmortem for the 40-minute login outage",
        "Write the postmortem for the delayed invoice run",
        "Write the postmortem for the search index corruption",
    ]
):
    add(
        f"dev-postmortem-{i:02d}",
        age(5, 500),
        what,
        "Timeline, root cause and action items written; reviewed in the weekly ops meeting.",
        "success",
        score=0.9,
        tags=["postmortem", "incident"],
    )

# on-call alerts
for i, (alert, finding, lesson) in enumerate(
    [
        (
            "p99 latency above 2 s on orders-api",
            "A slow query after the index was dropped by a migration; recreated it.",
            "Check migrations for dropped indexes when latency jumps right after a release.",
        ),
        (
            "CPU at 95% on the search cluster",
            "A customer ran wildcard queries in a loop; rate limited their key.",
            None,
        ),
        (
            "error rate 8% on auth-service",
            "The identity provider had an outage; errors stopped when it recovered.",
            None,
        ),
        (
            "queue depth above 50k on the email queue",
            "A stuck consumer after a Redis failover; restarted the consumers.",
            "Consumers must reconnect after a Redis failover; add a health check on consume lag.",
        ),
        ("5xx spike on the frontend", "A bad CDN config purge; rolled the config back.", None),
        (
            "replication lag 20 minutes on db-3",
            "A long-running analytics query held back replay; moved analytics to a dedicated replica.",
            "Never point ad-hoc analytics at a replica that serves production reads.",
        ),
        (
            "certificate expires in 7 days on status.example.com",
            "cert-manager could not reach the ACME server through the new egress proxy; allowed it.",
            None,
        ),
        ("memory at 92% on cache-1", "Normal growth; resized the node.", None),
        (
            "cron job did not run: nightly invoices",
            "The cron pod was evicted during a node drain; re-ran it by hand.",
            "Invoice runs need a PodDisruptionBudget and an alert on missed runs.",
        ),
        (
            "SSL handshake errors from a payment provider",
            "They removed TLS 1.1; our egress proxy still offered it first. Updated the cipher list.",
            None,
        ),
    ]
):
    add(
        f"dev-alert-{i:02d}",
        age(0.5, 600),
        f"Alert: {alert}",
        finding,
        "success" if i % 4 else "partial",
        score=0.85 if i % 4 else 0.6,
        tools=["grafana", "kubectl"],
        tags=["devops", "on-call"],
        lesson=lesson,
    )

# cloud cost work
for i, (what, saved) in enumerate(
    [
        (
            "Cut the AWS bill for idle staging environments",
            "Scheduled staging to stop at night and on weekends.",
        ),
        ("Move old logs to cold storage", "Lifecycle rule to Glacier after 30 days."),
        (
            "Right-size the overprovisioned Kubernetes nodes",
            "Moved to smaller instances after two weeks of usage data.",
        ),
        (
            "Find out why NAT gateway costs doubled",
            "A batch job downloaded images through NAT; added an S3 VPC endpoint.",
        ),
        (
            "Buy savings plans for the steady compute baseline",
            "Covered 70% of the baseline with a 1-year plan.",
        ),
    ]
):
    add(
        f"dev-cost-{i:02d}",
        age(5, 700),
        what,
        saved,
        "success",
        score=0.85,
        tools=["aws"],
        tags=["devops", "cost"],
        lesson="Check data transfer through NAT first; it hides in the networking line of the bill."
        if i == 3
        else None,
    )

# more billing: plans, tax, currency
for i, (q, a, outcome, lesson) in enumerate(
    [
        (
            "Customer wants to switch from monthly to yearly billing",
            "Switched at the next renewal with the yearly discount.",
            "success",
            None,
        ),
        (
            "Tax exemption certificate for a US nonprofit",
            "Uploaded the certificate and marked the customer tax-exempt.",
            "success",
            "US tax exemptions are per state; check the certificate covers the billing state.",
        ),
        (
            "Customer asks to be billed in CHF instead of EUR",
            "Not possible on an existing subscription; created a new one in CHF at renewal.",
            "partial",
            "Stripe subscriptions cannot change currency; plan the switch at renewal.",
        ),
        (
            "Extend the trial by two weeks for a large prospect",
            "Extended the trial end date; sales informed.",
            "success",
            None,
        ),
        (
            "Apply a 20% nonprofit discount",
            "Applied a forever coupon to the subscription.",
            "success",
            None,
        ),
        (
            "Invoice shows the wrong company name",
            "The name came from the card holder; set the invoice name field.",
            "success",
            None,
        ),
        (
            "Customer needs a purchase order number on every invoice",
            "Added the PO number to the invoice custom fields.",
            "success",
            None,
        ),
        (
            "Downgrade from Business to Team keeps charging Business",
            "The downgrade was scheduled for the end of term, as designed; explained it.",
            "success",
            None,
        ),
        (
            "Pause a subscription for three months",
            "Paused collection with a resume date.",
            "success",
            None,
        ),
        (
            "Merge two customer accounts with separate subscriptions",
            "Cancelled one subscription at term end and added its seats to the other.",
            "partial",
            "Merging accounts loses invoice history in the merged-away account; export it first.",
        ),
        (
            "Kunde möchte die Zahlungsart auf SEPA-Lastschrift umstellen",
            "SEPA-Mandat eingerichtet; die nächste Abbuchung erfolgt per Lastschrift.",
            "success",
            None,
        ),
        (
            "Client souhaite une facture avec son numéro de TVA intracommunautaire",
            "Numéro ajouté au compte ; nouvelle facture émise.",
            "success",
            None,
        ),
        (
            "Le paiement par carte est refusé pour le renouvellement annuel",
            "Carte expirée ; lien de mise à jour envoyé, paiement passé.",
            "success",
            None,
        ),
        (
            "Rabattcode wird im Checkout nicht akzeptiert",
            "Der Code war abgelaufen; einen neuen Code erstellt.",
            "success",
            None,
        ),
    ]
):
    add(
        f"bill-misc-{i:02d}",
        age(1, 700),
        q,
        a,
        outcome,
        score=0.85 if outcome == "success" else 0.5,
        tools=["stripe"],
        tags=["billing"],
        lesson=lesson,
    )

# more support: bug reports, feature requests, accounts
for i, (q, a, lesson) in enumerate(
    [
        (
            "Customer reports that the dashboard shows yesterday's numbers",
            "The cache was not invalidated after the nightly import; cleared it and filed a bug.",
            "Cache keys for dashboards must include the import run id.",
        ),
        (
            "Feature request: export invoices as XML for accounting software",
            "Logged the request; pointed them to the invoices API meanwhile.",
            None,
        ),
        (
            "Customer cannot upload files larger than 100 MB",
            "Plan limit; offered the Business plan or the chunked upload API.",
            None,
        ),
        (
            "Emails from us land in the customer's spam folder",
            "Their mail server had no record of our DKIM key rotation; asked them to re-check.",
            None,
        ),
        (
            "Customer wants to move their data to the EU region",
            "Scheduled a migration window and moved the workspace.",
            "Region moves need a read-only window; agree on it in writing first.",
        ),
        (
            "User sees 'access denied' on a project they own",
            "A group permission overrode their role; removed the group restriction.",
            None,
        ),
        (
            "Customer asks whether we are SOC 2 compliant",
            "Sent the SOC 2 Type II report under NDA.",
            None,
        ),
        (
            "Mobile app does not receive push notifications on Android",
            "Battery optimisation killed the app; sent the whitelist instructions.",
            None,
        ),
        (
            "Customer wants to delete one of their workspaces",
            "Deleted after the owner confirmed by email.",
            None,
        ),
        (
            "Integration with HubSpot stopped syncing contacts",
            "Their HubSpot token was revoked when the admin left; reconnected.",
            "Integrations tied to a personal account break when that person leaves; use a service account.",
        ),
        (
            "Kunde meldet: Export bricht bei großen Projekten ab",
            "Zeitüberschreitung beim Export; Export als Hintergrundjob gestartet.",
            None,
        ),
        (
            "Kunde fragt nach einem Auftragsverarbeitungsvertrag (AVV)",
            "AVV zur Unterschrift gesendet.",
            None,
        ),
        (
            "Kundin kann sich nach Namensänderung nicht mehr anmelden",
            "Die E-Mail-Adresse hatte sich geändert; Konto umgestellt.",
            None,
        ),
        (
            "Le client ne reçoit plus les notifications par e-mail",
            "Adresse désinscrite par erreur ; réinscrite.",
            None,
        ),
        (
            "Le client demande un export de toutes ses données",
            "Export complet généré et lien envoyé.",
            None,
        ),
        (
            "Client signale des caractères illisibles dans les PDF",
            "Police sans accents dans le modèle ; modèle corrigé.",
            "Les modèles PDF doivent embarquer une police avec les accents.",
        ),
    ]
):
    add(
        f"sup-ticket-{i:02d}",
        age(0.5, 700),
        q,
        a,
        "success",
        score=0.85,
        tools=["zendesk"],
        tags=["support"],
        lesson=lesson,
    )

# more coding: dependency upgrades
for i, (what, outcome, lesson) in enumerate(
    [
        ("Upgrade Django from 4.2 to 5.0", "success", None),
        ("Upgrade Node.js from 18 to 20 in the frontend build", "success", None),
        (
            "Upgrade React to 18 in the admin app",
            "partial",
            "Strict mode double-invokes effects in development; fix effects that are not idempotent.",
        ),
        (
            "Upgrade SQLAlchemy to 2.0 in the reporting service",
            "failure",
            "SQLAlchemy 2.0 removed implicit autocommit; every write needs an explicit transaction.",
        ),
        (
            "Upgrade numpy to 2.0 in the data pipelines",
            "failure",
            "numpy 2 changed scalar representations; pin pandas to a compatible version first.",
        ),
        ("Upgrade the Python base image from 3.10 to 3.12", "success", None),
        (
            "Upgrade Celery from 4 to 5",
            "success",
            "Celery 5 renamed several settings; run the upgrade command on the config first.",
        ),
    ]
):
    add(
        f"code-upgrade-{i:02d}",
        age(5, 700),
        what,
        {
            "success": "Upgraded; tests green.",
            "partial": "Upgraded with known issues left.",
            "failure": "Reverted after test failures.",
        }[outcome],
        outcome,
        score={"success": 0.9, "partial": 0.5, "failure": 0.2}[outcome],
        tools=["git", "pytest"],
        tags=["coding", "dependencies"],
        lesson=lesson,
    )

# more data: investigations and dashboards
for i, (q, a, lesson) in enumerate(
    [
        (
            "Why did signups drop 30% on Tuesday?",
            "The signup event stopped firing after a frontend release; signups themselves were normal.",
            "Check the tracking before the business: a drop in one event is usually a tracking bug.",
        ),
        (
            "Build a dashboard for support ticket volume",
            "Looker dashboard with volume by category and first-response time.",
            None,
        ),
        (
            "Duplicate customers in the CRM export",
            "The join on email was case-sensitive; lower-cased both sides.",
            "Normalise emails (case, whitespace) before joining on them.",
        ),
        (
            "Monthly active users differ between Mixpanel and the warehouse",
            "Mixpanel counts anonymous users; the warehouse counts logged-in ones.",
            None,
        ),
        (
            "Forecast server costs for next year",
            "Linear model on the last 18 months plus planned launches.",
            None,
        ),
        (
            "Set up a daily anomaly alert on order volume",
            "Seasonal baseline per weekday; alerts in the data channel.",
            None,
        ),
        (
            "Nightly dbt run takes four hours",
            "Two models were full-refreshing; made them incremental.",
            "Incremental models need a unique key or they duplicate rows on retries.",
        ),
        (
            "Warehouse query costs spiked this month",
            "An hourly dashboard scanned the whole events table; added a partition filter.",
            None,
        ),
        (
            "Daten-Export für die Buchhaltung als CSV",
            "CSV mit Semikolon und deutschem Zahlenformat erstellt.",
            None,
        ),
        (
            "Analyse du taux de désabonnement par pays",
            "Tableau partagé avec l'équipe croissance.",
            None,
        ),
        (
            "Reconcile payouts with bank statements for April",
            "Two payouts were split by the bank; everything else matched.",
            None,
        ),
        (
            "A/B test results for the new pricing page",
            "Variant B lifted trial starts 4%, not significant after 2 weeks.",
            "Decide the sample size before starting, or a 2-week test proves nothing.",
        ),
    ]
):
    add(
        f"data-task-{i:02d}",
        age(1, 700),
        q,
        a,
        "success",
        score=0.85,
        tools=["sql"],
        tags=["data"],
        lesson=lesson,
    )

# chores that share words with many queries (rotate, configure, secret, webhook, report, ...)
for i, (q, a, tags, lesson) in enumerate(
    [
        (
            "Rotate the AWS access keys for the CI user",
            "New key pair in the CI secrets, old pair deleted after a green build.",
            ["devops", "security"],
            None,
        ),
        (
            "Rotate the reporting database password",
            "Changed it in Secrets Manager and restarted the reporting pods.",
            ["devops", "secrets"],
            "Restart every consumer after a password rotation; cached connections hide the failure for hours.",
        ),
        (
            "Rotate the application logs daily instead of weekly",
            "logrotate config changed to daily with 14 files kept.",
            ["devops"],
            None,
        ),
        (
            "Rotate the on-call schedule for the holidays",
            "Swapped the December shifts in PagerDuty.",
            ["devops", "on-call"],
            None,
        ),
        (
            "Configure Sentry alerts for the frontend",
            "Alert on new issues and on a 2x error spike.",
            ["devops", "monitoring"],
            None,
        ),
        (
            "Configure log shipping from Kubernetes to Datadog",
            "Deployed the agent as a DaemonSet with container log collection.",
            ["devops", "monitoring"],
            None,
        ),
        (
            "Configure branch protection on the main branch",
            "Required reviews and green CI before merge.",
            ["coding", "git"],
            None,
        ),
        (
            "Configure the SMTP settings for the status page",
            "Used the transactional provider with a dedicated sender.",
            ["devops", "email"],
            None,
        ),
        (
            "Configure a custom domain for a customer's help center",
            "CNAME verified and certificate issued.",
            ["support"],
            None,
        ),
        (
            "Store the new Twilio API secret in Secrets Manager",
            "Stored and referenced from the notifications deployment.",
            ["devops", "secrets"],
            None,
        ),
        (
            "Webhook deliveries to a customer endpoint fail with 410 Gone",
            "Their endpoint was removed; disabled the webhook and emailed them.",
            ["support", "api"],
            None,
        ),
        (
            "Customer says webhook payloads arrive out of order",
            "Explained ordering is not guaranteed; they should use the event timestamp.",
            ["support", "api"],
            "Tell integrators early that webhooks can arrive out of order and more than once.",
        ),
        (
            "Replay failed webhooks for the last 24 hours",
            "Replayed 1,843 events from the dead-letter queue.",
            ["devops", "api"],
            None,
        ),
        (
            "Weekly sales report is missing Friday's orders",
            "The report's date filter used < instead of <= on the end date.",
            ["data", "reports"],
            None,
        ),
        (
            "Schedule the churn report to run every Monday",
            "Scheduled in Looker to the leadership list.",
            ["data", "reports"],
            None,
        ),
        (
            "Run the data migration for the new pricing tables",
            "Migrated 18k price rows in batches; verified totals.",
            ["coding", "migrations"],
            None,
        ),
        (
            "Scale the Celery workers for the Black Friday peak",
            "Raised the autoscaler max to 40 and pre-warmed 20.",
            ["devops", "celery"],
            "Pre-warm workers an hour before a known peak; autoscaling lags by minutes.",
        ),
        (
            "Add a new payment method: iDEAL for Dutch customers",
            "Enabled in Stripe and added to checkout for NL.",
            ["billing", "payments"],
            None,
        ),
        (
            "Customer asks why the invoice total changed after a seat was added",
            "Explained the prorated charge for the new seat.",
            ["billing", "support"],
            None,
        ),
        (
            "Upload the new code signing certificate to the build server",
            "Imported into the keychain of the macOS runner.",
            ["devops", "certificates"],
            None,
        ),
        (
            "Set up a status page for the public API",
            "Status page with components per region and an uptime check.",
            ["devops"],
            None,
        ),
        (
            "Migrate the cron jobs to Kubernetes CronJobs",
            "Moved 14 jobs; two needed more memory than before.",
            ["devops", "migrations"],
            None,
        ),
        (
            "Investigate slow login for users with many workspaces",
            "The permission check loaded every workspace; cached it per session.",
            ["coding", "performance"],
            None,
        ),
        (
            "Write the runbook for a Redis failover",
            "Runbook with the promote and reconnect steps, tested in staging.",
            ["devops", "redis"],
            None,
        ),
        (
            "Customer in Canada charged in USD instead of CAD",
            "Their price list was USD; moved them to the CAD price at renewal.",
            ["billing"],
            None,
        ),
        (
            "Kunde bittet um Stornierung des Jahresabos",
            "Zum Ende der Laufzeit gekündigt; Bestätigung gesendet.",
            ["billing", "de"],
            None,
        ),
        (
            "Résiliation de l'abonnement demandée par le client",
            "Abonnement résilié à la fin de la période.",
            ["billing", "fr"],
            None,
        ),
        (
            "Clean up stale feature flags older than six months",
            "Removed 23 flags and their dead code paths.",
            ["coding"],
            None,
        ),
        (
            "Pin the Docker base images by digest",
            "All Dockerfiles now use image digests; Renovate updates them.",
            ["devops", "security"],
            None,
        ),
        (
            "Set up Renovate for dependency updates",
            "Weekly grouped PRs for minor updates.",
            ["coding", "dependencies"],
            None,
        ),
    ]
):
    add(
        f"chore-{i:02d}",
        age(0.5, 700),
        q,
        a,
        "success",
        score=0.85,
        tags=tags,
        lesson=lesson,
    )

# =============================================================================================
# Queries
# =============================================================================================

# morphology: the query inflects differently from the episode
ask(
    "morph-deploying",
    "morphology",
    "deploying payments-service to production",
    ["dev-deploy-payments-1", "dev-deploy-payments-2"],
)
ask(
    "morph-configure-saml",
    "morphology",
    "how did we configure SAML SSO with Okta for a customer?",
    ["sup-saml-okta"],
)
ask(
    "morph-rotating",
    "morphology",
    "rotating the Stripe webhook signing secrets",
    ["bill-rotate-whsec"],
)
ask(
    "morph-refunds-cancelled",
    "morphology",
    "refunds for cancelled subscriptions",
    CANCEL_REFUND_KEYS,
)
ask(
    "morph-retries",
    "morphology",
    "invoice email retries failing",
    ["bill-invoice-email-retry"],
)
ask(
    "morph-migrations-locking",
    "morphology",
    "database migrations locking the users table",
    ["dev-migration-lock"],
)
ask(
    "morph-restarting",
    "morphology",
    "restarting stuck celery workers",
    ["dev-celery-1", "dev-celery-2"],
)
ask(
    "morph-fr-factures",
    "morphology",
    "factures en double",
    ["bill-fr-facture-double"],
)

# tag-only: the words are only in the episode's tags
ask(
    "tag-gdpr",
    "tag-only",
    "anything on GDPR?",
    ["sup-gdpr-delete", "sup-de-loeschung", "data-warehouse-erasure"],
)
ask("tag-terraform", "tag-only", "terraform", ["dev-rds-resize", "dev-s3-private"])
ask("tag-chargebacks", "tag-only", "chargebacks", ["bill-dispute-1", "bill-dispute-2"])
ask("tag-pci", "tag-only", "PCI compliance", ["sup-card-in-chat"])
ask(
    "tag-postmortems",
    "tag-only",
    "postmortems",
    ["dev-postmortem-00", "dev-postmortem-01", "dev-postmortem-02"],
)

# lesson-only: the distinctive words are only in the lesson
ask(
    "lesson-dst",
    "lesson-only",
    "daylight saving time bug",
    ["data-etl-dst", "code-tz"],  # reports an hour late in Sydney: a DST shift too
)
ask("lesson-webp", "lesson-only", "serve images as WebP through the CDN", ["code-webp"])
ask("lesson-language", "lesson-only", "detect the language from the ticket body", ["sup-lang"])
ask("lesson-pgbouncer", "lesson-only", "pgbouncer transaction pooling", ["dev-pgbouncer"])
ask(
    "lesson-idempotency",
    "lesson-only",
    "idempotency key for payment retries",
    ["bill-double-charge-retry"],
)
ask("lesson-vies", "lesson-only", "validate VAT IDs against VIES", ["bill-vat-berlin"])
ask("lesson-fakeredis", "lesson-only", "fakeredis fixture", ["code-rate-limit"])

# recency ties: same relevance, the newer episode first
ask(
    "tie-celery",
    "recency-tie",
    "Restart the stuck Celery worker on prod-worker-2",
    ["dev-celery-1", "dev-celery-2"],
    first="dev-celery-2",
)
ask(
    "tie-staging-password",
    "recency-tie",
    "where is the staging database password?",
    ["dev-staging-pw-old", "dev-staging-pw-new"],
    first="dev-staging-pw-new",
)
ask(
    "tie-rechnungsadresse",
    "recency-tie",
    "Rechnungsadresse ändern",
    ["bill-de-addr-1", "bill-de-addr-2"],
    first="bill-de-addr-2",
)
ask(
    "tie-revenue-report",
    "recency-tie",
    "export the monthly revenue report",
    ["data-report-old", "data-report-new"],
    first="data-report-new",
)

# old but unique: the only relevant episode is years old, fresher ones share words
ask("old-fax", "old-unique", "configure the fax gateway", ["dev-fax"], first="dev-fax")
ask(
    "old-apns",
    "old-unique",
    "renew the APNs push certificate",
    ["dev-apns"],
    first="dev-apns",
)
ask(
    "old-leapday",
    "old-unique",
    "leap day renewal billed twice",
    ["bill-leapday"],
    first="bill-leapday",
)
ask(
    "old-smtp-fr",
    "old-unique",
    "configurer le relais SMTP",
    ["bill-fr-smtp"],
    first="bill-fr-smtp",
)

# long questions, as a person would type them
ask(
    "long-double-charge",
    "long",
    "Hi, one of our enterprise customers says they were charged twice for their annual "
    "subscription this morning, once at 09:02 and again at 09:04, and they want the duplicate "
    "refunded today. Have we dealt with something like this before, and what is the right way "
    "to handle it in Stripe?",
    [*DUP_KEYS, "bill-double-charge-retry"],
)
ask(
    "long-502",
    "long",
    "Our on-call engineer got paged at 3am because the nginx ingress started returning 502 Bad "
    "Gateway errors right after the search-service deploy, even though all the pods looked "
    "healthy. What happened the last time we saw 502s after a deploy and how did we fix it?",
    ["dev-502-keepalive"],
)
ask(
    "long-pg-upgrade",
    "long",
    "We're planning to upgrade the main Postgres cluster from 13 to 15 next weekend. Before I "
    "start, can you tell me whether anything went wrong the last time we did a major version "
    "upgrade, and what we should watch out for with extensions and replication?",
    ["dev-pg-upgrade-1", "dev-pg-upgrade-2"],
    first="dev-pg-upgrade-1",
    intent="what_failed",
)
ask(
    "long-de-rechnung",
    "long",
    "Guten Tag, ein Kunde aus Österreich hat seine Rechnung für März nicht erhalten und fragt, "
    "ob wir sie ihm erneut per E-Mail senden können. Wie sind wir da beim letzten Mal "
    "vorgegangen?",
    ["bill-de-rechnung-erneut"],
)
ask(
    "long-revenue",
    "long",
    "The finance team noticed that the revenue dashboard shows about 3% less than Stripe for "
    "last month, and they need the numbers reconciled before the board meeting on Thursday. Did "
    "we investigate a mismatch like this before, and what was the cause?",
    ["data-revenue-mismatch"],
)

# intent: the same task with different outcomes
ask(
    "intent-pydantic-failed",
    "intent",
    "what went wrong when we upgraded pydantic to v2",
    ["code-pydantic-fail", "code-pydantic-ok"],
    first="code-pydantic-fail",
    intent="what_failed",
)
ask(
    "intent-oom-worked",
    "intent",
    "search pods OOMKilled during reindex",
    ["dev-oom-fail", "dev-oom-success"],
    first="dev-oom-success",
    intent="what_worked",
)

# everyday lookups
ask(
    "look-2fa",
    "lookup",
    "customer lost their 2FA device and is locked out",
    # the 2FA resets after a second-channel check; not the ones fixed by the phone's clock
    ["sup-2fa-lost", TWOFA_KEYS[1], TWOFA_KEYS[3]],
)
ask("look-3ds", "lookup", "card declined because 3D Secure was not completed", ["bill-3ds"])
ask("look-flaky", "lookup", "flaky tests in CI", FLAKY_KEYS)
ask("look-n-plus-one", "lookup", "N+1 queries making the orders list slow", ["code-n-plus-one"])
ask(
    "look-csv-encoding",
    "lookup",
    "CSV import broken by file encoding",
    ["data-csv-encoding", "data-fr-csv"],
)
ask(
    "look-proration",
    "lookup",
    "proration when a customer upgrades their plan mid-cycle",
    ["bill-proration"],
)
ask("look-redis-evict", "lookup", "redis evicting session keys", ["dev-redis-evict"])
ask("look-sqli", "lookup", "SQL injection", ["code-sqli"])
ask("look-dbt", "lookup", "dbt not_null test failing on customer_id", ["data-dbt-null"])
ask("look-hpa", "lookup", "autoscaler not scaling pods", ["dev-hpa"])
ask("look-bq-backfill", "lookup", "backfill events into BigQuery", ["data-bq-backfill"])
ask("look-secret", "lookup", "secret key committed to the repo", ["code-secret-leak"])
ask(
    "look-timezone",
    "lookup",
    "scheduled reports sent at the wrong time in another timezone",
    ["code-tz"],
)
ask("look-dns", "lookup", "DNS cut-over for the marketing site", ["dev-dns"])
ask("look-restore", "lookup", "restore a table after an accidental delete", ["dev-restore"])
ask("look-coupon", "lookup", "coupon code not applied at checkout", ["bill-coupon"])
ask("look-de-passwort", "lookup", "Passwort zurücksetzen", PASSWORD_DE_KEYS)
ask("look-password", "lookup", "user cannot reset password", [*PASSWORD_KEYS, "sup-fr-mdp"])
ask(
    "look-invoice-resend",
    "lookup",
    "resend an invoice to a customer",
    [*INVOICE_RESEND_KEYS, "bill-de-rechnung-erneut"],
)
ask(
    "look-tls",
    "lookup",
    "TLS certificate renewal stuck",
    # the renewals that got stuck, not the routine ones
    [TLS_KEYS[1], "dev-alert-06"],
)
ask("look-de-refund", "lookup", "Rückerstattung doppelte Abbuchung", ["bill-refund-dup-de"])
ask("look-fr-refund", "lookup", "remboursement double prélèvement", ["bill-refund-dup-fr"])

# unrelated: no word of these (stopwords aside) occurs in the log; recall must return nothing
for i, text in enumerate(
    [
        "What's a good recipe for banana bread?",
        "Who won the football World Cup in 1998?",
        "How far is the moon from earth?",
        "Translate 'good morning' into Japanese",
        "How many calories are in an avocado?",
        "Which planet has the most moons?",
        "Give me a synonym for happy",
        "How do I fold a paper crane?",
        "Wie lange muss ein Ei kochen?",
        "Welcher Vogel singt im Winter?",
        "Quelle est la capitale de l'Australie ?",
        "Les meilleurs fromages de Normandie",
    ]
):
    ask(f"unrelated-{i:02d}", "unrelated", text, [])

# near misses: off-topic questions that share one ordinary word with the log ("write",
# "long", "name", "point", a place). Keyword recall cannot tell them apart from a real match;
# they are reported, not asserted (see docs/recall.md).
for i, text in enumerate(
    [
        "Write a haiku about autumn leaves",
        "Recommend a science fiction novel for a long flight",
        "Suggest names for a golden retriever puppy",
        "What is the boiling point of water on a mountain?",
        "Quelle est la capitale du Canada ?",
        "Is it going to rain in Lisbon tomorrow?",
    ]
):
    ask(f"near-miss-{i:02d}", "near-miss", text, [])


def main() -> None:
    from deepcrew_episodic._recall import terms

    vocabulary: set[str] = set()
    for e in EPISODES:
        ep = e["episode"]
        for text in [
            ep["query"],
            ep["response"],
            ep["reflection"] or "",
            *ep["tags"],
            *ep["tools_used"],
        ]:
            vocabulary |= terms(text)
    for q in QUERIES:
        shared = terms(q["query"]) & vocabulary
        if q["kind"] == "unrelated":
            assert not shared, (q["id"], shared)
        elif q["kind"] == "near-miss":
            assert shared, q["id"]
    keys = {e["key"] for e in EPISODES}
    for q in QUERIES:
        missing = [k for k in q["relevant"] if k not in keys]
        assert not missing, (q["id"], missing)
        assert q["first"] is None or q["first"] in q["relevant"], q["id"]
    with (HERE / "episodes.jsonl").open("w", encoding="utf-8") as out:
        for e in EPISODES:
            out.write(json.dumps(e, ensure_ascii=False) + "\n")
    (HERE / "queries.json").write_text(
        json.dumps(QUERIES, ensure_ascii=False, indent=1) + "\n", encoding="utf-8"
    )
    print(f"{len(EPISODES)} episodes, {len(QUERIES)} queries")


if __name__ == "__main__":
    main()
