"""A synthetic large EDV run folder for the viewer's benchmark (``view_pages.py``), written
with the project's own schemas and writers, laid out as a real run of that size leaves it.

Shaped on the 10⁵-episode construction run the README reports (Mind2Web-like, one model
call per episode): ``tasks`` training tasks in four domains × 2 of 3 executors × ``epochs``
(stage ``execute``), then ``test_tasks`` routed inference episodes per epoch (``infer``).
Each task and epoch has a distill job (46 % with a contrast → 3 candidates, 2 votes each,
one per group executor, reward shown or hidden as configured); candidates route as the
README run's did (62 % shared / 26 % private / 12 % discarded) into the banks
(:class:`edv_ray.memory.MemoryBank`, de-duplicated, 16-dimensional random embeddings: the
viewer never reads them), and epoch ≥ 1 episodes retrieve 3 items of their domain from the
earlier epochs' banks (Zipf-skewed: some items are retrieved thousands of times).

Layout as in a real run: episode and call rows are written in batches of
``COMPACT_EVERY`` (2,000) and merged by :func:`edv_ray.results.store.compact_stage` into
one segment per batch (row groups of 128); each epoch's EDV per-task tables are merged
by :func:`edv_ray.methods.edv.records.compact_epoch` into one segment per table (the
rows are written per chunk of tasks, not per task: the segment's task index names chunks,
which only resume reads); ``uses``, ``routing``, ``selection``, ``task_types`` and the
pool through their schemas. Seeded: the same arguments build the same folder.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from pathlib import Path

import numpy as np

DOMAINS = ("Shopping", "Travel", "Info", "Entertainment")
AGENTS = ("a", "b", "c")
SKILL = {"a": 0.6, "b": 0.5, "c": 0.55}
WORDS = ("record", "order", "flight", "price", "filter", "search", "button", "account", "cart",
         "page", "menu", "date", "seat", "city", "review", "ticket", "profile", "list", "item")
BATCH = 2000  # results.runtime.batch.COMPACT_EVERY: episodes per segment
TASK_CHUNK = 1000  # EDV per-task rows written per file before an epoch's compaction


def _h(*parts) -> str:
    return hashlib.sha1("\x1f".join(map(str, parts)).encode()).hexdigest()[:12]


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def _messages(rng: random.Random, task: str, domain: str, memory: list[str], ok: bool) -> str:
    """A Mind2Web-like transcript: system (with its memory block), the page, the answer."""
    system = "You are a web agent. Pick the element that does the task."
    if memory:
        system += "\n\n## Experiences\n" + "\n\n".join(memory)
    cands = "".join(f'<a backend_node_id="{1000 + k}" href="/p/{k}">{_words(rng, 6)}</a>'
                    for k in range(5))
    html = f'<html><body><h1>{domain}</h1><p>{_words(rng, 120)}</p>{cands}</body></html>'
    pick = "A" if ok else rng.choice("BCDE")
    msgs = [{"role": "system", "content": system},
            {"role": "user", "content": f"Task: {task}\nPage:\n{html}\nOptions: A-E or none"},
            {"role": "assistant", "content": f"Answer: {pick}. Click the element that matches."},
            {"role": "tool", "content": json.dumps({"clicked": pick, "ok": ok})}]
    return json.dumps(msgs)


class Builder:
    def __init__(self, out: Path, tasks: int, epochs: int, test_tasks: int, seed: int,
                 log=print) -> None:
        self.out, self.tasks, self.epochs, self.test_tasks = Path(out), tasks, epochs, test_tasks
        self.rng, self.np_rng = random.Random(seed), np.random.default_rng(seed)
        self.run_id, self.log, self.t0 = "view-bench", log, time.monotonic()
        self.items_by_domain: dict[str, list[tuple[str, str, str]]] = {d: [] for d in DOMAINS}
        self.episodes = self.segments = 0

    def say(self, msg: str) -> None:
        self.log(f"[{time.monotonic() - self.t0:6.1f}s] {msg}", flush=True)

    def task(self, i: int, test: bool = False) -> tuple[str, str, str]:
        domain = DOMAINS[i % len(DOMAINS)]
        return domain, f"{'test' if test else 'train'}-{i}", f"site{i % 40}"

    # ---- episodes --------------------------------------------------------------------
    def episode(self, stage: str, epoch: int, i: int, agent: str, test: bool = False) -> dict:
        rng = self.rng
        domain, task_id, ttype = self.task(i, test)
        retrieved = self.retrieve(domain) if epoch > 0 or stage == "infer" else []
        p = SKILL[agent] + (0.05 if retrieved else 0.0)
        status = "error" if rng.random() < 0.005 else "ok"
        ok = status == "ok" and rng.random() < p
        eid = f"{stage}-e{epoch}-{domain}-{task_id}-t0-{agent}{'-m' if retrieved else ''}-" \
              f"{_h(stage, epoch, task_id, agent)}"
        texts = [t for _, t, _ in retrieved]
        return dict(
            run_id=self.run_id, method="edv", epoch=epoch, domain=domain, task_id=task_id,
            task_type=ttype, trial=0, attempt=0, episode_id=eid, agent=agent, model=f"sim/{agent}",
            prompt_strategy="native_tools", user_model=None, solo=True, status=status,
            reward=None if status == "error" else float(ok), success=None if status == "error" else ok,
            termination="agent_stop" if status == "ok" else "error",
            error="simulated server error" if status == "error" else None, num_messages=4,
            agent_prompt_tokens=rng.randint(900, 2500), agent_completion_tokens=rng.randint(8, 40),
            user_prompt_tokens=0, user_completion_tokens=0, llm_calls=1,
            wall_s=rng.uniform(0.5, 3.0), started_at=1.7e9 + self.episodes, seed=rng.getrandbits(31),
            observed_text=f"Open item on {domain} ({task_id})", experiences=texts,
            retrieved_item_ids=[k for k, _, _ in retrieved],
            retrieved_banks=[b for _, _, b in retrieved],
            messages_json=_messages(rng, f"Open the item of {task_id}", domain, texts, ok),
            reward_json=json.dumps({"reward": float(ok)}), attempt_id=_h("att", eid))

    def retrieve(self, domain: str, k: int = 3) -> list[tuple[str, str, str]]:
        pool = self.items_by_domain[domain]
        if not pool:
            return []
        # Zipf-skewed: a few items are retrieved very often, most rarely
        idx = np.minimum(self.np_rng.zipf(1.3, size=k) - 1, len(pool) - 1)
        return [pool[int(j)] for j in dict.fromkeys(idx.tolist())]

    def write_batch(self, stage: str, rows: list[dict]) -> None:
        from edv_ray.results.parquet_io import write_rows_atomic
        from edv_ray.results.schema import CALL_SCHEMA, EPISODE_SCHEMA
        from edv_ray.results.store import compact_stage

        calls = [dict(run_id=r["run_id"], role="agent", agent=r["agent"], model=r["model"],
                      task_id=r["task_id"], trial=0, episode_id=r["episode_id"], epoch=r["epoch"],
                      prompt_tokens=r["agent_prompt_tokens"],
                      completion_tokens=r["agent_completion_tokens"], latency_s=r["wall_s"],
                      attempts=1, ok=r["status"] == "ok", error=r["error"],
                      started_at=r["started_at"], seed=r["seed"], request_hash=_h(r["episode_id"]),
                      attempt=0, attempt_id=r["attempt_id"]) for r in rows]
        name = f"batch-{self.segments:05d}.parquet"
        write_rows_atomic(calls, self.out / "llm_calls" / f"stage={stage}" / name, CALL_SCHEMA)
        write_rows_atomic(rows, self.out / "episodes" / f"stage={stage}" / name, EPISODE_SCHEMA)
        compact_stage(self.out, stage)
        self.segments += 1
        self.episodes += len(rows)

    def stage(self, stage: str, epoch: int, plan: list[tuple[int, str]], test: bool = False) -> list[dict]:
        """Run ``plan`` ((task index, agent) pairs) as episodes; returns slim rows."""
        from edv_ray.results.parquet_io import write_rows_atomic
        from edv_ray.results.schema import USES_SCHEMA

        slim, batch = [], []
        for n, (i, agent) in enumerate(plan, 1):
            row = self.episode(stage, epoch, i, agent, test)
            batch.append(row)
            slim.append({k: row[k] for k in ("episode_id", "agent", "domain", "task_id", "success")})
            if len(batch) == BATCH or n == len(plan):
                self.write_batch(stage, batch)
                batch = []
                if self.segments % 10 == 0 or n == len(plan):
                    self.say(f"{stage} e{epoch}: {n:,}/{len(plan):,} episodes "
                             f"({self.episodes:,} in all)")
        uses = [dict(run_id=self.run_id, stage=stage, epoch=epoch, episode_id=s["episode_id"],
                     memory_key=None, condition="") for s in slim]
        write_rows_atomic(uses, self.out / "uses" / "method=edv" / f"{stage}-e{epoch}-{_h(stage, epoch)}.parquet",
                          USES_SCHEMA)
        return slim

    # ---- EDV stage tables and banks --------------------------------------------------
    def construct(self, epoch: int, runs: list[dict], sees_reward: bool = True) -> None:
        from edv_ray.memory import MemoryBank
        from edv_ray.memory.records import MemoryItem, Vote
        from edv_ray.methods.edv import records as R
        from edv_ray.results.parquet_io import write_rows_atomic

        rng, by_task = self.rng, {}
        for r in runs:
            by_task.setdefault((r["domain"], r["task_id"]), []).append(r)
        tables = {name: [] for name in ("candidates", "distill_runs", "votes", "verify_runs")}
        decisions, items, chunk = [], [], 0
        distill_calls, vote_calls = [], []  # (task_id, agent) of each stage-job call

        def flush():
            nonlocal chunk
            for name, rows in tables.items():
                write_rows_atomic(rows, R.edv_path(self.out, name, epoch, f"chunk-{chunk:04d}.parquet"),
                                  R.TASK_TABLES[name])
                rows.clear()
            chunk += 1

        for n, ((domain, task_id), group) in enumerate(sorted(by_task.items()), 1):
            group.sort(key=lambda r: r["agent"])
            distiller = rng.choice(AGENTS)
            contrast = rng.random() < 0.46
            k = 3 if contrast else 0
            tables["distill_runs"].append(dict(
                run_id=self.run_id, domain=domain, task_id=task_id, distiller=distiller,
                distiller_type="peer", status="ok" if contrast else "no_contrast", attempts=1,
                n_candidates=k, group=[g["agent"] for g in group],
                group_successes=sum(bool(g["success"]) for g in group), error=None,
                sees_reward=sees_reward))
            if not k:
                continue
            distill_calls.append((task_id, distiller))
            good = [g["episode_id"] for g in group if g["success"]]
            bad = [g["episode_id"] for g in group if not g["success"]]
            verifiers = [g["agent"] for g in group]
            for c in range(k):
                title = f"{_words(rng, 3).title()} on {domain}"
                rule = f"Before you {_words(rng, 4)}, check the {_words(rng, 8)} ({task_id}, {c})."
                when = f"When a {domain} task asks to {_words(rng, 5)}."
                cid = R.candidate_id(epoch, domain, task_id, c, rule)
                tables["candidates"].append(dict(
                    candidate_id=cid, run_id=self.run_id, domain=domain, task_id=task_id,
                    distiller=distiller, distiller_type="peer", title=title, when_to_use=when,
                    rule=rule, tags=[domain.lower()], supporting_episode_ids=good,
                    rejected_episode_ids=bad, supporting_all_failed=not good, is_poison=False))
                votes = {}
                draw, lone = rng.random(), rng.choice(verifiers)
                for v, g in zip(verifiers, group):
                    approve = draw < 0.62 or (draw < 0.88 and v == lone)
                    votes[v] = approve
                    vote_calls.append((task_id, v))
                    tables["votes"].append(dict(
                        candidate_id=cid, run_id=self.run_id, domain=domain, task_id=task_id,
                        verifier=v, verifier_type="executor", approve=approve, parse_ok=True,
                        rationale=f"{'Consistent' if approve else 'Contradicts'} with the page: "
                                  f"{_words(rng, 12)}.", sees_reward=sees_reward,
                        context_episode_ids=[g["episode_id"]], context_success=g["success"],
                        supporting_all_failed=not good, is_poison=False))
                approvers = sorted(v for v, ok in votes.items() if ok)
                route = ("shared" if len(approvers) == len(votes) else
                         "private" if approvers else "discard")
                new = []
                for owner in ([None] if route == "shared" else approvers if route == "private" else []):
                    new.append(MemoryItem(
                        bank=route, owner=owner, title=title, when_to_use=when, rule=rule,
                        tags=[domain.lower()], domain=domain, source_task_ids=[task_id], epoch=epoch,
                        supporting_trajectory_ids=good, rejected_trajectory_ids=bad,
                        distiller=distiller, method="edv",
                        embedding=self.np_rng.standard_normal(16).astype(np.float32).tolist(),
                        votes=[Vote(verifier=v, approve=a, rationale="") for v, a in votes.items()]))
                items += new
                decisions.append(dict(
                    candidate_id=cid, run_id=self.run_id, domain=domain, task_id=task_id,
                    route=route, approvers=approvers, verifiers=verifiers, is_poison=False,
                    supporting_all_failed=not good, item_ids=[i.item_id for i in new]))
            tables["verify_runs"].append(dict(
                run_id=self.run_id, domain=domain, task_id=task_id, verifiers=verifiers,
                n_candidates=k, n_votes=k * len(verifiers), status="ok"))
            if n % TASK_CHUNK == 0:
                flush()
        flush()
        self.stage_calls(epoch, "distill", "distiller", distill_calls)
        self.stage_calls(epoch, "verify", "verifier", vote_calls)
        write_rows_atomic(decisions, R.edv_path(self.out, "decisions", epoch, "part.parquet"),
                          R.DECISION_SCHEMA)
        R.compact_epoch(self.out, epoch)
        self.say(f"epoch {epoch}: {len(decisions):,} candidates, {len(items):,} items to the banks")
        bank = MemoryBank.load(self.out / "memory", dedup_threshold=0.999)
        bank.add(items)
        bank.save()
        for d in DOMAINS:  # what later episodes retrieve: the items of their domain
            self.items_by_domain[d] = []
        for it in bank.items():
            self.items_by_domain[it.domain].append((it.item_id, it.text, it.bank))
        for d in DOMAINS:
            self.rng.shuffle(self.items_by_domain[d])
        self.say(f"epoch {epoch}: banks hold {len(bank.items()):,} items")

    def stage_calls(self, epoch: int, stage: str, role: str, calls: list[tuple[str, str]]) -> None:
        """A stage job's call rows (no episode), merged into a segment as a run's end does."""
        from edv_ray.results.parquet_io import write_rows_atomic
        from edv_ray.results.schema import CALL_SCHEMA
        from edv_ray.results.store import compact_stage

        rng = self.rng
        rows = [dict(run_id=self.run_id, role=role, agent=a, model=f"sim/{a}", task_id=t, trial=0,
                     episode_id=None, epoch=epoch, prompt_tokens=rng.randint(1500, 6000),
                     completion_tokens=rng.randint(40, 400), latency_s=rng.uniform(0.2, 2.0),
                     attempts=1, ok=True, error=None, started_at=1.7e9, seed=rng.getrandbits(31),
                     request_hash=_h(stage, epoch, t, a, n), evidence_chars=rng.randint(2000, 9000),
                     evidence_kept=None, evidence_final_kept=True, usage_invalid=False,
                     attempt=None, attempt_id=None) for n, (t, a) in enumerate(calls)]
        for n in range(0, len(rows), BATCH * 10):
            write_rows_atomic(rows[n:n + BATCH * 10], self.out / "llm_calls" / f"stage={stage}"
                              / f"e{epoch}-{n}.parquet", CALL_SCHEMA)
        compact_stage(self.out, stage, ("llm_calls",))

    # ---- the rest of a run folder ----------------------------------------------------
    def tables(self) -> None:
        from edv_ray.results.parquet_io import write_rows_atomic
        from edv_ray.results.schema import SELECTION_SCHEMA, TASK_TYPE_SCHEMA
        from edv_ray.results.store import RunStore

        RunStore(self.out).write_pool([dict(agent=a, model=f"sim/{a}", prompt_strategy="native_tools",
                                            is_executor=True) for a in AGENTS])
        sel, types = [], []
        for test, n in ((False, self.tasks), (True, self.test_tasks)):
            for i in range(n):
                domain, task_id, ttype = self.task(i, test)
                sel.append(dict(run_id=self.run_id, selection="test" if test else "train",
                                split="all", domain=domain, task_id=task_id, task_type=ttype))
                types.append(dict(run_id=self.run_id, domain=domain, task_id=task_id,
                                  task_type=ttype, basis="website"))
        write_rows_atomic(sel, self.out / "selection" / "part.parquet", SELECTION_SCHEMA)
        write_rows_atomic(types, self.out / "task_types" / "part.parquet", TASK_TYPE_SCHEMA)
        (self.out / "config.yaml").write_text(
            f"run_id: {self.run_id}\nmethod: edv\nbenchmark:\n  name: mind2web\n"
            f"edv:\n  epochs: {self.epochs}\n")

    def routing(self, epoch: int) -> list[tuple[int, str]]:
        from edv_ray.results.parquet_io import write_rows_atomic
        from edv_ray.results.schema import ROUTING_SCHEMA

        plan, rows = [], []
        for i in range(self.test_tasks):
            domain, task_id, ttype = self.task(i, True)
            solver = AGENTS[(i + epoch) % len(AGENTS)]
            plan.append((i, solver))
            rows.append(dict(run_id=self.run_id, method="edv", epoch=epoch, domain=domain,
                             task_id=task_id, task_type=ttype, solver=solver, basis="task_type",
                             score=SKILL[solver], attempts=50))
        write_rows_atomic(rows, self.out / "routing" / "method=edv" / f"epoch={epoch}" / "part.parquet",
                          ROUTING_SCHEMA)
        return plan

    def build(self) -> Path:
        self.out.mkdir(parents=True, exist_ok=True)
        self.tables()
        for epoch in range(self.epochs):
            plan = []
            for i in range(self.tasks):
                group = sorted(random.Random(f"{epoch}|{i}").sample(AGENTS, 2))
                plan += [(i, a) for a in group]
            runs = self.stage("execute", epoch, plan)
            self.construct(epoch, runs)
            self.stage("infer", epoch, self.routing(epoch), test=True)
        self.say(f"done: {self.episodes:,} episodes in {self.out}")
        return self.out
