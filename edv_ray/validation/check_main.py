"""Checks 1-4 on the main planted world, and check 3's null control.

1. the Ability Matrix and the Model Selector find the planted best agent per task type;
   Router, No-Memory and Judge score their planted rates;
2. ReasoningBank's judge audit recovers the planted P(judge = success | fail);
3. EDV beats ReasoningBank by the margin the profile implies (null world: by nothing);
4. contamination reaches the share asked and costs what the planted harm implies.
"""

from __future__ import annotations

import numpy as np

from edv_ray.validation.checks import Row, cells_row, diff_row, num, rate_row
from edv_ray.validation.expect import Expect, twins_in_top
from edv_ray.validation.measure import ALL, Run, clustered_fn

# ---------------------------------------------------------------- 1: routing and rates

def routing_rows(run: Run, ex: Expect, judge: str | None, cell=None) -> list[Row]:
    """Checks 1a-1e. ``cell(method, type, agent=...)``: a cell's rate function — compare's
    own cell of the domain (default: a τ²-bench world, one planted type a domain), or
    :func:`type_cell_fn` where the types are not the benchmark's domains."""
    cell = cell or run.cell_fn
    ds = ex.domains
    picks = run.rows("SELECT method, task_type, solver, count(*) FROM routing "
                     "WHERE method IN ('router', 'edv') GROUP BY ALL ORDER BY ALL")
    planted = {d: ex.best(d)[0] for d in ds}
    wrong = [(m, t, a, n) for m, t, a, n in picks if a != planted.get(t)]
    matrix = run.rows("SELECT key, agent, attempts, successes FROM routing_matrix "
                      "WHERE method = 'router' AND level = 'task_type'")
    attempts: dict = {}
    for key, agent, n, _s in matrix:
        attempts.setdefault(key, {})[agent] = int(n or 0)
    p_pick = {d: ex.p_correct_pick(d, attempts.get(d, {})) for d in ds}
    rows = [Row("1a Model Selector picks the planted best agent per task type",
                ", ".join(f"{d}→{a}" for d, a in planted.items()),
                "; ".join(f"{m}: {t}→{a} ×{n}" for m, t, a, n in picks), bool(picks) and not wrong,
                "P(the matrix ranks the planted best first | its attempts, ties counted as "
                "misses): " + ", ".join(f"{d} {p:.3f}" for d, p in p_pick.items()),
                {"planted": planted, "picks": picks, "p_correct_pick": p_pick})]
    rows.append(matrix_row(run, ex, matrix))
    rows.append(cells_row("1c Router Pass@1 per type = planted per-type maximum",
                          [(d, ex.best(d)[1], cell("router", d)) for d in ds]))
    rows.append(cells_row("1d No-Memory Pass@1 per agent and type = planted",
                          [(f"{a}/{d}", ex.p(a, d), cell("no_memory", d, agent=a))
                           for a in ex.executors for d in ds]))
    if "judge" in run.methods() and judge:
        rows.append(cells_row("1e Judge Pass@1 per type = planted (closed form)",
                              [(d, ex.judge(judge, d), cell("judge", d)) for d in ds],
                              f"judge {judge}"))
        rows.append(_judge_pick_row(run, ex, judge))
    return rows


def type_cell_fn(run: Run, ex: Expect):
    """A cell of one planted task type where the types are not the benchmark's domains (a
    synthetic Mind2Web world: one framework domain, the websites' domains as types):
    compare's episode counts of the type's test tasks — the design's ids, not the run's —
    clustered by task."""
    def cell(method: str, t: str, agent: str = ALL):
        ids = set(ex.design.test_ids[t])
        tc = run.scored().task_counts(run.group, method, agent)
        return clustered_fn((key, c, n) for key, (c, n, _e) in tc.items() if key[1] in ids)
    return cell


