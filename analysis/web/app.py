"""The viewer's Starlette app: routes, the access token, and the pages' assembly.

Read-only by construction (the store is opened with `open_readonly`). Bound to loopback by
default, where it answers only requests whose Host header names loopback (localhost, 127.0.0.1,
[::1]: a rebound DNS name of another site does not reach it); bound elsewhere, every request
must carry the token (`?token=`, a bearer header or the cookie set by the first `?token=`
request), checked in constant time. Pages are server-rendered
Jinja2 with a few lines of vanilla JS (`templates/viewer.js`) for sorting, paging and the live
view; no build step and no network beyond this server.
"""

from __future__ import annotations

import contextlib
import hmac
import secrets
import threading
from collections.abc import AsyncIterator, Callable, Hashable, Sequence
from typing import Any, TypeVar

import anyio.to_thread
from cachetools import LRUCache, cached
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from a2rl.listen import VIEW_PORT, listen
from a2rl.store import Run

from .. import fmt, plots
from ..attribution import attribution_section
from ..audit_view import AUDIT_FILTERS, audit_section, audit_states
from ..ledger_view import ledger_rows, ledger_section
from ..lineage_view import lineage_section, stage_rows
from ..render_html import TEMPLATES, environment, report_context, training_curves
from ..report import build_report
from ..schema import Report
from . import queries
from .readonly import ReadOnlyStore, open_readonly
from .transcripts import Message, attach_calls, from_call, parse

PAGE = 200  # conversation entries per page
JOB_PAGE = 20
REV_PAGE = 100
LIVE_STATES = ("created", "running", "finalizing")
MAX_ROW_ID = 2**63 - 1  # a larger id in a URL is no row (and would overflow the database's)

T = TypeVar("T")


def _count_param(request: Request, name: str) -> int:
    """A non-negative integer query parameter; anything else counts as 0 (never a 500)."""
    value = request.query_params.get(name, "")
    return min(int(value), 10**9) if value.isdigit() else 0


def _lru(compute: Callable[[Run], T], key: Callable[[Run], Hashable]) -> Callable[[Run], T]:
    """`compute` with a small cache of its results (the 16 most recently used), keyed by what
    changes them (`Viewer._key`). Locked: reports are computed in worker threads."""
    return cached(LRUCache(maxsize=16), key=key, lock=threading.Lock())(compute)


class TokenGate(BaseHTTPMiddleware):
    """Every request needs the token: query `token`, `Authorization: Bearer` or the cookie."""

    def __init__(self, app: Any, token: str) -> None:
        super().__init__(app)
        self.token = token

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        given = (request.query_params.get("token") or request.cookies.get("a2rl_view")
                 or request.headers.get("authorization", "").removeprefix("Bearer ").strip())
        if not given or not hmac.compare_digest(given.encode(), self.token.encode()):
            return PlainTextResponse("a2rl view: this server needs its token (?token=...)",
                                     status_code=401)
        response = await call_next(request)
        if request.query_params.get("token"):
            response.set_cookie("a2rl_view", self.token, httponly=True, samesite="strict")
        return response


