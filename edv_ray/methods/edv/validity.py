"""EDV's report facts (``Method.validity_checks`` / ``Method.audit_items``), run for each
registered EDV instance: memory-guided construction used the frozen bank, no stage saw
a reward its config hides, and the bank's items for the memory audit.

A check returns rows (dicts: name, ok, figure, detail, method) that
:mod:`edv_ray.report.validity` prints; it reads only what the run stored."""

from __future__ import annotations

from edv_ray.methods.edv.instance import instance


def construction_memory(con, run_dir, section, name: str) -> list[dict]:
    """From epoch 1 on, memory-guided executions must retrieve from the bank frozen after
    the epoch before (when it holds items)."""
    from edv_ray.methods.edv.banks import snapshot_dir, version_of

    e, inst = section, instance(name)
    if e.epochs < 2 or not e.retrieve_during_construction or e.retrieval_k == 0:
        return []
    out = []
    for epoch in range(1, e.epochs):
        info = version_of(snapshot_dir(run_dir, epoch - 1, inst))
        n, used, mem, shared = con.execute("""
            SELECT count(*), count(*) FILTER (WHERE len(retrieved_item_ids) > 0),
                   count(*) FILTER (WHERE memory_key IS NOT NULL), count(*) FILTER (WHERE shared)
            FROM method_episodes WHERE used_by = ? AND stage = 'execute' AND epoch = ?
        """, [name, epoch]).fetchone()
        if not n:
            continue
        items = (info or {}).get("items", 0)
        ok = items == 0 or (mem == n and shared == 0)
        out.append(dict(
            name="edv_construction_memory", ok=ok,
            figure=f"epoch {epoch}: {used}/{n} executions retrieved (bank of {items} item(s))",
            detail="each memory-guided execution was given the frozen bank (a retrieval can "
                   "still find nothing above τ)" if ok else
                   f"{n - mem} execution(s) ran without memory / {shared} shared with another "
                   "method although the bank held items", method=name))
    return out


def reward_visibility(con, run_dir, section, name: str) -> list[dict]:
    """No distill run or vote saw a reward its config hides (each records whether the
    prompt it sent showed a run's grade, measured on the prompt)."""
    inst, out = instance(name), []
    for table, flag, allowed in (("distill_runs", "distiller", section.distiller_sees_reward),
                                 ("votes", "verifiers", section.verifiers_see_reward)):
        n, shown = con.execute(f"SELECT count(*), count(*) FILTER (WHERE sees_reward) "
                               f"FROM {inst.view(table)}").fetchone()
        if not n:
            continue
        ok = allowed or shown == 0
        out.append(dict(name="reward_visibility", ok=ok,
                        figure=f"{flag}: {shown}/{n} saw the reward "
                               f"(config: {'shown' if allowed else 'hidden'})",
                        detail="as configured" if ok else f"{shown} {table} row(s) saw a hidden reward",
                        method=name))
    return out


CHECKS = (construction_memory, reward_visibility)


def audit_items(run_dir, section, name: str) -> list[dict]:
    """The instance's final shared + private banks (its ``memory`` folder)."""
    from edv_ray.memory import MemoryBank

    where = instance(name).memory_dir(run_dir)
    if not where.is_dir():
        return []
    return [dict(item_id=it.item_id, method=it.method or name, bank=it.bank, owner=it.owner,
                 domain=it.domain, text=it.text, source_task_ids=list(it.source_task_ids),
                 source_episode_ids=list(it.supporting_trajectory_ids))
            for it in MemoryBank.load(where)]
