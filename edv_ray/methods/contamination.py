"""Memory experiments shared by methods with memory: contamination and memory_from.

**Contamination** (``contamination: 0.1`` or ``[0.05, 0.1, 0.2]``) measures how much
coherent-but-wrong memory hurts, on ONE frozen bank, paired:

1. construction finishes and the method's bank is frozen (EDV: its last snapshot; RB:
   every agent's bank);
2. per share s, per domain d and per bank in it (EDV: the shared bank and each owner's
   private bank; RB: each agent's bank) with n clean items, ``round(s·n / (1 − s))``
   clean items are taken as *hosts*: the first ones of one seeded order of that bank's
   items, the same order for every share, so the hosts (and their twins) of a larger
   share contain those of a smaller one (nested); each host gets a **wrong twin** — the same
   situation (title, when to use), a rule that contradicts the domain's policy — written
   by a pool model (``contamination_writer``; role ``contaminator``), validated, retried;
   an answer that stays malformed falls back to a curated poison rule of the domain
   (``methods/poison/<domain>.yaml``), recorded as such. Twins sit where their host sits
   (EDV: the host's bank — shared, or its owner's private bank — and domain; RB: appended
   to the host's entry, among the entries retrieval can return), so they are retrieved by
   the same queries. The share is counted, in items for every method, per solver and
   domain over what that solver reads (EDV: the shared bank plus its own private bank;
   RB: the agent's own bank): the share asked ± one item;
3. inference runs on the clean bank and on each contaminated copy with the same tasks,
   seeds and solvers; the contaminated runs' results are labelled
   ``<method>+poison@<s>`` in ``method_results`` (a paired comparison with ``<method>``).

Every twin is listed in ``contamination/method=M/<condition>.parquet`` with its host,
domain and the domain's counts; ``contamination_exposure/method=M/<condition>.parquet``
holds, per solver and domain, the counts behind its share (the ``contamination_share``
view, one row per solver: ``owner``); ``contamination_use`` gives, per method and
condition, how many inference episodes retrieved poison and the Pass@1 of both groups.

**memory_from** (``memory_from: RUN_DIR``): inference uses the memory built by another
run (e.g. a bank built by pool A, used by model B); the source is recorded in
``SOURCE.json`` beside the copy.
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
import shutil
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import pyarrow as pa
import yaml

from edv_ray.memory.records import Lesson, lesson_bounds_text
from edv_ray.methods.jobbase import JobBase
from edv_ray.results.parquet_io import read_rows, write_rows_atomic

STAGE = "contaminate"  # the twin writer's calls (phase: contamination)
_S = pa.string()
ITEMS_SCHEMA = pa.schema([
    ("run_id", _S), ("method", _S), ("condition", _S), ("share_asked", pa.float64()),
    ("domain", _S), ("bank", _S), ("owner", _S), ("item_id", _S), ("host_item_id", _S),
    ("title", _S), ("rule", _S), ("source", _S),  # model | curated
    ("n_clean", pa.int64()), ("n_poison", pa.int64()), ("share_reached", pa.float64()),
])
# per (solver, domain): the items of the banks that solver reads, clean and poison
EXPOSURE_SCHEMA = pa.schema([
    ("run_id", _S), ("method", _S), ("condition", _S), ("share_asked", pa.float64()),
    ("domain", _S), ("reader", _S), ("n_clean", pa.int64()), ("n_poison", pa.int64()),
    ("share_reached", pa.float64()), ("curated_fallbacks", pa.int64()),
])
TWIN_SCHEMA = pa.schema([
    ("twin_id", _S), ("method", _S), ("domain", _S), ("host_item_id", _S), ("title", _S),
    ("when_to_use", _S), ("rule", _S), ("source", _S), ("writer", _S), ("error", _S),
])


@functools.lru_cache(maxsize=None)
def load_poison(domain: str) -> tuple[dict[str, Any], ...]:
    """The domain's curated poison rules (read once per process; do not mutate)."""
    text = resources.files("edv_ray.methods").joinpath("poison", f"{domain}.yaml").read_text()
    return tuple(yaml.safe_load(text) or [])


def condition(share: float) -> str:
    return f"poison@{share:g}"


def n_poison(n_clean: int, share: float) -> int:
    """Poison items so that they are ``share`` of the domain's items (nearest integer)."""
    if share <= 0 or n_clean <= 0:
        return 0
    return int(round(share * n_clean / (1.0 - share)))


