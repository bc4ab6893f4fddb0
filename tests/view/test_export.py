"""`edv view RUN --html DIR`: a self-contained static folder — relative links only, each
resolving to a file of the export, no script, hostile text escaped, safe file names."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tests.view.test_app import Page, rb_run, read, rows_of
from tests.view.view_kit import SCRIPT

_URL_ATTRS = ("href", "src", "action", "srcset", "poster", "data")


def check_site(root: Path) -> dict[Path, str]:
    """Every HTML page of the export, after checking each of its links and sources."""
    pages = {p: p.read_text(encoding="utf-8") for p in root.rglob("*.html")}
    assert pages
    for path, html in pages.items():
        assert "<script" not in html.lower(), path
        assert not re.search(r"https?://", html.split("<main>", 1)[0]), path  # head + nav
        for tag, attrs in Page(html).tags:
            for key in _URL_ATTRS:
                if key not in attrs:
                    continue
                url = attrs[key]
                assert url and not re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:|//|/", url), (path, tag, url)
                target = (path.parent / url.split("#", 1)[0]).resolve()
                assert target.is_file() and root.resolve() in target.parents, (path, url)
    css = (root / "static" / "view.css").read_text()
    assert "url(" not in css and "@import" not in css and "http" not in css
    return pages


@pytest.fixture(scope="module")
def site(edv_run_dir, tmp_path_factory) -> Path:
    from edv_ray.cli import main

    out = tmp_path_factory.mktemp("export") / "site"
    assert main(["view", str(edv_run_dir), "--html", str(out)]) == 0
    return out


def test_export_is_self_contained(site, edv_run_dir):
    pages = check_site(site)
    assert (site / "index.html").is_file() and (site / "compare.html").is_file()
    items = read(edv_run_dir, "memory")
    for i in items:  # every item of the banks has its page (hex ids: their own names)
        assert (site / "memory" / f"{i['item_id']}.html").is_file()
    overview = pages[site / "index.html"]
    assert Page(overview).find("a", cls="method-memory", href="memory/m-edv.html")
    assert (site / "report" / "ability_matrix.png").is_file()
    assert 'src="report/ability_matrix.png"' in overview


def test_export_follows_an_item_to_its_episodes_and_back(site, edv_run_dir):
    shared = next(i for i in read(edv_run_dir, "memory") if i["bank"] == "shared")
    path = site / "memory" / f"{shared['item_id']}.html"
    html = path.read_text()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and SCRIPT not in html
    want = read(edv_run_dir, "edv/votes")
    assert len(rows_of(html, "votes")) >= 2 and len(rows_of(html, "votes")) <= len(want)
    page = Page(html)
    retriever = page.find("a", cls="retrieving-episode")[0]["href"]
    assert retriever.startswith("../episode/")
    ep = (path.parent / retriever).read_text()
    back = [a["href"] for a in Page(ep).find("a", cls="memory-ref")]
    assert f"../memory/{shared['item_id']}.html" in back
    source = page.find("a", cls="source-episode")[0]["href"]
    assert (path.parent / source).is_file()


def test_export_caps_episodes_and_never_links_a_missing_page(edv_run_dir, tmp_path):
    from edv_ray.view.export import export_html

    export_html([edv_run_dir], tmp_path / "one", max_episodes=1)
    assert len(list((tmp_path / "one" / "episode").glob("*.html"))) == 1
    check_site(tmp_path / "one")  # every other episode is named as text, not linked


@pytest.mark.slow
def test_several_runs_export_under_their_own_folders(edv_run_dir, tmp_path):
    from edv_ray.view.export import export_html

    other = tmp_path / "runs" / "copy"
    shutil.copytree(edv_run_dir, other)
    out = tmp_path / "site"
    export_html([edv_run_dir, other], out, max_episodes=3)
    pages = check_site(out)
    index = Page(pages[out / "index.html"])
    assert [a["href"] for a in index.find("a", cls="run-link")] == ["r/0/index.html", "r/1/index.html"]
    assert (out / "r" / "1" / "memory" / "index.html").is_file()


def test_file_names_from_ids_are_safe():
    from edv_ray.view.links import item_file, safe_name

    assert safe_name("execute-e0-mock-t1-good-3f2a") == "execute-e0-mock-t1-good-3f2a"
    for hostile in ("../../etc/passwd", "a/b", "rb-x:0", ".hidden", "x.html", "<script>", "a b",
                    "con\x00", "é", ""):
        name = safe_name(hostile)
        assert re.fullmatch(r"h-[0-9a-f]{32}", name), (hostile, name)
    assert safe_name("a/b") != safe_name("a:b")
    for reserved in ("index", "page-2", "m-edv", "compare", "episodes-3"):
        assert item_file(reserved).startswith("h-")


def test_export_refuses_a_file_as_its_folder(edv_run_dir, tmp_path):
    from edv_ray.cli import main

    target = tmp_path / "file"
    target.write_text("x")
    assert main(["view", str(edv_run_dir), "--html", str(target)]) == 2


def test_ids_that_are_not_file_names_are_hashed(tmp_path):
    """ReasoningBank item ids hold a colon: their pages get hashed names, and links reach them."""
    from edv_ray.view.export import export_html
    from edv_ray.view.links import safe_name

    run, item_id, _, infer = rb_run(tmp_path)
    out = tmp_path / "site"
    export_html([run], out)
    check_site(out)
    page = out / "memory" / f"{safe_name(item_id)}.html"
    assert page.is_file() and safe_name(item_id).startswith("h-")
    ep = (out / "episode" / f"{infer[0]['episode_id']}.html").read_text()
    assert f'href="../memory/{safe_name(item_id)}.html"' in ep
