"""`edv view`'s web app over HTTP (starlette's TestClient: real requests through the ASGI
app) on the small real EDV run of ``edv_run_dir`` (tests/view/view_kit.py): what each page
shows is checked against the run's Parquet files read directly with pyarrow."""

from __future__ import annotations

import math
import re
import shutil
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.view.view_kit import SCRIPT

CSP = ("default-src 'none'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
       "base-uri 'none'; form-action 'self'")


class Page(HTMLParser):
    """Every start tag with its attributes, and the text inside each element with a class."""

    def __init__(self, html: str):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.text = []
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, {k: v or "" for k, v in attrs}))

    def handle_data(self, data):
        self.text.append(data)

    def find(self, tag=None, cls=None, **attrs) -> list[dict]:
        return [a for t, a in self.tags if (tag is None or t == tag)
                and (cls is None or cls in a.get("class", "").split())
                and all(a.get(k.replace("_", "-")) == v for k, v in attrs.items())]


def rows_of(html: str, table_id: str) -> list[list[str]]:
    """The cell texts of each body row of ``table#table_id`` (a small, sufficient parser)."""
    body = html.split(f'id="{table_id}"', 1)[1].split("</table>", 1)[0]
    out = []
    for tr in re.findall(r"<tr\b[^>]*>(.*?)</tr>", body.split("<tbody>", 1)[1], re.DOTALL):
        out.append([re.sub(r"<[^>]+>", "", td).strip() for td in re.findall(r"<td\b[^>]*>(.*?)</td>", tr, re.DOTALL)])
    return out


def read(run_dir: Path, table: str) -> list[dict]:
    """Every row of a stored table, with its ``key=value`` folders as columns."""
    out = []
    for f in sorted((run_dir / table).rglob("*.parquet")):
        keys = dict(p.split("=", 1) for p in f.relative_to(run_dir / table).parts[:-1] if "=" in p)
        out += [{**keys, **r} for r in pq.read_table(f).to_pylist()]
    return out


@pytest.fixture(scope="module")
def client(edv_run_dir):
    from starlette.testclient import TestClient

    from edv_ray.view.app import make_app

    with TestClient(make_app([edv_run_dir])) as c:
        yield c


def get(client, url: str, status: int = 200):
    r = client.get(url)
    assert r.status_code == status, (url, r.status_code, r.text[:500])
    assert r.headers["content-security-policy"] == CSP
    assert r.headers["x-content-type-options"] == "nosniff"
    if r.headers["content-type"].startswith("text/html"):
        assert "<script" not in r.text.lower(), url
        for _, attrs in Page(r.text).tags:  # model text never becomes a link, source or style
            for key in ("href", "src", "action"):
                assert not attrs.get(key, "").lower().lstrip().startswith(("javascript:", "data:")), attrs
            assert "onerror" not in attrs and "onclick" not in attrs
    return r


def shared_item(run_dir: Path) -> dict:
    return next(r for r in read(run_dir, "memory") if r["bank"] == "shared")


def test_overview_shows_every_method_with_n_and_links_to_its_memory(client, edv_run_dir):
    r = get(client, "/")
    page = Page(r.text)
    methods = {a["data-method"] for a in page.find("tr") if "data-method" in a}
    assert methods == {"edv", "no_memory"}
    results = read(edv_run_dir, "episodes")
    infer = [e for e in results if e["stage"] == "infer"]
    row = next(x for x in rows_of(r.text, "pass-at-1") if x[0] == "edv")
    assert row[3] == str(len(infer))  # n = EDV's inference episodes on the test tasks
    for table in ("pass-at-1", "ability-matrix", "tokens", "validity"):
        assert page.find("table", id=table), table
    assert page.find("a", cls="method-memory", href="/memory?method=edv")
    cells = page.find("td", cls="cell")
    assert cells and all(re.fullmatch(r"cell h(10|[0-9]|x)", c["class"]) for c in cells)
    assert page.find("nav", id="top")
    assert get(client, "/report/ability_matrix.png").headers["content-type"] == "image/png"
    get(client, "/report/..%2Fconfig.yaml", 404)


