"""``edv compare`` tables over a hand-made DuckDB connection with the contract's views: every
figure equals a direct query (or a value computed outside the project)."""

from __future__ import annotations

import csv
import json
import random
import re

import duckdb
import pytest

from edv_ray.config import ConfigError
from edv_ray.report import compare_tables as ct
from edv_ray.report.compare import compare_tables, write_report
from edv_ray.report.compare_units import ALL, Scored, fmt_cell
from edv_ray.report.method_facts import per_model_methods

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
LAST_SQL = "(" + " OR ".join(f"(method = '{m}' AND epoch = {e})" for m, e in LAST.items()) + ")"
SOLVED = "(status = 'ok' AND success)"

MR_DDL = ("run_id VARCHAR, method VARCHAR, agent VARCHAR, epoch INT, domain VARCHAR, "
          "task_id VARCHAR, trial INT, status VARCHAR, success BOOLEAN, reward DOUBLE")
TOK_DDL = ("run_id VARCHAR, method VARCHAR, phase VARCHAR, stage VARCHAR, epoch INT, "
           "role VARCHAR, agent VARCHAR, model VARCHAR, calls BIGINT, prompt_tokens BIGINT, "
           "completion_tokens BIGINT, shared BOOLEAN")


def make_con(mr, tokens=(), admitted=(), info=()):
    con = duckdb.connect()
    con.execute(f"CREATE TABLE _mr ({MR_DDL})")
    con.execute(f"CREATE TABLE _tok ({TOK_DDL})")
    con.execute("CREATE TABLE _adm (run_id VARCHAR, method VARCHAR, bank VARCHAR, items BIGINT)")
    con.execute("CREATE TABLE _info (run_id VARCHAR, sweep_id VARCHAR, axes_json VARCHAR)")
    con.execute("CREATE TABLE _uses (run_id VARCHAR, method VARCHAR, stage VARCHAR, epoch INT, "
                "episode_id VARCHAR, memory_key VARCHAR)")
    for table, rows, width in (("_mr", mr, 10), ("_tok", tokens, 12), ("_adm", admitted, 4),
                               ("_info", info, 3)):
        if rows:
            con.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * width)})", list(rows))
    for view, table in (("method_results", "_mr"), ("token_use", "_tok"), ("admitted", "_adm"),
                        ("run_info", "_info"), ("uses", "_uses")):
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
                            if method in per_model_methods():
                                agents = ["qwen", "smol"]
                            elif method == "judge":
                                agents = [rng.choice(["qwen", "smol"])]
                            else:
                                agents = ["qwen" if i % 2 else "smol"]
                            for agent in agents:
                                mr.append(episode(rng, run, method, agent, epoch, domain, task,
                                                  trial, p))
        for method, epochs in PLAN.items():
            for epoch in epochs:
                for phase, stage, role in (("construction", "execute", "agent"),
                                           ("construction", "execute", "user_sim"),
                                           ("construction", "distill", "distiller"),
                                           ("inference", "eval", "agent"),
                                           ("inference", "eval", "user_sim")):
                    if method == "no_memory" and phase == "construction":
                        continue
                    tok.append((run, method, phase, stage, epoch, role, "qwen", "qwen-0.5b",
                                rng.randint(5, 50), rng.randint(1000, 90000),
                                rng.randint(100, 9000), False))
        adm += [(run, "edv", "shared", rng.randint(1, 9)), (run, "edv", "private", rng.randint(1, 9)),
                (run, "reasoning_bank", "rb", rng.randint(1, 9))]
    info = [(run, "sweep1", json.dumps(axes)) for run, (_, axes) in RUNS.items()]
    return make_con(mr, tok, adm, info)


@pytest.fixture(scope="module")
def con():
    return build_con()


def q1(con, sql, *params):
    return con.execute(sql, list(params)).fetchone()


def direct_counts(con, run, method, agent, domain, where=LAST_SQL):
    sql = (f"SELECT count(*), count(*) FILTER (WHERE {SOLVED}), "
           f"count(*) FILTER (WHERE status = 'error') FROM method_results WHERE {where} "
           "AND method = ? AND run_id = ?")
    params = [method, run]
    if agent != ALL:
        sql += " AND agent = ?"
        params.append(agent)
    if domain != ALL:
        sql += " AND domain = ?"
        params.append(domain)
    return q1(con, sql, *params)


