"""Mind2Web (offline, MindAct multi-choice protocol): data, metrics, episodes.

Self-contained: no Ray, τ²-bench or litellm. See README.md for the entry points.
"""

from edv_ray.envs.mind2web.data import SPLITS, Mind2WebData, Task, load_split
from edv_ray.envs.mind2web.episode import (
    EpisodeOutcome,
    instructions,
    observed_text,
    render_trajectory,
    run_episode,
    task_score,
    task_type,
)
from edv_ray.envs.mind2web.metrics import aggregate

__all__ = [
    "SPLITS",
    "EpisodeOutcome",
    "Mind2WebData",
    "Task",
    "aggregate",
    "instructions",
    "load_split",
    "observed_text",
    "render_trajectory",
    "run_episode",
    "task_score",
    "task_type",
]
