"""The memory audit is blind (issue 29 item 3): the rubric requests the judge server
received name no method, bank, agent, item or episode id; the rating sheet has opaque
ids and no method / bank column, in a shuffled order that the seed fixes; the key is kept
apart and joined at `edv audit-import`, giving each method its own agreement; only the
audit domain (default retail) is sampled; ReasoningBank items come only from entries its
retrieval can serve (each agent's latest entry of a task)."""

from __future__ import annotations

import argparse
import io
import json
import re
import shutil
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from edv_ray.llm.client import LLMClient
from edv_ray.memory import MemoryBank, MemoryItem
from edv_ray.methods.reasoning_bank.store import ENTRY_SCHEMA
from edv_ray.report import memory_audit as MA
from edv_ray.report import memory_audit_cli as MC
from edv_ray.report import memory_audit_human as MH
from edv_ray.results.parquet_io import read_rows, write_rows_atomic
from edv_ray.results.schema import EPISODE_SCHEMA
from tests.report import test_memory_audit as TMA
from tests.report.runfolder import config
from tests.report.test_memory_audit import answer, auditor, endpoint, read_sheet, write_sheet

judge_server, judge = TMA.judge_server, TMA.judge  # the scripted judge's fixtures

AGENTS = ("quokka7", "ibex42")  # names that appear nowhere else in a prompt
TICKET = "Order W1 arrived damaged; please return it to the original card."


def _episode(run: Path, eid: str, agent: str, domain: str, task: str, ok: bool) -> None:
    msgs = [{"role": "user", "content": TICKET},
            {"role": "assistant", "content": "Looking up the order now."},
            {"role": "assistant", "content": "The return is filed." if ok else "I cannot help."}]
    row = dict(run_id="r", method="x", epoch=0, domain=domain, task_id=task, trial=0, attempt=1,
               episode_id=eid, agent=agent, status="ok", success=ok, reward=float(ok),
               observed_text=TICKET, messages_json=json.dumps(msgs))
    write_rows_atomic([row], run / "episodes" / "stage=execute" / f"{eid}.a1.parquet", EPISODE_SCHEMA)


def _entry(run: Path, agent: str, domain: str, task: str, seq: int, epoch: int, titles: list[str],
           eid: str) -> None:
    row = dict(entry_id=f"rb-{agent}-e{epoch}-{domain}-{task}-{seq}", run_id="r", agent=agent,
               domain=domain, task_id=task, stage="rb_execute", query=TICKET,
               query_embedding=[1.0, 0.0], episode_ids=[eid], judge_labels=["success"],
               true_success=[True], status="ok", seq=seq,
               items=[{"title": t, "description": "When returning.", "content": f"{t} body."}
                      for t in titles])
    write_rows_atomic([row], run / "rb" / "bank" / f"agent={agent}" / f"epoch={epoch}"
                      / f"{domain}-{task}-{seq}.rb_execute.parquet", ENTRY_SCHEMA)


def make_run(tmp_path: Path) -> Path:
    """EDV: 8 retail + 2 airline items. RB: quokka7 learned task r1 twice (epoch 0, then
    epoch 1: only the later entry is servable) and r2 once; ibex42 learned r1 once and an
    airline task."""
    run = tmp_path / "run"
    for i, agent in enumerate(AGENTS * 2):
        _episode(run, f"execute-e0-retail-r{i}-{agent}-abc{i}", agent, "retail", f"r{i}", i % 2 == 0)
    _episode(run, "execute-e0-airline-a1-ibex42-abc9", "ibex42", "airline", "a1", True)
    bank = MemoryBank(run / "memory")
    items = []
    for i in range(10):
        domain = "airline" if i >= 8 else "retail"
        bank_name, owner = ("shared", None) if i % 2 else ("private", AGENTS[i % 2])
        items.append(MemoryItem(bank=bank_name, owner=owner, title=f"EDV lesson {i}",
                                when_to_use="A return", rule=f"EDV rule number {i}",
                                embedding=[float(j == i) for j in range(10)], domain=domain,
                                source_task_ids=[f"r{i % 4}"],
                                supporting_trajectory_ids=[f"execute-e0-retail-r{i % 4}-"
                                                           f"{AGENTS[i % 2]}-abc{i % 4}"]))
    bank.add(items)
    bank.save()
    q, b = AGENTS
    _entry(run, q, "retail", "r1", 1, 0, ["RB stale one", "RB stale two"], f"execute-e0-retail-r0-{q}-abc0")
    _entry(run, q, "retail", "r1", 10_000_001, 1, ["RB fresh one"], f"execute-e0-retail-r0-{q}-abc0")
    _entry(run, q, "retail", "r2", 2, 0, ["RB other task"], f"execute-e0-retail-r2-{q}-abc2")
    _entry(run, b, "retail", "r1", 1, 0, ["RB ibex lesson", "RB ibex second"], f"execute-e0-retail-r1-{b}-abc1")
    _entry(run, b, "airline", "a1", 2, 0, ["RB airline lesson"], "execute-e0-airline-a1-ibex42-abc9")
    return run


