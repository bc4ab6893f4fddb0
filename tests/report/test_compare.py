"""``edv compare`` tables over a hand-made DuckDB connection with the contract's views."""

from __future__ import annotations

import csv
import json
import random
import re

import duckdb
import pytest

from edv_ray.report import compare_tables as ct
from edv_ray.report.compare import write_report
from edv_ray.report.stats import wilson

RUNS = {  # run → (trials per task, axes)
    "r1": (2, {"pool": "qwen+smol", "retrieval_k": 1, "contamination": 0.0}),
    "r2": (1, {"pool": "qwen+smol", "retrieval_k": 3, "contamination": 0.1}),
    "r3": (1, {"pool": "qwen+smol", "retrieval_k": 5, "contamination": 0.2}),
}
DOMAINS = {"airline": 8, "retail": 10}
# method → {epoch: success probability}; per-model methods run every agent
PLAN = {"no_memory": {0: 0.45}, "reasoning_bank": {0: 0.5, 1: 0.55},
        "judge": {0: 0.6}, "edv": {0: 0.5, 1: 0.65, 2: 0.8}}
LAST = {"no_memory": 0, "reasoning_bank": 1, "judge": 0, "edv": 2}
# the last-epoch scope, written out by hand from the plan above
LAST_SQL = "(" + " OR ".join(f"(method = '{m}' AND epoch = {e})" for m, e in LAST.items()) + ")"
SOLVED = "(status = 'ok' AND success)"

MR_DDL = ("run_id VARCHAR, method VARCHAR, agent VARCHAR, epoch INT, domain VARCHAR, "
          "task_id VARCHAR, trial INT, status VARCHAR, success BOOLEAN, reward DOUBLE")


def make_con(mr, tokens=(), admitted=(), info=()):
    con = duckdb.connect()
    con.execute(f"CREATE TABLE _mr ({MR_DDL})")
    con.execute("CREATE TABLE _tok (run_id VARCHAR, method VARCHAR, phase VARCHAR, stage VARCHAR, "
                "role VARCHAR, agent VARCHAR, model VARCHAR, calls BIGINT, prompt_tokens BIGINT, "
                "completion_tokens BIGINT)")
    con.execute("CREATE TABLE _adm (run_id VARCHAR, method VARCHAR, bank VARCHAR, items BIGINT)")
    con.execute("CREATE TABLE _info (run_id VARCHAR, sweep_id VARCHAR, axes_json VARCHAR)")
    for table, rows, width in (("_mr", mr, 10), ("_tok", tokens, 10), ("_adm", admitted, 4),
                               ("_info", info, 3)):
        if rows:
            con.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * width)})", list(rows))
    for view, table in (("method_results", "_mr"), ("token_use", "_tok"), ("admitted", "_adm"),
                        ("run_info", "_info")):
        con.execute(f"CREATE VIEW {view} AS SELECT * FROM {table}")
    return con


def episode(rng, run, method, agent, epoch, domain, task, trial, p):
    if rng.random() < 0.08:
        return (run, method, agent, epoch, domain, task, trial, "error", None, None)
    ok = rng.random() < p
    return (run, method, agent, epoch, domain, task, trial, "ok", ok, float(ok))


def build_con(seed: int = 42):
    """Three runs (a sweep over retrieval_k and contamination), four methods, two domains."""
    rng = random.Random(seed)
    mr, tok, adm = [], [], []
    for run, (trials, _) in RUNS.items():
        for domain, n_tasks in DOMAINS.items():
            for i in range(n_tasks):
                task = f"{domain[0]}{i}"
                for trial in range(trials):
                    for method, epochs in PLAN.items():
                        for epoch, p in epochs.items():
                            if method in ct.PER_MODEL_METHODS:
                                agents = ["qwen", "smol"]
                            elif method == "judge":
                                agents = [rng.choice(["qwen", "smol"])]
                            else:
                                agents = ["qwen" if i % 2 else "smol"]
                            for agent in agents:
                                mr.append(episode(rng, run, method, agent, epoch, domain, task,
                                                  trial, p))
        for method in PLAN:
            for phase, stage, role in (("construction", "execute", "agent"),
                                       ("construction", "execute", "user_sim"),
                                       ("construction", "distill", "distiller"),
                                       ("inference", "eval", "agent"),
                                       ("inference", "eval", "user_sim")):
                if method == "no_memory" and phase == "construction":
                    continue
                tok.append((run, method, phase, stage, role, "qwen", "qwen-0.5b",
                            rng.randint(5, 50), rng.randint(1000, 90000), rng.randint(100, 9000)))
        adm += [(run, "edv", "shared", rng.randint(1, 9)), (run, "edv", "private", rng.randint(1, 9)),
                (run, "reasoning_bank", "rb", rng.randint(1, 9))]
    info = [(run, "sweep1", json.dumps(axes)) for run, (_, axes) in RUNS.items()]
    return make_con(mr, tok, adm, info)