def matrix_row(run: Run, ex: Expect, matrix: list[tuple] | None = None) -> Row:
    """The Ability Matrix's cells: Router's construction executions per (agent, type),
    clustered by task, against the planted rates; the stored matrix must hold the same
    counts."""
    if matrix is None:
        matrix = run.rows("SELECT key, agent, attempts, successes FROM routing_matrix "
                          "WHERE method = 'router' AND level = 'task_type'")
    ds = ex.domains
    per = run.rows("SELECT agent, task_type, domain, task_id, count(*) FILTER (WHERE success), "
                   "count(*) FROM method_episodes WHERE used_by = 'router' AND stage = 'execute' "
                   "GROUP BY ALL")
    cells = [(a, t) for a in ex.executors for t in ds]
    counts = {c: (sum(n for a, t, _d, _i, _s, n in per if (a, t) == c),
                  sum(s for a, t, _d, _i, s, _n in per if (a, t) == c)) for c in cells}
    stored = {(a, k): (int(n or 0), int(s or 0)) for k, a, n, s in matrix}
    same = all(stored.get(c) == counts[c] for c in cells if c in counts)
    row = cells_row("1b Ability Matrix cells = planted P(success | agent, type)",
                    [(f"{a}/{t}", ex.p(a, t), clustered_fn(((d, i), s, n) for aa, tt, d, i, s, n
                                                           in per if (aa, tt) == (a, t)))
                     for a, t in cells],
                    "the stored routing matrix " + ("holds these counts" if same else
                                                    "DIFFERS from these counts"))
    row.ok = row.ok and same
    return row


def _judge_pick_row(run: Run, ex: Expect, judge: str) -> Row:
    """The Judge's pick among mixed runs (some passed, some failed): P(it picks a passing
    one) as planted for a judge shown no grades — one shown them picks the passing run.
    Planted from the profile (each domain weighted by its expected mixed tasks); the same
    given the runs each pick saw is in the detail."""
    mixed = {d: ex.judge_pick_mixed(judge, d) for d in ex.domains}
    weight = {d: ex.n_test(d) * mixed[d][0] for d in ex.domains}
    planted = sum(weight[d] * mixed[d][1] for d in ex.domains) / (sum(weight.values()) or 1.0)
    picks = run.rows("SELECT domain, task_id, candidate_agents, candidate_success, picked_success "
                     "FROM judge_picks WHERE status = 'ok' AND any_success "
                     "AND NOT list_bool_and(candidate_success)")
    given = [sum(p for p, ok in zip(ex.o.judge_pick_distribution(
        judge, list(outs), [a == judge for a in agents]), outs) if ok)
        for _d, _t, agents, outs, _ok in picks]
    return rate_row("1e· Judge picks a passing run among mixed runs = planted (no grades shown)",
                    planted, clustered_fn(((d, t), int(bool(ok)), 1) for d, t, _a, _o, ok in picks),
                    f"{len(picks)} picks with passing and failing runs shown (expected "
                    f"{sum(weight.values()):.1f}); given the runs each saw: "
                    f"{sum(given) / len(given) if given else 0.0:.3f}")


# ---------------------------------------------------------------- 2: RB's judge audit

def rb_audit_rows(run: Run, ex: Expect) -> list[Row]:
    view = run.rows("SELECT agent, p_judge_success_given_failed, p_judge_success FROM rb_judge_audit")
    got = run.rows("SELECT domain, task_id, true_success, label = 'success' FROM rb_judgments "
                   "WHERE parse_ok")
    out = []
    for truth, name in ((False, "2d ReasoningBank judge audit: P(judge = success | fail)"),
                        (True, "2e ReasoningBank judge audit: P(judge = success | success)")):
        fn = clustered_fn(((d, t), int(said), 1) for d, t, ok, said in got if bool(ok) == truth)
        shown = ", ".join(f"{a} {num(f)}" for a, f, _s in view) if not truth else ""
        out.append(rate_row(name, ex.o.p_self_label_success(ex.executors[0], truth), fn,
                            "clustered by task" + (f"; rb_judge_audit per agent: {shown}" if shown else "")))
    return out


# ---------------------------------------------------------------- 3: EDV vs RB

