"""EDV (the paper's method) as a plug-in: its config section, construction epochs
(Execute → Distill → Verify → banks), routed inference, views. See ``method.py``."""

from __future__ import annotations

from edv_ray.methods.edv.config import AUDIT_STAGE, INFER_STAGE, NAME, EDVConfig, check_edv_pool
from edv_ray.methods.edv.method import add_views, run
from edv_ray.methods.contamination import twin_stage
from edv_ray.methods.registry import (AUDIT, CONSTRUCTION, CONTAMINATION, INFERENCE, Method,
                                     episode_results, register)

register(Method(
    name=NAME, config_cls=EDVConfig, run=run, check=check_edv_pool, add_views=add_views,
    results_sql=episode_results(NAME, INFER_STAGE),
    admitted_sql=f"""SELECT '{NAME}' AS method, bank, count(*) AS items FROM memory_items
                     WHERE distiller IS DISTINCT FROM 'contamination' GROUP BY bank""",
    has_memory=True, memory_dir="memory",
    phases={"execute": CONSTRUCTION, "distill": CONSTRUCTION, "verify": CONSTRUCTION,
            AUDIT_STAGE: AUDIT, twin_stage(NAME): CONTAMINATION, INFER_STAGE: INFERENCE},
    summary="Execute–Distill–Verify with shared/private banks and routed inference"))