def key_path(run: Path) -> Path:
    return run / "audit" / "key" / "audit_key.json"


def keyed_items(run: Path) -> dict[str, dict]:
    """The stored key, read here (opaque id → the item it stands for)."""
    return {r["audit_id"]: r for r in json.loads(key_path(run).read_text())["items"]}


def _score_by_text(prompt: str, attempt: int) -> str:
    m = re.search(r"rule number (\d+)", prompt)  # EDV item i scores i mod 6, RB items 1
    n = int(m.group(1)) if m else 1
    return answer({"groundedness": n % 6, "actionability": 4})


def _audit(judge, run, **kw):
    judge.add_script("auditor", auditor(_score_by_text))
    return MA.audit_run(run, endpoint(judge), kw.pop("sample", 20), kw.pop("seed", 0),
                        client=LLMClient(timeout_s=10, max_retries=0), retries=0, **kw)


def test_rubric_requests_and_sheet_are_blind(judge, tmp_path):
    run = make_run(tmp_path)
    _audit(judge, run)
    key = keyed_items(run)
    assert {k["method"] for k in key.values()} == {"edv", "reasoning_bank"}
    secrets = set(AGENTS) | {"reasoning_bank", "rb-", "private", "shared", "method", "bank="}
    secrets |= {k["item_id"] for k in key.values()}
    secrets |= {p.stem.split(".")[0] for p in (run / "episodes").rglob("*.parquet")}
    assert len(judge.requests) == len(key) == 8 + 4  # retail only: 8 EDV, 4 servable RB items
    for req in judge.requests:
        body = json.dumps(req)
        assert not [s for s in secrets if s in body], [s for s in secrets if s in body]
        assert re.fullmatch(r"m-[0-9a-f]{12}", req["user"].split("|")[4])  # the opaque id
    sheet = read_sheet(run)
    assert list(sheet[0]) == list(MA.SHEET_COLUMNS)
    assert not {"method", "bank", "owner", "agent"} & set(sheet[0])
    assert [r["item_id"] for r in sheet] == list(key)  # the key in the sheet's order
    assert all(re.fullmatch(r"m-[0-9a-f]{12}", r["item_id"]) for r in sheet)
    text = (run / "audit" / "human_rating_sheet.csv").read_text()
    assert not [s for s in secrets if s in text]
    assert key_path(run).parent != (run / "audit") and key_path(run).is_file()  # kept apart


def test_order_is_shuffled_and_seeded(judge, tmp_path):
    run = make_run(tmp_path / "a")
    other = tmp_path / "b" / "run"
    shutil.copytree(run, other)

    def order(r, seed):
        _audit(judge, r, seed=seed)
        return [keyed_items(r)[row["item_id"]]["item_id"] for row in read_sheet(r)]

    first = order(run, 5)
    assert order(other, 5) == first  # same seed, same order (another run folder, another salt)
    assert first != sorted(first)  # shuffled, not in item-id or method order
    methods = [keyed_items(run)[r["item_id"]]["method"] for r in read_sheet(run)]
    assert methods != sorted(methods) and methods != sorted(methods, reverse=True)
    assert order(run, 6) != first
    # another folder's salt gives other opaque ids; a re-audit of one folder keeps its own
    assert set(keyed_items(run)) != set(keyed_items(other))
    ids = set(keyed_items(run))
    _audit(judge, run, seed=6)
    assert set(keyed_items(run)) == ids


