"""The viewer's ASGI application (Starlette): the pages, the token, the security headers.

Every request needs the access token: ``?token=`` on any GET sets the ``dce_token`` cookie
(HttpOnly, SameSite=Strict) and redirects to the same URL without it; then the cookie is
enough. A request without it gets a 403 page that shows no data. Every response carries a
strict Content-Security-Policy (no script at all: the pages need none), ``nosniff``, a
same-origin referrer policy and ``Cache-Control: no-store``. The style sheet, which holds no
data, is the one thing served without the token. GET handlers never write. Deleting is possible only
when the app is created with ``allow_forget=True``, through a confirmation form protected
against cross-site requests (an HMAC of the session token, and the request's origin).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import logging
import secrets
import time
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from importlib import resources
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote, urlencode

import anyio.to_thread
from jinja2 import Environment, PackageLoader, StrictUndefined, Template
from markupsafe import Markup
from starlette.applications import Starlette
from starlette.convertors import Convertor, register_url_convertor
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..cli._loopback import host_allowed, same_secret
from ._charts import COLOURS, MAX_BARS, stacked_bars
from ._data import (
    DEFAULT_PER_PAGE,
    MAX_PER_PAGE,
    OUTCOMES,
    BadRequest,
    Filter,
    Snapshot,
    Source,
    day_of,
    deciding,
    out_of_date_order,
    parse_count,
    parse_filter,
    parse_fraction,
    top,
    week_of,
)
from ._safe import Multiline, Plain, Raw, Verbatim, make_attribute, make_finalize, quoted

if TYPE_CHECKING:
    from .. import Episode, EpisodicMemory, History

__all__ = ["COOKIE", "CSP", "create_app"]

log = logging.getLogger("deepcrew_episodic")

COOKIE = "dce_token"
CSP = (
    "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; "
    "frame-ancestors 'none'"
)
SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    # same-origin, not no-referrer: with no-referrer Chromium sends "Origin: null" on the
    # viewer's own forms, which the CSRF check must refuse. Nothing leaves for another site.
    (b"referrer-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
]
INTENTS = ("any", "what_worked", "what_failed")
MAX_TOP_K = 50
MAX_TASK_CHARS = 20_000
# The history page lists at most the newest this many runs (its summary is the whole
# history's): a task run every few minutes for a year would be a page of megabytes.
MAX_HISTORY_ROWS = 500
# The forget preview lists at most this many episodes (the count is always whole).
PREVIEW_ROWS = 200
# What a page shows of a long text in a table cell.
CELL_CHARS = 160


def create_app(
    memory: EpisodicMemory,
    *,
    token: str,
    allow_forget: bool = False,
    label: str = "memory",
    redact: Callable[[str], str] | None = None,
    refresh_seconds: float | None = None,
) -> Starlette:
    """The viewer over *memory*, as an ASGI application.

    *token* is the secret every request must carry (``?token=`` once, then the cookie it
    sets). *allow_forget* adds the pages that delete episodes. *label* names the store on
    the pages (never a URL with its password). *redact* is applied to every stored string
    shown (default: the default :class:`~deepcrew_episodic.Redactor`). A log that takes more
    than 50 ms to load is loaded again when it changed (the memory's revision, checked on every
    page) and at least every *refresh_seconds* (default 60).

    Example::

        app = create_app(memory, token=secrets.token_urlsafe(32))
        await uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=8000)).serve()
    """
    if not isinstance(token, str) or len(token) < 16:
        from .. import ConfigurationError

        raise ConfigurationError("token must be a string of at least 16 characters")
    from .. import EpisodicMemoryError

    if redact is None:
        from .. import Redactor

        redact = Redactor().redact
    source = (
        Source(memory)
        if refresh_seconds is None
        else Source(memory, refresh_seconds=refresh_seconds)
    )
    viewer = _Viewer(memory, source, label=label, allow_forget=allow_forget, redact=redact)
    routes = [
        Route("/", viewer.timeline),
        Route("/episode/{episode_id:anything}", viewer.episode),
        Route("/playground", viewer.playground),
        Route("/overview", viewer.overview),
        Route("/history", viewer.history),
        Route("/forget", viewer.forget_preview, methods=["GET"]),
        Route("/forget", viewer.forget, methods=["POST"]),
        Route("/static/style.css", viewer.style),
    ]
    return Starlette(
        routes=routes,
        middleware=[Middleware(_Guard, token=token, page=viewer)],
        exception_handlers={404: viewer.not_found, EpisodicMemoryError: viewer.unavailable},
    )


class _Anything(Convertor[str]):
    """A path parameter that matches any text, line breaks and NUL included (``path`` stops
    at a line break, so an id with CR or LF could not be opened)."""

    regex = r"[\s\S]*"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("anything", _Anything())


class _Viewer:
    """The pages."""

    def __init__(
        self,
        memory: EpisodicMemory,
        source: Source,
        *,
        label: str,
        allow_forget: bool,
        redact: Callable[[str], str],
    ) -> None:
        self.memory = memory
        self.source = source
        self.label = label
        self.allow_forget = allow_forget
        # CSRF: a secret of this server process; the form's token is an HMAC of the session's.
        self.csrf_key = secrets.token_bytes(32)
        self.redact = redact
        # Read from the package on the first request, in a worker thread (see _load).
        self.templates: dict[str, Template] = {}
        self.css = b""

    # --- helpers ------------------------------------------------------------------------

    async def page(self, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        await self._ready()
        return HTMLResponse(self.templates[name].render(**context), status_code=status)

    def _load_templates(self) -> None:
        """The templates and the style sheet, read from the package (blocking file I/O)."""
        env = Environment(
            loader=PackageLoader("deepcrew_episodic.viewer", "templates"),
            autoescape=True,  # every template, whatever its name
            finalize=make_finalize(self.redact),
            undefined=StrictUndefined,
            auto_reload=False,  # the package's templates do not change under a server
            trim_blocks=True,
            lstrip_blocks=True,
        )
        env.globals.update(
            label=Plain(self.label),  # scrubbed by the caller (the CLI), not stored text
            allow_forget=self.allow_forget,
            quote=_quote,
            colours=COLOURS,
            raw=Raw,
        )
        env.filters["attribute"] = make_attribute(self.redact)
        self.css = (
            resources.files("deepcrew_episodic.viewer") / "static" / "style.css"
        ).read_bytes()
        # Loaded whole now, so that `extends` never reads a file later.
        for name in env.list_templates(extensions=["html"]):
            self.templates[name] = env.get_template(name)

    async def style(self, request: Request) -> Response:
        await self._ready()
        return Response(self.css, media_type="text/css")

    async def _ready(self) -> None:
        if not self.templates:
            await anyio.to_thread.run_sync(self._load_templates)

    async def error(self, status: int, title: str, message: str) -> HTMLResponse:
        # The viewer's own words: made visible, never redacted (only stored strings are).
        return await self.page("error.html", status, title=Plain(title), message=Plain(message))

    async def unavailable(self, request: Request, exc: Exception) -> Response:
        """A store failure (redis down, a broken file): a 503 page, the error logged."""
        log.error("viewer: the store failed on %s: %s", request.url.path, exc)
        return await self.error(
            503, "Store unavailable", "The store could not be read. Try again in a moment."
        )

    async def not_found(self, request: Request, exc: Exception) -> Response:
        return await self.error(404, "Not found", "There is no such page.")

    async def filter(self, params: dict[str, list[str]]) -> Filter:
        """The timeline's filter; its times are read in the memory's zone, in a worker thread
        when one is given (a phrase imports dateparser, a zone name reads the zone database)."""
        if not any(v.strip() for name in ("since", "until") for v in params.get(name, ())):
            return parse_filter(params)
        return await anyio.to_thread.run_sync(
            functools.partial(parse_filter, params, tz=self.memory.tz, now=time.time())
        )

    def csrf_for(self, session: str) -> str:
        return hmac.new(self.csrf_key, session.encode(), hashlib.sha256).hexdigest()

    # --- timeline -----------------------------------------------------------------------

    async def timeline(self, request: Request) -> Response:
        try:
            for single in ("page", "per"):
                if len(request.query_params.getlist(single)) > 1:
                    raise BadRequest(f"{single}: give it once")
            chosen = await self.filter(_multi(request))
            page = parse_count("page", request.query_params.get("page"), default=1, maximum=10**9)
            per = parse_count(
                "per",
                request.query_params.get("per"),
                default=DEFAULT_PER_PAGE,
                maximum=MAX_PER_PAGE,
            )
        except BadRequest as exc:
            return await self.error(400, "Bad request", str(exc))
        start = (page - 1) * per
        if chosen.active:
            snapshot = await self.source.snapshot()
            rows = await chosen.apply(self.source, snapshot)
            shown, total, stored = rows[start : start + per], len(rows), len(snapshot.episodes)
            age = _age(snapshot)
            grades = await self.source.grades_of(shown, snapshot)
        else:
            # No filter: the page alone is read (from the store's index where it keeps one),
            # so the first page of a large log costs what a page costs.
            listed = await self.memory.page(per, start)
            shown, total, stored = listed.episodes, listed.total, listed.total
            age = _age(Snapshot([], time.time(), 0.0))
            grades = await self.source.grades_of(shown)
        if page > 1 and start >= total:
            last_page = max(1, -(-total // per))
            return await self.error(
                400,
                "Bad request",
                f"page: {page} is past the last page ({last_page}) of {total} episodes",
            )
        keep = chosen.params() + ([("per", str(per))] if per != DEFAULT_PER_PAGE else [])
        return await self.page(
            "timeline.html",
            rows=[
                {**self._row(ep), "graded": deciding(ep, grades.get(ep.id, [])) is not None}
                for ep in shown
            ],
            out_of_order=out_of_date_order(shown),
            total=total,
            stored=stored,
            first=start + 1 if shown else 0,
            last=start + len(shown),
            prev_url=_link("/", [*keep, ("page", str(page - 1))]) if page > 1 else None,
            next_url=_link("/", [*keep, ("page", str(page + 1))]) if start + per < total else None,
            forget_url=_link("/forget", chosen.params()) if chosen.active and total else None,
            filter=chosen,
            outcomes=OUTCOMES,
            age=age,
            notice=_deleted_notice(request.query_params.get("deleted")),
        )

    # --- one episode --------------------------------------------------------------------

    async def episode(self, request: Request) -> Response:
        episode_id = request.path_params["episode_id"]
        snapshot = await self.source.snapshot()
        found = snapshot.by_id(episode_id)
        expired = False
        if found is None:
            # Not shown by load(): an expired one is still stored until swept.
            from .. import ConfigurationError

            try:
                selected = await self.memory.select(ids=[episode_id])
            except ConfigurationError:
                selected = []
            if not selected:
                return await self.error(
                    404, "No such episode", f"No episode has the id {episode_id!r}."
                )
            found, expired = selected[0], True
        expired = expired or self.memory.is_expired(found)
        # An expired episode is shown by its id only: not its text, its grades or its run.
        grades = [] if expired else await self.memory.grades(found.id)
        run = snapshot.run(found.run_id) if found.run_id and not expired else []
        # The outcome shown is the one the grades give; which grade decided it, and what
        # the run itself recorded, are shown beside it.
        decided = deciding(found, grades)
        recorded = None
        if decided is not None:
            before = await self.source.recorded(snapshot, found)
            if before is not None:
                recorded = {"outcome": before.outcome, "source": before.source_label()}
        return await self.page(
            "episode.html",
            ep=found,
            fields=[("id", Multiline(found.id))] if expired else _fields(found),
            expired=expired,
            grades=grades,
            decided=decided,
            graded_as={"outcome": found.outcome, "source": found.source_label()},
            recorded=recorded,
            run=[self._row(e) for e in run if not self.memory.is_expired(e)],
            run_id="" if expired else found.run_id,
            forget_url=_link("/forget", [("ids", found.id)]),
            age=_age(snapshot),
        )

    # --- playground ---------------------------------------------------------------------

    async def playground(self, request: Request) -> Response:
        from .. import EpisodicMemoryError

        params = request.query_params
        task = params.get("task", "")
        intent = params.get("intent") or "any"
        context: dict[str, Any] = {
            "task": Multiline(task),
            "intent": intent,
            "intents": INTENTS,
            "top_k": params.get("top_k") or str(self.memory.recall_k),
            "min_relevance": params.get("min_relevance") or "",
            "ran": False,
        }
        try:
            if intent not in INTENTS:
                raise BadRequest(
                    f"intent: {quoted(intent, 40)!r} is not one of {', '.join(INTENTS)}"
                )
            top_k = parse_count(
                "top_k", params.get("top_k"), default=self.memory.recall_k, maximum=MAX_TOP_K
            )
            floor = parse_fraction("min_relevance", params.get("min_relevance"))
            if len(task) > MAX_TASK_CHARS:
                raise BadRequest(f"task: at most {MAX_TASK_CHARS} characters")
        except BadRequest as exc:
            return await self.page("playground.html", 400, error=str(exc), **context)
        if not task.strip():
            return await self.page("playground.html", error="", **context)
        try:
            ranking = await self.memory.explain(task, top_k, intent=intent, min_relevance=floor)
        except EpisodicMemoryError as exc:
            return await self.page("playground.html", 400, error=str(exc), **context)
        block = self.memory.render(ranking)
        hybrid = ranking.by == "hybrid"
        items = [
            {
                "rank": n,
                "id": s.episode.id,
                "task": s.episode.query,
                "outcome": s.episode.outcome,
                "source": s.episode.source_label(),
                "keyword": _n(s.keyword),
                "similarity": _n(s.similarity) if hybrid and s.similarity is not None else "-",
                "meaning": _n(s.meaning) if hybrid and s.similarity is not None else "-",
                "recency": _n(s.recency),
                "outcome_weight": _n(s.outcome_weight),
                "uses": s.uses,
                "iterations": s.iterations,
                "score": _n(s.score),
                "relevance": _n(s.relevance),
                "matched": list(s.matched),
                "why": s.why(),
            }
            for n, s in enumerate(ranking, 1)
        ]
        # What the relevance floor kept out (as explain() and recall -v say it).
        under = [
            {
                "id": s.episode.id,
                "task": s.episode.query,
                "outcome": s.episode.outcome,
                "source": s.episode.source_label(),
                "relevance": _n(s.relevance),
                "matched": list(s.matched),
                "why": s.why(),
            }
            for s in ranking.under_floor
        ]
        context.update(
            ran=True,
            block=Verbatim(block),  # redacted by finalize like every stored string
            items=items,
            under=under,
            floor=f"{ranking.min_relevance:g}",
            hybrid=self.memory.embedder is not None,
            ranking=ranking.by,
            embedder_error=ranking.embedder_error or "",
            top_k=str(top_k),
        )
        return await self.page("playground.html", error="", **context)

    # --- history ------------------------------------------------------------------------

    async def history(self, request: Request) -> Response:
        """The runs of one task over time, oldest first, and where its run of successes broke
        (:meth:`~deepcrew_episodic.EpisodicMemory.history`: the runs recall finds for it)."""
        from .. import EpisodicMemoryError

        params = request.query_params
        task = params.get("task", "")
        context: dict[str, Any] = {
            "task": Multiline(task),
            "since": params.get("since", ""),
            "until": params.get("until", ""),
            "ran": False,
        }
        try:
            for single in ("task", "since", "until"):
                if len(params.getlist(single)) > 1:
                    raise BadRequest(f"{single}: give it once")
            if len(task) > MAX_TASK_CHARS:
                raise BadRequest(f"task: at most {MAX_TASK_CHARS} characters")
        except BadRequest as exc:
            return await self.page("history.html", 400, error=str(exc), **context)
        if not task.strip():
            return await self.page("history.html", error="", **context)
        try:
            # The memory reads the times (its clock, its zone): a bad one is a 400 naming it.
            found = await self.memory.history(
                task,
                since=params.get("since", "").strip() or None,
                until=params.get("until", "").strip() or None,
            )
        except EpisodicMemoryError as exc:
            return await self.page("history.html", 400, error=str(exc), **context)
        rows = [
            {**self._row(s.episode), "iterations": s.iterations, "broke": s is found.broke}
            for s in found[-MAX_HISTORY_ROWS:]
        ]
        context.update(
            ran=True,
            rows=rows,
            total=len(found),
            state=_history_status(found),
            failures=found.failures_since,
            broke=self._row(found.broke.episode) if found.broke is not None else None,
            last_success=(
                self._row(found.last_success.episode) if found.last_success is not None else None
            ),
        )
        return await self.page("history.html", error="", **context)

    # --- overview -----------------------------------------------------------------------

    async def overview(self, request: Request) -> Response:
        by = request.query_params.get("by") or "day"
        if by not in ("day", "week"):
            return await self.error(
                400, "Bad request", f"by: {quoted(by, 20)!r} is not 'day' or 'week'"
            )
        snapshot = await self.source.snapshot()
        stats = await self.source.stats(snapshot)
        key = f"overview:{by}"
        if key not in snapshot.derived:
            snapshot.derived[key] = _overview(snapshot, by)
        chart, cut, undated, tags, tools = snapshot.derived[key]
        top_count = max(stats.by_outcome.values(), default=0)
        histogram = [
            (o, n, round(n / top_count * 200) if top_count else 0)
            for o, n in stats.by_outcome.items()
        ]
        # Best to worst, as recall ranks them; "" is no source recorded (or an unknown outcome).
        sources = [
            (name or "none", stats.by_source.get(name, 0))
            for name in ("verifier", "user", "agent", "judge", "")
        ]
        counters = self.memory.counters
        return await self.page(
            "overview.html",
            by=by,
            chart=chart,
            cut=cut,
            undated=undated,
            histogram=histogram,
            sources=sources,
            stats=stats,
            size=_size(stats.stored_bytes),
            tags=tags,
            tools=tools,
            counters=[
                ("corrupt records skipped", stats.corrupt),
                ("corrupt records seen by this server", counters.corrupt_records),
                ("reflection failures", counters.reflection_failures),
                ("embedding failures", counters.embedding_failures),
                ("recall failures", counters.recall_failures),
                ("record failures", counters.record_failures),
                ("missing records", counters.missing_records),
                ("indexes recovered", counters.recovered_indexes),
                ("log went back (restored, restarted)", counters.rewound_logs),
                ("unsafe store settings", counters.unsafe_settings),
            ],
            age=_age(snapshot),
        )

    # --- forget -------------------------------------------------------------------------

    async def _selection(
        self, params: dict[str, list[str]], *, fresh: bool
    ) -> tuple[list[Episode], list[tuple[str, str]]]:
        """What a forget request selects: ``ids`` (every stored episode with one of them,
        expired ones included, as :meth:`forget` counts them) or the timeline's filter (the
        episodes the timeline shows for it), and the parameters that say so."""
        ids = [i for i in params.get("ids", []) if i]
        if ids:
            return await self.memory.select(ids=ids), [("ids", i) for i in ids]
        chosen = await self.filter(params)
        if not chosen.active:
            raise BadRequest("give ids or a filter: the viewer does not delete everything at once")
        if fresh:
            self.source.invalidate()
        return await chosen.apply(self.source, await self.source.snapshot()), chosen.params()

    def _row(self, ep: Episode) -> dict[str, Any]:
        """One row of a table of episodes: its text redacted before it is cut (a secret cut
        in its middle is no longer recognisable), and an expired episode (the forget page
        lists them) by its id only."""
        if self.memory.is_expired(ep):
            return {**_row(ep, self.redact), "task": "(expired)", "lesson": "", "score": "-"}
        return _row(ep, self.redact)

    async def forget_preview(self, request: Request) -> Response:
        if not self.allow_forget:
            return await self.not_found(request, Exception())
        try:
            selected, params = await self._selection(_multi(request), fresh=True)
        except BadRequest as exc:
            return await self.error(400, "Bad request", str(exc))
        session = request.cookies.get(COOKIE, "")
        return await self.page(
            "forget.html",
            count=len(selected),
            rows=[self._row(ep) for ep in selected[:PREVIEW_ROWS]],
            more=max(0, len(selected) - PREVIEW_ROWS),
            params=_hidden(params),
            digest=_digest(selected),
            csrf=self.csrf_for(session),
        )

    async def forget(self, request: Request) -> Response:
        if not self.allow_forget:
            return await self.not_found(request, Exception())
        refused = _cross_site(request)
        form = await request.form()
        given = form.get("csrf")
        session = request.cookies.get(COOKIE, "")
        if refused is None and not (
            isinstance(given, str) and hmac.compare_digest(given, self.csrf_for(session))
        ):
            refused = "the form's CSRF token is missing or wrong"
        if refused is not None:
            log.warning("viewer: refused a forget request: %s", refused)
            return await self.error(403, "Forbidden", f"Refused: {refused}. Nothing was deleted.")
        params: dict[str, list[str]] = {}
        for name, value in form.multi_items():
            if isinstance(value, str) and name not in ("csrf", "digest"):
                params.setdefault(name, []).append(_decode(value))
        try:
            selected, shown = await self._selection(params, fresh=True)
        except BadRequest as exc:
            return await self.error(400, "Bad request", str(exc))
        if form.get("digest") != _digest(selected):
            # The log changed between the confirmation page and now: confirm what it is now.
            return await self.page(
                "forget.html",
                409,
                count=len(selected),
                rows=[self._row(ep) for ep in selected[:PREVIEW_ROWS]],
                more=max(0, len(selected) - PREVIEW_ROWS),
                params=_hidden(shown),
                digest=_digest(selected),
                csrf=self.csrf_for(session),
                changed=True,
            )
        deleted = await self.memory.forget([ep.id for ep in selected]) if selected else 0
        self.source.invalidate()
        log.info("viewer: forgot %d episodes", deleted)
        return RedirectResponse(_link("/", [("deleted", str(deleted))]), status_code=303)


class _Guard:
    """The token check and the headers every response carries, around the whole app."""

    def __init__(self, app: ASGIApp, *, token: str, page: _Viewer) -> None:
        self.app = app
        self.token = token
        self.page = page

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)  # lifespan
            return

        started = False

        async def send_with_headers(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                headers = [
                    (k, v)
                    for k, v in message.get("headers", [])
                    if k.lower() not in {name for name, _ in SECURITY_HEADERS}
                ]
                message["headers"] = headers + SECURITY_HEADERS
            await send(message)

        request = Request(scope)
        if not host_allowed(scope, request.headers.get("host")):
            # DNS rebinding: a page of another site whose name now resolves to 127.0.0.1.
            refusal = await self.page.error(
                400, "Bad request", "The Host header does not name this server."
            )
            await refusal(scope, receive, send_with_headers)
            return
        if request.url.path == "/static/style.css" and request.method in ("GET", "HEAD"):
            # The style sheet holds no data: the token page itself needs it.
            await self.app(scope, receive, send_with_headers)
            return
        given = request.query_params.get("token")
        if given is not None and request.method in ("GET", "HEAD"):
            if not same_secret(given, self.token):
                await self._refuse(scope, receive, send_with_headers)
                return
            target = request.url.remove_query_params("token")
            # The path as the client sent it (the decoded one may hold CR, LF or NUL, which a
            # header cannot), with one leading slash: "//evil.example/" is another site.
            raw_path = scope.get("raw_path")
            sent = raw_path.decode("latin-1") if raw_path else quote(scope["path"])
            path = "/" + quote(sent, safe="/%:@!$&'()*+,;=~").lstrip("/\\")
            location = path + (f"?{target.query}" if target.query else "")
            response: Response = RedirectResponse(location, status_code=303)
            response.set_cookie(
                COOKIE, self.token, httponly=True, samesite="strict", path="/", secure=False
            )
            await response(scope, receive, send_with_headers)
            return
        if not same_secret(request.cookies.get(COOKIE, ""), self.token):
            await self._refuse(scope, receive, send_with_headers)
            return
        try:
            await self.app(scope, receive, send_with_headers)
        except Exception as exc:
            if started:
                raise
            # Not a store failure (those get the 503 page): a bug, or a third-party provider's
            # own error. Still the viewer's page, with its headers, never Starlette's bare 500.
            log.error(
                "viewer: %s failed: %s",
                request.url.path,
                # redacted, then cut: the message may quote stored text
                " ".join(self.page.redact(f"{type(exc).__name__}: {exc}").split())[:500],
            )
            failed = await self.page.error(
                500, "Server error", "This page failed; the server's log says why."
            )
            await failed(scope, receive, send_with_headers)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = await self.page.error(
            403,
            "Token needed",
            "This viewer needs its access token: open the URL it printed when it started "
            "(with ?token=...).",
        )
        await response(scope, receive, send)


def _overview(snapshot: Snapshot, by: str) -> tuple[Markup, int, int, list[Any], list[Any]]:
    """The chart, how many periods it leaves out, the undated count, top tags and tools:
    computed once per snapshot (a pass over every episode)."""
    period = day_of if by == "day" else week_of
    buckets: dict[str, Counter[str]] = {}
    tags: Counter[str] = Counter()
    tools: Counter[str] = Counter()
    undated = 0
    for ep, when in zip(snapshot.episodes, snapshot.times, strict=True):
        tags.update(dict.fromkeys(ep.tags, 1))
        tools.update(dict.fromkeys(ep.tools_used, 1))
        if when is None:
            undated += 1
            continue
        buckets.setdefault(period(when), Counter())[ep.outcome] += 1
    ordered = sorted(buckets.items())
    cut = max(0, len(ordered) - MAX_BARS)
    chart = stacked_bars(
        [(name, dict(c)) for name, c in ordered[cut:]], OUTCOMES, label=f"Outcomes per {by}"
    )
    return chart, cut, undated, top(tags), top(tools)


# --- small helpers ------------------------------------------------------------------------------


def _history_status(history: History) -> str:
    """Which sentence the history page ends with (the template words it)."""
    if history.broke is not None and history.last_success is not None:
        return "broke"
    if history.failing:
        return "never"
    return "working" if history.last_success is not None else "unknown"


def _hidden(params: Sequence[tuple[str, str]]) -> list[tuple[str, Raw]]:
    """The forget form's hidden fields, each value percent-encoded: a browser rewrites CR,
    LF and NUL in a form value, and the ids and filters must reach the server as stored."""
    return [
        (name, Raw(quote(value.encode("utf-8", "surrogateescape"), safe="")))
        for name, value in params
    ]


def _decode(value: str) -> str:
    """A hidden field's value as :func:`_hidden` encoded it."""
    return unquote(value, errors="surrogateescape")


