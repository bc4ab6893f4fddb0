"""Memory-quality audit over a hand-made run folder (EDV shared + private bank, RB
entries, source episodes) with the scripted server as the judge: scores stored, malformed
answers give no score, grounding context sent, rating sheet export/import round trip,
bad sheets rejected."""

from __future__ import annotations

import argparse
import csv
import io
import json
import random
from pathlib import Path

import pytest
from rich.console import Console

from edv_ray.llm.client import Endpoint, LLMClient
from edv_ray.memory import MemoryBank, MemoryItem
from edv_ray.methods.reasoning_bank.store import ENTRY_SCHEMA
from edv_ray.report import memory_audit as MA
from edv_ray.report import memory_audit_cli as MC
from edv_ray.report import memory_audit_human as MH
from edv_ray.results.parquet_io import read_rows, write_rows_atomic
from edv_ray.results.schema import EPISODE_SCHEMA
from edv_ray.testing.scripted_server import ScriptedServer

TICKET = "Please create a task titled Important Meeting for user_1."


@pytest.fixture(scope="module")
def judge_server():
    server = ScriptedServer({}).start()  # no Ray needed: the audit runs in this process
    yield server
    server.stop()


@pytest.fixture
def judge(judge_server):
    judge_server.scripts.clear()
    judge_server.requests.clear()
    return judge_server


def episode(eid, agent, success, stage="execute", task_id="create_task_1"):
    msgs = [{"role": "user", "content": TICKET},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "name": "create_task", "arguments": {"user_id": "user_1"}}]},
            {"role": "tool", "content": json.dumps({"task_id": "task_2"})},
            {"role": "assistant", "content": f"Done by {agent}."}]
    row = dict(run_id="r", method="edv", epoch=0, domain="mock", task_id=task_id, trial=0,
               attempt=1, episode_id=eid, agent=agent, status="ok", success=success,
               reward=float(success), observed_text=TICKET, messages_json=json.dumps(msgs))
    return row, Path("episodes") / f"stage={stage}" / f"{eid}.a1.parquet"


def make_run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    for eid, agent, ok in (("ep-good", "good", True), ("ep-bad", "bad", False),
                           ("ep-rb", "bad", False)):
        row, rel = episode(eid, agent, ok)
        write_rows_atomic([row], run / rel, EPISODE_SCHEMA)
    bank = MemoryBank(run / "memory")
    spec = [("shared", None, "Confirm the user id before creating a task", [1.0, 0.0, 0.0]),
            ("private", "good", "Echo the created task id back to the user", [0.0, 1.0, 0.0]),
            ("private", "good", "Never invent a user id that is missing", [0.0, 0.0, 1.0])]
    bank.add([MemoryItem(bank=b, owner=o, title=f"Lesson {i}", when_to_use="Creating a task",
                         rule=rule, embedding=vec, domain="retail", source_task_ids=["create_task_1"],
                         supporting_trajectory_ids=["ep-good", "ep-bad"], distiller="judge")
              for i, (b, o, rule, vec) in enumerate(spec)])
    bank.save()
    entry = dict(entry_id="rb-bad-retail-create_task_1", run_id="r", agent="bad", domain="retail",
                 task_id="create_task_1", stage="rb_execute", query=TICKET,
                 query_embedding=[1.0, 0.0], episode_ids=["ep-rb"], judge_labels=["failure"],
                 true_success=[False], status="ok",
                 items=[{"title": "lesson a", "description": "When creating.", "content": "Check the user."},
                        {"title": "lesson b", "description": "Always.", "content": "Retry forever."}])
    write_rows_atomic([entry], run / "rb" / "bank" / "agent=bad" / "epoch=0" / "x.rb_execute.parquet",
                      ENTRY_SCHEMA)
    return run


def answer(scores: dict, **over) -> str:
    body = {c: {"score": scores.get(c, 3), "rationale": f"{c} seen in the runs"} for c in MA.CRITERIA}
    body.update(over)
    return json.dumps(body)