def margin_rows(run: Run, ex: Expect, cfg: dict, label: str, number: str, reps: int) -> list[Row]:
    """EDV − ReasoningBank (mean of domain scores), planted vs measured, and each side."""
    ds = ex.domains
    e, rb = cfg.get("edv", {}), cfg.get("reasoning_bank", {})
    edv = {d: ex.edv_inference(d, e) for d in ds}
    curve = ex.rb_curve({d: (d, ex.n_train(d)) for d in ds}, rb, rb.get("epochs", 1), reps=reps)
    rbv = curve[max(curve)]
    planted = sum(edv[d] - rbv[d] for d in ds) / len(ds)
    beats = planted > 0.02
    rows = [diff_row(f"{number} EDV − ReasoningBank, {label}", planted,
                     run.paired_fn("edv", "reasoning_bank"),
                     ("the 95 % interval must also exclude 0 (EDV beats RB)" if beats else
                      "null control: the interval must contain 0")
                     + f"; RB by Monte Carlo ({reps} reps/agent)", exclude_zero=beats)]
    rows.append(cells_row(f"{number}· EDV Pass@1 per type, {label} (closed form)",
                          [(x, edv[x], run.cell_fn("edv", x)) for x in ds], bank_detail(run, ex, ds, e)))
    rows.append(cells_row(f"{number}· ReasoningBank Pass@1 per type, {label} (Monte Carlo)",
                          [(x, rbv[x], run.cell_fn("reasoning_bank", x)) for x in ds]))
    rows[0].detail += "; " + "; ".join(luck(run, ex, m) for m in ("edv", "reasoning_bank"))
    return rows


def luck(run: Run, ex: Expect, method: str) -> str:
    """How lucky a method's draws were: its mean planted P(success) given what each episode
    retrieved (the engine's own probability) against its observed rate, and the chance of
    a rate at least that far out (Poisson-binomial tail) — a miss with a tiny chance is
    the framework's (or the world's) fault, a miss with a fair chance is the dice."""
    got = run.rows("SELECT m.domain, m.agent, e.experiences, m.success FROM method_results m "
                   "JOIN episodes e USING (episode_id) WHERE m.method = ?", method)
    ps = [ex.o.success_probability(a, d, d, x or []) for d, a, x, _s in got]
    if not ps:
        return f"{method}: no episodes"
    dist = np.array([1.0])
    for p in ps:
        dist = np.convolve(dist, [1 - p, p])
    obs = sum(bool(s) for *_r, s in got)
    tail = dist[obs:].sum() if obs >= sum(ps) else dist[:obs + 1].sum()
    return (f"{method} given what it retrieved: planted {np.mean(ps):.3f}, observed "
            f"{obs / len(ps):.3f} (P(as far out) = {tail:.3f})")


def bank_detail(run: Run, ex: Expect, ds: list[str], e: dict) -> str:
    """The assumptions behind EDV's closed form, measured: the shared bank's quality (the
    oracle reads the hidden tags), what inference retrieved and how right that was."""
    parts = []
    for d in ds:
        rules = [r for (r,) in run.rows("SELECT rule FROM memory_items WHERE bank = 'shared' "
                                        "AND domain = ?", d)]
        q = sum(ex.o.item_is_correct(r) for r in rules) / max(1, len(rules))
        parts.append(f"{d}: shared bank {len(rules)} items, {q:.2f} right "
                     f"(planted {ex.edv_bank(d, e)['q']:.2f})")
    k = e.get("retrieval_k", 3)
    got = run.rows("SELECT experiences, retrieved_banks FROM method_episodes WHERE used_by = 'edv' "
                   "AND stage = 'infer' AND condition = ''")
    full = sum(len(b or []) == k and set(b) == {"shared"} for _x, b in got)
    items = [x for xs, _b in got for x in xs or []]
    right = sum(ex.o.item_is_correct(x) for x in items) / max(1, len(items))
    parts.append(f"{full}/{len(got)} inference episodes retrieved {k} shared items, {right:.2f} right")
    return "; ".join(parts)