@pytest.fixture(scope="module")
def con():
    return build_con()


def q1(con, sql, *params):
    return con.execute(sql, list(params)).fetchone()


def direct_counts(con, method, agent, domain, where=LAST_SQL):
    sql = (f"SELECT count(*), count(*) FILTER (WHERE {SOLVED}), "
           f"count(*) FILTER (WHERE status = 'error') FROM method_results WHERE {where} "
           "AND method = ?")
    params = [method]
    if agent != ct.ALL:
        sql += " AND agent = ?"
        params.append(agent)
    if domain != ct.ALL:
        sql += " AND domain = ?"
        params.append(domain)
    return q1(con, sql, *params)


def test_main_table_equals_direct_queries(con):
    rows = ct.main_table(con, n_boot=300)
    keys = {(r["method"], r["agent"], r["domain"]) for r in rows}
    domains = list(DOMAINS) + [ct.ALL]
    expected = {(m, a, d) for m in PLAN for d in domains
                for a in ([ct.ALL, "qwen", "smol"] if m in ct.PER_MODEL_METHODS else [ct.ALL])}
    assert keys == expected
    for r in rows:
        n, s, e = direct_counts(con, r["method"], r["agent"], r["domain"])
        assert (r["n"], r["successes"], r["errors"]) == (n, s, e)
        assert r["pass_at_1"] == pytest.approx(s / n)
        w = wilson(s, n)
        assert (r["ci_lo"], r["ci_hi"]) == pytest.approx((w.lo, w.hi))
        assert r["baseline"] == "reasoning_bank"
    assert sum(r["errors"] for r in rows if r["agent"] == ct.ALL and r["domain"] == ct.ALL) > 0


def test_bootstrap_difference_equals_direct_paired_mean(con):
    rows = ct.main_table(con, n_boot=300)
    edv = next(r for r in rows if (r["method"], r["agent"], r["domain"]) == ("edv", ct.ALL, "retail"))
    task_mean = (f"SELECT domain, task_id, avg(CASE WHEN {SOLVED} THEN 1.0 ELSE 0.0 END) AS s "
                 f"FROM method_results WHERE {LAST_SQL} AND domain = 'retail' AND method = ")
    diff, tasks = q1(con, f"WITH a AS ({task_mean}'edv' GROUP BY ALL), "
                          f"b AS ({task_mean}'reasoning_bank' GROUP BY ALL) "
                          "SELECT avg(a.s - b.s), count(*) FROM a JOIN b USING (domain, task_id)")
    assert edv["diff_vs_baseline"] == pytest.approx(diff)
    assert edv["paired_tasks"] == tasks == DOMAINS["retail"]
    assert edv["diff_lo"] <= edv["diff_vs_baseline"] <= edv["diff_hi"]
    base = [r for r in rows if r["method"] == "reasoning_bank"]
    assert all(r["diff_vs_baseline"] is None for r in base)


def test_pass_hat_k_equals_direct_query(con):
    rows = ct.main_table(con, n_boot=100)
    # r1 has 2 trials per task: pass^2 = mean over (run, task[, agent]) of c(c-1) / (n(n-1))
    for method, agent_unit in (("edv", ""), ("no_memory", ", agent")):
        want, tasks = q1(con, f"""
            SELECT avg(c * (c - 1) / (n * (n - 1))), count(*) FROM (
                SELECT run_id, domain, task_id{agent_unit}, count(*) AS n,
                       count(*) FILTER (WHERE {SOLVED}) AS c
                FROM method_results WHERE {LAST_SQL} AND method = ? GROUP BY ALL) WHERE n >= 2""",
                            method)
        r = next(r for r in rows if (r["method"], r["agent"], r["domain"]) == (method, ct.ALL, ct.ALL))
        assert r["k"] == 2 and r["pass_hat_k"] == pytest.approx(want) and r["pass_hat_k_task_runs"] == tasks
    phk = ct.pass_hat_k_table(con)
    assert {r["k"] for r in phk} == {1, 2}