def test_a_row_per_run_method_and_agent_equal_to_direct_queries(con):
    rows = ct.main_table(Scored(con), n_boot=300)
    keys = {(r["group"], r["method"], r["agent"], r["domain"]) for r in rows}
    domains = list(DOMAINS) + [ALL]
    assert keys == {(run, m, a, d) for run in RUNS for m in PLAN for d in domains
                    for a in ([ALL, "qwen", "smol"] if m in per_model_methods() else [ALL])}
    for r in rows:
        n, s, e = direct_counts(con, r["group"], r["method"], r["agent"], r["domain"])
        assert (r["n"], r["successes"], r["errors"]) == (n, s, e)
        if r["domain"] != ALL:
            assert r["pass_at_1"] == pytest.approx(s / n)
        else:
            assert r["pooled_pass_at_1"] == pytest.approx(s / n)
        # r1 has two trials per task (and per-model "all" two agents): clustered intervals
        repeated = r["group"] == "r1" or (r["method"] in per_model_methods() and r["agent"] == ALL)
        assert r["interval"] == ("task-clustered" if repeated else "wilson")
        assert r["baseline"] == "reasoning_bank"
    assert sum(r["errors"] for r in rows if r["agent"] == ALL and r["domain"] == ALL) > 0


def test_all_is_the_mean_of_domain_scores_with_the_pooled_figure_beside(con):
    for r in ct.main_table(Scored(con), n_boot=100):
        if r["domain"] != ALL:
            continue
        means = [direct_counts(con, r["group"], r["method"], r["agent"], d) for d in DOMAINS]
        assert r["pass_at_1"] == pytest.approx(sum(s / n for n, s, _ in means) / len(means))
        assert r["ci_lo"] <= r["pass_at_1"] <= r["ci_hi"]


def test_pooling_only_when_asked_and_labelled(con):
    unpooled = Scored(con)
    assert [g.label for g in unpooled.groups] == ["r1", "r2", "r3"]
    # runs that differ in their axes are not pooled even with pool=True
    assert [g.label for g in Scored(con, pool=True).groups] == ["r1", "r2", "r3"]
    info = [(run, None, json.dumps({"seed": i})) for i, run in enumerate(("s0", "s1"))]
    rows = [(run, "edv", "q", 0, "retail", f"t{i}", 0, "ok", i % 3 != 0, None)
            for run in ("s0", "s1") for i in range(30)]
    two = make_con(rows, info=info)
    (g,) = Scored(two, pool=True).groups
    assert g.runs == ("s0", "s1") and "pooled 2 runs: s0, s1" in g.text
    cell = Scored(two, pool=True).cell(g.label, "edv", ALL, "retail")
    assert (cell["n"], cell["tasks"], cell["interval"]) == (60, 30, "task-clustered")


def test_bootstrap_difference_equals_direct_paired_mean(con):
    rows = ct.main_table(Scored(con), n_boot=300)
    edv = next(r for r in rows if (r["group"], r["method"], r["agent"], r["domain"])
               == ("r2", "edv", ALL, "retail"))
    task_mean = (f"SELECT domain, task_id, avg(CASE WHEN {SOLVED} THEN 1.0 ELSE 0.0 END) AS s "
                 f"FROM method_results WHERE {LAST_SQL} AND run_id = 'r2' AND domain = 'retail' "
                 "AND method = ")
    diff, tasks = q1(con, f"WITH a AS ({task_mean}'edv' GROUP BY ALL), "
                          f"b AS ({task_mean}'reasoning_bank' GROUP BY ALL) "
                          "SELECT avg(a.s - b.s), count(*) FROM a JOIN b USING (domain, task_id)")
    assert edv["diff"] == pytest.approx(diff)
    assert edv["paired_tasks"] == tasks == DOMAINS["retail"]
    assert edv["diff_lo"] is None and "too few tasks (10 paired" in edv["diff_note"]
    assert all(r["diff"] is None for r in rows if r["method"] == "reasoning_bank")


def scored_rows(run, method, agent, outcomes, domain="retail"):
    return [(run, method, agent, 0, domain, f"t{i}", 0, "ok", bool(ok), None)
            for i, ok in enumerate(outcomes)]