def admission_rows(run: Run, ex: Expect, e: dict) -> list[Row]:
    """Where EDV's candidates went (the decisions, not the votes), against the profile's
    closed form: all executors approve → shared, none → discard, some → private. One cell
    over every domain (its planted value weighted by the candidates each domain's training
    tasks are expected to give — design and profile only), so it has the power to see
    ignored votes, a relaxed unanimity or swapped banks."""
    ds = ex.domains
    bank = {d: ex.edv_bank(d, e) for d in ds}
    weight = {d: ex.n_train(d) * bank[d]["candidates"] for d in ds}
    total = sum(weight.values()) or 1.0
    planted = {w: sum(weight[d] * bank[d]["p_admitted"][w] for d in ds) / total
               for w in ("shared", "private", "discard")}
    got = run.rows("SELECT domain, task_id, route FROM decisions WHERE NOT coalesce(is_poison, false)")
    discard = sum(r == "discard" for *_k, r in got) / max(1, len(got))
    cells = [(where, planted[where], clustered_fn(((d, t), int(r == where), 1) for d, t, r in got))
             for where in ("shared", "private")]
    rows = [cells_row("2f EDV admission: where a candidate goes (shared, private)", cells,
                      f"{len(got)} candidates, clustered by task; planted from the writer and "
                      f"verifier profile only; discard planted {planted['discard']:.3f}, "
                      f"measured {discard:.3f}")]
    rows.append(_routes_row(run))
    if e.get("distill_by", "third_party") == "third_party":
        n, inside = run.rows("SELECT count(*), count(*) FILTER (WHERE list_contains(\"group\", "
                             "distiller)) FROM distill_runs")[0]
        rows.append(Row("2g EDV's distiller is a third party (outside the group it distils)",
                        "0 tasks", f"{inside} of {n} tasks", n > 0 and inside == 0,
                        "distill_by: third_party — the paper's contrast needs an outside writer"))
    return rows


def gain_rows(run: Run, ex: Expect, cfg: dict) -> list[Row]:
    """EDV's two gains, each planted and measured on its own: the memory gain (EDV −
    Router: both route to the solver the Ability Matrix ranks first, EDV then retrieves
    ``k`` shared items of the bank's planted quality) and the routing gain (Router −
    No-Memory: the best agent's rate against the pool's mean)."""
    e, ds = cfg.get("edv", {}), ex.domains
    memory = sum(ex.edv_inference(d, e) - ex.best(d)[1] for d in ds) / len(ds)
    routing = sum(ex.routing_gain(d) for d in ds) / len(ds)
    return [diff_row("3c EDV's memory gain: EDV − Router (the same routing)", memory,
                     run.paired_fn("edv", "router"), "planted: k shared items of the bank's "
                     "planted quality; the 95 % interval must exclude 0", exclude_zero=True),
            diff_row("3d EDV's routing gain: Router − No-Memory", routing,
                     run.paired_fn("router", "no_memory"), "planted: the best agent's rate "
                     "against the pool's mean; the 95 % interval must exclude 0", exclude_zero=True),
            cells_row("3c· EDV Pass@1 per type (closed form)",
                      [(d, ex.edv_inference(d, e), run.cell_fn("edv", d)) for d in ds],
                      bank_detail(run, ex, ds, e))]