def test_memory_filters_narrow_the_list(client, edv_run_dir):
    items = read(edv_run_dir, "memory")
    every = Page(get(client, "/memory").text).find("tr", cls="memory-item")
    shared = Page(get(client, "/memory?bank=shared").text).find("tr", cls="memory-item")
    private = Page(get(client, "/memory?bank=private%3Agood").text).find("tr", cls="memory-item")
    assert {a["data-item-id"] for a in shared} == {i["item_id"] for i in items if i["bank"] == "shared"}
    assert {a["data-item-id"] for a in private} == {i["item_id"] for i in items
                                                    if i["bank"] == "private" and i["owner"] == "good"}
    assert len(shared) < len(every) and len(private) < len(every)
    rejected = Page(get(client, "/memory?bank=rejected").text).find("tr", cls="memory-item")
    decisions = read(edv_run_dir, "edv/decisions")
    assert len(rejected) == sum(d["route"] == "discard" for d in decisions) > 0
    assert not Page(get(client, "/memory?method=no_memory").text).find("tr", cls="memory-item")
    assert not Page(get(client, "/memory?epoch=7").text).find("tr", cls="memory-item")


def test_pagination_covers_every_item_once(client):
    first = get(client, "/memory?per_page=3").text
    total = int(re.search(r"(\d+) in all", first).group(1))
    n_pages = math.ceil(total / 3)
    assert f"Page 1 of {n_pages}" in first
    seen = []
    for k in range(1, n_pages + 1):
        html = get(client, f"/memory?per_page=3&page={k}").text
        ids = [a["data-item-id"] for a in Page(html).find("tr", cls="memory-item")]
        assert len(ids) == (3 if k < n_pages else total - 3 * (n_pages - 1))
        assert bool(Page(html).find("a", cls="next")) == (k < n_pages)
        seen += ids
    assert len(seen) == len(set(seen)) == total
    episodes = get(client, "/episodes?per_page=5").text
    assert len(Page(episodes).find("tr", cls="episode")) == 5


def test_vote_table_is_the_votes_parquet(client, edv_run_dir):
    item = shared_item(edv_run_dir)
    ids = {item["item_id"], *(item["merged_item_ids"] or [])}
    cands = {d["candidate_id"] for d in read(edv_run_dir, "edv/decisions") if ids & set(d["item_ids"] or [])}
    want = Counter((v["verifier"], v["candidate_id"], "approve" if v["approve"] else "reject")
                   for v in read(edv_run_dir, "edv/votes") if v["candidate_id"] in cands)
    html = get(client, f"/memory/{item['item_id']}").text
    got = Counter((r[0], r[5], r[2]) for r in rows_of(html, "votes"))
    assert got == want and sum(want.values()) >= 2
    shown = {r[3] for r in rows_of(html, "votes")}
    assert all(s.startswith("shown: ") for s in shown)  # this run shows verifiers the grades
    page = Page(html)
    assert page.find(id="admitted")[0]["data-admitted"] == "shared"
    assert [a["data-verifier"] for a in page.find("tr", cls="vote")] == [r[0] for r in rows_of(html, "votes")]


def test_item_links_to_its_sources_and_retrievers_and_back(client, edv_run_dir):
    item = shared_item(edv_run_dir)
    page = Page(get(client, f"/memory/{item['item_id']}").text)
    sources = page.find("a", cls="source-episode")
    assert {a["data-episode-id"] for a in sources} >= set(item["supporting_trajectory_ids"])
    src = get(client, sources[0]["href"]).text
    assert f'href="/memory/{item["item_id"]}"' in src.split('id="used-as-evidence"', 1)[1]
    retrievers = page.find("a", cls="retrieving-episode")
    want = {e["episode_id"] for e in read(edv_run_dir, "episodes")
            if item["item_id"] in (e["retrieved_item_ids"] or [])}
    assert {a["data-episode-id"] for a in retrievers} == want and want
    ep = Page(get(client, retrievers[0]["href"]).text)
    assert item["item_id"] in {a["data-item-id"] for a in ep.find("a", cls="memory-ref")}
    assert ep.find(id="transcript") and ep.find(id="grade")
    assert {a["data-role"] for a in ep.find(cls="msg")} <= {"user", "assistant", "tool", "system", "other"}
    stats = get(client, f"/memory/{item['item_id']}").text.split('id="retrieval-stats"', 1)[1]
    assert f'data-retrieved="{len(want)}"' in get(client, f"/memory/{item['item_id']}").text
    assert "not an effect" in stats


