"""What the judging roles were sent, read from the requests the scripted server got
(real Ray, HTTP, τ²-bench): an airline run's distiller, verifier, Judge and RB self-judge
prompts hold the gold path's whole ``get_user_details`` result (payment methods and
all) and none of the user simulator's scenario; the run's validity table shows the
evidence each role kept. In telecom conversation mode the user's own tool call and its
output reach the user simulator but no judging prompt."""

from __future__ import annotations

import csv
import json

import pytest

from edv_ray.results.views import connect
from edv_ray.testing.helpers import scripted_config, tau2_tasks
from tests.methods import scripts
from tests.methods.test_hidden_instructions import hidden_fragments
from tests.methods.test_methods import roles_sent, run

JUDGING = ("distiller", "verifier", "judge", "self_judge")


def _text(req) -> str:
    return "\n".join(str(m.get("content") or "") for m in req["messages"])


def _tool_results(run_dir, name: str) -> set[str]:
    """The results of every ``name`` call in the stored runs (what the agents saw)."""
    out = set()
    for (raw,) in connect(run_dir).execute(
            "SELECT messages_json FROM episodes WHERE status = 'ok'").fetchall():
        msgs = json.loads(raw)
        ids = {tc["id"] for m in msgs for tc in (m.get("tool_calls") or []) if tc["name"] == name}
        out |= {m["content"] for m in msgs if m.get("role") == "tool" and m.get("id") in ids}
    return out


@pytest.mark.slow
def test_airline_judging_prompts_hold_whole_tool_results_and_no_scenario(server, tmp_path):
    scripts.script_stage_roles(server)
    cfg = scripts.conversation_config(server, tmp_path, ["27"], ["2"], max_steps=20)
    run_dir = run(cfg)
    details = _tool_results(run_dir, "get_user_details")
    assert len(details) == 2  # task 27's user (construction) and task 2's (test)
    for d in details:  # the old 300-char cut kept none of the certificates
        pays = json.loads(d)["payment_methods"]
        assert len(d) > 600 and any(p.startswith("certificate_") for p in pays)
    fragments = [f for t in tau2_tasks("airline") if t.id in ("2", "27")
                 for f in hidden_fragments(t)]
    assert fragments
    for role in JUDGING:
        sent = [_text(r) for r in roles_sent(server, role)]
        assert sent, role
        assert any(d in s for s in sent for d in details), f"{role} never saw a whole result"
        for s in sent:
            assert not [f for f in fragments if f in s], f"{role} saw the user's scenario"
    assert any(f in _text(r) for r in roles_sent(server, "user_sim") for f in fragments)
    with open(run_dir / "report" / "validity.csv") as f:
        rows = [r for r in csv.DictReader(f) if r["name"] == "evidence_kept"]
    by_role = {r["figure"].split(" (")[0]: r for r in rows}
    assert set(JUDGING) <= set(by_role)
    for role in JUDGING:
        assert by_role[role]["ok"] == "True", by_role[role]
        assert "kept min 100% / mean 100%, 0 shortened" in by_role[role]["figure"]


def _telecom_user(req, tag):
    """The user checks the phone with its own tool first, then tells the agent."""
    msgs = req["messages"]
    if not any(m["role"] == "tool" for m in msgs):
        return {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_user_1", "type": "function",
            "function": {"name": "check_status_bar", "arguments": "{}"}}]}
    if sum(m["role"] == "user" for m in msgs) < 2:  # (roles are flipped for the simulator)
        return {"role": "assistant", "content": "My phone shows no signal bars at all."}
    return {"role": "assistant", "content": "Thanks. ###STOP###"}


@pytest.mark.slow
def test_telecom_user_tool_traffic_reaches_no_judging_prompt(server, tmp_path):
    server.add_script("user_sim", _telecom_user)
    server.add_script("agent", lambda req, tag: {"role": "assistant",
                                                 "content": "Please try restarting the phone."})
    server.add_script("judge", scripts.make_judge("first"))
    task = tau2_tasks("telecom", "test")[0]
    agents = [{"name": n, "model": "scripted", "prompt_strategy": "native_tools"}
              for n in ("a", "b", "third")]
    cfg = scripted_config(
        server.base_url, tmp_path, method=["judge"], agents=agents,
        roles={"executors": ["a", "b"], "judge": "third", "user_simulator": {"model": "scripted"}},
        benchmark={"domains": ["telecom"], "split": "test", "task_ids": [task.id],
                   "num_tasks": None, "solo": "never", "max_steps": 12})
    run_dir = run(cfg)
    status = {c for c in _tool_results_by(run_dir, "user") if c}
    assert status and all("Status Bar" in s for s in status)
    user_seen = "\n".join(_text(r) for r in roles_sent(server, "user_sim"))
    assert all(s in user_seen for s in status)  # the simulator did get its tool's output
    judged = [_text(r) for r in roles_sent(server, "judge")]
    assert judged and all("My phone shows no signal bars" in j for j in judged)
    for j in judged:
        # (the policy names the tool; the call's rendering and its output must not appear)
        assert "calls check_status_bar(" not in j and not any(s in j for s in status)


def _tool_results_by(run_dir, requestor: str) -> list[str]:
    out = []
    for (raw,) in connect(run_dir).execute(
            "SELECT messages_json FROM episodes WHERE status = 'ok'").fetchall():
        out += [m.get("content") or "" for m in json.loads(raw)
                if m.get("role") == "tool" and m.get("requestor") == requestor]
    return out
