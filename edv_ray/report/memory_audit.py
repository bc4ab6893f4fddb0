"""Memory-quality audit: an LLM rubric over a seeded sample of each method's bank items,
a rating sheet for people, their scores imported back, and a summary with agreement.

Items: what each method's retrieval can serve at the end of the run — EDV's final shared
and private banks (``RUN_DIR/memory``, :class:`MemoryBank`) and, of ReasoningBank's
entries (``RUN_DIR/rb/bank``; item id ``<entry_id>:<index>``, as retrieval names them),
the latest entry of each (agent, domain, task), the only one its retrieval returns.
Only items of one domain are audited (``domain``, default ``retail``: the paper's audit
domain; ``None``: every domain). Grounding context: the item's source task (what the
agent saw: the RB entry's query, else the source episodes' ``observed_text``) and its
source trajectories (EDV: the distiller's supporting episodes; RB: the entry's
episodes), read from the run's episode Parquet.

Blind (:mod:`edv_ray.report.memory_audit_key`): the judge and the rating sheet see an
opaque id per item, in a seeded shuffled order, and neither the method, the bank, the
agent, an item id nor an episode id; the key is kept apart and joined when scores return.

The judge answers a strict JSON rubric (:class:`RubricAnswer`: groundedness,
actionability, specificity, noise_hallucination, potential_harm — integers 0–5, each
with a rationale), retried; an answer that stays malformed (or a call that fails) is
stored with ``parse_ok = false`` and no score, never a default one. Prompt:
``edv_ray/report/prompts/memory_audit.v2.md``.

Files under ``RUN_DIR/audit/``: ``memory_audit.parquet`` (LLM scores, joined with the key
after scoring), ``audit_calls.parquet`` (its model calls), ``key/audit_key.json`` (the
blinding key: not for raters), ``human_rating_sheet.csv`` (the same sample, blind, score
columns empty),
``human_scores.parquet`` (imported ratings, one row per rater × item), ``summary.csv``.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import random
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, StrictInt

from edv_ray.config import Sampling
from edv_ray.llm.client import (
    CallContext,
    CallLedger,
    Endpoint,
    LLMCallError,
    LLMClient,
)
from edv_ray.prompts import fence, render_prompt
from edv_ray.report.memory_audit_key import DEFAULT_DOMAIN, blind
from edv_ray.results.parquet_io import read_rows, write_rows_atomic

PROMPT = "memory_audit.v2"
CRITERIA = ("groundedness", "actionability", "specificity", "noise_hallucination", "potential_harm")
HIGHER_IS_BETTER = {"groundedness": True, "actionability": True, "specificity": True,
                    "noise_hallucination": False, "potential_harm": False}
# blind: ``item_id`` holds the opaque id; no method, bank or agent column
SHEET_COLUMNS = ("item_id", "text", "source_task", *CRITERIA, "rater", "comment")
MAX_TRAJECTORIES, TRAJECTORY_CHARS = 3, 4000


class Score(BaseModel):
    model_config = ConfigDict(extra="forbid")
    score: StrictInt = Field(ge=0, le=5)
    rationale: str = Field(min_length=1, max_length=2000)


class RubricAnswer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    groundedness: Score
    actionability: Score
    specificity: Score
    noise_hallucination: Score
    potential_harm: Score


@dataclass
class AuditItem:
    item_id: str
    method: str
    bank: str  # shared | private | rb
    owner: str | None
    domain: str | None
    text: str
    task_ids: list[str]
    episode_ids: list[str]
    task_text: str = ""
    trajectories: list[dict] = field(default_factory=list)
    audit_id: str = ""  # the opaque id the judge and the raters see


_S, _I = pa.string(), pa.int32()
AUDIT_SCHEMA = pa.schema(
    [("run_id", _S), ("audit_id", _S), ("item_id", _S), ("method", _S), ("bank", _S), ("owner", _S),
     ("domain", _S), ("source_task_ids", pa.list_(_S)), ("episode_ids", pa.list_(_S)),
     ("judge_model", _S), ("prompt", _S), ("seed", pa.int64()), ("parse_ok", pa.bool_()),
     ("attempts", _I), ("error", _S)]
    + [(c, _I) for c in CRITERIA] + [(f"{c}_rationale", _S) for c in CRITERIA]
    + [("audited_at", _S)])
HUMAN_SCHEMA = pa.schema([("audit_id", _S), ("item_id", _S), ("method", _S), ("bank", _S), ("rater", _S)]
                         + [(c, _I) for c in CRITERIA] + [("comment", _S), ("imported_at", _S)])


class HumanScoreError(ValueError):
    """A rating sheet that cannot be imported (every problem listed, nothing written)."""


def audit_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / "audit"


# ---- items and their provenance ----------------------------------------------------------
def collect_items(run_dir: str | Path) -> list[AuditItem]:
    """Every item the run's retrieval can serve, as each registered method declares them
    (``Method.audit_items``, given the run's section of it — None when the run's config
    lacks it or cannot be read): e.g. EDV's final shared + private banks, ReasoningBank's
    retrievable entry items."""
    from edv_ray.report.method_facts import methods

    run_dir, items = Path(run_dir), []
    cfg = _run_config(run_dir)
    for name, m in methods().items():
        if m.audit_items is None:
            continue
        section = cfg.section(name) if cfg is not None and name in cfg.method_names() else None
        for d in m.audit_items(run_dir, section, name):
            items.append(AuditItem(d["item_id"], d.get("method") or name, d["bank"], d.get("owner"),
                                   d.get("domain"), d["text"], list(d.get("source_task_ids") or []),
                                   list(d.get("source_episode_ids") or []),
                                   task_text=d.get("task_text") or ""))
    return items


def _run_config(run_dir: Path):
    """The run's config (None: none readable)."""
    from edv_ray.config import ConfigError, load_config

    try:
        return load_config(run_dir / "config.yaml")
    except (ConfigError, OSError, KeyError, ValueError):
        return None