def test_per_agent_rows_compare_with_the_same_agents_baseline_row():
    n = 20
    rows = (scored_rows("r", "reasoning_bank", "q", [1] * 19 + [0])
            + scored_rows("r", "reasoning_bank", "s", [0] * n)
            + scored_rows("r", "no_memory", "q", [1] * 15 + [0] * 5)
            + scored_rows("r", "no_memory", "s", [1] * 2 + [0] * 18))
    main = {(r["method"], r["agent"]): r for r in ct.main_table(Scored(make_con(rows)), n_boot=500)}
    nm_q = main[("no_memory", "q")]
    assert nm_q["baseline_agent"] == "q" and nm_q["diff"] == pytest.approx(15 / 20 - 19 / 20)
    assert main[("no_memory", ALL)]["baseline_agent"] == ALL
    assert main[("no_memory", ALL)]["diff"] == pytest.approx(17 / 40 - 19 / 40)


def test_the_26_of_40_vs_20_of_40_example_prints_the_paired_verdict(tmp_path):
    rows = (scored_rows("r", "no_memory", "q", [1] * 20 + [0] * 20)
            + scored_rows("r", "edv", "q", [1] * 26 + [0] * 14))
    tables = write_report(make_con(rows), tmp_path, n_boot=10_000)
    md = (tmp_path / "compare.md").read_text()
    (pair,) = [p for p in tables["pairs"] if p["domain"] == "retail"]
    assert pair["diff"] == pytest.approx(0.15) and pair["diff_p"] == pytest.approx(1 / 32)
    assert ("retail: edv − no_memory = +0.150 [+0.030, +0.270] over 40 paired tasks (6 differ); "
            "exact two-sided p = 0.0312; detectable at 80 % power: ±0.167 — edv higher") in md
    # Wilson bounds as statsmodels gives them (proportion_confint(26, 40, method="wilson"))
    assert "0.650 [0.495, 0.779] n=40, 0 err" in md and "0.500 [0.352, 0.648] n=40, 0 err" in md
    assert "overlap" not in md.lower() and "distinguishable" not in md


