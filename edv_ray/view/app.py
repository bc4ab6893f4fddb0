"""The viewer's web app: Starlette routes over each run's DuckDB views, Jinja2 pages.

One DuckDB connection per run, opened once when the app is made; DuckDB connections are
not safe across threads (Starlette runs these sync handlers in a thread pool), so each
run's queries hold its lock. Read-only: GET/HEAD only, nothing is ever written. Every
response carries a Content-Security-Policy that allows no script at all.

One run: its pages at the root. Several runs (or a sweep's variants): ``/`` lists them,
each run's pages under ``/r/<index>/``, ``/compare`` compares them all.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, Response
from starlette.routing import Route

from edv_ray.view import queries as Q
from edv_ray.view.links import ServerLinks
from edv_ray.view.queries_item import resolve_items
from edv_ray.view.render import CSP, STYLESHEET, render

N_BOOT = 2000  # bootstrap resamples of the Compare page (edv compare's default: 10,000)
_PNG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,120}\.png")
_HEADERS = [(b"content-security-policy", CSP.encode()), (b"x-content-type-options", b"nosniff"),
            (b"referrer-policy", b"no-referrer"), (b"x-frame-options", b"DENY"),
            (b"cross-origin-resource-policy", b"same-origin")]


class SecurityHeaders:
    """Adds the CSP (no script) and its companions to every HTTP response."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def send_with_headers(message):
            if message["type"] == "http.response.start":
                drop = {k for k, _ in _HEADERS}
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() not in drop]
                message = {**message, "headers": headers + _HEADERS}
            await send(message)

        await self.app(scope, receive, send_with_headers)


class RunView:
    """One run folder: its connection (opened once), a lock, the cached overview."""

    def __init__(self, path: Path, label: str, index: int):
        from edv_ray.results.views import connect

        self.path, self.label, self.index = Path(path), label, index
        self.con = connect(self.path)
        self.lock = threading.Lock()
        self._overview: dict | None = None
        self._overview_ready = threading.Event()
        self._compare: dict | None = None
        with self.lock:
            Q.ensure_views(self.con)

    def query(self, fn, *args, **kwargs):
        with self.lock:
            return fn(self.con, *args, **kwargs)

    def warm(self) -> None:
        """Compute the overview (the report's tables and validity checks: seconds on a
        large run) on a connection of its own, so the other pages answer meanwhile."""
        from edv_ray.results.views import connect

        def work():
            try:
                con = connect(self.path)
                try:
                    self._overview = Q.overview(con, self.path)
                finally:
                    con.close()
            except Exception:  # noqa: BLE001 - the page computes it again and shows the error
                self._overview = None
            finally:
                self._overview_ready.set()

        threading.Thread(target=work, name=f"edv-view-overview-{self.index}", daemon=True).start()

    def overview(self) -> dict:
        """The views read the files listed at start: the overview is computed once."""
        if self._overview_ready.wait(timeout=600) and self._overview is not None:
            return self._overview
        with self.lock:
            if self._overview is None:
                self._overview = Q.overview(self.con, self.path)
            return self._overview

    def plots(self) -> list[str]:
        folder = self.path / "report"
        if not folder.is_dir() or folder.is_symlink():
            return []
        return sorted(p.name for p in folder.iterdir()
                      if _PNG.fullmatch(p.name) and p.is_file() and not p.is_symlink())

    def compare(self) -> dict:
        with self.lock:
            if self._compare is None:
                self._compare = compare_data([self.path])
            return self._compare


