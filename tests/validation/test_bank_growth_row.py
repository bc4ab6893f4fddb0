"""Row 5a· "shared banks fill and grow": the summed banks have a lower bound above 0, so a
bank that never fills or never grows fails (issue 27: per-domain ranges started at 0)."""

from __future__ import annotations

import numpy as np

from edv_ray.validation.check_pools import _growth_row


def _mc(rng, per_epoch: list[float], reps: int = 2000) -> dict:
    """A domain's Monte Carlo bank sizes: Poisson draws, cumulative over epochs."""
    draws = rng.poisson(per_epoch, size=(reps, len(per_epoch)))
    return {"bank_sizes": np.cumsum(draws, axis=1)}


def test_growth_row_passes_planted_sizes_and_fails_a_bank_that_never_grows():
    rng = np.random.default_rng(0)
    ds = ["airline", "retail"]
    mc = {d: _mc(rng, [4.0, 3.0, 1.0]) for d in ds}
    # a single domain's range starts at 0 (the gap the issue names) ...
    assert np.quantile(mc["airline"]["bank_sizes"][:, 0], 0.001) == 0

    def sizes(a, r):
        return {("airline", x): a[x] for x in range(3)} | {("retail", x): r[x] for x in range(3)}

    good = _growth_row(3, ds, sizes([4, 7, 8], [3, 6, 7]), mc, 2000)
    assert good.ok is True, (good.planted, good.measured)
    flat = _growth_row(3, ds, sizes([4, 4, 4], [3, 3, 3]), mc, 2000)  # never grows
    assert flat.ok is False and "growth 0" in flat.measured
    empty = _growth_row(3, ds, sizes([0, 0, 0], [0, 0, 0]), mc, 2000)  # never fills
    assert empty.ok is False
    doubled = _growth_row(3, ds, sizes([8, 16, 18], [8, 14, 16]), mc, 2000)  # votes ignored
    assert doubled.ok is False


def test_the_full_epochs_world_plants_growth_above_zero():
    """The epochs world at its full size: its own profile and design (the suite's Monte
    Carlo, as row 5a· runs it) give the banks' growth a lower bound above 0, so a bank
    that stops growing after the first epoch fails there; the median bank passes."""
    from edv_ray.validation.suite import MC_REPS, expect_for
    from edv_ray.validation.worlds import load_world

    w = load_world("epochs", "full")
    ex, e, reps = expect_for(w), w.config["edv"], MC_REPS["full"]
    mc = {d: ex.edv_curve(d, ex.n_train(d), e, reps=reps, seed=i) for i, d in enumerate(ex.domains)}

    def banks(epoch_of):
        return {(d, x): int(np.median(mc[d]["bank_sizes"][:, epoch_of(x)]))
                for d in ex.domains for x in range(e["epochs"])}

    typical = _growth_row(e["epochs"], ex.domains, banks(lambda x: x), mc, reps)
    assert typical.ok is True, (typical.planted, typical.measured)
    stuck = _growth_row(e["epochs"], ex.domains, banks(lambda x: 0), mc, reps)  # never grows
    assert stuck.ok is False and "growth 0" in stuck.measured
    assert "growth [0," not in stuck.planted, stuck.planted