def auditor(by_text):
    """Scripted judge: ``by_text(prompt, attempt)`` → raw answer text."""
    seen: dict[str, int] = {}

    def script(req, tag):
        seen[tag["task_id"]] = seen.get(tag["task_id"], 0) + 1
        return {"role": "assistant", "content": by_text(req["messages"][-1]["content"],
                                                       seen[tag["task_id"]])}
    return script


def endpoint(server) -> Endpoint:
    return Endpoint(model_name="auditor-model", litellm_model="openai/auditor-model",
                    api_base=server.base_url)


def standard_judge(prompt, attempt):
    if "Never invent a user id" in prompt:
        return "{not json at all"  # stays malformed: no score
    if "Retry forever" in prompt:
        return answer({"groundedness": 6})  # out of range, every time: no score
    if "Echo the created task id" in prompt:
        # a score given as a string first (strict: rejected), then a valid answer
        return answer({"specificity": "4"}) if attempt == 1 else answer({"groundedness": 2})
    return answer({"groundedness": 4, "actionability": 5, "potential_harm": 0})


def audit(judge, run, **kw):
    judge.add_script("auditor", auditor(standard_judge))
    return MA.audit_run(run, endpoint(judge), kw.pop("sample", 10), kw.pop("seed", 0),
                        client=LLMClient(timeout_s=10, max_retries=0), retries=1, **kw)


def test_scores_stored_malformed_gives_no_score(judge, tmp_path):
    run = make_run(tmp_path)
    summary = audit(judge, run)
    rows = {r["item_id"]: r for r in read_rows(run / "audit" / "memory_audit.parquet")}
    assert len(rows) == 5 and {r["method"] for r in rows.values()} == {"edv", "reasoning_bank"}
    items = MA.collect_items(run)
    rid = {key: next(i.item_id for i in items if key in i.text)
           for key in ("Confirm the user id", "Echo the created", "Never invent", "Check the user",
                       "Retry forever")}
    good = rows[rid["Confirm the user id"]]
    assert good["parse_ok"] and good["attempts"] == 1 and good["error"] is None
    assert (good["groundedness"], good["actionability"], good["potential_harm"]) == (4, 5, 0)
    assert good["groundedness_rationale"] == "groundedness seen in the runs"
    retried = rows[rid["Echo the created"]]
    assert retried["parse_ok"] and retried["attempts"] == 2 and retried["groundedness"] == 2
    for key in ("Never invent", "Retry forever"):
        bad = rows[rid[key]]
        assert not bad["parse_ok"] and bad["attempts"] == 2 and bad["error"]
        assert all(bad[c] is None and bad[f"{c}_rationale"] is None for c in MA.CRITERIA)
    assert rows[rid["Check the user"]]["bank"] == "rb" and rows[rid["Check the user"]]["owner"] == "bad"
    # grounding context: item text, the source task and its trajectories with outcomes
    prompts = [r["messages"][-1]["content"] for r in judge.requests]
    edv_prompt = next(p for p in prompts if "Confirm the user id" in p)
    assert TICKET in edv_prompt and 'outcome="success"' in edv_prompt and 'outcome="failure"' in edv_prompt
    assert "call create_task" in edv_prompt and "Done by good." in edv_prompt
    rb_prompt = next(p for p in prompts if "Retry forever" in p)
    assert 'n="1" outcome="failure"' in rb_prompt and 'n="2"' not in rb_prompt  # its one run
    assert {r["user"].split("|")[1] for r in judge.requests} == {"auditor"}
    assert {r["temperature"] for r in judge.requests} == {0.0}
    calls = read_rows(run / "audit" / "audit_calls.parquet")
    assert len(calls) == len(judge.requests) == 8 and {c["role"] for c in calls} == {"auditor"}
    # the summary counts scored items only and the unscored apart
    s = {(r["method"], r["criterion"]): r for r in summary}
    assert s[("edv", "groundedness")]["llm_n"] == 2 and s[("edv", "groundedness")]["llm_unscored"] == 1
    assert s[("edv", "groundedness")]["llm_mean"] == pytest.approx(3.0)
    assert s[("reasoning_bank", "potential_harm")]["llm_mean"] == 0.0
    assert s[("edv", "groundedness")]["human_n"] == 0 and s[("edv", "groundedness")]["pairs"] == 0


