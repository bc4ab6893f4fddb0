"""Who does what for one task: execution group, distiller, verifiers (seeded, reproducible).

Every draw uses its own ``random.Random`` seeded by (run seed, epoch, domain, task), so a
resumed run — or a rerun with the same seed — draws the same group and distiller.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from edv_ray.config import RunConfig
from edv_ray.methods.edv.config import EDVConfig
from edv_ray.methods.contamination import load_poison
from edv_ray.methods.edv.records import candidate_id
from edv_ray.methods.steps import draw_group, task_rng


@dataclass(frozen=True)
class TaskRoles:
    group: list[str]
    distiller: str
    distiller_type: str
    verifiers: list[tuple[str, str]]  # (agent, verifier_type)


def draw_roles(cfg: RunConfig, e: EDVConfig, epoch: int, domain: str, task_id: str) -> TaskRoles:
    pool = [a.name for a in cfg.agents]
    group = draw_group(cfg, epoch, domain, task_id, e.n_executors)
    rng = task_rng(cfg.seed, epoch, domain, task_id, "distill")
    if e.distill_by == "self":
        distiller, dtype = group[0], "self"
    elif e.distill_by == "executor":
        distiller, dtype = rng.choice(group), "executor"
    else:
        options = sorted(set(cfg.roles.distillers or pool) - set(group))
        if not options:
            raise ValueError(f"no third-party distiller outside group {group}")
        distiller, dtype = rng.choice(options), "third_party"
    if e.verify_by == "executors":
        verifiers = [(a, "executor") for a in group]
    elif e.verify_by == "distiller":
        verifiers = [(distiller, "distiller")]
    elif e.verify_by == "self":
        verifiers = [(distiller, "self")]
    elif e.verify_by == "external":
        options = sorted(set(cfg.roles.verifiers or pool) - set(group) - {distiller})
        if not options:
            raise ValueError(f"no external verifier outside group {group} and distiller {distiller}")
        verifiers = [(task_rng(cfg.seed, epoch, domain, task_id, "verify").choice(options), "external")]
    elif e.verify_by == "judge":
        verifiers = [(cfg.roles.judge, "judge")]
    else:
        verifiers = [(distiller, "none")]
    return TaskRoles(group, distiller, dtype, verifiers)


def poison_candidates(cfg: RunConfig, e: EDVConfig, epoch: int, domain: str,
                      task_id: str) -> list[dict[str, Any]]:
    """Known-wrong rules injected into Verify for this task (seeded choice)."""
    n = e.poison_per_task
    if n == 0:
        return []
    pool = load_poison(domain)
    picks = task_rng(cfg.seed, epoch, domain, task_id, "poison").sample(pool, min(n, len(pool)))
    return [dict(
        candidate_id=candidate_id(epoch, domain, task_id, 1000 + i, p["rule"]), run_id=cfg.run_id,
        domain=domain, task_id=task_id, distiller="poison", distiller_type="poison",
        title=p["title"], when_to_use=p["when_to_use"], rule=p["rule"], tags=list(p.get("tags", [])),
        supporting_episode_ids=[], rejected_episode_ids=[], supporting_all_failed=None,
        is_poison=True) for i, p in enumerate(picks)]
