"""Simulation layer: run one τ²-bench episode and grade it offline. No side effects.

``EvaluationType.ALL`` = DB hash + env assertions + actions + communicate; NL assertions
would need a hosted judge model and are never used.

What τ²-bench does per episode and we do once per process:

* its environment constructor reads and validates the domain's JSON database three times
  per episode (the episode, the replayed "predicted" state, the gold state): here the
  database is loaded once per process and each episode gets copy-on-access tables over
  it (:class:`edv_ray.envs.tau2.tasks.DomainState`), so one episode's writes never reach
  another, and DB hashes reuse the JSON of untouched records;
* the gold state depends only on the task: its DB hashes are computed once per task;
* the predicted state is the episode's own environment after the episode — the same
  initial state and the same tool calls, in order, as τ²-bench's replay (its tools are
  deterministic functions of the DB and the arguments), so no second copy is built;
* tool JSON schemas (pydantic schema generation on every model call) are built once.

:func:`grade` mirrors ``tau2.evaluator.evaluator.evaluate_simulation`` for
``EvaluationType.ALL``; ``tests/runtime/test_harness_cache.py`` checks it gives the same
rewards as τ²-bench's own evaluation.
"""

from __future__ import annotations

import threading

from edv_ray.envs.protocol import EpisodeOutcome, ExperienceFn, memo
from edv_ray.envs.tau2.agent import (
    EdvAgent,
    EdvSoloAgent,
    EdvUserSimulator,
    ModelBinding,
)
from edv_ray.envs.tau2.tasks import domain_state

SUCCESS_EPS = 1e-6


def quiet_tau2_logs() -> None:
    """τ²-bench logs every step at INFO through loguru; keep warnings only."""
    import sys

    from loguru import logger

    logger.remove()
    logger.add(sys.stderr, level="WARNING")


_GOLD: dict[tuple[str, str], tuple[str | None, str | None]] = {}  # (domain, task) → hashes
_TOOLS: dict[tuple[str, bool], tuple[list, list | None]] = {}  # (domain, solo) → Tool lists
_SCHEMAS: dict[tuple[str, str], list[dict]] = {}  # (domain, who) → tool JSON schemas
_LOCK = threading.Lock()



def episode_tools(domain: str, env, solo: bool) -> tuple[list, list | None]:
    """(agent tools, user tools or None) as τ²-bench ``Tool`` objects, built once per
    process (``get_tools`` builds a pydantic model per tool on every call). The agents
    and the user simulator read them for names and schemas only; tool calls run on the
    episode's own environment. Fresh lists: the solo agent appends its stop tool."""
    agent, user = memo(_TOOLS, (domain, solo), lambda: (
        _agent_tools(env, solo), None if solo else _user_tools(env)), _LOCK)
    return list(agent), (list(user) if user else None)


def tool_schemas(domain: str, who: str, tools: list | None) -> list[dict] | None:
    """The tools' JSON schemas, built once per process (``who``: agent, solo, user)."""
    if not tools:
        return None
    return memo(_SCHEMAS, (domain, who), lambda: [t.openai_schema for t in tools], _LOCK)


def gold_hashes(domain: str, task) -> tuple[str | None, str | None]:
    """(agent DB hash, user DB hash) of the task's gold end state, once per task."""
    with _LOCK:
        got = _GOLD.get((domain, task.id))
    if got is not None:
        return got
    from loguru import logger

    state = domain_state(domain)
    init = task.initial_state
    env = state.fresh_env()  # τ²-bench builds the gold environment without solo mode
    env.set_state(
        initialization_data=init.initialization_data if init is not None else None,
        initialization_actions=init.initialization_actions if init is not None else None,
        message_history=(init.message_history or []) if init is not None else [],
    )
    for action in task.evaluation_criteria.actions or []:
        try:
            env.make_tool_call(tool_name=action.name, requestor=action.requestor,
                               **action.arguments)
        except Exception as e:  # noqa: BLE001 - as τ²-bench: a warning, not a failure
            logger.warning(f"Error in golden actions {action.name}({action.arguments}): {e}")
    got = (state.db_hash(env.tools), state.db_hash(env.user_tools))
    with _LOCK:
        _GOLD[(domain, task.id)] = got
    return got


def _agent_tools(env, solo: bool) -> list:
    user_tools = env.get_user_tools() if solo and env.user_tools else []
    return env.get_tools() + user_tools


def _user_tools(env) -> list | None:
    try:
        return env.get_user_tools()
    except Exception:  # noqa: BLE001 - domains without user tools raise here
        return None