def test_import_joins_the_key_per_method_agreement(judge, tmp_path):
    run = make_run(tmp_path)
    _audit(judge, run)
    llm = {r["audit_id"]: r for r in read_rows(run / "audit" / "memory_audit.parquet")}
    key = keyed_items(run)
    sheet = read_sheet(run)
    for r in sheet:  # the rater agrees with the LLM on EDV items, is 2 off on RB items
        g = llm[r["item_id"]]["groundedness"]
        off = 2 if key[r["item_id"]]["method"] == "reasoning_bank" else 0
        r.update(groundedness=str(g + off), rater="alice")
    p = argparse.ArgumentParser()
    MC.add_parsers(p.add_subparsers(dest="cmd", required=True))
    out = io.StringIO()
    assert MC.run_cli(p.parse_args(["audit-import", str(run), str(write_sheet(tmp_path / "s.csv", sheet))]),
                      Console(file=out, width=200)) == 0
    human = read_rows(run / "audit" / "human_scores.parquet")
    assert {h["item_id"] for h in human} == {k["item_id"] for k in key.values()}  # joined
    assert all(key[h["audit_id"]]["method"] == h["method"] for h in human)
    s = {(r["method"], r["criterion"]): r for r in MA.summarize(run)}
    assert s[("edv", "groundedness")]["pairs"] == 8 and s[("edv", "groundedness")]["exact_agreement"] == 1.0
    rb = s[("reasoning_bank", "groundedness")]
    assert rb["pairs"] == 4 and rb["exact_agreement"] == 0.0 and rb["mean_abs_diff"] == 2.0
    # the real item ids are not accepted in place of the opaque ones
    sheet[0]["item_id"] = key[sheet[0]["item_id"]]["item_id"]
    with pytest.raises(MA.HumanScoreError, match="unknown item id"):
        MH.import_human_scores(run, write_sheet(tmp_path / "t.csv", sheet))


def test_domain_filter_default_retail(judge, tmp_path):
    run = make_run(tmp_path)
    _audit(judge, run)
    assert {k["domain"] for k in keyed_items(run).values()} == {"retail"}
    _audit(judge, run, domain="airline")
    assert {k["domain"] for k in keyed_items(run).values()} == {"airline"}
    assert len(keyed_items(run)) == 3  # 2 EDV + 1 RB
    _audit(judge, run, domain=None)
    assert {k["domain"] for k in keyed_items(run).values()} == {"retail", "airline"}
    with pytest.raises(ValueError, match=r"no memory items of domain 'telecom'.*airline, retail"):
        _audit(judge, run, domain="telecom")
    p = argparse.ArgumentParser()
    MC.add_parsers(p.add_subparsers(dest="cmd", required=True))
    out = io.StringIO()
    args = p.parse_args(["audit", str(run), "--model-endpoint", judge.base_url, "--model", "m",
                         "--domain", "telecom"])
    assert MC.run_cli(args, Console(file=out, width=300)) == 2
    assert "no memory items of domain 'telecom'" in out.getvalue()


def test_rb_items_only_from_servable_entries(tmp_path):
    items = MA.collect_items(make_run(tmp_path))
    rb = sorted(i.text.splitlines()[0] for i in items if i.method == "reasoning_bank")
    # quokka7's epoch-0 entry of r1 was superseded by its epoch-1 entry: never retrieved
    assert rb == ["### RB airline lesson", "### RB fresh one", "### RB ibex lesson",
                  "### RB ibex second", "### RB other task"]
    assert {i.owner for i in items if i.method == "reasoning_bank"} == set(AGENTS)
    # with reasoning_bank.max_injected = 1, an entry's second item is never injected
    run = tmp_path / "run"
    (run / "config.yaml").write_text(yaml.safe_dump(config(
        "r", ["reasoning_bank"], agents=AGENTS, reasoning_bank={"max_injected": 1})))
    capped = sorted(i.text.splitlines()[0] for i in MA.collect_items(run) if i.method == "reasoning_bank")
    assert capped == ["### RB airline lesson", "### RB fresh one", "### RB ibex lesson", "### RB other task"]