def in_domain(items: list[AuditItem], domain: str | None, where: str | Path) -> list[AuditItem]:
    """The items of ``domain`` (None: all); a domain the run's memory lacks is a ValueError
    naming the domains it has."""
    if domain is None:
        return items
    kept = [i for i in items if i.domain == domain]
    if items and not kept:
        have = ", ".join(sorted({str(i.domain) for i in items}))
        raise ValueError(f"{where} holds no memory items of domain {domain!r} (its items' "
                         f"domains: {have}); pick one with --domain, or --domain all")
    return kept


def sample_items(items: list[AuditItem], per_method: int, seed: int) -> list[AuditItem]:
    """A seeded sample of up to ``per_method`` items of each method (the same run, seed
    and size give the same sample)."""
    out = []
    for method in sorted({i.method for i in items}):
        pool = sorted((i for i in items if i.method == method), key=lambda i: i.item_id)
        rng = random.Random(f"memory-audit|{seed}|{method}")
        out += sorted(rng.sample(pool, min(per_method, len(pool))), key=lambda i: i.item_id)
    return out


def attach_provenance(run_dir: str | Path, items: list[AuditItem]) -> None:
    """Fill each item's source trajectories (and task text when it has none) from the
    run's episodes (latest attempt of each)."""
    from edv_ray.results.views import connect

    wanted = sorted({e for i in items for e in i.episode_ids})
    rows: dict[str, dict] = {}
    if wanted:
        con = connect(run_dir)
        con.register("_wanted", pa.table({"episode_id": wanted}))
        cur = con.execute("SELECT episode_id, stage, agent, domain, task_id, success, reward, "
                          "observed_text, messages_json FROM episodes "
                          "WHERE episode_id IN (SELECT episode_id FROM _wanted)")
        cols = [d[0] for d in cur.description]
        rows = {r[0]: dict(zip(cols, r)) for r in cur.fetchall()}
        con.close()
    for it in items:
        it.trajectories = [rows[e] for e in it.episode_ids if e in rows]
        if not it.task_text:
            it.task_text = next((t["observed_text"] for t in it.trajectories if t["observed_text"]), "")


def source_task(it: AuditItem) -> str:
    head = f"{it.domain or '?'} / {', '.join(it.task_ids) or '?'}"
    return f"{head}\n{it.task_text}".strip()


def render_trajectory(row: dict, limit: int = TRAJECTORY_CHARS, env=None) -> str:
    """One episode as the benchmark renders it for judging roles (``env``: the run's
    environment — e.g. Mind2Web shows the agent's own previous actions, never gold
    ones); without an environment, each turn's role, text and tool calls."""
    try:
        messages = json.loads(row.get("messages_json") or "[]")
    except ValueError:
        messages = []
    if env is not None:
        return env.render_trajectory(messages, limit)
    lines = []
    for m in messages:
        text = (m.get("content") or "").strip()
        for c in m.get("tool_calls") or []:
            fn = c.get("function") or c
            text += f" [call {fn.get('name')}({json.dumps(fn.get('arguments'), ensure_ascii=False)})]"
        lines.append(f"{m.get('role', '?')}: {text.strip()}")
    body = "\n".join(lines)
    return body if len(body) <= limit else body[:limit] + "\n… (cut)"


