"""``edv power``: plan an experiment before booking GPUs — the probability that it detects
each planted difference at ``edv compare``'s paired test, and the tasks × trials it needs.

- :mod:`.model` — methods as per-type rates, tasks with a latent difficulty, the seeded
  vectorised Monte Carlo and the search for the tasks needed;
- :mod:`.profile` — the rates a simulation profile (``engine: simulated``) implies;
- :mod:`.pilot` — the rates and the heterogeneity measured in a pilot run folder;
- :mod:`.run` — the command (``edv power SOURCE``).
"""