def _env_reward(env, task, gold: tuple[str | None, str | None], state):
    """``EnvironmentEvaluator.calculate_reward`` with the episode's environment as the
    predicted state and the cached gold hashes."""
    from tau2.data_model.simulation import DBCheck, EnvAssertionCheck, RewardInfo
    from tau2.data_model.tasks import RewardType

    crit = task.evaluation_criteria
    if crit.actions is None and crit.env_assertions is None:
        return RewardInfo(reward=1.0, db_check=DBCheck(db_match=True, db_reward=1.0),
                          info={"note": "No expected actions or env assertions"})
    match = gold == (state.db_hash(env.tools), state.db_hash(env.user_tools))
    db_reward = 1.0 if match else 0.0
    checks = []
    assertion_reward = 1.0
    for assertion in crit.env_assertions or []:
        met = env.run_env_assertion(assertion, raise_assertion_error=False)
        checks.append(EnvAssertionCheck(env_assertion=assertion, met=met,
                                        reward=1.0 if met else 0.0))
        assertion_reward *= checks[-1].reward
    reward, breakdown = 1.0, {}
    if RewardType.DB in crit.reward_basis:
        breakdown[RewardType.DB] = db_reward
        reward *= db_reward
    if RewardType.ENV_ASSERTION in crit.reward_basis:
        breakdown[RewardType.ENV_ASSERTION] = assertion_reward
        reward *= assertion_reward
    return RewardInfo(reward=reward, db_check=DBCheck(db_match=match, db_reward=db_reward),
                      env_assertions=checks, reward_basis=crit.reward_basis,
                      reward_breakdown=breakdown)


def grade(sim, task, env, domain: str):
    """``evaluate_simulation(..., EvaluationType.ALL)`` on the episode's own environment."""
    from tau2.data_model.simulation import RewardInfo, TerminationReason
    from tau2.data_model.tasks import RewardType
    from tau2.evaluator.evaluator_action import ActionEvaluator
    from tau2.evaluator.evaluator_communicate import CommunicateEvaluator

    if sim.termination_reason not in {TerminationReason.AGENT_STOP, TerminationReason.USER_STOP}:
        return RewardInfo(reward=0.0, reward_basis=None, info={
            "note": "Simulation terminated prematurely. Termination reason: "
                    f"{sim.termination_reason.value}"})
    crit = task.evaluation_criteria
    if crit is None:
        return RewardInfo(reward=1.0, reward_basis=None, info={"note": "No evaluation criteria"})
    gold = gold_hashes(domain, task) if (crit.actions is not None
                                         or crit.env_assertions is not None) else (None, None)
    env_info = _env_reward(env, task, gold, domain_state(domain))
    action_info = ActionEvaluator.calculate_reward(task=task, full_trajectory=sim.messages)
    comm_info = CommunicateEvaluator.calculate_reward(task=task, full_trajectory=sim.messages)
    basis = set(crit.reward_basis)
    if basis & {RewardType.NL_ASSERTION}:
        raise ValueError("NL assertions are part of the reward basis, but they are not being evaluated.")
    reward, breakdown = 1.0, {}
    for info, kinds in ((env_info, {RewardType.DB, RewardType.ENV_ASSERTION}),
                        (action_info, {RewardType.ACTION}),
                        (comm_info, {RewardType.COMMUNICATE})):
        if basis & kinds:
            breakdown.update(info.reward_breakdown or {})
            reward *= info.reward
    return RewardInfo(
        reward=reward, db_check=env_info.db_check, env_assertions=env_info.env_assertions,
        action_checks=action_info.action_checks, nl_assertions=None,
        communicate_checks=comm_info.communicate_checks, reward_basis=crit.reward_basis,
        reward_breakdown=breakdown,
        info={"env": env_info.info, "nl": None, "communicate": comm_info.info,
              "action": action_info.info})


def simulate(domain: str, task, *, agent_binding: ModelBinding, strategy: str,
             experience_fn: ExperienceFn | None, user_binding: ModelBinding | None, solo: bool,
             max_steps: int, max_errors: int, seed: int | None):
    """Run the orchestrator on a fresh environment: (simulation, environment, agent)."""
    from tau2.orchestrator.orchestrator import Orchestrator
    from tau2.user.user_simulator import DummyUser

    if not solo and user_binding is None:
        raise ValueError(
            f"task {task.id} needs a user simulator: set roles.user_simulator "
            "(or benchmark.solo for tasks with a ticket)"
        )
    state = domain_state(domain)
    env = state.fresh_env(solo_mode=solo)
    agent_tools, user_tools = episode_tools(domain, env, solo)
    if solo:
        agent = EdvSoloAgent(agent_tools, state.policy, task, agent_binding, strategy,
                             experience_fn)
        agent._schemas = tool_schemas(domain, "solo", agent.tools)  # with its stop tool
        user = DummyUser()
    else:
        agent = EdvAgent(agent_tools, state.policy, agent_binding, strategy, experience_fn,
                         tool_schemas=tool_schemas(domain, "agent", agent_tools))
        user = EdvUserSimulator(user_tools, str(task.user_scenario), user_binding,
                                tool_schemas=tool_schemas(domain, "user", user_tools))
    sim = Orchestrator(domain=domain, agent=agent, user=user, environment=env, task=task,
                       max_steps=max_steps, max_errors=max_errors, seed=seed,
                       solo_mode=solo).run()
    return sim, env, agent


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
    sim, env, agent = simulate(
        domain, task, agent_binding=agent_binding, strategy=strategy,
        experience_fn=experience_fn, user_binding=user_binding, solo=solo,
        max_steps=max_steps, max_errors=max_errors, seed=seed)
    info = grade(sim, task, env, domain)
    reward = float(info.reward)
    return EpisodeOutcome(
        reward=reward, success=reward >= 1.0 - SUCCESS_EPS,
        termination=str(getattr(sim.termination_reason, "value", sim.termination_reason)),
        messages=[m.model_dump(mode="json") for m in sim.messages],
        reward_detail=info.model_dump(mode="json"),
        observed_text=agent.observed_text, extra={"solo": solo},
    )
