"""What MMTB's judging roles are shown, read from the requests the scripted server got
(real ``edv run``: Ray, HTTP, EDV's distiller and verifiers, the Judge, ReasoningBank's
self-judge and extractor), and the run report's ``benchmark_metrics`` check.

Two agents play the fixture dialogues with the same turn shapes: ``good`` makes the gold
calls, ``bad`` the same turns with a tool that does not exist (rejected at its first
call). Neither ever says a gold final answer. No judging prompt may hold a gold label
(the mission kind) or a gold answer, and every mission in every prompt must end the same
way — with the agent's own text turn, every call answered — so that a transcript's shape
does not tell a right mission from a wrong one.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from edv_ray.envs.mmtb.data import PREPARE, load_dialogues
from edv_ray.envs.mmtb.episode import NO_RESULT
from edv_ray.report.validity import run_checks
from edv_ray.results.views import connect
from edv_ray.testing.helpers import scripted_config
from tests.envs.test_mmtb_episode import gold_replies
from tests.methods import scripts
from tests.methods.test_methods import run

FIX = Path(__file__).parents[1] / "fixtures" / "mmtb"
FINAL = "All done, as you asked."
JUDGING = ("distiller", "verifier", "judge", "self_judge", "extractor")


def _plays(dialogues) -> dict[str, dict[str, list[str]]]:
    """task message → the replies of each agent, turn by turn."""
    out = {}
    for d in dialogues.values():
        for m in d.missions:
            good = [FINAL if r == str(m.nodes[-1].observation) else r for r in gold_replies(m)]
            bad = [r.replace('"name": "', '"name": "lookup_') for r in good]
            out[m.segment[m.task_id]["content"]] = {"good": good, "bad": bad}
    return out


def _agent(plays):
    def agent(req, tag):
        msgs = req["messages"]
        at = max(i for i, m in enumerate(msgs) if m["role"] == "user" and m["content"] in plays)
        turn = sum(m["role"] == "assistant" for m in msgs[at:])
        replies = plays[msgs[at]["content"]][tag["agent"]]
        return {"role": "assistant", "content": replies[turn] if turn < len(replies) else FINAL}
    return agent


def _mission_blocks(prompt: str) -> list[list[str]]:
    """The role tags of each rendered mission in a prompt, in order."""
    blocks: list[list[str]] = []
    for line in prompt.splitlines():
        if re.match(r"^===== mission \d+ =====$", line.strip()):
            blocks.append([])
        elif blocks and re.match(r"^\[(user|assistant|assistant→tools|tool)\]", line):
            blocks[-1].append(line[1:line.index("]")])
    return blocks


@pytest.mark.slow
def test_judging_prompts_hold_no_gold_and_end_every_mission_alike(server, tmp_path):
    dialogues = {d.id: d for d in load_dialogues(FIX)}
    roles = {"agent": _agent(_plays(dialogues)), "distiller": scripts.distiller,
             "verifier": scripts.verifier_all_approve, "judge": scripts.make_judge("first"),
             "self_judge": scripts.make_self_judge(lambda agent: "success"),
             "extractor": scripts.extractor}
    for role, script in roles.items():
        server.add_script(role, script)
    agents = [{"name": n, "model": "scripted", "prompt_strategy": "text_tools"}
              for n in ("bad", "good", "judge")]
    cfg = scripted_config(server.base_url, tmp_path, agents=agents,
                          method=["no_memory", "judge", "edv", "reasoning_bank"],
                          roles={"executors": ["bad", "good"], "judge": "judge"},
                          edv={"n_executors": 2, "retrieval_tau": -1.0},
                          reasoning_bank={"epochs": 1, "retrieval_k": 1})
    cfg["benchmark"] = {"name": "mmtb", "data_dir": str(FIX), "split": "all",
                        "train_split": "all"}
    run_dir = run(cfg)
    con = connect(run_dir)
    rewards = dict(con.execute("SELECT agent, max(reward) FROM episodes WHERE stage = 'eval' "
                               "AND agent IN ('bad', 'good') GROUP BY 1").fetchall())
    assert rewards["good"] == 1.0 and rewards["bad"] < 1.0  # bad really failed missions

    gold_answers = {str(n.observation) for d in dialogues.values() for m in d.missions
                    for n in m.nodes if n.name == PREPARE}
    seen_roles, continued = set(), 0
    for req in server.requests:
        role = (req.get("user") or "").split("|")[1:2]
        if not role or role[0] not in JUDGING:
            continue
        prompt = "\n".join(m.get("content") or "" for m in req["messages"])
        seen_roles.add(role[0])
        assert not re.search(r"\((single|multi|chat|clarify)\)", prompt), role
        assert not [g for g in gold_answers if g in prompt], role
        blocks = _mission_blocks(prompt)
        for tags in blocks:
            assert tags and tags[-1] == "assistant", (role, tags)  # ends with its own text
            for i, t in enumerate(tags):  # every call turn is answered
                assert t != "assistant→tools" or tags[i + 1] == "tool", (role, tags)
        continued += prompt.count(NO_RESULT)
    assert {"distiller", "judge", "self_judge"} <= seen_roles
    assert continued > 0  # bad's rejected missions are in the prompts, continued

    # the run report names the scoring rules; episodes scored otherwise fail the check
    check = {c.name: c for c in run_checks(run_dir)}["benchmark_metrics"]
    assert check.ok and check.figure == "mmtb: official"
    cfg_file = run_dir / "config.yaml"
    cfg_file.write_text(cfg_file.read_text().replace("metrics: official", "metrics: corrected"))
    check = {c.name: c for c in run_checks(run_dir)}["benchmark_metrics"]
    assert not check.ok and "['official']" in check.detail