def compare_data(paths: list[Path], n_boot: int = N_BOOT) -> dict:
    """``edv compare``'s paired verdicts and Pass@1 rows for the runs (their own functions:
    :func:`edv_ray.report.compare_load.attach`, :func:`edv_ray.report.compare.compare_tables`);
    mixed task sets and failed validity checks are allowed here and said in the notes."""
    from edv_ray.config import ConfigError
    from edv_ray.report.compare import compare_tables
    from edv_ray.report.compare_load import attach
    from edv_ray.report.compare_units import fmt_cell

    out = {"pairs": [], "main": [], "runs": [], "notes": [], "error": None, "n_boot": n_boot}
    try:
        cmp = attach(list(paths), allow_mixed_tasks=True, allow_invalid=True)
        tables = compare_tables(cmp.con, n_boot=n_boot)
    except (ConfigError, ValueError) as err:
        out["error"] = f"cannot compare: {err}"
        return out
    out["notes"] = list(cmp.notes) + ([f"Left out (no result at the last epoch): {', '.join(tables['_left_out'])}"]
                                      if tables.get("_left_out") else [])
    out["pairs"] = tables["pairs"]
    out["main"] = [{"run": r["group"], "method": r["method"], "agent": r["agent"], "domain": r["domain"],
                    "Pass@1 [95% CI] n": fmt_cell(r)} for r in tables["main"]]
    out["runs"] = [{"run": r.label, "run_id": r.stored_run_id, "benchmark": r.benchmark, "seed": r.seed,
                    "test_tasks": len(r.tasks), "axes": r.axes_text} for r in cmp.runs]
    return out


def _page(template: str, status: int = 200, **ctx) -> HTMLResponse:
    return HTMLResponse(render(template, **ctx), status_code=status)


def _not_found(links, what: str, run: RunView | None = None) -> HTMLResponse:
    return _page("error.html.jinja", 404, links=links, title="Not found", message=what,
                 run_label=run.label if run else "")


def _int(value, default: int = 1) -> int:
    try:
        return max(1, int(value))
    except (TypeError, ValueError):
        return default


def _per(page: dict) -> int | None:
    return None if page["per_page"] == Q.PER_PAGE else page["per_page"]


