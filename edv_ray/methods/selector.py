"""Model Selector: the best solver for a task type, from the Ability Matrix
(:mod:`edv_ray.methods.ability_matrix`; :func:`edv_ray.methods.steps.select_solvers`
applies it to every test task).

Cells are ``agent → (finished attempts, successes, errored episodes)``. The paper's
rule: highest success rate, 0.5 prior for an empty cell. A cell that only ever errored
(infrastructure failures, no finished attempt) is marked and ranks below every other
cell: errors say nothing about ability. When no candidate has a finished attempt on
the task type (an unseen type), the domain's row decides; else the prior.
``random_solver``: the no-Ability-Matrix ablation's seeded draw per task.
"""

from __future__ import annotations

from edv_ray.methods.ability_matrix import PRIOR, Cell


def _pick(cells: dict[str, Cell], candidates: list[str], prior: float):
    def key(agent: str):
        n, s, e = cells.get(agent, (0, 0, 0))
        score = s / n if n else prior
        errors_only = n == 0 and e > 0
        return (errors_only, -score, -n, agent)

    best = sorted(candidates, key=key)[0]
    n, s, _e = cells.get(best, (0, 0, 0))
    return best, (s / n if n else prior), n


def select_solver(by_type: dict[str, Cell], by_domain: dict[str, Cell], candidates: list[str],
                  prior: float = PRIOR) -> tuple[str, str, float, int]:
    """(solver, basis, score, attempts); basis = task_type | domain | prior. Ties → more
    attempts, then agent name (deterministic)."""
    if not candidates:
        raise ValueError("no candidate solvers")
    for basis, cells in (("task_type", by_type), ("domain", by_domain)):
        if any(cells.get(a, (0, 0, 0))[0] > 0 for a in candidates):
            solver, score, n = _pick(cells, candidates, prior)
            return solver, basis, score, n
    solver, score, n = _pick(by_type, candidates, prior)
    return solver, "prior", score, n


def random_solver(candidates: list[str], seed: int, domain: str, task_id: str) -> str:
    """``routing: random`` (no Ability Matrix): a candidate drawn per task, the draw keyed
    by (seed, domain, task id) — the same task gets the same solver in every epoch and on
    resume, and the candidates' order does not matter."""
    import hashlib

    if not candidates:
        raise ValueError("no candidate solvers")
    pool = sorted(candidates)
    digest = hashlib.sha256(f"{seed}\x1f{domain}\x1f{task_id}".encode()).digest()
    return pool[int.from_bytes(digest[:8], "big") % len(pool)]
