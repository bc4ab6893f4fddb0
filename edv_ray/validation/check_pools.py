"""Checks on the homogeneous and the epoch worlds.

2. verification_audit recovers the planted P(approve | wrong) (homogeneous world: EDV
   without the contrast gate; lessons of groups whose runs all failed are always wrong);
5. the epoch curves rise as planted (EDV and ReasoningBank), EDV's later construction
   epochs run with memory, and the heterogeneity comparison separates a homogeneous
   from a heterogeneous planted pool; distinct seeds give independent runs.

The epoch curves are planted GIVEN each epoch's frozen bank (its size and the truth of
its items, read by the oracle): a small world's bank varies from run to run (how many
groups happened to contrast), which no test-time interval covers. How the bank grows is
checked on its own, against the Monte Carlo's range (5a·); the unconditional Monte Carlo
curve is shown beside.
"""

from __future__ import annotations

import itertools

import numpy as np

from edv_ray.validation.checks import Row, cells_row, diff_row, level, predicted, range_row, rate_row
from edv_ray.validation.expect import Expect
from edv_ray.validation.measure import Run, clustered_fn, paired_scores


# ---------------------------------------------------------------- 2: EDV's verification

def verification_rows(run: Run, ex: Expect, cfg: dict) -> list[Row]:
    e = cfg.get("edv", {})
    ds = ex.domains
    planted = sum(ex.edv_bank(d, e)["p_approve_all_failed"] for d in ds) / len(ds)
    view = run.rows("SELECT p_approve_given_failed, votes_all_failed FROM verification_audit "
                    "WHERE verifier_type = 'executor'")
    votes = run.rows("SELECT domain, task_id, approve, supporting_all_failed, is_poison, "
                     "context_success FROM votes WHERE verifier_type = 'executor' AND parse_ok")
    fn = clustered_fn(((d, t), int(a), 1) for d, t, a, f, p, _c in votes if f and not p)
    shown = ", ".join(f"{v:.3f} over {n} votes" for v, n in view if v is not None)
    rows = [rate_row("2a verification_audit: P(approve | every supporting run failed)", planted, fn,
                     "planted: the approval of the lessons of groups whose runs all failed, right as "
                     f"often as the writer writes them (no writer right: P(approve | wrong, own run "
                     f"failed)); the view: {shown}")]
    for own_ok, name in ((False, "2b known-wrong (poison) lessons: P(approve | own run failed)"),
                         (True, "2c known-wrong (poison) lessons: P(approve | own run succeeded)")):
        p = ex.o.p_approve(ex.executors[0], correct=False, own_run_failed=not own_ok)
        fn = clustered_fn(((d, t), int(a), 1) for d, t, a, _f, pz, c in votes if pz and bool(c) == own_ok)
        rows.append(rate_row(name, p, fn, "the votes table's poison rows (the admission audit)"))
    return rows


# ---------------------------------------------------------------- 5: heterogeneity, seeds

def heterogeneity_rows(hom: Run, het: Run, ex_hom: Expect, ex_het: Expect) -> list[Row]:
    ds = ex_het.domains
    g_het = sum(ex_het.routing_gain(d) for d in ds) / len(ds)
    g_hom = sum(ex_hom.routing_gain(d) for d in ds) / len(ds)
    rows = [diff_row("5d routing gain (Router − No-Memory), homogeneous pool", g_hom,
                     hom.paired_fn("router", "no_memory"), "planted 0: routing can gain nothing"),
            diff_row("5e routing gain (Router − No-Memory), heterogeneous pool", g_het,
                     het.paired_fn("router", "no_memory"), "the 95 % interval must exclude 0",
                     exclude_zero=True)]
    gain = {}
    for run, key in ((het, "het"), (hom, "hom")):
        r, nm = run.task_scores("router"), run.task_scores("no_memory")
        gain[key] = {k: r[k] - nm[k] for k in set(r) & set(nm)}
    rows.append(diff_row("5f heterogeneity separates the pools (gain heterogeneous − homogeneous)",
                         g_het - g_hom, lambda conf: paired_scores(gain["het"], gain["hom"], conf),
                         "paired by task over the same test tasks; the 95 % interval must exclude 0",
                         exclude_zero=True))
    return rows