@dataclass(frozen=True)
class Host:
    """A clean item that gets a wrong twin; ``where`` says where the method keeps it
    (``where["owner"]``: the private bank's owner; absent or None: a bank every solver
    of the method reads — EDV's shared bank, or the one agent's bank of ReasoningBank)."""

    domain: str
    item_id: str
    task_id: str
    title: str
    when_to_use: str
    rule: str
    where: dict = field(default_factory=dict, hash=False, compare=False)


def owner_of(h: Host) -> str:
    return (h.where or {}).get("owner") or ""


def pick_hosts(clean: dict[str, list[Host]], share: float, seed: int, method: str
               ) -> dict[str, list[Host]]:
    """Per domain and per bank in it (:func:`owner_of`), the hosts of ``share``: the
    first ``n_poison`` items of a seeded order of the bank's items that does not depend
    on the share, so a larger share's hosts contain a smaller one's. The order is one
    permutation, followed by fresh ones only when the share needs more twins than there
    are clean items (every item is a host once before any is a host twice)."""
    out = {}
    for domain, items in sorted(clean.items()):
        picks: list[Host] = []
        for owner in sorted({owner_of(h) for h in items}):
            bank = sorted((h for h in items if owner_of(h) == owner), key=lambda h: h.item_id)
            n = n_poison(len(bank), share)
            rng = random.Random(f"{seed}|{method}|{domain}|{owner}|hosts")
            order: list[Host] = []
            while len(order) < n:
                perm = list(bank)
                rng.shuffle(perm)
                order += perm
            picks += order[:n]
        out[domain] = picks
    return out


def twin_stage(method: str) -> str:
    """The stage a method's twin writer's calls are recorded under (phase contamination)."""
    return f"{STAGE}_{method}"


def twin_id(method: str, host_item_id: str, copy: int = 0) -> str:
    return "tw-" + hashlib.sha1(f"{method}\x1f{host_item_id}\x1f{copy}".encode()).hexdigest()[:16]


def _twin_path(run_dir: Path, method: str, tid: str) -> Path:
    return Path(run_dir) / "contamination_twins" / f"method={method}" / f"{tid}.parquet"


class TwinAnswer(Lesson):
    """The contamination writer's answer: the wrong twin of a lesson, a lesson itself."""


class TwinJob(JobBase):
    kind: str = STAGE
    method: str
    twin_id: str
    host: dict[str, Any]
    writer: str
    binding: dict[str, Any]
    curated: dict[str, Any]  # the fallback rule (a curated poison rule of the domain)
    retries: int = 2

    @property
    def job_id(self) -> str:
        return f"{STAGE}:{self.method}:{self.twin_id}"

    @property
    def handler(self) -> str:
        return "edv_ray.methods.contamination:run_twin_job"


def write_twins(ctx, method: str, hosts: dict[str, list[Host]]) -> dict[tuple[str, int], dict]:
    """The wrong twin of every host (the k-th use of a host gets its k-th twin), written
    by the contamination writer as stage jobs; already written twins are kept (resume).
    Returns {(host item id, copy): twin row}."""
    from edv_ray.methods import steps
    from edv_ray.methods.jobkit import role_binding

    cfg = ctx.cfg
    writer = cfg.contamination_writer or (cfg.roles.distillers or [a.name for a in cfg.agents])[0]
    binding = role_binding(ctx, writer, twin_stage(method))
    jobs, keys = [], []
    for domain, hs in hosts.items():
        curated = load_poison(domain)
        seen: dict[str, int] = {}
        for h in hs:
            copy = seen.get(h.item_id, 0)
            seen[h.item_id] = copy + 1
            tid = twin_id(method, h.item_id, copy)
            keys.append(((h.item_id, copy), tid))
            if _twin_path(ctx.run_dir, method, tid).exists():
                continue
            fallback = curated[int(tid[3:11], 16) % len(curated)] if curated else {}
            jobs.append(TwinJob(
                kind=twin_stage(method), run_id=ctx.run_id, run_dir=str(ctx.run_dir), benchmark=cfg.benchmark.model_dump(mode="json"),
                domain=domain, task_id=h.task_id, timeout_s=cfg.runtime.episode_timeout_s,
                method=method, twin_id=tid, host=dict(item_id=h.item_id, title=h.title,
                                                      when_to_use=h.when_to_use, rule=h.rule),
                writer=writer, binding=binding, curated=dict(fallback)))
    results = steps.run_jobs(ctx, jobs, f"{method} contamination twins")
    bad = [r["job_id"] for r in results if r.get("status") != "ok"]
    if bad:
        ctx.unfinished.extend(bad)
    out = {}
    for key, tid in keys:
        rows = read_rows(_twin_path(ctx.run_dir, method, tid))
        if rows:
            out[key] = rows[0]
    return out