def test_sample_is_seeded_per_method(tmp_path):
    items = MA.collect_items(make_run(tmp_path))
    assert len(items) == 5
    ids = lambda xs: [i.item_id for i in xs]
    first = MA.sample_items(items, 2, seed=7)
    shuffled = items[:]
    random.Random(3).shuffle(shuffled)
    assert ids(MA.sample_items(shuffled, 2, seed=7)) == ids(first)
    assert sorted(i.method for i in first) == ["edv", "edv", "reasoning_bank", "reasoning_bank"]
    seeds = {tuple(ids(MA.sample_items(items, 1, seed=s))) for s in range(20)}
    assert len(seeds) > 1  # the seed matters


def read_sheet(run):
    with (run / "audit" / "human_rating_sheet.csv").open(newline="") as f:
        return list(csv.DictReader(f))


def write_sheet(path, rows, fields=MA.SHEET_COLUMNS):
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    return path


def test_rating_sheet_round_trip(judge, tmp_path):
    run = make_run(tmp_path)
    audit(judge, run)
    sheet = read_sheet(run)
    assert list(sheet[0]) == list(MA.SHEET_COLUMNS) and len(sheet) == 5
    assert all(r[c] == "" for r in sheet for c in MA.CRITERIA)
    assert all(TICKET in r["source_task"] and "create_task_1" in r["source_task"] for r in sheet)
    llm = {r["audit_id"]: r for r in read_rows(run / "audit" / "memory_audit.parquet")}
    for r in sheet:  # agree with the LLM on groundedness, 2 points off on actionability
        g = llm[r["item_id"]]["groundedness"]
        r.update(groundedness=str(3 if g is None else g), actionability=" 3 ", specificity="2",
                 comment="ok")
    sheet[0]["specificity"] = ""  # a blank cell: not rated
    n = MH.import_human_scores(run, write_sheet(tmp_path / "alice.csv", sheet), rater="alice")
    assert n == 5
    human = read_rows(run / "audit" / "human_scores.parquet")
    assert len(human) == 5 and {h["rater"] for h in human} == {"alice"}
    assert sum(h["specificity"] is None for h in human) == 1 and {h["actionability"] for h in human} == {3}
    s = {(r["method"], r["criterion"]): r for r in MA.summarize(run)}
    g = s[("edv", "groundedness")]
    assert g["human_n"] == 3 and g["pairs"] == 2 and g["exact_agreement"] == 1.0  # 1 unscored
    a = s[("edv", "actionability")]  # LLM said 5 on the one, 3 on the retried one
    assert a["pairs"] == 2 and a["exact_agreement"] == 0.5 and a["mean_abs_diff"] == 1.0
    assert (run / "audit" / "summary.csv").is_file()
    # importing the same rater again replaces the rows; another rater adds
    MH.import_human_scores(run, tmp_path / "alice.csv", rater="alice")
    MH.import_human_scores(run, tmp_path / "alice.csv", rater="bob")
    assert sorted(h["rater"] for h in read_rows(run / "audit" / "human_scores.parquet")) == \
        ["alice"] * 5 + ["bob"] * 5


@pytest.mark.parametrize("cell,needle", [("6", "'6' is not an integer"), ("3.5", "'3.5'"),
                                         ("x", "'x'"), ("-1", "'-1'"), ("true", "'true'")])