def build_prompt(it: AuditItem, env=None) -> str:
    """The rubric prompt, blind: no method, bank, agent, item or episode id (runs are
    numbered)."""
    blocks = []
    for n, t in enumerate(it.trajectories[:MAX_TRAJECTORIES], 1):
        outcome = "error" if t["success"] is None else ("success" if t["success"] else "failure")
        blocks.append(f'<trajectory n="{n}" outcome="{outcome}">\n'
                      f'{fence(render_trajectory(t, env=env))}\n</trajectory>')
    if not blocks:
        blocks = ["(no source trajectory was found in the run)"]
    return render_prompt("report", PROMPT, item=fence(it.text),
                         task=fence(source_task(it) or "(unknown)"), trajectories="\n".join(blocks))


# ---- the LLM audit -----------------------------------------------------------------------
def _run_id(run_dir: Path) -> str:
    try:
        import yaml

        return (yaml.safe_load((run_dir / "config.yaml").read_text()) or {}).get("run_id") or run_dir.name
    except (OSError, ValueError):
        return run_dir.name


def _env_of(run_dir: Path):
    """The run's benchmark environment (its own trajectory rendering), if it can be read."""
    from edv_ray.config import ConfigError, load_config
    from edv_ray.envs.protocol import get_env

    try:
        return get_env(load_config(run_dir / "config.yaml").benchmark.name)
    except (ConfigError, OSError, KeyError):  # a bare bank folder: rendered plainly
        return None


def score_item(it: AuditItem, client: LLMClient, endpoint: Endpoint, run_id: str, *,
               retries: int, sampling: Sampling, json_mode: str, ledger: CallLedger,
               env=None) -> dict:
    """One rubric row: scores when the answer is valid JSON of the schema, else none."""
    from edv_ray.methods.jobkit import RoleBinding, ask_json, json_caller

    binding = RoleBinding(endpoint=endpoint, sampling=sampling, json_mode=json_mode)
    ctx = CallContext(run_id=run_id, stage="memory_audit", role="auditor",
                      agent=endpoint.model_name, domain=it.domain or "", task_id=it.audit_id,
                      episode_id=f"audit-{it.audit_id}")  # sent as the request's `user`: blind
    row = dict(audit_id=it.audit_id, item_id=it.item_id, method=it.method, bank=it.bank, owner=it.owner,
               domain=it.domain, source_task_ids=it.task_ids, episode_ids=it.episode_ids)
    try:
        answer, attempts, error = ask_json(json_caller(client, binding, ctx, ledger),
                                           build_prompt(it, env), RubricAnswer, retries)
    except LLMCallError as err:  # the endpoint failed: no score, the reason kept
        attempts = sum(1 for r in ledger.rows() if r["task_id"] == it.audit_id)
        answer, error = None, f"{type(err).__name__}: {str(err)[:300]}"
    row.update(parse_ok=answer is not None, attempts=attempts, error=error)
    for c in CRITERIA:
        s = getattr(answer, c) if answer is not None else None
        row[c], row[f"{c}_rationale"] = (s.score, s.rationale) if s else (None, None)
    return row


def audit_run(run_dir: str | Path, endpoint: Endpoint, sample_per_method: int = 20,
              seed: int = 0, *, client: LLMClient | None = None, retries: int = 2,
              sampling: Sampling | None = None, json_mode: str = "schema",
              concurrency: int = 4, domain: str | None = DEFAULT_DOMAIN) -> list[dict]:
    """Score a seeded sample of every method's servable items of ``domain`` with the judge
    at ``endpoint``, blind, in a seeded shuffled order; write the scores, the judge's
    calls, the key and the blind human rating sheet; return the summary."""
    from edv_ray.results.schema import CALL_SCHEMA

    run_dir = Path(run_dir)
    items = sample_items(in_domain(collect_items(run_dir), domain, run_dir), sample_per_method, seed)
    if not items:
        raise ValueError(f"{run_dir} holds no memory items (no memory/ or rb/bank/ files)")
    items = blind(run_dir, items, seed, domain)
    attach_provenance(run_dir, items)
    client = client or LLMClient(timeout_s=120.0, max_retries=2)
    sampling = sampling or Sampling(temperature=0.0, max_tokens=1024)
    run_id, ledger, env = _run_id(run_dir), CallLedger(), _env_of(run_dir)
    with ThreadPoolExecutor(max(1, concurrency)) as pool:
        rows = list(pool.map(lambda it: score_item(
            it, client, endpoint, run_id, retries=retries, sampling=sampling,
            json_mode=json_mode, ledger=ledger, env=env), items))
    now = dt.datetime.now(dt.timezone.utc).isoformat()
    for r in rows:
        r.update(run_id=run_id, judge_model=endpoint.model_name, prompt=PROMPT, seed=seed,
                 audited_at=now)
    out = audit_dir(run_dir)
    write_rows_atomic(rows, out / "memory_audit.parquet", AUDIT_SCHEMA)
    calls = [{k: r.get(k) for k in CALL_SCHEMA.names} for r in ledger.rows()]
    write_rows_atomic(calls, out / "audit_calls.parquet", CALL_SCHEMA)
    export_rating_sheet(run_dir, items)
    return summarize(run_dir)


