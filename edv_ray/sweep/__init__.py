"""``edv sweep SWEEP.yaml``: a base run config plus axes, expanded into runs under one
sweep folder that share one set of model servers.

A sweep file::

    sweep_id: hetero-embedded          # the folder name under output_dir
    output_dir: runs/sweeps
    base: ../edv_mock_embedded.yaml    # a run config file (relative to this file) or a mapping
    parallel: 2                        # variants in flight at once (they share the servers)
    axes:
      pool:                            # a named axis: each value is a config override
        qwen_only: {agents: [...], roles: {executors: [...]}}
        mixed: {agents: [...]}
      edv.retrieval_k: [1, 3]          # a dotted config path and its values
      method: [edv, reasoning_bank]
      contamination: [0.0, 0.1]

The grid is the Cartesian product of the axes (:mod:`.grid`: each variant gets its own
readable folder, a collision is an error before any work). Each distinct model setting
is served once for the whole sweep and shared by every variant using it (:mod:`.servers`:
a model whose setting differs between variants is another server). Each variant is a
normal run folder under ``SWEEP/runs/`` with ``axes.json`` (its axis values — W&B groups
and ``edv compare`` columns come from it). Variants run in ``parallel`` threads
(:mod:`.run`: one variant's failure is recorded and the rest finish; Ctrl-C stops them
all promptly). Re-running the same command resumes: complete variants are skipped,
partial ones resumed; a sweep file changed since is an error unless ``--accept-changed``
(:mod:`.state`).
"""

from edv_ray.sweep.grid import SweepConfig, Variant, expand, folder_label, load_sweep
from edv_ray.sweep.run import SweepInterrupted, prepare, run_sweep

__all__ = ["SweepConfig", "SweepInterrupted", "Variant", "expand", "folder_label",
           "load_sweep", "prepare", "run_sweep"]
