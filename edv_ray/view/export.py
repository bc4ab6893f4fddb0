"""``edv view RUN --html DIR``: the viewer's pages as a self-contained static folder.

No server and no internet: every link is relative to the page (``index.html`` at the
root; with several runs each under ``r/<i>/``), the stylesheet and the run's report PNGs
are copied in, and a page the export does not hold is never linked (its id is shown as
text). File names are made from ids only when plainly safe (``links.safe_name``).

What it holds: the overview, the memory list (all, and per method) and every item page
(up to ``max_items``), the episode list and the pages of up to ``max_episodes`` episodes —
first those the item pages name (sources, then retrieving episodes), then the list's —
and the Compare page.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from edv_ray.view import queries as Q
from edv_ray.view.links import ExportLinks, ExportSite, item_file, safe_name
from edv_ray.view.render import STYLESHEET, render
from edv_ray.view.sql import pages

PER_PAGE = Q.PER_PAGE


class _Site(ExportSite):
    def __init__(self, max_items: int, max_episodes: int):
        self.max_items, self.max_episodes = max_items, max_episodes
        self._items: dict[str, set[str]] = {}
        self._methods: dict[str, dict[str, int]] = {}
        self._episodes: dict[str, dict[str, None]] = {}
        self._episode_total: dict[str, int] = {}
        self.frozen = False

    def plan_run(self, prefix: str, con) -> list[str]:
        Q.ensure_views(con)
        ids = [r[0] for r in con.execute(
            "SELECT item_id FROM view_items ORDER BY method, epoch NULLS LAST, bank, domain, item_id "
            "LIMIT ?", [self.max_items]).fetchall()]
        self._items[prefix] = set(ids)
        self._methods[prefix] = dict(con.execute(
            "SELECT method, count(*) FROM view_items GROUP BY 1").fetchall())
        self._episodes[prefix] = {}
        self._episode_total[prefix] = min(
            con.execute("SELECT count(*) FROM episodes").fetchone()[0], self.max_episodes)
        return ids

    def methods(self, run_prefix: str) -> set[str]:
        return set(self._methods.get(run_prefix, {}))

    def memory_pages(self, run_prefix: str, method: str) -> int:
        total = (self._methods[run_prefix].get(method, 0) if method
                 else sum(self._methods[run_prefix].values()))
        return pages(min(total, self.max_items), PER_PAGE)

    def items(self, run_prefix: str) -> set[str]:
        return self._items.get(run_prefix, set())

    def want_episode(self, run_prefix: str, episode_id: str) -> bool:
        held = self._episodes.setdefault(run_prefix, {})
        if episode_id in held:
            return True
        if self.frozen or len(held) >= self.max_episodes:
            return False
        held[episode_id] = None
        return True

    def episode_ids(self, run_prefix: str) -> list[str]:
        return list(self._episodes.get(run_prefix, {}))

    def episode_pages(self, run_prefix: str) -> int:
        return pages(self._episode_total.get(run_prefix, 0), PER_PAGE)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _export_run(site: _Site, out: Path, prefix: str, path: Path, label: str, multi: bool) -> int:
    """Every page of one run under ``out / prefix``; returns the number of files."""
    from edv_ray.results.views import connect
    from edv_ray.view.app import _PNG, compare_data

    con = connect(path)
    item_ids = site.plan_run(prefix, con)
    root = out / prefix
    top, deep = ExportLinks(site, 0, prefix), ExportLinks(site, 1, prefix)
    common = {"run_label": label if multi else ""}
    files = 0
    plots = []
    report = path / "report"
    if report.is_dir() and not report.is_symlink():
        for p in sorted(report.iterdir()):
            if _PNG.fullmatch(p.name) and p.is_file() and not p.is_symlink():
                (root / "report").mkdir(parents=True, exist_ok=True)
                shutil.copyfile(p, root / "report" / safe_name(p.name))
                plots.append(p.name)
                files += 1
    _write(root / "index.html", render("overview.html.jinja", ov=Q.overview(con, path), run_path=str(path),
                                       plots=plots, links=top, title="Overview", **common))
    choices = Q.filter_choices(con)
    for method in [None, *sorted(site.methods(prefix))]:
        for n in range(1, site.memory_pages(prefix, method or "") + 1):
            page = Q.memory_page(con, method=method, page=n, per_page=PER_PAGE)
            href = deep.memory(method=method, page=n)  # "../memory/<name>.html"
            _write(root / href.removeprefix("../"), render(
                "memory_list.html.jinja", page=page, choices=choices, links=deep, title="Memory",
                page_link=lambda k, m=method: deep.memory(method=m, page=k), **common))
            files += 1
    for item_id in item_ids:
        d = Q.memory_item(con, item_id)
        if d is None:
            continue
        _write(root / "memory" / (item_file(item_id) + ".html"), render(
            "memory_item.html.jinja", d=d, links=deep, title=d["item"]["title"] or "Memory item",
            retrieval_link=lambda k: None, **common))
        files += 1
    for n in range(1, site.episode_pages(prefix) + 1):
        page = Q.episode_page(con, page=n, per_page=PER_PAGE)
        _write(root / (top.episodes(page=n)), render(
            "episodes.html.jinja", page=page, links=top, title="Episodes",
            page_link=lambda k: top.episodes(page=k), **common))
        files += 1
    site.frozen = True
    for eid in site.episode_ids(prefix):
        d = Q.episode(con, eid)
        if d is None:
            continue
        _write(root / "episode" / (safe_name(eid) + ".html"), render(
            "episode.html.jinja", d=d, links=deep, title=f"Episode {eid}", **common))
        files += 1
    _write(root / "compare.html", render("compare.html.jinja", **compare_data([path]), links=top,
                                         title="Compare", **common))
    site.frozen = False
    con.close()
    return files + 2


def export_html(run_dirs: list[Path], out_dir: Path, max_episodes: int = 2000,
                max_items: int = 5000) -> Path:
    """Write the static export of the runs (a sweep folder: its variants) into
    ``out_dir``; returns the path of its ``index.html``."""
    from edv_ray.config import ConfigError
    from edv_ray.report.compare_load import labels_for
    from edv_ray.report.compare_load import run_dirs as expand
    from edv_ray.view.app import compare_data

    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--html {out}: exists and is not a folder")
    dirs = expand([Path(p) for p in run_dirs])
    labels = labels_for(dirs)
    out.mkdir(parents=True, exist_ok=True)
    (out / "static").mkdir(exist_ok=True)
    shutil.copyfile(STYLESHEET, out / "static" / "view.css")
    site = _Site(max_items, max_episodes)
    multi = len(dirs) > 1
    for i, (path, label) in enumerate(zip(dirs, labels)):
        _export_run(site, out, f"r/{i}/" if multi else "", path, label, multi)
    if multi:
        from edv_ray.results.views import connect

        rows = []
        for i, (path, label) in enumerate(zip(dirs, labels)):
            con = connect(path)
            rows.append({"index": i, "label": label, "path": str(path), "href": f"r/{i}/index.html",
                         "methods": Q.overview(con)["methods"]})
            con.close()
        home = ExportLinks(site, 0, "", root=True)
        _write(out / "index.html", render("index.html.jinja", runs=rows, links=home, title="Runs",
                                          run_label=""))
        _write(out / "compare.html", render("compare.html.jinja", **compare_data(dirs), links=home,
                                            title="Compare runs", run_label=""))
    return out / "index.html"