def test_merged_duplicates_lead_to_the_item_that_kept_them(client, edv_run_dir):
    item = shared_item(edv_run_dir)
    assert item["merged_item_ids"]  # the same lesson from three tasks: one item
    for merged in item["merged_item_ids"]:
        r = client.get(f"/memory/{merged}", follow_redirects=False)
        assert r.status_code == 307 and r.headers["location"] == f"/memory/{item['item_id']}"


def test_every_internal_link_answers(client):
    """A crawl from the overview: every link and image of every page reached answers 200."""
    todo, seen = ["/"], set()
    while todo and len(seen) < 300:
        url = todo.pop()
        if url in seen:
            continue
        seen.add(url)
        r = client.get(url)
        assert r.status_code == 200, (url, r.status_code)
        if r.headers["content-type"].startswith("text/html"):
            for _, attrs in Page(r.text).tags:
                for key in ("href", "src"):
                    link = attrs.get(key, "")
                    if key in attrs:
                        assert link.startswith("/"), (url, link)  # nothing outside the viewer
                        todo.append(link)
    assert len(seen) > 20


def test_hostile_text_is_escaped(client, edv_run_dir):
    item = shared_item(edv_run_dir)
    html = get(client, f"/memory/{item['item_id']}").text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and SCRIPT not in html
    assert "[U+202E]" in html and "\u202e" not in html
    bad = next(e for e in read(edv_run_dir, "episodes") if e["agent"] == "bad" and e["stage"] == "execute")
    ep = get(client, f"/episode/{bad['episode_id']}").text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in ep and Page(ep).find(cls="tool-call")


def test_ids_in_urls_are_quoted_and_unknown_ids_are_404(client):
    from edv_ray.view.links import ServerLinks

    assert ServerLinks().item("a/b:c?<x>") == "/memory/a%2Fb%3Ac%3F%3Cx%3E"
    assert ServerLinks("/r/1").episode("javascript:alert(1)") == "/r/1/episode/javascript%3Aalert%281%29"
    r = get(client, "/memory/%3Cscript%3Ealert(1)%3C%2Fscript%3E", 404)
    assert "&lt;script&gt;" in r.text
    get(client, "/episode/..%2F..%2Fconfig.yaml", 404)
    assert client.post("/memory").status_code == 405  # read-only


def test_compare_page_shows_edv_compare_verdicts(client):
    html = get(client, "/compare").text
    assert Page(html).find("table", id="paired-verdicts")
    sentences = [r[-1] for r in rows_of(html, "paired-verdicts")]
    assert any("edv" in s and "no_memory" in s for s in sentences), sentences


def test_several_runs_and_dns_rebinding(edv_run_dir, tmp_path):
    from starlette.testclient import TestClient

    from edv_ray.view.app import make_app

    other = tmp_path / "copy"
    shutil.copytree(edv_run_dir, other)
    with TestClient(make_app([edv_run_dir, other])) as c:
        index = get(c, "/").text
        assert [a["href"] for a in Page(index).find("a", cls="run-link")] == ["/r/0/", "/r/1/"]
        assert Page(get(c, "/r/1/memory").text).find("tr", cls="memory-item")
        get(c, "/r/7/memory", 404)
        get(c, "/compare")  # the same run twice: said on the page, not a crash
    with TestClient(make_app([edv_run_dir], allowed_hosts=["127.0.0.1"]),
                    base_url="http://evil.example") as c:
        assert c.get("/").status_code == 400


