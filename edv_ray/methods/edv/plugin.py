"""Registers EDV (see the package docstring, :mod:`edv_ray.methods.edv`)."""

from __future__ import annotations

from functools import partial

from edv_ray.methods.edv.config import AUDIT_STAGE, INFER_STAGE, EDVConfig, check_edv_pool
from edv_ray.methods.edv.instance import EDV, BLIND, EDVBlindConfig, Instance, reward_use
from edv_ray.methods.edv.method import add_views, run
from edv_ray.methods.contamination import twin_stage
from edv_ray.methods.edv.experiences import experience_sql, report_tables
from edv_ray.methods.edv.validity import CHECKS, audit_items
from edv_ray.methods.edv.viewer import MEMORY_VIEW
from edv_ray.methods.registry import (AUDIT, CONSTRUCTION, CONTAMINATION, INFERENCE, PICK, Method,
                                     episode_results, register)

# report order: reward-blind EDV right before EDV, so "edv − edv_blind" isolates what the
# reward adds to the same roles
_ORDER = {BLIND.name: 40, EDV.name: 50}


def _method(inst: Instance, config_cls: type[EDVConfig], summary: str) -> Method:
    name = inst.name
    return Method(
        name=name, config_cls=config_cls, run=partial(run, inst=inst), check=check_edv_pool,
        add_views=partial(add_views, inst=inst), results_sql=episode_results(name, INFER_STAGE),
        admitted_sql=f"""SELECT '{name}' AS method, bank, count(*) AS items
                         FROM {inst.view('memory_items')}
                         WHERE distiller IS DISTINCT FROM 'contamination' GROUP BY bank""",
        has_memory=True, memory_dir=inst.memory_rel, reward_use=reward_use,
        phases={"execute": CONSTRUCTION, inst.stage("distill"): CONSTRUCTION,
                inst.stage("verify"): CONSTRUCTION, inst.stage(AUDIT_STAGE): AUDIT,
                twin_stage(name): CONTAMINATION, INFER_STAGE: INFERENCE},
        scoring=PICK, report_order=_ORDER[name], validity_checks=CHECKS,
        audit_items=audit_items, experience_sql=experience_sql, report_tables=report_tables(name),
        votes_view=inst.view("votes"),
        judging_roles=("distiller", "verifier"), memory_view=MEMORY_VIEW, summary=summary)


register(_method(EDV, EDVConfig, "Execute–Distill–Verify with shared/private banks and "
                                 "routed inference"))
register(_method(BLIND, EDVBlindConfig, "EDV with the benchmark's reward hidden from the "
                                        "distiller and the verifiers"))