def test_a_null_result_says_what_it_could_have_missed():
    rows = (scored_rows("r", "no_memory", "q", [i % 2 for i in range(40)])
            + scored_rows("r", "edv", "q", [(i // 2) % 2 for i in range(40)]))
    (pair,) = ct.pairs_table(Scored(make_con(rows)), n_boot=2000)
    assert pair["diff"] == 0 and pair["diff_p"] == 1.0
    assert "no difference shown (p = 1); differences smaller than ±0.3" in pair["sentence"]


def test_bad_baseline_and_epoch_are_errors_not_empty_tables(con):
    with pytest.raises(ConfigError, match="--baseline nope: no such method"):
        compare_tables(con, baseline="nope", n_boot=10)
    with pytest.raises(ConfigError, match="--epoch 99: no method has epoch 99.*0, 1, 2"):
        compare_tables(con, epoch=99, n_boot=10)
    with pytest.raises(ConfigError, match="--boot 0"):
        compare_tables(con, n_boot=0)
    s = Scored(con, epoch=2)  # only EDV has epoch 2: the others are named as left out
    assert s.methods == ["edv"] and s.left_out == ["no_memory", "reasoning_bank", "judge"]


def test_pass_hat_k_equals_direct_query(con):
    rows = ct.main_table(Scored(con), n_boot=100)
    for method, agent_unit in (("edv", ""), ("no_memory", ", agent")):
        want, tasks = q1(con, f"""
            SELECT avg(c * (c - 1) / (n * (n - 1))), count(*) FROM (
                SELECT domain, task_id{agent_unit}, count(*) AS n,
                       count(*) FILTER (WHERE {SOLVED}) AS c
                FROM method_results WHERE {LAST_SQL} AND method = ? AND run_id = 'r1'
                GROUP BY ALL) WHERE n >= 2""", method)
        r = next(r for r in rows if (r["group"], r["method"], r["agent"], r["domain"])
                 == ("r1", method, ALL, ALL))
        assert r["k"] == 2 and r["pass_hat_k"] == pytest.approx(want)
        assert r["pass_hat_k_task_runs"] == tasks
    assert {r["k"] for r in ct.pass_hat_k_table(Scored(con))} == {1, 2}


def test_errors_count_as_failures():
    rows = [("r", "edv", "qwen", None, "retail", f"t{i}", 0, "ok", i < 5, None) for i in range(8)]
    rows += [("r", "edv", "qwen", None, "retail", f"t{i}", 0, "error", None, None) for i in (8, 9)]
    (r,) = [r for r in ct.main_table(Scored(make_con(rows)), n_boot=50) if r["domain"] == "retail"]
    assert (r["n"], r["successes"], r["errors"]) == (10, 5, 2)
    assert (r["pass_at_1"], r["ci_lo"], r["ci_hi"]) == pytest.approx((0.5, 0.236593, 0.763407),
                                                                     abs=1e-6)


def test_heterogeneity_and_curves_equal_direct_queries(con):
    s = Scored(con)
    het = ct.heterogeneity_table(s, {})
    assert {"pool", "retrieval_k", "contamination", "method", "runs"} <= set(het[0])
    for r in het:
        run = next(k for k, (_, axes) in RUNS.items() if axes["retrieval_k"] == r["retrieval_k"])
        n, s_, e = direct_counts(con, run, r["method"], ALL, ALL)
        assert (r["n"], r["successes"], r["errors"], r["runs"], r["group"]) == (n, s_, e, 1, run)
    ep = {(r["group"], r["method"], r["x"]): r for r in ct.curve_epoch(con, pool=False)}
    assert {x for g, m, x in ep if m == "edv" and g == "r1"} == {0, 1, 2}
    for (g, m, x), r in ep.items():
        n, s_, _ = direct_counts(con, g, m, ALL, ALL, where=f"epoch = {x}")
        assert (r["n"], r["successes"]) == (n, s_)
    k = {(r["method"], r["x"]): r for r in ct.curve_axis(s, "retrieval_k")}
    assert {x for _, x in k} == {1, 3, 5}
    n, s_, _ = direct_counts(con, "r2", "edv", ALL, ALL)
    assert (k[("edv", 3)]["n"], k[("edv", 3)]["successes"]) == (n, s_)


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
    for png in ("pass_at_1", "curve_epoch", "curve_retrieval_k", "curve_contamination"):
        assert f"]({png}.png)" in md
    # every Pass@1 printed carries its interval and n
    printed = re.findall(r"\b[01]\.\d{3} \[[01]\.\d{3}, [01]\.\d{3}\]( n=\d+)?", md)
    assert printed and all(printed)
    r = next(r for r in tables["main"] if (r["group"], r["method"], r["agent"], r["domain"])
             == ("r2", "edv", ALL, ALL))
    assert fmt_cell(r) in md and fmt_cell(r, pooled=True) in md
    assert "all (mean of domains)" in md and "all (episode-pooled)" in md


def test_no_baseline_and_empty_extras(tmp_path):
    rows = [("r", m, "qwen", 0, "airline", f"t{i}", 0, "ok", (i + j) % 3 == 0, None)
            for j, m in enumerate(("edv", "router")) for i in range(12)]
    con = make_con(rows)
    assert all(r["baseline"] is None and r["diff"] is None for r in ct.main_table(Scored(con)))
    assert {r["baseline"] for r in ct.main_table(Scored(con), baseline="router", n_boot=50)} == {"router"}
    tables = write_report(con, tmp_path, n_boot=50)
    assert not tables["tokens"] and not tables["pass_hat_k"] and not tables["curve_retrieval_k"]
    assert (tmp_path / "compare.md").exists() and (tmp_path / "main.csv").exists()
    assert not (tmp_path / "curve_epoch.png").exists()  # one epoch: no curve to draw


def test_empty_connection_still_writes_a_report(tmp_path):
    tables = write_report(make_con([], info=[("r0", None, None)]), tmp_path, n_boot=10)
    assert all(not rows for name, rows in tables.items() if name not in ("heterogeneity",))
    assert "0 run(s)" in (tmp_path / "compare.md").read_text() or \
        "1 row group" in (tmp_path / "compare.md").read_text()
    assert not list(tmp_path.glob("*.png"))