def rb_run(tmp_path) -> tuple[Path, str, dict, list[dict]]:
    """A run folder written row by row (tests/report/runfolder.py): one ReasoningBank entry
    with one item, retrieved by two of four inference episodes, and a poison twin of it."""
    from edv_ray.methods.contamination import ITEMS_SCHEMA
    from edv_ray.methods.reasoning_bank.store import ENTRY_SCHEMA
    from edv_ray.results.parquet_io import write_rows_atomic
    from tests.report.runfolder import config, episode, write_run

    run = tmp_path / "rb-run"
    learned = episode("r", "rb_execute", "a", "retail", "k0", True)
    entry_id = "rb-a-e0-rb_execute-retail-k0"
    item_id = entry_id + ":0"
    infer = [{**episode("r", "rb_infer", "a", "retail", f"t{i}", i in (0, 2)),
              "retrieved_item_ids": [item_id] if i < 2 else [], "retrieved_banks": ["rb"] if i < 2 else []}
             for i in range(4)]
    write_run(run, config("r", ["reasoning_bank"]), episodes=[learned, *infer],
              test_tasks=[("retail", f"t{i}") for i in range(4)])
    write_rows_atomic([{"entry_id": entry_id, "run_id": "r", "agent": "a", "domain": "retail",
                        "task_id": "k0", "stage": "rb_execute", "query": "q", "query_embedding": [0.0],
                        "episode_ids": [learned["episode_id"]], "judge_labels": ["success"],
                        "true_success": [True], "status": "ok", "seq": 0,
                        "items": [{"title": f"Lesson {SCRIPT}", "description": "d", "content": "c"}]}],
                      run / "rb" / "bank" / "agent=a" / "epoch=0" / "k0.parquet", ENTRY_SCHEMA)
    write_rows_atomic([{"run_id": "r", "method": "reasoning_bank", "condition": "poison@0.5",
                        "share_asked": 0.5, "domain": "retail", "bank": "rb", "owner": "a",
                        "item_id": "tw-1", "host_item_id": item_id, "title": "Wrong", "rule": "do harm",
                        "source": "curated", "n_clean": 1, "n_poison": 1, "share_reached": 0.5}],
                      run / "contamination" / "method=reasoning_bank" / "poison@0.5.parquet", ITEMS_SCHEMA)
    return run, item_id, learned, infer


def test_reasoning_bank_items_and_poison_twins_are_listed_and_marked(tmp_path):
    from starlette.testclient import TestClient

    from edv_ray.methods.reasoning_bank.viewer import NO_VERIFICATION
    from edv_ray.view.app import make_app

    run, item_id, learned, infer = rb_run(tmp_path)
    with TestClient(make_app([run])) as c:
        listed = Page(get(c, "/memory").text).find("tr", cls="memory-item")
        assert {(a["data-item-id"], a["data-kind"]) for a in listed} == {(item_id, "rb"), ("tw-1", "poison")}
        assert "poison" in next(a for a in listed if a["data-item-id"] == "tw-1")["class"].split()
        assert [a["data-item-id"] for a in Page(get(c, "/memory?bank=rb").text).find("tr", cls="memory-item")] \
            == [item_id, "tw-1"]
        html = get(c, "/memory/" + item_id.replace(":", "%3A")).text
        page = Page(html)
        assert page.find(id="admitted")[0]["data-admitted"] == "rb:a"
        assert [a["data-episode-id"] for a in page.find("a", cls="source-episode")] == [learned["episode_id"]]
        assert {a["data-episode-id"] for a in page.find("a", cls="retrieving-episode")} == \
            {e["episode_id"] for e in infer[:2]}
        assert re.search(r'class="n-with">2<', html) and re.search(r'class="n-without">2<', html)
        assert "&lt;script&gt;" in html and "<script" not in html
        twin = Page(get(c, "/memory/tw-1").text)
        assert twin.find(id="admitted")[0]["data-admitted"] == "poison twin in rb:a"
        assert twin.find("a", cls="host-item", href="/memory/" + item_id.replace(":", "%3A"))
        # its method's declared provenance and evidence: the entry's note, the episode it
        # was learned from linking back to the item; a per-agent bank filters as <bank>:<owner>
        assert NO_VERIFICATION in "".join(page.text)
        learned_page = Page(get(c, f"/episode/{learned['episode_id']}").text)
        assert [a["data-item-id"] for a in learned_page.find("a", cls="evidence-item")] == [item_id]
        assert learned_page.find("li", cls="rb-entry")
        assert {a["data-item-id"] for a in Page(get(c, "/memory?bank=rb%3Aa").text).find(
            "tr", cls="memory-item")} == {item_id, "tw-1"}
