"""Simulation layer: run one τ²-bench episode and grade it offline. No side effects.

``EvaluationType.ALL`` = DB hash + env assertions + actions + communicate; NL assertions
would need a hosted judge model and are never used.
"""

from __future__ import annotations

from edv_ray.envs.protocol import EpisodeOutcome, ExperienceFn
from edv_ray.envs.tau2.agent import EdvAgent, EdvSoloAgent, EdvUserSimulator, ModelBinding

SUCCESS_EPS = 1e-6


def quiet_tau2_logs() -> None:
    """τ²-bench logs every step at INFO through loguru; keep warnings only."""
    import sys

    from loguru import logger

    logger.remove()
    logger.add(sys.stderr, level="WARNING")


def run_tau2_episode(
    domain: str,
    task,
    *,
    agent_binding: ModelBinding,
    strategy: str,
    experience_fn: ExperienceFn | None,
    user_binding: ModelBinding | None,
    solo: bool,
    max_steps: int,
    max_errors: int,
    seed: int | None,
) -> EpisodeOutcome:
    from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation
    from tau2.orchestrator.orchestrator import Orchestrator
    from tau2.registry import registry
    from tau2.user.user_simulator import DummyUser

    make_env = registry.get_env_constructor(domain)
    if solo:
        env = make_env(solo_mode=True)
        user_tools = env.get_user_tools() if env.user_tools else []
        agent = EdvSoloAgent(env.get_tools() + user_tools, env.get_policy(), task,
                             agent_binding, strategy, experience_fn)
        user = DummyUser()
    else:
        if user_binding is None:
            raise ValueError(
                f"task {task.id} needs a user simulator: set roles.user_simulator "
                "(or benchmark.solo for tasks with a ticket)"
            )
        env = make_env()
        agent = EdvAgent(env.get_tools(), env.get_policy(), agent_binding, strategy, experience_fn)
        try:
            user_tools = env.get_user_tools()
        except Exception:  # domains without user tools raise here
            user_tools = None
        user = EdvUserSimulator(user_tools, str(task.user_scenario), user_binding)
    sim = Orchestrator(domain=domain, agent=agent, user=user, environment=env, task=task,
                       max_steps=max_steps, max_errors=max_errors, seed=seed,
                       solo_mode=solo).run()
    info = evaluate_simulation(simulation=sim, task=task, evaluation_type=EvaluationType.ALL,
                               solo_mode=solo, domain=domain)
    reward = float(info.reward)
    return EpisodeOutcome(
        reward=reward, success=reward >= 1.0 - SUCCESS_EPS,
        termination=str(getattr(sim.termination_reason, "value", sim.termination_reason)),
        messages=[m.model_dump(mode="json") for m in sim.messages],
        reward_detail=info.model_dump(mode="json"),
        observed_text=agent.observed_text, extra={"solo": solo},
    )