def seed_rows(run: Run, ex: Expect) -> list[Row]:
    """Agents of one model with distinct seeds act independently: two agents' No-Memory
    runs of a task agree as often as independent draws do (identical requests — seeds
    overwritten — would agree every time)."""
    got = run.rows("SELECT domain, task_id, trial, agent, success FROM method_episodes "
                   "WHERE used_by = 'no_memory'")
    by: dict = {}
    for d, t, trial, agent, ok in got:
        by.setdefault((d, t, trial), {})[agent] = bool(ok)
    units = []
    for (d, t, _trial), outs in by.items():
        pairs = list(itertools.combinations(sorted(outs), 2))
        units.append(((d, t), sum(outs[a] == outs[b] for a, b in pairs), len(pairs)))
    ds = ex.domains
    seeds = run.request_seeds()
    return [rate_row("5g distinct seeds act independently: P(two agents' runs agree)",
                     sum(ex.agreement(d) for d in ds) / len(ds), clustered_fn(units),
                     "1.0 if the seeds collapsed; request seeds per agent: "
                     + ", ".join(f"{a} {s}" for a, s in seeds))]


# ---------------------------------------------------------------- 5: epoch curves

def _snapshot(run: Run, epoch: int, domain: str, ex: Expect) -> list[tuple[bool, str]]:
    """(right, source task) of the shared items EDV froze after ``epoch``."""
    return [(ex.o.item_is_correct(rule), src) for rule, src in run.shared_items(epoch, domain)]


def epoch_rows(run: Run, ex: Expect, cfg: dict, reps: int) -> list[Row]:
    ds = ex.domains
    e, rb = cfg["edv"], cfg["reasoning_bank"]
    k = e.get("retrieval_k", 3)
    # one seed per domain: the domains' bank sizes are independent draws, so they add up
    mc = {d: ex.edv_curve(d, ex.n_train(d), e, reps=reps, seed=i) for i, d in enumerate(ds)}
    epochs = sorted(x for (x,) in run.rows("SELECT DISTINCT epoch FROM method_results WHERE "
                                           "method = 'edv'"))
    snaps = {(d, x): _snapshot(run, x, d, ex) for d in ds for x in range(e["epochs"])}
    given = _given_retrieved(run, ex, "edv")
    rows = _profile_curve_rows(run, "5a EDV", "edv", {d: mc[d]["inference_reps"] for d in ds},
                               {d: ex.n_test(d) for d in ds})
    rows += [_curve_row(run, "5a· EDV epoch curve = planted given what each epoch retrieved", "edv",
                        given, {d: mc[d]["inference"] for d in ds}, e["epochs"]),
             _frozen_row(run, "5a· EDV evaluations read only their epoch's frozen bank", "edv",
                         {x: run.bank_ids(x) for x in epochs})]
    rows += _rise_row(run, "5a· EDV rise given what each epoch retrieved", "edv", given)
    if e.get("retrieval_tau", 0.0) <= -1.0 and e.get("retrieval_scope") == "shared":
        rows.append(_retrieval_row(run, k, snaps))
    q = (1 - level(e["epochs"] * len(ds))) / 2
    rng = {d: np.quantile(mc[d]["bank_sizes"], [q, 1 - q], axis=0) for d in ds}
    sizes = {(d, x): len(snaps[(d, x)]) for d in ds for x in range(e["epochs"])}
    rows.append(Row("5a· EDV shared bank size per epoch within the planted range",
                    ", ".join(f"{d}/e{x} [{int(rng[d][0][x])}, {int(rng[d][1][x])}]"
                              for d in ds for x in range(e["epochs"])),
                    ", ".join(f"{d}/e{x} {n}" for (d, x), n in sizes.items()),
                    all(rng[d][0][x] <= n <= rng[d][1][x] for (d, x), n in sizes.items()),
                    f"Monte Carlo range of the shared bank after each epoch ({reps} reps; mean "
                    + "; ".join(f"{d} " + ", ".join(f"{m:.1f}" for m in mc[d]["bank_sizes"].mean(axis=0))
                                for d in ds) + ")"))
    rows.append(_growth_row(e["epochs"], ds, sizes, mc, reps))
    rows += _construction_rows(run, ex, e, snaps, mc)
    rows += rb_epoch_rows(run, ex, rb, reps)
    return rows


def construction_epoch_rows(run: Run, ex: Expect, cfg: dict, reps: int) -> list[Row]:
    """Check 5b alone (a world of many training tasks: EDV's construction epochs ≥ 1 read
    a bank that is full by then, on hundreds of executions an epoch)."""
    e = cfg["edv"]
    mc = {d: ex.edv_curve(d, ex.n_train(d), e, reps=reps, seed=i) for i, d in enumerate(ex.domains)}
    snaps = {(d, x): _snapshot(run, x, d, ex) for d in ex.domains for x in range(e["epochs"])}
    return _construction_rows(run, ex, e, snaps, mc)