def relevance_rows(run: Run, ex: Expect, cfg: dict) -> list[Row]:
    """Retrieval relevance (the relevance world): a right item helps only tasks of its own
    planted sub-type. Planted from the profile and the design alone: the routed solver
    retrieves ``k`` shared items of the task's own sub-type (a right retriever finds the
    task's kind), of that sub-type's planted bank quality; the memory gain EDV − Router
    is the mean over the test tasks. A retriever that ranks at random, ignores the query
    or reads the wrong bank retrieves items of the other kind, which help nothing."""
    e = cfg.get("edv", {})
    k = e.get("retrieval_k", 3)
    cells, gains, notes = [], [], []
    for d in ex.domains:
        train = {t: len(v) for t, v in ex.planted_types(d, "train").items()}
        tc = run.scored().task_counts(run.group, "edv", domain=d)
        for t, ids in sorted(ex.planted_types(d).items()):
            bank, planted = ex.edv_bank(t, e), ex.edv_inference(t, e)
            gains += [planted - ex.best(t)[1]] * len(ids)
            chosen = set(ids)
            cells.append((f"{d}/{t}", planted, clustered_fn(
                (key, c, n) for key, (c, n, _e) in tc.items() if key[1] in chosen)))
            expected = (bank["right"] + bank["wrong"]) * train.get(t, 0)
            notes.append(f"{d}/{t}: {len(ids)} test tasks, ~{expected:.1f} shared items of its "
                         f"own kind expected (k = {k})")
    got = run.rows("SELECT domain, task_id, experiences FROM method_episodes WHERE used_by = 'edv' "
                   "AND stage = 'infer' AND condition = ''")
    own = [ex.o.item_relevant(x, d, ex.o.task_type(d, t)) for d, t, xs in got for x in xs or []]
    notes.append(f"inference retrieved {len(own)} items, {sum(own) / max(1, len(own)):.2f} of the "
                 "task's own kind (diagnostic: what the framework did)")
    return [diff_row("3e EDV's memory gain where an item helps only its own kind: EDV − Router",
                     sum(gains) / max(1, len(gains)), run.paired_fn("edv", "router"),
                     "planted: k shared items of the task's own sub-type; the 95 % interval "
                     "must exclude 0", exclude_zero=True),
            cells_row("3e· EDV Pass@1 per sub-type (closed form)", cells, "; ".join(notes))]


# ---------------------------------------------------------------- 4: contamination

def contamination_rows(run: Run, ex: Expect, cfg: dict) -> list[Row]:
    rows = []
    for method in ("edv", "reasoning_bank"):
        if method not in run.methods():
            continue
        for s in cfg.get("contamination") or []:
            got = run.rows("SELECT domain, owner, n_clean, n_poison, share_reached FROM "
                           "contamination_share WHERE method = ? AND condition = ?", method, f"poison@{s:g}")
            off = [(dd, o, npz, round(s * nc / (1 - s))) for dd, o, nc, npz, _ in got
                   if abs(npz - round(s * nc / (1 - s))) > 1]
            reached = {f"{dd}{'/' + o if o else ''}": sr for dd, o, _nc, _np, sr in got}
            beside = _twins_beside_hosts(run, method, s)
            rows.append(Row(f"4{'a' if method == 'edv' else 'c'} {method} contamination: share reached",
                            f"{s:g} ± 1 item per domain" + (", twins beside hosts" if method == "edv"
                                                            else ""),
                            ", ".join(f"{k} {v:.3f}" for k, v in reached.items())
                            + (f"; {beside[0]} of {beside[1]} twins away from their host" if beside else ""),
                            bool(got) and not off and (not beside or beside[0] == 0),
                            f"off by more than one item: {off}" if off else
                            "per domain (and per agent's bank for ReasoningBank)", {"reached": reached}))
            rows.append(_drop_row(run, ex, method, s, cfg.get("edv", {}),
                                  cfg.get("reasoning_bank", {})))
    return rows