def test_errors_count_as_failures():
    # epoch NULL (a method without epochs) must survive the last-epoch scope too
    rows = [("r", "edv", "qwen", None, "retail", f"t{i}", 0, "ok", i < 5, None) for i in range(8)]
    rows += [("r", "edv", "qwen", None, "retail", f"t{i}", 0, "error", None, None) for i in (8, 9)]
    con = make_con(rows)
    (r,) = [r for r in ct.main_table(con, n_boot=50) if r["domain"] == "retail"]
    assert (r["n"], r["successes"], r["errors"]) == (10, 5, 2)
    assert r["pass_at_1"] == pytest.approx(0.5)  # 5/10, not 5/8
    assert (r["ci_lo"], r["ci_hi"]) == pytest.approx((0.236593, 0.763407), abs=1e-5)


def test_overlap_flag_and_sentence():
    def scored(method, successes):
        return [("r", method, "qwen", 0, "retail", f"t{i}", 0, "ok", i < successes, None)
                for i in range(20)]
    con = make_con(scored("no_memory", 10) + scored("router", 11) + scored("edv", 20))
    main = {r["method"]: r for r in ct.main_table(con, n_boot=500)
            if r["agent"] == ct.ALL and r["domain"] == "retail"}
    assert main["router"]["baseline"] == "no_memory"
    assert main["router"]["overlaps_baseline"] is True       # 11/20 vs 10/20
    assert main["edv"]["overlaps_baseline"] is False         # 20/20 vs 10/20
    assert main["edv"]["diff_lo"] > 0 and main["edv"]["diff_vs_baseline"] == pytest.approx(0.5)
    pairs = {(p["method"], p["other"]): p for p in ct.pairs_table(con, n_boot=500)
             if p["domain"] == "retail"}
    assert set(pairs) == {("router", "no_memory"), ("edv", "no_memory"), ("edv", "router")}
    assert pairs[("router", "no_memory")]["overlap"]
    assert "not distinguishable at this n" in pairs[("router", "no_memory")]["sentence"]
    assert "n=20" in pairs[("router", "no_memory")]["sentence"]
    assert not pairs[("edv", "no_memory")]["overlap"]
    assert "not distinguishable" not in pairs[("edv", "no_memory")]["sentence"]


def test_token_tables_equal_direct_queries(con):
    tt = ct.token_tables(con)
    summ = {r["method"]: r for r in tt["tokens"]}
    tok = "sum(prompt_tokens + completion_tokens)"
    rb_inf = None
    for method in ("reasoning_bank", "edv", "no_memory", "judge"):
        inf, = q1(con, f"SELECT {tok} FROM token_use WHERE method = ? AND phase = 'inference' "
                       "AND role <> 'user_sim'", method)
        cons, = q1(con, f"SELECT coalesce({tok}, 0) FROM token_use WHERE method = ? "
                        "AND phase = 'construction' AND role <> 'user_sim'", method)
        sim, = q1(con, f"SELECT {tok} FROM token_use WHERE method = ? AND role = 'user_sim'", method)
        n, s = q1(con, f"SELECT count(*), count(*) FILTER (WHERE {SOLVED}) FROM method_results "
                       "WHERE method = ?", method)
        r = summ[method]
        assert (r["inference_tokens"], r["construction_tokens"], r["user_sim_tokens"]) == (inf, cons, sim)
        assert (r["episodes"], r["solved"]) == (n, s)
        assert r["inference_per_test_task"] == pytest.approx(inf / n)
        assert r["inference_per_solved_task"] == pytest.approx(inf / s)
        if method == "reasoning_bank":
            rb_inf = inf / n
        assert r["inference_ratio_to_rb"] == pytest.approx((inf / n) / rb_inf)
    assert summ["no_memory"]["construction_tokens"] == 0
    items = {(r["method"], r["bank"]): r for r in tt["tokens_per_item"]}
    shared, = q1(con, "SELECT sum(items) FROM admitted WHERE method = 'edv' AND bank = 'shared'")
    assert items[("edv", "shared")]["items"] == shared
    assert items[("edv", "shared")]["tokens_per_item"] == pytest.approx(
        summ["edv"]["construction_tokens"] / shared)
    assert ("edv", ct.ALL) in items and ("reasoning_bank", "rb") in items
    roles = [r for r in tt["tokens_by_role"] if r["user_sim"]]
    assert roles and all(r["role"] == "user_sim" for r in roles)


