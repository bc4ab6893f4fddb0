"""EDV (the paper's method) as a plug-in: its config section, construction epochs
(Execute → Distill → Verify → banks), routed inference, views. See ``method.py``.

Registered twice (:mod:`edv_ray.methods.edv.instance`): ``edv`` (the distiller and
verifiers see each run's graded outcome, the paper's Figure 3) and ``edv_blind`` (the
reward hidden from both), each with its own folders, stages and views.

The package holds no code of its own: importing its config module loads no run code.
EDV registers itself from :mod:`edv_ray.methods.edv.plugin` (listed in
:data:`edv_ray.plugins.BUILTIN`).
"""