def _routes_row(run: Run) -> Row:
    """Admission as the method states it, read from the decisions against the votes: all
    of a candidate's verifiers approve → shared, some → private (for those approvers),
    none or no vote → discard. A specification check given the votes (2f beside it is
    planted from the profile alone): ignored votes, swapped banks or a relaxed unanimity
    route a candidate against its votes."""
    got = run.rows("""
        SELECT d.candidate_id, d.route, list_sort(coalesce(d.approvers, [])),
               count(v.verifier), count(v.verifier) FILTER (WHERE v.approve),
               list_sort(coalesce(list(v.verifier) FILTER (WHERE v.approve), []))
        FROM decisions d LEFT JOIN votes v USING (candidate_id)
        GROUP BY d.candidate_id, d.route, d.approvers""")
    wrong = 0
    for _c, route, approvers, n, yes, approving in got:
        want = "discard" if yes == 0 else "shared" if yes == n else "private"
        wrong += route != want or (want != "discard" and list(approvers) != list(approving))
    return Row("2f· EDV routes each candidate as its votes say (given the votes)",
               "0 candidates against their votes", f"{wrong} of {len(got)} candidates",
               bool(got) and wrong == 0, "unanimous → shared, some → the approvers' private "
               "banks, none → discard; read from the decisions and the votes tables")


def _twins_beside_hosts(run: Run, method: str, share: float) -> tuple[int, int] | None:
    """(twins not in their host's domain, bank and owner; twins) for EDV, whose hosts are
    items of its bank; None for a method whose hosts are not bank items."""
    if method != "edv":
        return None
    got = run.rows("SELECT count(*) FILTER (WHERE h.item_id IS NULL OR c.domain IS DISTINCT FROM "
                   "h.domain OR c.bank IS DISTINCT FROM h.bank OR c.owner IS DISTINCT FROM h.owner), "
                   "count(*) FROM contamination_items c LEFT JOIN memory_items h "
                   "ON h.item_id = c.host_item_id WHERE c.method = ? AND c.condition = ?",
                   method, f"poison@{share:g}")
    return int(got[0][0]), int(got[0][1])


def _drop_row(run: Run, ex: Expect, method: str, share: float, e: dict, rb: dict) -> Row:
    """Clean − contaminated on the same tasks, planted from the profile and the design:
    poison items an episode retrieves × (harm per wrong item + for EDV the planted value of
    the clean item a twin displaces). ReasoningBank's twins ride along with their host
    entry's items: ``share / (1 − share)`` per clean item of the ``k`` entries it reads.
    EDV ranks items: a twin (the host's words, its advice withdrawn) ranks next to its
    host, so its ``k`` shared slots hold :func:`twins_in_top` twins — a range over which
    of the pair ranks first (random ranking, ``share · k``, lies inside). What the run
    retrieved is in the detail."""
    mem = ex.o.profile.memory
    ds = ex.domains
    if method == "edv":
        per_episode = twins_in_top(e.get("retrieval_k", 3), share)
    else:
        cap = rb.get("max_items") or 3
        items = float(np.mean([min(ex.o.items_per_answer(a), cap) for a in ex.executors]))
        per_episode = (share / (1 - share) * rb.get("retrieval_k", 1) * items,) * 2
    effect = 0.0
    for d in ds:
        displaced = 0.0
        if method == "edv":
            q = ex.edv_bank(d, e)["q"]
            displaced = mem.gain_correct * q - mem.harm_wrong * (1 - q)
        effect += (mem.harm_wrong + displaced) / len(ds)
    planted = (per_episode[0] * effect, per_episode[1] * effect)
    cond = f"{method}+poison@{share:g}"
    poison = {i for (i,) in run.rows("SELECT item_id FROM contamination_items WHERE "
                                     "method || '+' || condition = ?", cond)}
    got: dict[str, list[int]] = {}
    for dom, ids in run.rows("SELECT m.domain, e.retrieved_item_ids FROM method_results m JOIN "
                             "episodes e USING (episode_id) WHERE m.method = ?", cond):
        got.setdefault(dom, []).append(sum(i in poison for i in ids or []))
    lo, hi = per_episode
    return diff_row(f"4{'b' if method == 'edv' else 'd'} {method} contamination drop (clean − poisoned)",
                    planted if lo != hi else planted[0], run.paired_fn(method, cond),
                    "poison items retrieved per episode: planted "
                    + (f"{lo:.2f}–{hi:.2f}" if lo != hi else f"{lo:.2f}") + ", the run: "
                    + ", ".join(f"{dom} {np.mean(v):.2f}" for dom, v in sorted(got.items())))