def export_rating_sheet(run_dir: str | Path, items: list[AuditItem]) -> Path:
    """The audited sample for human raters, blind and in the audit's shuffled order: the
    opaque id, text, source task, and one empty column per criterion (integers 0–5) plus
    a rater and a comment."""
    path = audit_dir(run_dir) / "human_rating_sheet.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=SHEET_COLUMNS)
        w.writeheader()
        for it in items:
            w.writerow({"item_id": it.audit_id, "text": it.text, "source_task": source_task(it)})
    return path


# ---- summary -----------------------------------------------------------------------------
def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _rater_pairs(scored: list[tuple[str, str, int]]) -> list[int]:
    """|difference| of every pair of two raters' scores on the same item."""
    by_item: dict[str, dict[str, int]] = {}
    for item, rater, score in scored:
        by_item.setdefault(item, {})[rater] = score
    return [abs(a - b) for s in by_item.values() for i, a in enumerate(s.values())
            for b in list(s.values())[i + 1:]]


def summarize(run_dir: str | Path) -> list[dict]:
    """Per method × criterion: LLM mean and n (unscored items counted apart), human mean
    and n over every rater's scores, the number of raters, and on items scored by both:
    pairs (each rater's score against the LLM's), exact agreement, agreement within one
    point, mean absolute difference; between raters (items two or more people scored):
    rater pairs, their exact agreement and within one point. Also written to
    ``audit/summary.csv``."""
    out_dir = audit_dir(run_dir)
    llm = read_rows(out_dir / "memory_audit.parquet")
    human = read_rows(out_dir / "human_scores.parquet")
    by_item = {r["item_id"]: r for r in llm if r["parse_ok"]}
    table = []
    for method in sorted({r["method"] for r in llm} | {r["method"] for r in human}):
        lm = [r for r in llm if r["method"] == method]
        hm = [r for r in human if r["method"] == method]
        for c in CRITERIA:
            ls = [r[c] for r in lm if r[c] is not None]
            hs = [r[c] for r in hm if r[c] is not None]
            pairs = [(h[c], by_item[h["item_id"]][c]) for h in hm
                     if h[c] is not None and h["item_id"] in by_item]
            diffs = [abs(a - b) for a, b in pairs]
            between = _rater_pairs([(h["item_id"], h["rater"], h[c]) for h in hm
                                    if h[c] is not None])
            table.append(dict(
                method=method, criterion=c, higher_is_better=HIGHER_IS_BETTER[c],
                llm_mean=_mean(ls), llm_n=len(ls), llm_unscored=sum(1 for r in lm if not r["parse_ok"]),
                human_mean=_mean(hs), human_n=len(hs),
                raters=len({h["rater"] for h in hm if h[c] is not None}), pairs=len(pairs),
                exact_agreement=_mean([float(d == 0) for d in diffs]),
                within_one=_mean([float(d <= 1) for d in diffs]),
                mean_abs_diff=_mean([float(d) for d in diffs]),
                rater_pairs=len(between), rater_exact=_mean([float(d == 0) for d in between]),
                rater_within_one=_mean([float(d <= 1) for d in between])))
    if table:
        out_dir.mkdir(parents=True, exist_ok=True)
        with (out_dir / "summary.csv").open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(table[0]))
            w.writeheader()
            w.writerows(table)
    return table


def print_summary(table: list[dict], console) -> None:
    from edv_ray.report.tables import _rich_table

    cols = ["method", "criterion", "llm_mean", "llm_n", "llm_unscored", "human_mean", "human_n",
            "raters", "pairs", "exact_agreement", "within_one", "mean_abs_diff", "rater_pairs",
            "rater_exact"]
    console.print(_rich_table("Memory audit (0–5; noise and harm: higher is worse)", cols,
                              [tuple(r[c] for c in cols) for r in table]))