def make_app(run_dirs: list[Path], *, allowed_hosts: list[str] | None = None) -> Starlette:
    """The viewer over run folders (a sweep folder means its variant runs)."""
    from edv_ray.report.compare_load import labels_for
    from edv_ray.report.compare_load import run_dirs as expand

    dirs = expand([Path(p) for p in run_dirs])
    runs = [RunView(p, label, i) for i, (p, label) in enumerate(zip(dirs, labels_for(dirs)))]
    for run in runs:
        run.warm()
    multi = len(runs) > 1
    all_compare: dict = {}
    all_lock = threading.Lock()

    def run_of(request: Request) -> tuple[RunView | None, ServerLinks]:
        i = request.path_params.get("run", 0)
        if not 0 <= i < len(runs):
            return None, ServerLinks("", multi, root=True)
        return runs[i], ServerLinks(f"/r/{i}" if multi else "", multi)

    def common(run: RunView, links: ServerLinks, title: str) -> dict:
        return {"links": links, "title": title, "run_label": run.label if multi else ""}

    def overview(request: Request):
        run, links = run_of(request)
        if run is None:
            return _not_found(links, "no such run")
        return _page("overview.html.jinja", ov=run.overview(), run_path=str(run.path), plots=run.plots(),
                     **common(run, links, "Overview"))

    def memory(request: Request):
        run, links = run_of(request)
        if run is None:
            return _not_found(links, "no such run")
        f = {k: request.query_params.get(k) or None for k in Q.FILTERS}
        page = run.query(Q.memory_page, **f, page=_int(request.query_params.get("page")),
                         per_page=_int(request.query_params.get("per_page"), Q.PER_PAGE))
        choices = run.query(Q.filter_choices)
        return _page("memory_list.html.jinja", page=page, choices=choices,
                     page_link=lambda n: links.memory(**page["filters"], page=n, per_page=_per(page)),
                     **common(run, links, "Memory"))

    def item(request: Request):
        run, links = run_of(request)
        item_id = request.path_params["item_id"]
        d = run.query(Q.memory_item, item_id, page=_int(request.query_params.get("page"))) if run else None
        if d is None and run is not None:  # a duplicate merged into another item: that item
            kept = run.query(resolve_items, [item_id]).get(item_id)
            if kept and kept != item_id:
                return Response(status_code=307, headers={"location": links.item(kept)})
        if d is None:
            return _not_found(links, f"no memory item {item_id!r} in this run", run)
        return _page("memory_item.html.jinja", d=d, retrieval_link=lambda n: links.item(item_id, n),
                     **common(run, links, d["item"]["title"] or "Memory item"))

    def episode(request: Request):
        run, links = run_of(request)
        eid = request.path_params["episode_id"]
        d = run.query(Q.episode, eid) if run else None
        if d is None:
            return _not_found(links, f"no episode {eid!r} in this run", run)
        return _page("episode.html.jinja", d=d, **common(run, links, f"Episode {eid}"))

    def episodes(request: Request):
        run, links = run_of(request)
        if run is None:
            return _not_found(links, "no such run")
        f = {k: request.query_params.get(k) or None for k in ("stage", "agent", "domain", "outcome")}
        page = run.query(Q.episode_page, **f, page=_int(request.query_params.get("page")),
                         per_page=_int(request.query_params.get("per_page"), Q.PER_PAGE))
        return _page("episodes.html.jinja", page=page,
                     page_link=lambda n: links.episodes(**page["filters"], page=n, per_page=_per(page)),
                     **common(run, links, "Episodes"))

    def compare(request: Request):
        run, links = run_of(request)
        if run is None:
            return _not_found(links, "no such run")
        return _page("compare.html.jinja", **run.compare(), **common(run, links, "Compare"))

    def report_file(request: Request):
        run, _ = run_of(request)
        name = request.path_params["name"]
        if run is None or not _PNG.fullmatch(name) or name not in run.plots():
            return Response("not found", status_code=404, media_type="text/plain")
        return FileResponse(run.path / "report" / name, media_type="image/png")

    def index(request: Request):
        links = ServerLinks("", True, root=True)
        rows = []
        for r in runs:
            rows.append({"index": r.index, "label": r.label, "path": str(r.path), "href": f"/r/{r.index}/",
                         "methods": r.overview()["methods"]})
        return _page("index.html.jinja", runs=rows, links=links, title="Runs", run_label="")

    def compare_all(request: Request):
        with all_lock:
            if not all_compare:
                all_compare.update(compare_data([r.path for r in runs]))
        return _page("compare.html.jinja", **all_compare, links=ServerLinks("", True, root=True),
                     title="Compare runs", run_label="")

    pages = [("/", overview), ("/memory", memory), ("/memory/{item_id:path}", item),
             ("/episode/{episode_id:path}", episode), ("/episodes", episodes),
             ("/compare", compare), ("/report/{name}", report_file)]
    routes = [Route(("/r/{run:int}" + p) if multi else p, fn) for p, fn in pages]
    if multi:
        routes = [Route("/", index), Route("/compare", compare_all),
                  Route("/r/{run:int}", lambda request: Response(status_code=307, headers={
                      "location": f"/r/{request.path_params['run']}/"})), *routes]
    css = STYLESHEET.read_text(encoding="utf-8")
    routes.append(Route("/static/view.css", lambda request: Response(css, media_type="text/css")))
    middleware = [Middleware(SecurityHeaders)]
    if allowed_hosts:
        middleware.append(Middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts))
    return Starlette(routes=routes, middleware=middleware)


def serve(run_dirs: list[Path], host: str = "127.0.0.1", port: int = 8765, echo=print) -> None:
    """Serve the viewer with uvicorn until Ctrl-C. On a loopback address only requests
    naming that host are answered (a page elsewhere cannot reach it by DNS rebinding)."""
    import uvicorn

    loopback = host in ("127.0.0.1", "localhost")
    hosts = ["127.0.0.1", "localhost"] if loopback else None
    app = make_app(run_dirs, allowed_hosts=hosts)
    shown = f"[{host}]" if ":" in host else host
    echo(f"serving http://{shown}:{port}/ (Ctrl-C stops)")
    uvicorn.run(app, host=host, port=port, log_level="warning")
