"""W&B Tables of a finished run: its experiences (with provenance and votes) and a sample
of its episodes, read from the run folder through :func:`edv_ray.results.views.connect`.

* ``experiences`` — every experience in every bank, one row each: EDV's shared and
  private items (``memory/``; each EDV instance its own, e.g. ``edv_blind``), ReasoningBank's entries' items (``rb/bank``; id
  ``<entry_id>:<index>``, as retrieval names them), the wrong twins of a contamination run
  (``is_poison``, with their host) and EDV's discarded candidates (``admitted =
  discarded``: what did *not* get in, and why). Each row has its provenance (distiller,
  source tasks, the supporting and contrasted episodes, epoch, domain), the verifiers'
  votes (who, approve / reject, the reward each was shown: ``hidden`` when the verifier
  did not see grades, else whether its context runs succeeded; ReasoningBank: the agent's
  own judge label beside the true outcome), where it was admitted, and how often
  episodes retrieved it with their Pass@1 (association only, no claim of causality).
* ``episodes`` — a seeded sample (at most ``max_episodes``) of the run's episodes:
  method, stage, agent, task, trial, status, success, reward, the retrieved item ids and
  a transcript cut to ``transcript_chars``.

Every query is bounded (``LIMIT``; W&B's logged tables hold at most 10,000 rows): the
run is never loaded into memory. ``summary`` says how many experiences there were and
how many were logged.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

MAX_EXPERIENCES = 10_000  # wandb.Table.MAX_ROWS: a longer logged table is refused
MAX_EPISODES = 200
TEXT_CHARS = 2_000
TRANSCRIPT_CHARS = 4_000

EXPERIENCE_COLUMNS = [
    "method", "item_id", "admitted", "bank", "owner", "is_poison", "domain", "epoch",
    "distiller", "source_task_ids", "source_episode_ids", "contrasted_episode_ids",
    "title", "text", "votes", "approvals", "rejections", "candidate_id", "host_item_id",
    "retrieved", "retrieved_pass_at_1",
]
EPISODE_COLUMNS = [
    "method", "stage", "epoch", "agent", "domain", "task_id", "trial", "episode_id",
    "status", "success", "reward", "retrieved_item_ids", "transcript",
]

# Contamination: the wrong twins planted in a frozen copy of a bank.
_POISON = """
SELECT method || '+' || condition AS method, item_id,
       condition || ':' || CASE WHEN bank = 'private' THEN 'private:' || owner
                                WHEN bank = 'rb' THEN 'rb:' || owner ELSE bank END AS admitted,
       bank, owner, true AS is_poison, domain, NULL AS epoch, 'poison:' || source AS distiller,
       []::VARCHAR[] AS source_task_ids, []::VARCHAR[] AS source_episode_ids,
       []::VARCHAR[] AS contrasted_episode_ids, title, rule AS text, NULL AS votes,
       NULL AS approvals, NULL AS rejections, NULL AS candidate_id, host_item_id
FROM contamination_items
"""

_RETRIEVED = """
SELECT item_id, count(*) AS retrieved,
       avg(CAST(coalesce(success, false) AS DOUBLE)) AS retrieved_pass_at_1
FROM (SELECT unnest(retrieved_item_ids) AS item_id, success FROM episodes
      WHERE len(retrieved_item_ids) > 0)