class Viewer:
    def __init__(self, store: ReadOnlyStore, fleet: str | None = None) -> None:
        self.store, self.fleet, self.env = store, fleet, environment()
        # the data of the pages, cached: a finished run never changes, a live one is keyed by
        # its counts (`_key`)
        self.report: Callable[[Run], Report] = _lru(
            lambda run: build_report(self.store, run.id), self._key)
        self._messages = _lru(self._parse_conversation, self._key)
        self.training_curves: Callable[[Run], list[tuple[str, str, str]]] = _lru(
            lambda run: training_curves(self.store, run.id), self._key)
        for name in self.env.list_templates(extensions=["jinja"]):
            self.env.get_template(name)  # compiled at start, not on a user's first visit

    def page(self, name: str, status: int = 200, **ctx: Any) -> HTMLResponse:
        return HTMLResponse(self.env.get_template(name).render(**ctx), status_code=status)

    def not_found(self, what: str) -> HTMLResponse:
        return self.page("error.html.jinja", status=404, title="Not found", message=what)

    # --- data with caches: a finished run never changes, a live one is keyed by its counts

    def _key(self, run: Run) -> tuple[Any, ...]:
        if run.status == "finished":
            return (run.id, "finished", run.agent_transcript_sha)
        a = queries.activity(self.store, run.id)
        return (run.id, run.status, a.model_dump_json() if a else "")

    def conversation(self, run: Run) -> tuple[str, list[Message] | None]:
        """(format, messages); messages is None for agents without a transcript, whose
        conversation is the store's calls, paged in SQL."""
        if not run.agent_transcript_sha:
            return "none", None
        return self._messages(run)

    def _parse_conversation(self, run: Run) -> tuple[str, list[Message]]:
        kind, msgs = parse(queries.blob(self.store, run.agent_transcript_sha or ""),
                           run.agent)
        return kind, attach_calls(msgs, queries.calls(self.store, run.id))

    def conversation_page(self, run: Run, offset: int) -> tuple[str, list[Message], int]:
        kind, msgs = self.conversation(run)
        if msgs is None:
            total = queries.count_calls(self.store, run.id)
            rows = queries.calls(self.store, run.id, limit=PAGE, offset=offset)
            return kind, [from_call(c) for c in rows], total
        return kind, msgs[offset:offset + PAGE], len(msgs)

    # --- pages

    async def runs(self, request: Request) -> Response:
        fleet = request.query_params.get("fleet") or self.fleet
        rows = queries.list_runs(self.store, fleet)
        audits = audit_states(self.store, [r.run_id for r in rows])
        # `?audit=flagged` (or the short `?flagged=1`): the select on the page; an unknown
        # value shows every run rather than failing
        choice = request.query_params.get("audit") or (
            "flagged" if request.query_params.get("flagged") == "1" else "")
        choice = choice if choice in AUDIT_FILTERS else ""
        shown = [r for r in rows if audits[r.run_id].shown_by(choice)]
        return self.page("runs.html.jinja", title=f"fleet {fleet}" if fleet else "Runs",
                         rows=shown, total=len(rows), fleet=fleet, audits=audits,
                         audit_filter=choice, audit_filters=AUDIT_FILTERS,
                         has_profile=any(r.profile is not None for r in rows))

    async def run(self, request: Request) -> Response:
        """The run's first view, from cheap queries; the report's sections (which read the
        whole run) arrive from `/run/{id}/report` once computed."""
        run = queries.get_run(self.store, request.path_params["run_id"])
        if run is None:
            return self.not_found(f"no run {request.path_params['run_id']!r}")
        row = queries.list_runs(self.store, run_id=run.id)[0]
        kind, msgs, total = self.conversation_page(run, 0)
        evaluation, regrades = queries.reproducibility(self.store, run)
        lineage = lineage_section(self.store, run.id)
        attribution = attribution_section(self.store, run.id)
        return self.page(
            "run.html.jinja", title=f"run {run.id}", run=run, row=row,
            evaluation=evaluation, regrades=regrades,
            conv_format=kind, messages=msgs, conv_total=total, page=PAGE,
            jobs=queries.jobs(self.store, run, JOB_PAGE),
            job_total=queries.count_jobs(self.store, run.id), job_page=JOB_PAGE,
            revisions=queries.revisions(self.store, run, REV_PAGE),
            rev_total=queries.count_revisions(self.store, run.id), rev_page=REV_PAGE,
            submissions=queries.submissions(self.store, run),
            audit=audit_section(self.store, run.id),
            ledger_rows=ledger_rows(ledger_section(self.store, run.id)),
            lineage=lineage, lineage_rows=stage_rows(lineage.shown) if lineage else [],
            attribution=attribution, attribution_rows=fmt.attribution_rows(attribution),
            live=run.status in LIVE_STATES, activity=queries.activity(self.store, run.id),
            clock=queries.live_clock(run))

    async def report_fragment(self, request: Request) -> Response:
        """The report's sections as two HTML fragments (above and below the conversation)."""
        run = queries.get_run(self.store, request.path_params["run_id"])
        if run is None:
            return JSONResponse({"error": "no such run"}, status_code=404)
        rep = await anyio.to_thread.run_sync(self.report, run)
        curves = await anyio.to_thread.run_sync(self.training_curves, run)
        ctx = dict(run=run, **report_context(rep, curves, standalone=False))
        top = self.env.get_template("report_top.html.jinja").render(**ctx)
        bottom = self.env.get_template("report_bottom.html.jinja").render(**ctx)
        return JSONResponse({"top": top, "bottom": bottom})

    async def conversation_fragment(self, request: Request) -> Response:
        run = queries.get_run(self.store, request.path_params["run_id"])
        if run is None:
            return self.not_found("no such run")
        offset = _count_param(request, "offset")
        kind, msgs, total = self.conversation_page(run, offset)
        return self.page("conversation.html.jinja", run=run, messages=msgs, offset=offset,
                         conv_total=total, page=PAGE)

    async def jobs_fragment(self, request: Request) -> Response:
        run = queries.get_run(self.store, request.path_params["run_id"])
        if run is None:
            return self.not_found("no such run")
        offset = _count_param(request, "offset")
        return self.page("jobs.html.jinja", run=run, offset=offset, job_page=JOB_PAGE,
                         jobs=queries.jobs(self.store, run, JOB_PAGE, offset),
                         job_total=queries.count_jobs(self.store, run.id))

    async def revisions_fragment(self, request: Request) -> Response:
        run = queries.get_run(self.store, request.path_params["run_id"])
        if run is None:
            return self.not_found("no such run")
        offset = _count_param(request, "offset")
        return self.page("revisions.html.jinja", run=run, offset=offset, rev_page=REV_PAGE,
                         revisions=queries.revisions(self.store, run, REV_PAGE, offset),
                         rev_total=queries.count_revisions(self.store, run.id))

    async def job_log(self, request: Request) -> Response:
        run_id, job_id = request.path_params["run_id"], request.path_params["job_id"]
        j = queries.job(self.store, run_id, job_id)
        if j is None:
            return self.not_found(f"no job {job_id!r} in run {run_id!r}")
        log = queries.blob(self.store, j.log_blob_sha)
        text = log.decode("utf-8", errors="replace") if log is not None else \
            "(no log stored yet: the job may still be running)"
        return self.page("job.html.jinja", title=f"job {j.id}", run_id=run_id, job=j, log=text)

    async def call_page(self, request: Request) -> Response:
        run_id = request.path_params["run_id"]
        call_id = int(request.path_params["call_id"])
        c = queries.call(self.store, run_id, call_id) if call_id <= MAX_ROW_ID else None
        if c is None:
            return self.not_found("no such tool call")
        return self.page("call.html.jinja", title=f"call {c.seq or c.id}", run_id=run_id,
                         m=from_call(c),
                         started=c.started_at)

    async def revision(self, request: Request) -> Response:
        """A revision's diff: the fragment the run page loads into an opened revision
        (`?fragment=1`), or a page of its own when opened directly."""
        run_id = request.path_params["run_id"]
        rev_id = int(request.path_params["rev_id"])
        found = queries.revision_diff(self.store, run_id, rev_id) if rev_id <= MAX_ROW_ID \
            else None
        if found is None:
            return self.not_found("no such revision")
        if request.query_params.get("fragment"):
            return self.page("diff.html.jinja", diff=found[1])
        rev, diff = found
        return self.page("revision.html.jinja", title=f"revision {rev.id}", run_id=run_id,
                         rev=rev, diff=diff, call_seq=queries.call_seq(self.store,
                                                                       rev.tool_call_id))

    async def activity(self, request: Request) -> Response:
        run_id = request.path_params["run_id"]
        a = queries.activity(self.store, run_id)
        if a is None:
            return JSONResponse({"error": "no such run"}, status_code=404)
        after = _count_param(request, "after")
        new = queries.calls(self.store, run_id, after_id=after, limit=100)
        html = self.env.get_template("messages.html.jinja").render(
            run_id=run_id, messages=[from_call(c) for c in new])
        run = queries.get_run(self.store, run_id)
        scores, jobs_html = [], ""
        if run is not None:
            scores = [{"submission": s.id, "status": s.status, "scores": [
                {"split": e.split, "score": e.score, "kind": e.kind} for e in s.evaluations]}
                for s in queries.submissions(self.store, run)]
            # The jobs started since the page was rendered (it had `jobs_from` of them), in
            # their current state: the page replaces its list with these on each poll.
            jobs_from = _count_param(request, "jobs_from")
            jobs_html = self.env.get_template("jobs.html.jinja").render(
                run=run, offset=0, job_page=JOB_PAGE, job_total=0,
                jobs=queries.jobs(self.store, run, JOB_PAGE, jobs_from))
        clock = queries.live_clock(run).model_dump(mode="json") if run is not None else None
        # `ended`: the page stops following a run in any state past the live ones (finished,
        # or failed when its node was lost).
        return JSONResponse({"activity": a.model_dump(), "ended": a.status not in LIVE_STATES,
                             "clock": clock,
                             "calls_html": html,
                             "last_call_id": max([after] + [c.id or 0 for c in new]),
                             "jobs_html": jobs_html, "scores": scores})

    async def compare(self, request: Request) -> Response:
        ids = [x for v in request.query_params.getlist("run") for x in v.split(",") if x]
        runs = [r for r in (queries.get_run(self.store, i) for i in ids) if r is not None]
        if len(runs) < 2:
            return self.page("error.html.jinja", status=400, title="Compare",
                             message="pick two or more runs: /compare?run=A&run=B "
                                     "(tick them on the runs page)")
        reps = [self.report(r) for r in runs]
        items = [queries.final_items(self.store, r) for r in runs]
        common = sorted(set.intersection(*(set(i) for i in items))) if all(items) else []
        agree = {"items": len(common),
                 "all_right": sum(all(i[k] for i in items) for k in common),
                 "all_wrong": sum(not any(i[k] for i in items) for k in common)}
        pairs = []
        for a in range(len(runs)):
            for b in range(a + 1, len(runs)):
                keys = sorted(set(items[a]) & set(items[b]))
                pairs.append({"a": runs[a].id, "b": runs[b].id, "items": len(keys),
                              "same": sum(items[a][k] == items[b][k] for k in keys),
                              "only_a": sum(items[a][k] and not items[b][k] for k in keys),
                              "only_b": sum(items[b][k] and not items[a][k] for k in keys)})
        cols = []
        for run, rep in zip(runs, reps, strict=True):
            best = rep.summary.final_submission_id or rep.summary.best_submission_id
            route = next((x.route for x in rep.routes if x.submission_id == best), None)
            cols.append({"run": run, "r": rep, "route": route, "routes": [
                x.route for x in rep.routes]})
        plot = plots.compare_plot([(run.id, rep.trajectory, rep.timeline.end_s, run.final_score)
                                   for run, rep in zip(runs, reps, strict=True)])
        return self.page("compare.html.jinja", title="Compare", cols=cols, agree=agree,
                         pairs=pairs, plot=plot)

    async def static_js(self, request: Request) -> Response:
        return Response((TEMPLATES / "viewer.js").read_text(), media_type="text/javascript")

    async def healthz(self, request: Request) -> Response:
        return PlainTextResponse("ok")