def all_twins(ctx, method: str, hosts: dict[str, list[Host]],
              share: float) -> dict[tuple[str, int], dict] | None:
    """:func:`write_twins`, or None (said on the console) when some twin is still missing
    after errors: that share's contaminated condition waits for ``--resume``."""
    twins = write_twins(ctx, method, hosts)
    wanted = sum(len(hs) for hs in hosts.values())
    if len(twins) < wanted:
        ctx.console.print(f"[yellow]{method} contamination {share:g}: {wanted - len(twins)} "
                          "twin(s) missing after errors; resume to finish[/]")
        return None
    return twins


def run_twin_job(job_json: str, client) -> dict[str, Any]:
    """Worker side: ask the writer for a wrong twin of one clean item; fall back to the
    job's curated rule when the answer stays malformed (recorded as ``curated``)."""
    from edv_ray.llm.client import CallLedger
    from edv_ray.methods.answers import ask_json
    from edv_ray.methods.jobkit import RoleBinding, env_of, json_caller, stage_ctx, write_calls
    from edv_ray.prompts import fence, render_prompt

    job = TwinJob.model_validate_json(job_json)
    env, bench = env_of(job.benchmark)
    binding = RoleBinding.model_validate(job.binding)
    prompt = render_prompt("methods", "contamination_twin.v2", task_noun=env.task_noun,
                           lesson_bounds=lesson_bounds_text(),
                           policy=env.policy(bench, job.domain), title=fence(job.host["title"]),
                           when_to_use=fence(job.host["when_to_use"]), rule=fence(job.host["rule"]))
    ledger = CallLedger()

    def differs(a: TwinAnswer) -> None:
        if a.rule.strip().lower() == job.host["rule"].strip().lower():
            raise ValueError("the twin repeats the original rule")
    try:
        ans, _n, err = ask_json(json_caller(client, binding, stage_ctx(job, "contaminator", job.writer),
                                            ledger), prompt, TwinAnswer, job.retries, differs)
    finally:
        write_calls(job, ledger, f"{job.twin_id}.parquet")
    if ans is not None:
        row = dict(title=ans.title, when_to_use=ans.when_to_use, rule=ans.rule, source="model", error=None)
    else:
        c = job.curated
        rule = c.get("rule") or ""
        row = dict(title=job.host["title"], when_to_use=job.host["when_to_use"],
                   rule=f"When {job.host['when_to_use'].rstrip('.')}: {rule}" if rule else "",
                   source="curated", error=err)
        if not row["rule"]:
            return {"job_id": job.job_id, "status": "error", "error": f"no twin: {err}"}
    row.update(twin_id=job.twin_id, method=job.method, domain=job.domain,
               host_item_id=job.host["item_id"], writer=job.writer)
    write_rows_atomic([row], _twin_path(job.run_dir, job.method, job.twin_id), TWIN_SCHEMA)
    return {"job_id": job.job_id, "status": "ok", "source": row["source"]}


def record(run_dir: Path, method: str, share: float, rows: list[dict],
           exposure: list[dict] | None = None) -> None:
    """The share's poison items and, per solver, its exposure (:func:`exposure_rows`)."""
    if exposure is not None:
        write_rows_atomic(exposure, Path(run_dir) / "contamination_exposure" / f"method={method}"
                          / f"{condition(share)}.parquet", EXPOSURE_SCHEMA)
    write_rows_atomic(rows, Path(run_dir) / "contamination" / f"method={method}"
                      / f"{condition(share)}.parquet", ITEMS_SCHEMA)


def _placed_owner(p: dict) -> str:
    return "" if p.get("bank") == "shared" else (p.get("owner") or "")


def exposure_rows(run_id: str, method: str, share: float, clean: dict[str, list[Host]],
                  placed: list[dict], readers: list[str]) -> list[dict]:
    """Per solver (``readers``) and domain: the clean and poison items of the banks it
    reads — every bank without an owner, and its own private bank — and their share."""
    out = []
    for domain in sorted(set(clean) | {p["domain"] for p in placed}):
        for r in sorted(set(readers)):
            n_c = sum(owner_of(h) in ("", r) for h in clean.get(domain, []))
            mine = [p for p in placed if p["domain"] == domain and _placed_owner(p) in ("", r)]
            if n_c + len(mine) == 0:
                continue
            out.append(dict(run_id=run_id, method=method, condition=condition(share),
                            share_asked=share, domain=domain, reader=r, n_clean=n_c,
                            n_poison=len(mine), share_reached=len(mine) / (n_c + len(mine)),
                            curated_fallbacks=sum(p.get("source") == "curated" for p in mine)))
    return out