def _construction_rows(run: Run, ex: Expect, e: dict, snaps: dict, mc: dict) -> list[Row]:
    ds = ex.domains
    return [construction_row(run, ex, e.get("retrieval_k", 3), snaps,
                             {d: mc[d]["construction"] for d in ds}),
            _construction_range_row(run, ex, e, {d: mc[d]["construction_reps"] for d in ds})]


def _retrieval_row(run: Run, k: int, snaps: dict) -> Row:
    """EDV's retrieval as specified, given the bank: with τ = −1 and the shared scope every
    evaluation episode of epoch E reads min(k, |shared bank of its domain after E|) items
    (its test task wrote none). A specification check on the framework's own bank — the
    bank's size is checked against the profile by the rows beside it — that moves when
    retrieval returns nothing, too little or too much."""
    want = {key: min(k, len(items)) for key, items in snaps.items()}
    off, total, got = 0, 0, {}
    for d, x, ids in run.rows("SELECT m.domain, m.epoch, e.retrieved_item_ids FROM method_results m "
                              "JOIN episodes e USING (episode_id) WHERE m.method = 'edv'"):
        n = len(ids or [])
        total += 1
        off += n != want.get((d, x), -1)
        got.setdefault((d, x), []).append(n)
    return Row("5a· EDV evaluations retrieve min(k, bank) items (τ = −1, given the bank)",
               ", ".join(f"{d}/e{x} {n}" for (d, x), n in sorted(want.items())),
               ", ".join(f"{d}/e{x} {np.mean(v):.2f}" for (d, x), v in sorted(got.items())),
               total > 0 and off == 0, f"{off} of {total} evaluation episodes retrieved another "
               "number of items than the specification gives for their epoch's frozen bank")


def _growth_row(epochs: int, ds: list[str], sizes: dict, mc: dict, reps: int) -> Row:
    """The shared banks' total over domains after each epoch, and its growth from the first
    epoch to the last, within the Monte Carlo range: a total has a lower bound above 0 where
    a domain's size alone does not, so a bank that never fills or never grows fails."""
    total = sum(mc[d]["bank_sizes"] for d in ds)  # reps × epochs
    grow = total[:, -1] - total[:, 0]
    q = (1 - level(epochs + 1)) / 2
    lo, hi = np.quantile(total, [q, 1 - q], axis=0)
    g_lo, g_hi = np.quantile(grow, [q, 1 - q])
    got = [sum(sizes[(d, x)] for d in ds) for x in range(epochs)]
    got_grow = got[-1] - got[0]
    ok = all(lo[x] <= n <= hi[x] for x, n in enumerate(got))
    if epochs > 1:
        ok = ok and g_lo <= got_grow <= g_hi
    return Row("5a· EDV shared banks fill and grow (total over domains) within the planted range",
               ", ".join(f"e{x} [{int(lo[x])}, {int(hi[x])}]" for x in range(epochs))
               + (f"; growth [{int(g_lo)}, {int(g_hi)}]" if epochs > 1 else ""),
               ", ".join(f"e{x} {n}" for x, n in enumerate(got))
               + (f"; growth {got_grow}" if epochs > 1 else ""), bool(ok),
               f"Monte Carlo range of the summed shared banks ({reps} reps, independent per "
               f"domain); mean e0–e{epochs - 1}: " + ", ".join(f"{m:.1f}" for m in total.mean(axis=0)))


def _given_retrieved(run: Run, ex: Expect, method: str) -> dict:
    """(domain, epoch) → the mean planted P(success) of the method's evaluation episodes
    given the items each retrieved (the oracle reads their truth): which items a task
    retrieves depends on the task texts, not on their truth."""
    got: dict = {}
    for d, x, agent, exps in run.rows(
            "SELECT m.domain, m.epoch, m.agent, e.experiences FROM method_results m JOIN episodes e "
            "USING (episode_id) WHERE m.method = ?", method):
        got.setdefault((d, x), []).append(ex.o.success_probability(agent, d, d, exps or []))
    return {k: float(np.mean(v)) for k, v in sorted(got.items())}


def _frozen_row(run: Run, check: str, method: str, allowed: dict, entry: bool = False) -> Row:
    """Every item an evaluation of epoch E retrieved was in the memory of epoch E."""
    bad, total = 0, 0
    for x, ids in run.rows("SELECT m.epoch, e.retrieved_item_ids FROM method_results m JOIN "
                           "episodes e USING (episode_id) WHERE m.method = ?", method):
        for i in ids or []:
            total += 1
            bad += (i.rsplit(":", 1)[0] if entry else i) not in allowed.get(x, set())
    return Row(check, "0 items from later epochs", f"{bad} of {total} retrieved items", bad == 0,
               "retrieved item ids against the memory each epoch's evaluation may read")