def create_app(url: str | ReadOnlyStore, token: str | None = None,
               fleet: str | None = None, hosts: Sequence[str] | None = None) -> Starlette:
    """The viewer over the store at `url` (opened read-only). With `token`, every request
    must carry it. With `hosts`, a request whose Host header names another host is refused
    (400): served on loopback without a token, a page of another site could otherwise reach
    it through a DNS name rebound to 127.0.0.1."""
    store = url if isinstance(url, ReadOnlyStore) else open_readonly(url)
    v = Viewer(store, fleet)
    routes = [
        Route("/", v.runs), Route("/healthz", v.healthz), Route("/compare", v.compare),
        Route("/static/viewer.js", v.static_js),
        Route("/run/{run_id}", v.run),
        Route("/run/{run_id}/conversation", v.conversation_fragment),
        Route("/run/{run_id}/report", v.report_fragment),
        Route("/run/{run_id}/jobs", v.jobs_fragment),
        Route("/run/{run_id}/revisions", v.revisions_fragment),
        Route("/run/{run_id}/activity", v.activity),
        Route("/run/{run_id}/job/{job_id}", v.job_log),
        Route("/run/{run_id}/call/{call_id:int}", v.call_page),
        Route("/run/{run_id}/revision/{rev_id:int}", v.revision),
    ]
    middleware = [Middleware(TrustedHostMiddleware, allowed_hosts=list(hosts))] if hosts else []
    middleware += [Middleware(TokenGate, token=token)] if token else []
    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        yield
        store.close()

    app = Starlette(routes=routes, middleware=middleware, lifespan=lifespan)
    app.state.viewer = v
    return app


