"""A support bot's log of 30 episodes and the questions its users ask in their own words.

Each question names the episode that answers it (``None``: nothing in the log does). Several of
them share one incidental word with episodes about something else ("time", "app", "email",
"never", "account"): the relevance floor must keep those out.
"""

from __future__ import annotations

from deepcrew_episodic import Episode

# (key, query, outcome, tags, lesson)
LOG: list[tuple[str, str, str, list[str], str]] = [
    (
        "charged-twice",
        "Customer charged twice for the same order",
        "success",
        ["billing"],
        "A retried checkout made a duplicate charge; refund the second one in Stripe, it shows in 5-10 days.",
    ),
    (
        "reports-timeout",
        "Reports page timing out for large accounts",
        "success",
        ["reports"],
        "Reports over 50k rows time out; point the user to the scheduled CSV export.",
    ),
    (
        "reset-email",
        "Password reset email never arrives",
        "success",
        ["account", "email"],
        "Our sender domain was blocklisted at Outlook; resend from the backup domain.",
    ),
    (
        "app-crash",
        "Mobile app crashes on launch after the 4.2 update",
        "success",
        ["mobile"],
        "4.2 crashes on Android 9; tell the user to install 4.2.1 from the store.",
    ),
    (
        "cancel-plan",
        "How do I cancel my subscription?",
        "success",
        ["billing"],
        "Settings > Billing > Cancel; the plan runs until the end of the paid period.",
    ),
    (
        "annual-refund",
        "Refund for an annual plan cancelled mid-year",
        "success",
        ["billing"],
        "Annual plans are refunded pro rata within 30 days of renewal, never after.",
    ),
    (
        "invoice-name",
        "Invoice shows the wrong company name",
        "success",
        ["billing"],
        "The name comes from the billing profile; fix it there and regenerate the invoice.",
    ),
    (
        "2fa-codes",
        "Two-factor codes are rejected",
        "success",
        ["account", "security"],
        "The phone's clock had drifted; turn on automatic date and time.",
    ),
    (
        "google-sso",
        "Cannot log in with Google SSO",
        "success",
        ["account", "sso"],
        "The workspace enforces SSO on another domain; an admin must add the user's domain.",
    ),
    (
        "export-contacts",
        "Export contacts to a CSV file",
        "success",
        ["data"],
        "Contacts > Export; files over 10k rows arrive by email as a download link.",
    ),
    (
        "webhook-401",
        "Webhook deliveries fail with 401 Unauthorized",
        "success",
        ["integrations"],
        "The signing secret was rotated; paste the new one in the receiving service.",
    ),
    (
        "change-email",
        "Change the email address on my account",
        "success",
        ["account", "email"],
        "The new address must be verified before the old one stops working.",
    ),
    (
        "spam-folder",
        "Notification emails land in the spam folder",
        "success",
        ["email"],
        "Their mail server lacked our SPF include; ask them to allow-list notify.example.com.",
    ),
    (
        "dark-mode",
        "Dark mode missing in the desktop app",
        "partial",
        ["desktop"],
        "Dark mode ships in version 5; until then the beta channel has it.",
    ),
    (
        "upgrade-pro",
        "Upgrade from the Basic plan to Pro",
        "success",
        ["billing"],
        "Upgrades apply at once and the difference is prorated on the next invoice.",
    ),
    (
        "delete-account",
        "Delete my account and all my data",
        "success",
        ["privacy"],
        "Erasure requests go to the privacy queue and finish within 30 days.",
    ),
    (
        "slack-silent",
        "Slack integration stopped posting messages",
        "success",
        ["integrations"],
        "The Slack app's token was revoked; reinstall the app from the integrations page.",
    ),
    (
        "calendar-offset",
        "Calendar sync shows events at the wrong time",
        "success",
        ["integrations"],
        "The account's time zone differed from the calendar's; set both to the same zone.",
    ),
    (
        "rate-limit",
        "API requests rejected with 429 Too Many Requests",
        "success",
        ["api"],
        "The key exceeded 100 requests a minute; back off and retry, or ask for a higher quota.",
    ),
    (
        "card-declined",
        "Card declined at checkout",
        "failure",
        ["billing"],
        "The bank blocked the payment; the customer must approve it in their banking app.",
    ),
    (
        "add-member",
        "How do I add a team member?",
        "success",
        ["account"],
        "Settings > Team > Invite; invitations expire after 7 days.",
    ),
    (
        "upload-limit",
        "Uploads over 25 MB fail",
        "success",
        ["files"],
        "The limit is 25 MB per file on Basic; Pro raises it to 250 MB.",
    ),
    (
        "search-old",
        "Search finds nothing in tickets older than a year",
        "success",
        ["search"],
        "Old tickets were not reindexed after the migration; reindex the workspace.",
    ),
    (
        "session-expiry",
        "Session expires after a few minutes",
        "success",
        ["account"],
        "An admin set the idle timeout to 15 minutes; it is under Security settings.",
    ),
    (
        "vat-missing",
        "VAT number missing on the invoice",
        "success",
        ["billing"],
        "Add the VAT ID to the billing profile; past invoices can be reissued.",
    ),
    (
        "trello-import",
        "Import from Trello loses attachments",
        "failure",
        ["import"],
        "Attachments above 10 MB are skipped by the importer; upload them by hand.",
    ),
    (
        "app-store",
        "Cannot find the app in the App Store",
        "success",
        ["mobile"],
        "The app is not published in that country yet; send the web version link.",
    ),
    (
        "verify-link",
        "Email verification link expired",
        "success",
        ["account", "email"],
        "Verification links last 24 hours; resend one from the login page.",
    ),
    (
        "wrong-currency",
        "Checkout shows prices in the wrong currency",
        "success",
        ["billing"],
        "The currency follows the billing country; change the country before paying.",
    ),
    (
        "widget-blank",
        "Chat widget does not load on the website",
        "success",
        ["widget"],
        "The site's Content-Security-Policy blocked our script; add widget.example.com to it.",
    ),
]

# (question, the key of the episode that answers it, or None: nothing in the log does)
QUESTIONS: list[tuple[str, str | None]] = [
    ("got charged two times this month", "charged-twice"),
    ("the app keeps closing right after I open it", "app-crash"),
    ("the reset link never showed up in my inbox", "reset-email"),
    ("your emails end up in my junk mail", "spam-folder"),
    ("meetings appear an hour off in my schedule", "calendar-offset"),
    ("I was logged out after a short while", "session-expiry"),
    ("how long does it take to get my money back", "charged-twice"),
    ("what time does your office open", None),
    ("I never use the app on weekends", None),
]


def episodes(now: float) -> list[tuple[str, Episode]]:
    """The log as episodes, oldest first, one a day up to *now*."""
    from deepcrew_episodic._episode import now_iso

    found = []
    for i, (key, query, outcome, tags, lesson) in enumerate(LOG):
        days = len(LOG) - i
        found.append(
            (
                key,
                Episode(
                    id=key,
                    query=query,
                    response="Answered.",
                    outcome=outcome,  # type: ignore[arg-type]
                    tags=tags,
                    reflection=lesson,
                    timestamp=now_iso(now - days * 86400),
                ),
            )
        )
    return found
