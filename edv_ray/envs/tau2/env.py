"""τ²-bench behind the environment protocol (see :mod:`edv_ray.envs.protocol`)."""

from __future__ import annotations

import json
from typing import Any

from edv_ray.envs.protocol import BenchmarkFigures, EpisodeOutcome, ExperienceFn
from edv_ray.envs.tau2 import tasks as T
from edv_ray.prompts.budget import elide_middle


def first_user_text(messages: list[dict[str, Any]]) -> str:
    """The first thing the user said (what a conversational agent observes first)."""
    for m in messages:
        if m.get("role") == "user" and (m.get("content") or "").strip():
            return str(m["content"])
    return ""


def agent_side(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages the agent took part in: the user's own tool calls and their results
    (telecom's user-side device tools, requestor ``user``) are left out — the agent
    never saw them, so neither do the roles that judge its run."""
    return [m for m in messages
            if not (m.get("role") == "user" and m.get("tool_calls"))
            and not (m.get("role") == "tool" and m.get("requestor") == "user")]


def render_transcript(messages: list[dict[str, Any]], max_chars: int) -> str:
    """A readable transcript of a τ²-bench message list (JSON dicts) as the agent saw it:
    one line per message or tool call, every tool result and message whole. Over
    ``max_chars`` the evidence rule of :mod:`edv_ray.prompts.budget` shortens it (head
    and final state kept, the middle elided with a marker)."""
    lines = []
    for m in agent_side(messages):
        role = m.get("role")
        if m.get("tool_calls"):
            for tc in m["tool_calls"]:
                lines.append(f"{role} calls {tc.get('name')}({json.dumps(tc.get('arguments'))})")
        elif role == "tool":
            lines.append(f"tool result: {m.get('content') or ''}")
        elif m.get("content"):
            lines.append(f"{role}: {m['content']}")
    return elide_middle("\n".join(lines), max_chars)[0]


class Tau2Env:
    name = "tau2"
    task_noun = "customer-service task"

    def select_tasks(self, bench, split: str, task_ids, num_tasks) -> dict[str, list]:
        sel = bench.model_copy(update={"split": split, "task_ids": task_ids, "num_tasks": num_tasks})
        return T.select_tasks(sel)

    def task_by_id(self, bench, domain: str, task_id: str, split: str | None = None):
        return T.task_by_id(domain, task_id)

    def task_type(self, bench, domain: str, task) -> str:
        return T.task_type(domain, task.id, bench.task_type_key)

    def needs_user_simulator(self, bench, task) -> bool:
        return not T.use_solo(bench.solo, task)

    def policy(self, bench, domain: str) -> str:
        return T.domain_policy(domain)

    def observed_text(self, bench, task, messages: list[dict[str, Any]]) -> str:
        """Solo: the ticket. Conversation: the user's first message (never the user
        simulator's scenario: reason_for_call / known_info / task_instructions)."""
        if T.use_solo(bench.solo, task):
            return str(task.ticket)
        return first_user_text(messages)

    def pre_episode_text(self, bench, task) -> str | None:
        """The ticket in solo mode; a conversation shows nothing before the user speaks."""
        return str(task.ticket) if T.use_solo(bench.solo, task) else None

    def render_trajectory(self, messages: list[dict[str, Any]], max_chars: int) -> str:
        return render_transcript(messages, max_chars)

    def warm_up(self, bench, domain: str) -> None:
        """The domain's pristine database, tool lists and schemas (with and, where the
        domain has it, without a user simulator)."""
        from edv_ray.envs.tau2.episode import episode_tools, tool_schemas

        state = T.domain_state(domain)
        agent, user = episode_tools(domain, state.fresh_env(), False)
        tool_schemas(domain, "agent", agent)
        tool_schemas(domain, "user", user)
        try:
            solo_env = state.fresh_env(solo_mode=True)
        except ValueError:  # τ²-bench: "<domain> does not support solo mode"
            return
        episode_tools(domain, solo_env, True)

    def run_episode(self, bench, spec, task, agent_binding, user_binding,
                    experiences: ExperienceFn | None) -> EpisodeOutcome:
        from edv_ray.envs.tau2.episode import run_tau2_episode

        return run_tau2_episode(
            spec.domain, task, agent_binding=agent_binding, strategy=spec.prompt_strategy,
            experience_fn=experiences, user_binding=user_binding, solo=spec.solo,
            max_steps=spec.max_steps, max_errors=spec.max_errors, seed=spec.seed)

    def scoring_figures(self, bench, details: list[dict[str, Any]]) -> BenchmarkFigures | None:
        return None  # τ²-bench's figure is the reward: Pass@1 in every table

    def simulated_player(self):
        from edv_ray.envs.tau2.sim_player import PLAYER

        return PLAYER


ENV = Tau2Env()