def is_loopback(host: str) -> bool:
    return host in ("127.0.0.1", "localhost", "::1") or host.startswith("127.")


def loopback_hosts(host: str) -> list[str]:
    """The Host header names a tokenless viewer on `host` (loopback) answers: this machine's
    own loopback names, and the address it is bound to."""
    bound = f"[{host}]" if ":" in host else host
    return list(dict.fromkeys(["localhost", "127.0.0.1", "[::1]", bound]))


def resolve_token(host: str, token: str | None) -> str | None:
    """The token to require: the given one, a fresh one off loopback, else none."""
    if token:
        return token
    return None if is_loopback(host) else secrets.token_urlsafe(24)


def serve(url: str, host: str = "127.0.0.1", port: int = VIEW_PORT, fleet: str | None = None,
          token: str | None = None, say: Callable[[str], None] = print) -> None:
    """Serve until interrupted. Off loopback a token is required (generated when not given).

    The store is opened and the address bound before "serving" is said: a missing store, a
    port in use or a host that is not this machine's raise (`StoreOpenError`, `ListenError`)
    with the line to show, and uvicorn gets the bound socket."""
    # uvicorn (~12 ms) only to serve: `a2rl runs --json` loads this package for its queries
    import uvicorn

    token = resolve_token(host, token)
    app = create_app(url, token=token, fleet=fleet,
                     hosts=None if token else loopback_hosts(host))
    sock = listen(host, port)
    shown = f"[{host}]" if ":" in host else host
    link = f"http://{shown}:{port}/" + (f"?token={token}" if token else "")
    say(f"a2rl view: serving the store read-only at {link} (Ctrl-C stops)")
    try:
        uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning")).run(
            sockets=[sock])
    finally:
        sock.close()