def test_heterogeneity_and_curves_equal_direct_queries(con):
    het = ct.heterogeneity_table(con)
    assert {"pool", "retrieval_k", "contamination", "method", "runs"} <= set(het[0])
    for r in het:
        run = next(k for k, (_, axes) in RUNS.items() if axes["retrieval_k"] == r["retrieval_k"])
        n, s, e = q1(con, f"SELECT count(*), count(*) FILTER (WHERE {SOLVED}), count(*) FILTER "
                          f"(WHERE status = 'error') FROM method_results WHERE {LAST_SQL} "
                          "AND method = ? AND run_id = ?", r["method"], run)
        assert (r["n"], r["successes"], r["errors"], r["runs"]) == (n, s, e, 1)
        assert r["contamination"] == RUNS[run][1]["contamination"]
    ep = {(r["method"], r["x"]): r for r in ct.curve_epoch(con)}
    assert {x for m, x in ep if m == "edv"} == {0, 1, 2}
    for (m, x), r in ep.items():
        n, s, _ = direct_counts(con, m, ct.ALL, ct.ALL, where=f"epoch = {x}")
        assert (r["n"], r["successes"]) == (n, s)
    k = {(r["method"], r["x"]): r for r in ct.curve_axis(con, "retrieval_k")}
    assert {x for _, x in k} == {1, 3, 5}
    n, s, _ = direct_counts(con, "edv", ct.ALL, ct.ALL, where=f"run_id = 'r2' AND {LAST_SQL}")
    assert (k[("edv", 3)]["n"], k[("edv", 3)]["successes"]) == (n, s)


def test_write_report_writes_every_file(con, tmp_path):
    tables = write_report(con, tmp_path / "cmp", n_boot=200)
    out = tmp_path / "cmp"
    for name in ("main", "pass_hat_k", "pairs", "tokens", "tokens_by_role", "tokens_per_item",
                 "heterogeneity", "curve_epoch", "curve_retrieval_k", "curve_contamination"):
        assert tables[name], name
        with open(out / f"{name}.csv") as f:
            assert len(list(csv.DictReader(f))) == len(tables[name])
    for png in ("pass_at_1", "curve_epoch", "curve_retrieval_k", "curve_contamination"):
        data = (out / f"{png}.png").read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    md = (out / "compare.md").read_text()
    assert "not distinguishable at this n" in md
    for png in ("pass_at_1", "curve_epoch", "curve_retrieval_k", "curve_contamination"):
        assert f"]({png}.png)" in md
    # every Pass@1 printed carries its interval and n
    printed = re.findall(r"\b[01]\.\d{3} \[[01]\.\d{3}, [01]\.\d{3}\]( n=\d+)?", md)
    assert printed and all(printed)
    r = next(r for r in tables["main"] if (r["method"], r["agent"], r["domain"]) == ("edv", ct.ALL, ct.ALL))
    assert ct.fmt_rate(r["pass_at_1"], r["ci_lo"], r["ci_hi"], r["n"], r["errors"]) in md


def test_baseline_choice_and_empty_extras(tmp_path):
    rows = [("r", m, "qwen", 0, "airline", f"t{i}", 0, "ok", (i + j) % 3 == 0, None)
            for j, m in enumerate(("edv", "router")) for i in range(12)]
    con = make_con(rows)
    main = ct.main_table(con, n_boot=50)
    assert all(r["baseline"] is None and r["diff_vs_baseline"] is None for r in main)
    assert {r["baseline"] for r in ct.main_table(con, baseline="router", n_boot=50)} == {"router"}
    tables = write_report(con, tmp_path, n_boot=50)
    assert not tables["tokens"] and not tables["pass_hat_k"] and not tables["curve_retrieval_k"]
    assert (tmp_path / "compare.md").exists() and (tmp_path / "main.csv").exists()
    assert not (tmp_path / "curve_epoch.png").exists()  # one epoch: no curve to draw


def test_empty_connection_still_writes_a_report(tmp_path):
    tables = write_report(make_con([], info=[("r0", None, None)]), tmp_path, n_boot=10)
    assert all(not rows for name, rows in tables.items() if name != "heterogeneity")
    assert "0 run(s)" in (tmp_path / "compare.md").read_text()
    assert not list(tmp_path.glob("*.png"))
