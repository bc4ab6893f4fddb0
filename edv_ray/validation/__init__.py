"""The validation suite (issue 21): planted worlds run through the whole framework on the
simulated engine, and what the framework measured set against what was planted.

  worlds.py      the worlds' run configs (experiments/validation/worlds/*.yaml) at a size
  runs.py        a world run by the framework's own pipeline (finished runs reused)
  expect.py      what a world implies, computed apart from the framework (oracle only)
  measure.py     what the framework measured, read as `edv compare` / `edv report` read it
  checks.py      one row: check, planted, measured with interval, verdict
  check_main.py  checks 1-4 (routing, RB judge audit, EDV vs RB, contamination)
  check_pools.py checks 2 and 5 (verification audit, heterogeneity, seeds, epoch curves)
  coverage.py    check 6 (interval coverage)
  suite.py       all of it, and the table
  legacy.py      the checks against an old commit's runs (issue 18's defects)

Run it with ``experiments/validation/run.py --fast|--full``.
"""
