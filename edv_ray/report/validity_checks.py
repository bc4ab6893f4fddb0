"""The built-in validity checks (see :mod:`edv_ray.report.validity`)."""

from __future__ import annotations

from edv_ray.report.validity import Check, check


@check
def tasks_scored(con, run_dir) -> list[Check]:
    """Every method scored every selected test task × trial (an errored episode counts
    as a scored failure); a task missing from a method's rows would leave its
    denominator silently."""
    from edv_ray.config import load_config

    selected = con.execute("SELECT count(*) FROM selection WHERE selection = 'test'").fetchone()[0]
    if not selected or not (run_dir / "config.yaml").is_file():
        return []
    cfg = load_config(run_dir / "config.yaml")
    out = []
    for method in cfg.method_names():
        epochs = con.execute("SELECT DISTINCT epoch FROM method_results WHERE method = ?",
                             [method]).fetchall()
        for (epoch,) in sorted(epochs, key=lambda e: -1 if e[0] is None else e[0]) or [(None,)]:
            got, rows = con.execute(
                "SELECT count(DISTINCT (domain, task_id)), count(*) FROM method_results "
                "WHERE method = ? AND epoch IS NOT DISTINCT FROM ?", [method, epoch]).fetchone()
            missing = con.execute(
                "SELECT domain || '/' || task_id FROM selection s WHERE selection = 'test' "
                "AND NOT EXISTS (SELECT 1 FROM method_results m WHERE m.method = ? "
                "AND m.epoch IS NOT DISTINCT FROM ? AND m.domain = s.domain "
                "AND m.task_id = s.task_id) ORDER BY 1 LIMIT 3", [method, epoch]).fetchall()
            where = "" if epoch is None else f" (epoch {epoch})"
            out.append(Check(
                "tasks_scored", not missing, f"{got}/{selected} tasks, {rows} rows{where}",
                f"not scored: {', '.join(m[0] for m in missing)}" if missing else
                "every selected test task has a result (errors count as failures)", method))
    return out