GROUP BY item_id
"""


def _tables(con) -> set[str]:
    return {r[0] for r in con.execute(
        "SELECT table_name FROM information_schema.tables").fetchall()}


def experience_sql(con) -> str | None:
    """The union of every experience source the run has (``None``: no memory at all)."""
    from edv_ray.report.method_facts import methods

    have = _tables(con)
    parts = [sql for name, m in methods().items() if m.experience_sql is not None
             for sql in [m.experience_sql(have, name)] if sql]
    if "contamination_items" in have:
        parts.append(_POISON)
    if not parts:
        return None
    return " UNION ALL BY NAME ".join(f"SELECT * FROM ({p})" for p in parts)


def _cut(text: Any, limit: int) -> Any:
    if not isinstance(text, str) or len(text) <= limit:
        return text
    return text[:limit] + f" … ({len(text) - limit} more characters)"


def _join(value: Any) -> Any:
    return ", ".join(str(v) for v in value) if isinstance(value, list) else value


def experience_rows(con, limit: int = MAX_EXPERIENCES, text_chars: int = TEXT_CHARS
                    ) -> tuple[list[list], int]:
    """(rows in :data:`EXPERIENCE_COLUMNS` order, at most ``limit``; how many there are)."""
    sql = experience_sql(con)
    if sql is None:
        return [], 0
    total = con.execute(f"SELECT count(*) FROM ({sql})").fetchone()[0]
    cols = ", ".join(f"x.{c}" for c in EXPERIENCE_COLUMNS if not c.startswith("retrieved"))
    rows = con.execute(f"""
        WITH x AS ({sql}), r AS ({_RETRIEVED})
        SELECT {cols}, coalesce(r.retrieved, 0) AS retrieved, r.retrieved_pass_at_1
        FROM x LEFT JOIN r USING (item_id)
        ORDER BY x.method, x.admitted = 'discarded', x.admitted, x.epoch NULLS LAST,
                 x.item_id, x.candidate_id
        LIMIT {int(limit)}""").fetchall()
    text_at = EXPERIENCE_COLUMNS.index("text")
    out = []
    for row in rows:
        row = [_join(v) for v in row]
        row[text_at] = _cut(row[text_at], text_chars)
        out.append(row)
    return out, total


def render_messages(messages_json: str | None) -> str:
    """A plain transcript of a stored message list: one line per message / tool call."""
    try:
        messages = json.loads(messages_json or "[]")
    except ValueError:
        return messages_json or ""
    lines = []
    for m in messages if isinstance(messages, list) else []:
        if not isinstance(m, dict):
            continue
        role = m.get("role") or "?"
        if m.get("content"):
            lines.append(f"{role}: {m['content']}")
        for tc in m.get("tool_calls") or []:
            if isinstance(tc, dict):
                fn = tc.get("function") if isinstance(tc.get("function"), dict) else tc
                lines.append(f"{role} calls {fn.get('name')}({json.dumps(fn.get('arguments'))})")
    return "\n".join(lines)


def episode_rows(con, seed: int = 0, limit: int = MAX_EPISODES,
                 transcript_chars: int = TRANSCRIPT_CHARS) -> list[list]:
    """A seeded sample of the run's episodes (same seed, same sample), in
    :data:`EPISODE_COLUMNS` order; the ids are drawn first, then only their rows read."""
    picked = con.execute(f"""
        SELECT stage, episode_id FROM episodes
        ORDER BY md5(episode_id || ':' || stage || ':' || {int(seed)}) LIMIT {int(limit)}
    """).fetchall()
    if not picked:
        return []
    ids = sorted({e for _, e in picked})
    cols = ", ".join(c for c in EPISODE_COLUMNS if c != "transcript")
    rows = con.execute(f"""
        SELECT {cols}, messages_json FROM episodes WHERE episode_id IN (SELECT unnest(?))
        ORDER BY method, stage, epoch, agent, domain, task_id, trial, episode_id""",
                       [ids]).fetchall()
    keep = set(picked)
    out = []
    at_stage, at_id = EPISODE_COLUMNS.index("stage"), EPISODE_COLUMNS.index("episode_id")
    for *row, messages_json in rows:
        if (row[at_stage], row[at_id]) not in keep:
            continue
        row = [_join(v) for v in row]
        out.append(row + [_cut(render_messages(messages_json), transcript_chars)])
    return out


def run_tables(run_dir: str | Path, seed: int = 0, max_experiences: int = MAX_EXPERIENCES,
               max_episodes: int = MAX_EPISODES) -> tuple[dict, dict]:
    """({"experiences": wandb.Table, "episodes": wandb.Table} — those with rows; summary)."""
    import wandb

    from edv_ray.results.views import connect

    con = connect(run_dir)
    try:
        exp, total = experience_rows(con, max_experiences)
        eps = episode_rows(con, seed, max_episodes)
    finally:
        con.close()
    logged = {}
    if exp:
        logged["experiences"] = wandb.Table(columns=EXPERIENCE_COLUMNS, data=exp)
    if eps:
        logged["episodes"] = wandb.Table(columns=EPISODE_COLUMNS, data=eps)
    summary = {"tables/experiences_total": total, "tables/experiences_logged": len(exp),
               "tables/episodes_logged": len(eps)}
    return logged, summary