def share_rows(run_id: str, method: str, share: float, clean: dict[str, list[Host]],
               placed: list[dict]) -> list[dict]:
    """The contamination table's rows: one per poison item, with its domain's counts."""
    per_domain: dict[str, int] = {}
    for p in placed:
        per_domain[p["domain"]] = per_domain.get(p["domain"], 0) + 1
    out = []
    for p in placed:
        n_c, n_p = len(clean.get(p["domain"], [])), per_domain[p["domain"]]
        out.append(dict(run_id=run_id, method=method, condition=condition(share),
                        share_asked=share, n_clean=n_c, n_poison=n_p,
                        share_reached=n_p / (n_c + n_p), **p))
    return out


def copy_source(src_run: str, what: str, dest: Path) -> Path:
    """Copy ``SRC_RUN/what`` (a memory folder) into ``dest`` once, with its provenance."""
    src = Path(src_run) / what
    if not src.is_dir():
        from edv_ray.config import ConfigError

        raise ConfigError(f"memory_from {src_run}: it has no {what}/ folder")
    if not dest.exists():
        shutil.copytree(src, dest)
        (dest / "SOURCE.json").write_text(json.dumps({"memory_from": str(Path(src_run).resolve()),
                                                      "folder": what}))
    return dest


def add_views(con, run_dir) -> None:
    from edv_ray.results.views import register_table

    register_table(con, "contamination_items", Path(run_dir) / "contamination",
                   ITEMS_SCHEMA, ["method"])
    register_table(con, "contamination_exposure", Path(run_dir) / "contamination_exposure",
                   EXPOSURE_SCHEMA, ["method"])
    con.execute("""
        CREATE OR REPLACE VIEW contamination_share AS
        -- the share's unit: what one solver (owner) reads in one domain (EDV: the shared
        -- bank and its own private bank; ReasoningBank: the agent's own bank)
        SELECT * FROM (
            SELECT method, condition, domain, reader AS owner, share_asked, n_clean,
                   n_poison, share_reached, curated_fallbacks
            FROM contamination_exposure
            UNION ALL BY NAME
            -- run folders recorded before per-solver exposure: per domain (RB: per agent)
            SELECT method, condition, domain, CASE WHEN bank = 'rb' THEN owner END AS owner,
                   any_value(share_asked) AS share_asked,
                   any_value(n_clean) AS n_clean, count(*) AS n_poison,
                   count(*) / (any_value(n_clean) + count(*)) AS share_reached,
                   count(*) FILTER (WHERE source = 'curated') AS curated_fallbacks
            FROM contamination_items i
            WHERE NOT EXISTS (SELECT 1 FROM contamination_exposure x
                              WHERE x.method = i.method AND x.condition = i.condition)
            GROUP BY ALL
        ) ORDER BY method, condition, domain, owner
    """)
    con.execute("""
        CREATE OR REPLACE VIEW contamination_use AS
        WITH r AS (
            SELECT m.method, m.success, m.status, m.domain,
                   EXISTS (SELECT 1 FROM contamination_items c
                           WHERE m.method = c.method || '+' || c.condition
                             AND list_contains(e.retrieved_item_ids, c.item_id)) AS used_poison,
                   EXISTS (SELECT 1 FROM contamination_items c
                           WHERE m.method = c.method || '+' || c.condition
                             AND c.domain <> m.domain
                             AND list_contains(e.retrieved_item_ids, c.item_id)) AS cross_domain
            FROM method_results m JOIN episodes e USING (episode_id)
            WHERE m.method LIKE '%+poison@%'
        )
        SELECT method, count(*) AS episodes,
               count(*) FILTER (WHERE used_poison) AS retrieved_poison,
               count(*) FILTER (WHERE cross_domain) AS retrieved_other_domain_poison,
               count(*) FILTER (WHERE used_poison AND success) / nullif(count(*) FILTER (WHERE used_poison), 0)
                   AS pass_at_1_with_poison,
               count(*) FILTER (WHERE NOT used_poison AND success) / nullif(count(*) FILTER (WHERE NOT used_poison), 0)
                   AS pass_at_1_without
        FROM r GROUP BY method ORDER BY method
    """)
