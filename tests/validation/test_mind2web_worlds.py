"""The worlds on a synthetic Mind2Web release (issue 27: the construction world, the wide
epochs world): the release written for the world's size is read by the framework's own
Mind2Web loader as the real release is, its task types and ids are what the world's
design (the planted values' input) says, and the planted engine reads the same types
from it; the wide epochs world is the epochs world with more test tasks."""

from __future__ import annotations

from edv_ray.envs.mind2web.data import Mind2WebData
from edv_ray.envs.mind2web.episode import task_type
from edv_ray.simulation.mind2web_release import write_release
from edv_ray.validation.suite import expect_for
from edv_ray.validation.worlds import load_world, release_ids, release_order


def test_a_synthetic_release_reads_back_as_written(tmp_path):
    root = write_release(tmp_path / "rel", ["Travel", "Shopping", "Travel"], ["Info"], candidates=4)
    data = Mind2WebData(root)
    train = data.tasks("train")
    assert [(t.id, task_type(t)) for t in train] == [("tr-0", "Travel"), ("tr-1", "Shopping"),
                                                     ("tr-2", "Travel")]
    assert [(t.id, task_type(t)) for t in data.tasks("test_task")] == [("tt-0", "Info")]
    step = train[0].steps[0]
    # one step, one round of 4 candidates: the ranker ranks the positive one first
    assert len(train[0].steps) == 1 and len(step.pos_candidates) + len(step.neg_candidates) == 4
    assert [c.rank for c in step.pos_candidates] == [0] and step.op == "CLICK"


def test_release_order_interleaves_types_and_ids_follow_it():
    assert release_order({"A": 3, "B": 1}) == ["A", "B", "A", "A"]
    assert release_ids({"A": 3, "B": 1}, "tr") == {"A": ["tr-0", "tr-2", "tr-3"], "B": ["tr-1"]}


def test_the_construction_worlds_design_is_its_release(tmp_path):
    for size in ("fast", "full"):
        w = load_world("construction", size, tmp_path)
        d = w.design()
        data = Mind2WebData(w.config["benchmark"]["data_dir"])
        for split, ids, counts in (("train", d.train_ids, d.n_train), ("test_task", d.test_ids, d.n_test)):
            got: dict = {}
            for t in data.tasks(split):
                got.setdefault(task_type(t), []).append(t.id)
            assert got == ids and {k: len(v) for k, v in got.items()} == counts
        ex = expect_for(w)  # the oracle reads the planted types from the same files
        assert {ex.o.task_type("mind2web", i) for i in d.train_ids["Travel"]} == {"Travel"}
    # Mind2Web sends no tools, so identities carry sampling only; τ²-bench worlds keep the strategy
    ident = w.profile["agents"]["a"]["identity"]
    assert ident["prompt_strategy"] is None and ident["temperature"] == 0.1
    assert load_world("main", "fast", tmp_path).profile["agents"]["a"]["identity"]["prompt_strategy"] == "native_tools"


def test_the_rates_world_has_many_test_tasks_per_type_and_a_clear_best(tmp_path):
    w = load_world("rates", "full", tmp_path)
    d, ex = w.design(), expect_for(w)
    assert d.domains == ["Shopping", "Travel"] and min(d.n_test.values()) >= 500
    assert w.config["method"] == ["router", "no_memory"]
    for t in d.domains:  # the planted best leads the others by 0.25: routing is not luck
        best, rate = ex.best(t)
        assert all(rate - ex.p(a, t) >= 0.25 for a in ex.executors if a != best)


def test_the_rates_worlds_homogeneous_twin_has_its_design_and_no_best(tmp_path):
    """5f+ pairs the two rates worlds by test task: the same release design at each size;
    in the twin every agent is the same model (routing can gain nothing)."""
    for size in ("fast", "full"):
        het, hom = load_world("rates", size, tmp_path), load_world("rates_homogeneous", size, tmp_path)
        assert hom.design() == het.design(), size
        assert hom.config["method"] == het.config["method"]
    ex_hom, ex_het = expect_for(hom), expect_for(het)
    for t in hom.design().domains:
        assert ex_hom.routing_gain(t) == 0.0 and ex_het.routing_gain(t) > 0.15


def test_a_release_is_rewritten_only_when_its_size_changes(tmp_path):
    w = load_world("construction", "fast", tmp_path)
    mark = tmp_path / "releases" / w.run_id / "release.json"
    before = mark.stat().st_mtime_ns
    load_world("construction", "fast", tmp_path)
    assert mark.stat().st_mtime_ns == before


def test_the_wide_epochs_world_is_the_epochs_world_with_many_test_tasks(tmp_path):
    tau, wide = load_world("epochs", "full", tmp_path), load_world("epochs_wide", "full", tmp_path)
    assert wide.profile == tau.profile  # the same planted world …
    for key in ("method", "edv", "router", "reasoning_bank"):
        assert wide.config[key] == tau.config[key], key
    d, dt = wide.design(), tau.design()
    assert d.domains == ["mind2web"] and d.n_train["mind2web"] == dt.n_train["airline"]
    assert d.n_test["mind2web"] * d.trials > 20 * sum(dt.n_test.values()) * dt.trials  # … on far more test episodes
    ex = expect_for(wide)  # one type, named as the framework's domain: as on τ²-bench, a domain is a type
    assert {ex.o.task_type("mind2web", i) for i in d.test_ids["mind2web"][:50]} == {"mind2web"}


def test_the_many_training_tasks_world_is_the_epochs_worlds_edv(tmp_path):
    """epochs_train checks 5b on hundreds of construction executions: the epochs world's
    profile and EDV, its bank full after the first epoch (planted 0.8 given it, 0.2
    without memory, so a run that reads none is far off)."""
    tau, many = load_world("epochs", "full", tmp_path), load_world("epochs_train", "full", tmp_path)
    assert many.profile == tau.profile and many.config["method"] == ["edv"]
    same = ("retrieval_k", "retrieval_tau", "retrieval_scope", "max_candidates", "dedup_threshold")
    assert {k: many.config["edv"][k] for k in same} == {k: tau.config["edv"][k] for k in same}
    d = many.design()
    assert d.n_train["mind2web"] >= 100 and many.config["edv"]["epochs"] >= 2
    ex = expect_for(many)
    mc = ex.edv_curve("mind2web", d.n_train["mind2web"], many.config["edv"], reps=100, seed=0)
    assert mc["bank_sizes"][:, 0].min() >= many.config["edv"]["retrieval_k"]
    assert abs(mc["construction"][1] - 0.8) < 0.01 and abs(ex.no_memory("mind2web") - 0.2) < 1e-9


def test_the_wide_null_world_is_the_null_world_on_many_tasks(tmp_path):
    """null_wide repeats check 3b where τ²-bench's test tasks cannot give 3b· its power: the
    same planted world and methods, a type named as the framework's domain, many training
    tasks (the bank's quality near its planted half) and many test tasks."""
    tau, wide = load_world("null", "full", tmp_path), load_world("null_wide", "full", tmp_path)
    assert wide.profile == tau.profile
    for key in ("method", "edv", "reasoning_bank"):
        assert wide.config[key] == tau.config[key], key
    d, dt = wide.design(), tau.design()
    assert d.domains == ["mind2web"] and d.n_train["mind2web"] >= 10 * max(dt.n_train.values())
    assert d.n_test["mind2web"] >= 20 * min(dt.n_test.values())
    ex, ex_tau = expect_for(wide), expect_for(tau)
    assert ex.edv_inference("mind2web", wide.config["edv"]) == ex_tau.edv_inference(
        "airline", tau.config["edv"])
