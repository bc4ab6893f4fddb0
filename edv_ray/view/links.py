"""Where each page lives: the server's URLs and the static export's relative file names.

Ids are data: in a URL every id is percent-quoted whole (``quote(id, safe="")``: no ``/``,
``:`` or ``?`` survives), in the export a file name is the id itself only when it is
``[A-Za-z0-9._-]`` (not starting with a dot), else a hash of it. A link the export does
not hold comes back as ``None`` (the page shows the id as text, never a dead link).
"""

from __future__ import annotations

import hashlib
import re
from urllib.parse import quote, urlencode

_SAFE = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}")


def safe_name(value: str) -> str:
    """A file name for an id: the id when plainly safe, else ``h-`` + a hash of it."""
    value = str(value)
    if _SAFE.fullmatch(value) and not value.lower().endswith((".html", ".htm")):
        return value
    return "h-" + hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:32]


_RESERVED = re.compile(r"index|episodes(-\d+)?|compare|page-\d+|m-.*", re.IGNORECASE)


def item_file(item_id: str) -> str:
    """An item's file name under ``memory/`` (never one of the list pages' names)."""
    name = safe_name(item_id)
    return ("h-" + hashlib.sha256(name.encode()).hexdigest()[:32]) if _RESERVED.fullmatch(name) else name


def _query(params: dict) -> str:
    kept = {k: str(v) for k, v in params.items() if v not in (None, "") and not (k == "page" and str(v) == "1")}
    return ("?" + urlencode(kept)) if kept else ""


class ServerLinks:
    """Absolute paths on the viewer's server; ``prefix`` is ``""`` or ``/r/<i>``."""

    static_site = False

    def __init__(self, prefix: str = "", multi: bool = False, root: bool = False):
        self.prefix = prefix
        self.multi = multi
        self.root = root  # the runs' list (several runs): no run's pages from here

    def home(self) -> str:
        return "/"

    def overview(self) -> str:
        return self.prefix + "/"

    def memory(self, **filters) -> str | None:
        if self.root:
            return None
        return self.prefix + "/memory" + _query(filters)

    def item(self, item_id, page: int = 1) -> str | None:
        if not item_id:
            return None
        return self.prefix + "/memory/" + quote(str(item_id), safe="") + _query({"page": page})

    def episode(self, episode_id) -> str | None:
        return self.prefix + "/episode/" + quote(str(episode_id), safe="") if episode_id else None

    def episodes(self, **filters) -> str | None:
        if self.root:
            return None
        return self.prefix + "/episodes" + _query(filters)

    def compare(self) -> str:
        return "/compare" if self.root else self.prefix + "/compare"

    def all_compare(self) -> str:
        return "/compare"

    def static(self, name: str) -> str:
        return "/static/" + name

    def report_file(self, name: str) -> str:
        return self.prefix + "/report/" + quote(name, safe="")


class ExportLinks:
    """Relative links between the export's files. ``depth``: folders below the run's own
    folder the page sits in; ``run_prefix``: ``""`` or ``r/<i>/`` (several runs);
    ``items`` / ``episodes``: the ids the export holds (a growing set while pages are
    being planned: ``want_episode`` adds one while under the cap)."""

    static_site = True

    def __init__(self, site: ExportSite, depth: int = 0, run_prefix: str = "", root: bool = False):
        self.site, self.depth, self.run_prefix = site, depth, run_prefix
        self.multi = bool(run_prefix) or root
        self.root = root  # the runs' list of a multi-run export

    def at(self, depth: int) -> ExportLinks:
        return ExportLinks(self.site, depth, self.run_prefix)

    def _root(self) -> str:
        return "../" * (self.depth + self.run_prefix.count("/"))

    def _run(self) -> str:
        return "../" * self.depth

    def home(self) -> str:
        return self._root() + "index.html"

    def overview(self) -> str:
        return self._run() + "index.html"

    def memory(self, method=None, page=1, **other) -> str | None:
        if self.root or any(v not in (None, "") for v in other.values()):
            return None  # only the method filter is exported
        page = int(page or 1)
        if method and method not in self.site.methods(self.run_prefix):
            return None
        base = f"m-{safe_name(method)}" if method else "index"
        if page > self.site.memory_pages(self.run_prefix, method or ""):
            return None
        name = base if page == 1 else ("page" if not method else base) + f"-{page}"
        return self._run() + "memory/" + name + ".html"

    def item(self, item_id, page: int = 1) -> str | None:
        if not item_id or int(page) != 1 or item_id not in self.site.items(self.run_prefix):
            return None
        return self._run() + "memory/" + item_file(item_id) + ".html"

    def episode(self, episode_id) -> str | None:
        if not episode_id or not self.site.want_episode(self.run_prefix, episode_id):
            return None
        return self._run() + "episode/" + safe_name(episode_id) + ".html"

    def episodes(self, page=1, **other) -> str | None:
        if self.root or any(v not in (None, "") for v in other.values()):
            return None
        page = int(page or 1)
        if page > self.site.episode_pages(self.run_prefix):
            return None
        return self._run() + ("episodes.html" if page == 1 else f"episodes-{page}.html")

    def compare(self) -> str | None:
        return self._run() + "compare.html"

    def all_compare(self) -> str:
        return self._root() + "compare.html"

    def static(self, name: str) -> str:
        return self._root() + "static/" + name

    def report_file(self, name: str) -> str:
        return self._run() + "report/" + safe_name(name)


class ExportSite:  # the protocol ExportLinks reads (export.py implements it)
    def methods(self, run_prefix: str) -> set[str]: ...
    def memory_pages(self, run_prefix: str, method: str) -> int: ...
    def items(self, run_prefix: str) -> set[str]: ...
    def want_episode(self, run_prefix: str, episode_id: str) -> bool: ...
    def episode_pages(self, run_prefix: str) -> int: ...