def test_bad_values_rejected(judge, tmp_path, cell, needle):
    run = make_run(tmp_path)
    audit(judge, run, sample=1)
    sheet = read_sheet(run)
    for r in sheet:
        r.update({c: "2" for c in MA.CRITERIA})
    sheet[1]["potential_harm"] = cell
    with pytest.raises(MA.HumanScoreError, match="row 3: potential_harm") as err:
        MH.import_human_scores(run, write_sheet(tmp_path / "r.csv", sheet))
    assert needle in str(err.value) and "nothing imported" in str(err.value)
    assert not (run / "audit" / "human_scores.parquet").exists()


def test_unknown_and_duplicate_ids_and_missing_columns_rejected(judge, tmp_path):
    run = make_run(tmp_path)
    audit(judge, run, sample=1)
    sheet = read_sheet(run)
    rows = [{**sheet[0], "groundedness": "1"}, {**sheet[0], "groundedness": "2"},
            {"item_id": "made-up-id", "groundedness": "3"}]
    with pytest.raises(MA.HumanScoreError) as err:
        MH.import_human_scores(run, write_sheet(tmp_path / "r.csv", rows))
    msg = str(err.value)
    assert "row 3: item" in msg and "rated twice" in msg
    assert "row 4: unknown item id 'made-up-id'" in msg
    with pytest.raises(MA.HumanScoreError, match="missing column.*potential_harm"):
        MH.import_human_scores(run, write_sheet(tmp_path / "c.csv", rows, fields=["item_id", "groundedness"]))
    assert not (run / "audit" / "human_scores.parquet").exists()
    with pytest.raises(MA.HumanScoreError, match="run the memory audit first"):
        MH.import_human_scores(make_run(tmp_path / "other"), tmp_path / "r.csv")


def test_cli_functions(judge, tmp_path):
    run = make_run(tmp_path)
    judge.add_script("auditor", auditor(standard_judge))
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    MC.add_parsers(sub)
    out = io.StringIO()
    con = Console(file=out, width=200)
    args = p.parse_args(["audit", str(run), "--model-endpoint", judge.base_url, "--model", "m",
                         "--sample", "1", "--seed", "3", "--retries", "0"])
    assert MC.run_cli(args, con) == 0
    assert len(read_rows(run / "audit" / "memory_audit.parquet")) == 2 and "Memory audit" in out.getvalue()
    sheet = read_sheet(run)
    sheet[0]["groundedness"] = "9"
    assert MC.run_cli(p.parse_args(["audit-import", str(run), str(write_sheet(tmp_path / "s.csv", sheet))]),
                      con) == 2
    sheet[0]["groundedness"] = "4"
    assert MC.run_cli(p.parse_args(["audit-import", str(run), str(write_sheet(tmp_path / "s.csv", sheet)),
                                    "--rater", "carol"]), con) == 0
    assert [h["rater"] for h in read_rows(run / "audit" / "human_scores.parquet")] == ["carol"]


def test_unreachable_judge_gives_no_scores(tmp_path):
    run = make_run(tmp_path)
    dead = Endpoint(model_name="m", litellm_model="openai/m", api_base="http://127.0.0.1:9/v1")
    summary = MA.audit_run(run, dead, 1, 0, client=LLMClient(timeout_s=5, max_retries=0), retries=2)
    rows = read_rows(run / "audit" / "memory_audit.parquet")
    assert len(rows) == 2 and not any(r["parse_ok"] for r in rows)
    assert all("LLMCallError" in r["error"] and r["attempts"] == 1 for r in rows)
    assert all(r[c] is None for r in rows for c in MA.CRITERIA)
    assert all(s["llm_n"] == 0 and s["llm_mean"] is None for s in summary)


def test_run_without_memory_is_a_clear_error(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="holds no memory items"):
        MA.audit_run(tmp_path / "empty", Endpoint(model_name="m", litellm_model="openai/m"), 5, 0)
