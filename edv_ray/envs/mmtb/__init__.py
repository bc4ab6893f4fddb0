"""Multi-Mission Tool Bench (MMTB): data, call-graph scoring, episodes.

Self-contained: no Ray, τ²-bench or litellm. See README.md for the entry points.
"""

from edv_ray.envs.mmtb.data import SPLITS, Dialogue, load_dialogues, select
from edv_ray.envs.mmtb.episode import (
    EpisodeOutcome,
    instructions,
    mission_results,
    observed_text,
    render_trajectory,
    run_episode,
    task_type,
)
from edv_ray.envs.mmtb.metrics import breakdown

__all__ = [
    "SPLITS",
    "Dialogue",
    "EpisodeOutcome",
    "breakdown",
    "instructions",
    "load_dialogues",
    "mission_results",
    "observed_text",
    "render_trajectory",
    "run_episode",
    "select",
    "task_type",
]
