"""τ²-bench behind the environment protocol (see :mod:`edv_ray.envs.protocol`)."""

from __future__ import annotations

import json
from typing import Any

from edv_ray.envs.protocol import EpisodeOutcome, ExperienceFn
from edv_ray.envs.tau2 import tasks as T


def first_user_text(messages: list[dict[str, Any]]) -> str:
    """The first thing the user said (what a conversational agent observes first)."""
    for m in messages:
        if m.get("role") == "user" and (m.get("content") or "").strip():
            return str(m["content"])
    return ""


def render_transcript(messages: list[dict[str, Any]], max_chars: int) -> str:
    """A compact, readable transcript of a τ²-bench message list (JSON dicts); over
    ``max_chars`` the start (setup) and the end (outcome) are kept."""
    lines = []
    for m in messages:
        role = m.get("role")
        if m.get("tool_calls"):
            for tc in m["tool_calls"]:
                lines.append(f"{role} calls {tc.get('name')}({json.dumps(tc.get('arguments'))})")
        elif role == "tool":
            lines.append(f"tool result: {(m.get('content') or '')[:300]}")
        elif m.get("content"):
            lines.append(f"{role}: {m['content'][:600]}")
    text = "\n".join(lines)
    if len(text) > max_chars:
        half = max(0, max_chars // 2)
        text = text[:half] + "\n[...]\n" + text[-half:]
    return text


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


ENV = Tau2Env()