def _latest_row(run: Run) -> Row:
    """ReasoningBank over epochs retrieves each past task's LATEST entry (as of the
    evaluation's epoch), never an older copy of the same task (issue 18: k = 1 returned
    the epoch-0 entry forever, k = 3 three copies of one task)."""
    entries = run.rows("SELECT entry_id, agent, domain, task_id, epoch FROM rb_entries "
                       "WHERE stage = 'rb_execute'")
    info = {e: (a, d, t, ep) for e, a, d, t, ep in entries}
    latest: dict = {}
    for _e, a, d, t, ep in entries:
        latest.setdefault((a, d, t), []).append(ep)
    stale, total, dup = 0, 0, 0
    for x, ids in run.rows("SELECT m.epoch, e.retrieved_item_ids FROM method_results m JOIN "
                           "episodes e USING (episode_id) WHERE m.method = 'reasoning_bank'"):
        seen = set()
        for eid in {i.rsplit(":", 1)[0] for i in ids or []}:
            if eid not in info:
                continue
            a, d, t, ep = info[eid]
            total += 1
            stale += ep != max(e for e in latest[(a, d, t)] if e <= x)
            dup += (a, d, t) in seen
            seen.add((a, d, t))
    return Row("5c· ReasoningBank retrieves each past task's latest entry, no task twice",
               "0 stale, 0 repeated", f"{stale} stale, {dup} repeated of {total} retrieved entries",
               total > 0 and stale == 0 and dup == 0, "an entry is stale when a later epoch's "
               "entry of its task existed at the evaluation's epoch")


def _curve_row(run: Run, check: str, method: str, given: dict, mc: dict, n_epochs: int) -> Row:
    cells = [(f"{d}/e{x}", p, run.cell_fn(method, d, epoch=x)) for (d, x), p in sorted(given.items())]
    row = cells_row(check, cells, "unconditional Monte Carlo: " + "; ".join(
        f"{d} " + ", ".join(f"e{x} {v:.3f}" for x, v in enumerate(curve)) for d, curve in mc.items()))
    missing = n_epochs - len({x for _d, x in given})
    if missing > 0:
        row.ok = False
        row.detail += f"; {missing} epoch(s) without an evaluation"
    return row


def _rise_row(run: Run, check: str, method: str, given: dict) -> list[Row]:
    """Last − first evaluated epoch, paired by task (the mean of domain scores)."""
    epochs = sorted({x for _d, x in given})
    if len(epochs) < 2:
        return []
    a, b = epochs[0], epochs[-1]
    ds = sorted({d for d, _x in given})
    planted = sum(given[(d, b)] - given[(d, a)] for d in ds) / len(ds)
    return [diff_row(f"{check} e{a} → e{b}", planted,
                     lambda conf: paired_scores(run.task_scores(method, b), run.task_scores(method, a),
                                                conf), "paired by task")]


def construction_row(run: Run, ex: Expect, k: int, snaps: dict, mc: dict) -> Row:
    """EDV's construction runs after epoch 0 read the bank frozen after the epoch before:
    their success rate is the planted rate with that memory, not the memory-free rate."""
    got = run.rows("SELECT domain, epoch, agent, task_id, success, len(experiences) > 0 FROM "
                   "method_episodes WHERE used_by = 'edv' AND stage = 'execute' AND epoch > 0")
    cells = []
    for d, x in sorted({(r[0], r[1]) for r in got}):
        mine = [r for r in got if (r[0], r[1]) == (d, x)]
        bank = snaps[(d, x - 1)]
        planted = np.mean([ex.from_bank(a, d, k, sum(ok for ok, src in bank if src != t),
                                        sum(src != t for _ok, src in bank))
                           for _d, _x, a, t, _s, _m in mine])
        cells.append((f"{d}/e{x}", float(planted),
                      clustered_fn(((d, t), int(s), 1) for _d, _x, _a, t, s, _m in mine)))
    used = sum(r[5] for r in got)
    n_epochs = max(len(v) for v in mc.values())
    row = cells_row("5b· EDV construction epochs ≥ 1 = planted given the memory they read", cells,
                    f"{used}/{len(got)} of them retrieved memory; without memory: "
                    + ", ".join(f"{d} {ex.no_memory(d):.3f}" for d in mc) + "; unconditional Monte "
                    "Carlo: " + "; ".join(f"{d} " + ", ".join(f"e{x} {v:.3f}" for x, v in enumerate(c)
                                                              if x > 0) for d, c in mc.items()))
    if len(cells) < (n_epochs - 1) * len(mc):
        row.ok = False
        row.detail += "; construction epochs without EDV executions of their own"
    return row