def _deleted_notice(value: str | None) -> Plain:
    """The timeline's notice after a deletion: a fixed sentence, only the count from the URL."""
    if value is None or not value.isdigit() or len(value) > 12:
        return Plain("")
    n = int(value)
    return Plain(f"Deleted {n} episode{'s' * (n != 1)}.")


def _cross_site(request: Request) -> str | None:
    """Why a POST comes from another site, or ``None``: ``Sec-Fetch-Site`` when the browser
    sends it, and ``Origin`` (which must be this server's own)."""
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return f"a {site} request"
    origin = request.headers.get("origin")
    if origin is not None:
        own = f"{request.url.scheme}://{request.headers.get('host', '')}"
        if origin != own:
            return "a request from another origin"
    return None


def _multi(request: Request) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for name, value in request.query_params.multi_items():
        found.setdefault(name, []).append(value)
    return found


def _quote(value: str) -> Raw:
    return Raw(quote(value, safe=""))


def _link(path: str, params: Sequence[tuple[str, str]]) -> Raw:
    return Raw(path + (f"?{urlencode(list(params))}" if params else ""))


def _digest(episodes: Sequence[Episode]) -> str:
    ids = "\n".join(sorted(ep.id for ep in episodes))
    return hashlib.sha256(ids.encode("utf-8", "surrogateescape")).hexdigest()


