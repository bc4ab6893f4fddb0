"""No agent, distiller, verifier, judge or extractor prompt carries the user simulator's
hidden scenario (reason_for_call / known_info / task_instructions) — read from the
requests the scripted server received, in conversation mode, for every method that
learns or judges. The user simulator's own requests do carry it (the test can fail)."""

from __future__ import annotations

import pytest

from edv_ray.testing.helpers import tau2_tasks
from tests.methods import scripts
from tests.methods.test_methods import roles_sent, run

TRAIN = ["7", "8"]
TEST = ["2"]


def hidden_fragments(task) -> list[str]:
    instr = task.user_scenario.instructions
    parts = [getattr(instr, k, None) for k in ("reason_for_call", "known_info", "task_instructions")]
    lines = [ln.strip() for p in parts if p for ln in str(p).splitlines()]
    return [ln for ln in lines if len(ln) >= 25]


@pytest.mark.slow
def test_no_hidden_scenario_reaches_any_solver_or_judge(server, tmp_path):
    scripts.script_stage_roles(server)
    cfg = scripts.conversation_config(server, tmp_path, TRAIN, TEST)
    run_dir = run(cfg)
    tasks = {t.id: t for t in tau2_tasks("airline") if t.id in TRAIN + TEST}
    fragments = [f for t in tasks.values() for f in hidden_fragments(t)]
    assert len(fragments) > 10
    seen_roles = set()
    for role in ("agent", "distiller", "verifier", "judge", "self_judge", "extractor"):
        for req in roles_sent(server, role):
            seen_roles.add(role)
            text = "\n".join(str(m.get("content") or "") for m in req["messages"])
            leaked = [f for f in fragments if f in text]
            assert leaked == [], f"{role} saw hidden instructions: {leaked[:2]}"
    assert seen_roles == {"agent", "distiller", "verifier", "judge", "self_judge", "extractor"}
    user_text = "\n".join(str(m.get("content") or "") for r in roles_sent(server, "user_sim")
                          for m in r["messages"])
    assert any(f in user_text for f in fragments)  # the simulator does get its scenario
    # retrieval and the stage prompts were keyed on the user's first message
    from edv_ray.results.views import connect

    observed = {o for (o,) in connect(run_dir).execute(
        "SELECT DISTINCT observed_text FROM episodes WHERE status = 'ok'").fetchall()}
    assert observed == {"Hi, I need help with my request."}