def rb_epoch_rows(run: Run, ex: Expect, rb: dict, reps: int) -> list[Row]:
    """ReasoningBank's curve: within the planted range of the profile's Monte Carlo, and
    given each agent's bank after each epoch (latest entry per task; the oracle reads its
    items' truth)."""
    ds = ex.domains
    given = _given_retrieved(run, ex, "reasoning_bank")
    epoch_of = dict(run.rows("SELECT entry_id, epoch FROM rb_entries"))
    rb_epochs = sorted({x for _d, x in given})
    allowed = {x: {e for e, ep in epoch_of.items() if ep <= x} for x in rb_epochs}
    per_rep = ex.rb_curve_reps({d: (d, ex.n_train(d)) for d in ds}, rb, rb.get("epochs", 1),
                               reps=max(100, reps // 4))
    mc = {x: {d: float(per_rep[:, x, j].mean()) for j, d in enumerate(ds)}
          for x in range(per_rep.shape[1])}
    rows = _profile_curve_rows(run, "5c ReasoningBank", "reasoning_bank",
                               {d: per_rep[:, :, j] for j, d in enumerate(ds)},
                               {d: ex.n_test(d) * len(ex.executors) for d in ds})
    rows += [_curve_row(run, "5c· ReasoningBank epoch curve = planted given what each epoch retrieved",
                        "reasoning_bank", given, {d: [mc[x][d] for x in sorted(mc)] for d in ds},
                        rb.get("epochs", 1)),
             _frozen_row(run, "5c· ReasoningBank evaluations read only what was learned by their epoch",
                         "reasoning_bank", allowed, entry=True),
             _latest_row(run)]
    return rows + _rise_row(run, "5c· ReasoningBank rise given what each epoch retrieved",
                            "reasoning_bank", given)


# ---------------------------------------------------------------- 5: profile-only ranges

def _profile_curve_rows(run: Run, name: str, method: str, reps: dict, n_eval: dict) -> list[Row]:
    """The epoch curve and its rise against the profile's Monte Carlo alone (``reps``:
    domain → repetitions × epochs of the expected test Pass@1; ``n_eval``: evaluation
    episodes per domain and epoch, from the design): what the run measured must lie in
    the range the Monte Carlo predicts for a run of this design."""
    ds = sorted(reps)
    epochs = min(v.shape[1] for v in reps.values())
    sims = {(d, x): predicted(reps[d][:, x], n_eval[d], seed=100 * i + x)
            for i, d in enumerate(ds) for x in range(epochs)}
    cells = [(f"{d}/e{x}", sims[(d, x)], run.cell_fn(method, d, epoch=x)(0.95).rate)
             for d in ds for x in range(epochs)]
    rows = [range_row(f"{name} epoch curve within the planted range (profile and design only)",
                      cells, "range of the measured Pass@1 over the Monte Carlo's repetitions "
                      "and the episodes' binomial draws")]
    if epochs > 1:  # the rise: last − first, the mean over domains, paired draws per repetition
        rise = np.mean([sims[(d, epochs - 1)] - sims[(d, 0)] for d in ds], axis=0)
        got = paired_scores(run.task_scores(method, epochs - 1), run.task_scores(method, 0), 0.95)
        rows.append(range_row(f"{name} rise e0 → e{epochs - 1} within the planted range "
                              "(profile and design only)", [("rise", rise, got.diff)],
                              "paired by task; range over the Monte Carlo's repetitions"))
    return rows


def _construction_range_row(run: Run, ex: Expect, e: dict, reps: dict) -> Row:
    """EDV's construction epochs ≥ 1 against the profile's Monte Carlo alone: the
    memory-guided construction rate of a run of this design (``n_train`` × group size
    executions per domain and epoch)."""
    got = dict(((d, x), r) for d, x, r in run.rows(
        "SELECT domain, epoch, avg(success::DOUBLE) FROM method_episodes WHERE used_by = 'edv' "
        "AND stage = 'execute' AND epoch > 0 GROUP BY ALL"))
    n = e.get("n_executors", 2)
    cells = [(f"{d}/e{x}", predicted(reps[d][:, x], ex.n_train(d) * n, seed=7 * i + x),
              got.get((d, x))) for i, d in enumerate(sorted(reps)) for x in range(1, reps[d].shape[1])]
    return range_row("5b EDV construction epochs ≥ 1 within the planted range (profile and design "
                     "only)", cells, "a run that reads no memory after epoch 0 falls below it")