def _n(value: float | None) -> str:
    """A score part as shown: 3 decimals, no float noise (0.399999995668588 reads 0.400)."""
    return "-" if value is None else f"{value:.3f}"


def _cut(text: str, limit: int = CELL_CHARS) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def _row(ep: Episode, redact: Callable[[str], str]) -> dict[str, Any]:
    return {
        "id": ep.id,
        "date": _date(ep.timestamp),
        "timestamp": ep.timestamp,
        "outcome": ep.outcome,
        "source": ep.source_label(),
        "score": "-" if ep.score is None else f"{ep.score:.2f}",
        "task": _cut(redact(ep.query)),
        "lesson": _cut(redact(ep.reflection or "")),
    }


def _date(stamp: str) -> str:
    return f"{stamp[:10]} {stamp[11:16]}" if len(stamp) >= 16 else (stamp or "undated")


def _fields(ep: Episode) -> list[tuple[str, Any]]:
    """Every field of *ep*, in the record's order, as the episode page shows it."""
    shown: list[tuple[str, Any]] = []
    for name, value in ep.to_dict().items():
        if value is None or value == "" or value == []:
            shown.append((name, "-"))
        elif isinstance(value, list):
            shown.append((name, ", ".join(value)))
        elif isinstance(value, str):
            shown.append((name, Multiline(value)))
        else:
            shown.append((name, str(value)))
    return shown


def _age(snapshot: Snapshot) -> str:
    """When the shown snapshot was loaded, for a page's footer."""
    stamp = datetime.fromtimestamp(snapshot.loaded_at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    seconds = time.time() - snapshot.loaded_at
    return stamp if seconds < 1 else f"{stamp} ({seconds:.0f} s ago)"


def _size(n: int) -> str:
    size = float(n)
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{n} bytes" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} bytes"
