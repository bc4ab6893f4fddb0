"""The contamination world (issue 27): checks 4a-4d at a detectable size. Its drops are
planted linear in the wrong items an episode retrieves (check_main._drop_row), which
holds only while no episode's planted rate clips at 0 or 1: the world's profile must keep
every agent's rate inside [0, 1] for the most items either method can retrieve."""

from __future__ import annotations

from edv_ray.validation.suite import WORLDS, expect_for
from edv_ray.validation.worlds import load_world


def test_no_planted_rate_clips_for_the_most_items_either_method_retrieves(tmp_path):
    w = load_world("contamination", "full", tmp_path)
    ex, cfg = expect_for(w), w.config
    mem = ex.o.profile.memory
    rb = cfg["reasoning_bank"]
    own = rb["retrieval_k"] * min(ex.o.items_per_answer(cfg["contamination_writer"]),
                                  rb.get("max_items") or 3)
    k = cfg["edv"]["retrieval_k"]
    # (most wrong items, most right items): each own item may carry one twin, always wrong
    most = {"reasoning_bank": (2 * own, own), "edv": (k, k)}
    assert ex.o.profile.unknown_writer_p_correct == 0.0
    for a in ex.executors:
        for t in ex.domains:
            p = ex.p(a, t)
            for method, (wrong, right) in most.items():
                assert p - wrong * mem.harm_wrong >= 0, (a, t, method)
                assert p + right * mem.gain_correct <= 1, (a, t, method)
    # … and a wrong item costs three times what it costs in the main world
    main = load_world("main", "full", tmp_path)
    assert mem.harm_wrong >= 3 * expect_for(main).o.profile.memory.harm_wrong
    assert cfg["contamination"] == main.config["contamination"]


def test_the_contamination_world_runs_at_the_full_size_only():
    assert "contamination" in WORLDS["full"] and "contamination" not in WORLDS["fast"]
    assert WORLDS["full"][-1] == WORLDS["fast"][-1] == "coverage"  # coverage's rows come last
