"""Model Selector: the best solver for a task type, from the Ability Matrix."""

from __future__ import annotations


def select_solver(matrix: list[dict], task_type: str, candidates: list[str],
                  prior: float = 0.5) -> str:
    """Highest score for ``task_type`` (0.5 prior for an empty cell); ties → more attempts,
    then agent name (deterministic)."""
    if not candidates:
        raise ValueError("no candidate solvers")
    cells = {r["agent"]: r for r in matrix if r["task_type"] == task_type}

    def key(agent: str):
        r = cells.get(agent)
        score = r["score"] if r and r["attempts"] else prior
        return (-score, -(r["attempts"] if r else 0), agent)

    return sorted(candidates, key=key)[0]
