"""The per-process τ²-bench state (one database load, copy-on-access tables, cached gold
hashes, the episode's own environment as the graded state) grades exactly like τ²-bench's
own ``evaluate_simulation``, and one episode's database writes never reach another."""

from __future__ import annotations

import functools

import pytest

from edv_ray.agents.binding import ModelBinding
from edv_ray.config import Sampling
from edv_ray.envs.tau2 import episode as E
from edv_ray.envs.tau2.tasks import CowTable, domain_state
from edv_ray.llm.client import CallContext, CallLedger, Endpoint, LLMClient
from edv_ray.testing.helpers import tau2_tasks

READ_ONLY = ("get_", "find_", "search_", "list_", "calculate", "think", "transfer_to_human")


def _writes(task, domain="retail") -> bool:
    """The task's gold actions change the database (some gold actions fail by design)."""
    return (any(not a.name.startswith(READ_ONLY) for a in task.evaluation_criteria.actions or [])
            and E.gold_hashes(domain, task)[0] != _fresh_tau2_hash(domain))


def _simulate(server, domain, task, trial=0):
    ep = Endpoint(model_name="scripted", litellm_model="openai/scripted", api_base=server.base_url)
    client = LLMClient(timeout_s=20, max_retries=1)

    def bind(role):
        ctx = CallContext(run_id="t", stage="eval", role=role, agent="gold", domain=domain,
                          task_id=task.id, trial=trial, episode_id=f"{task.id}-{trial}")
        return ModelBinding(client, ep, Sampling(), ctx, CallLedger(), None)

    return E.simulate(domain, task, agent_binding=bind("agent"), strategy="native_tools",
                      experience_fn=None, user_binding=bind("user_sim"), solo=False,
                      max_steps=60, max_errors=5, seed=0)


def _tau2_reward(sim, task, domain):
    from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation

    return evaluate_simulation(simulation=sim, task=task, evaluation_type=EvaluationType.ALL,
                               solo_mode=False, domain=domain)


@functools.cache
def _fresh_tau2_hash(domain) -> str:
    from tau2.registry import registry

    return registry.get_env_constructor(domain)().get_db_hash()


@pytest.mark.slow
@pytest.mark.parametrize("domain", ["retail", "airline"])
def test_cached_grading_matches_tau2_on_gold_and_do_nothing(server, domain):
    tasks = [t for t in tau2_tasks(domain, "test") if _writes(t, domain)][:4]
    assert len(tasks) == 4
    for mode in ("gold", "nothing"):
        server.mode = mode
        for task in tasks:
            sim, env, _agent = _simulate(server, domain, task)
            ours = E.grade(sim, task, env, domain)
            theirs = _tau2_reward(sim, task, domain)
            assert ours.reward == theirs.reward, (mode, task.id)
            assert ours.db_check == theirs.db_check, (mode, task.id)
            assert ours.reward_breakdown == theirs.reward_breakdown, (mode, task.id)
            assert ours.reward == (1.0 if mode == "gold" else 0.0), (mode, task.id)
            # the episode's own DB hash, from cached record JSON, is τ²-bench's hash
            assert domain_state(domain).db_hash(env.tools) == env.tools.get_db_hash()


def test_one_episodes_writes_never_reach_the_next(server):
    domain = "retail"
    task = next(t for t in tau2_tasks(domain, "test") if _writes(t))
    pristine = _fresh_tau2_hash(domain)
    server.mode = "gold"
    sim, env, _ = _simulate(server, domain, task)
    assert E.grade(sim, task, env, domain).reward == 1.0
    assert env.tools.get_db_hash() != pristine  # the gold actions changed this episode's DB
    # the next episode starts from the pristine database, not from the previous end state
    fresh = domain_state(domain).fresh_env()
    assert fresh.tools.get_db_hash() == pristine
    assert domain_state(domain).db_hash(fresh.tools) == pristine
    server.mode = "nothing"
    sim, env, _ = _simulate(server, domain, task, trial=1)
    info = E.grade(sim, task, env, domain)
    assert info.reward == 0.0 and info.db_check.db_match is False


def test_copy_on_access_tables_isolate_every_write_path():
    state = domain_state("retail")
    pristine = _fresh_tau2_hash("retail")
    a, b = state.fresh_env(), state.fresh_env()
    users = a.tools.db.users
    assert isinstance(users, CowTable)
    uid = next(iter(users))
    users[uid].orders.append("#W0000000")  # mutate through __getitem__
    for _k, u in users.items():  # noqa: PERF102 - mutate through items()
        u.email = "x@example.com"
        break
    for u in users.values():
        u.name.first_name = "Changed"
    popped = users.pop(next(k for k in users if k != uid))
    popped.orders.clear()
    users["new_user"] = users[uid]  # insertion
    users.get(uid).address.zip = "00000"
    assert b.tools.db.users[uid].orders[-1] != "#W0000000"
    assert b.tools.get_db_hash() == pristine
    assert state.fresh_env().tools.get_db_hash() == pristine
    # the fast hash follows every change exactly
    assert a.tools.get_db_hash() != pristine
    assert state.db_hash(a.tools) == a.tools.get_db_hash()
    assert state.db_hash(b.tools) == pristine


def test_mock_domain_solo_grading_matches_tau2(server):
    from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation

    from edv_ray.envs.tau2.tasks import has_ticket

    tasks = [t for t in tau2_tasks("mock") if has_ticket(t)][:4]
    ep = Endpoint(model_name="scripted", litellm_model="openai/scripted", api_base=server.base_url)
    client = LLMClient(timeout_s=20, max_retries=1)
    for task in tasks:
        ctx = CallContext(run_id="t", stage="eval", role="agent", agent="gold", domain="mock",
                          task_id=task.id, episode_id=task.id)
        binding = ModelBinding(client, ep, Sampling(), ctx, CallLedger(), None)
        sim, env, _ = E.simulate("mock", task, agent_binding=binding, strategy="text_tools",
                                 experience_fn=None, user_binding=None, solo=True,
                                 max_steps=30, max_errors=5, seed=0)
        ours = E.grade(sim, task, env, "mock")
        theirs = evaluate_simulation(simulation=sim, task=task,
                                     evaluation_type=EvaluationType.ALL, solo_mode=True,
                                     domain="mock")
        assert (ours.reward, ours.db_check) == (theirs.reward, theirs.db_check), task.id
        assert sim.termination_reason.value == "agent_stop", task.id  # it saw `done`


def _write_attempts(store, n):
    for i in range(n):
        for attempt, status in ((1, "error"), (2, "ok")) if i < 2 else ((1, "ok"),):
            row = {"run_id": "r", "stage": "eval", "episode_id": f"e{i}", "attempt": attempt,
                   "status": status, "success": status == "ok", "task_id": f"t{i}",
                   "experiences": [], "retrieved_item_ids": [], "retrieved_banks": []}
            store.write_episode("eval", row, [{"run_id": "r", "episode_id": f"e{i}",
                                               "role": "agent", "latency_s": 0.1 * attempt}])


def test_compaction_keeps_every_attempt_and_resume(tmp_path, monkeypatch):
    from edv_ray.methods.jobkit import load_episode
    from edv_ray.results import store as S
    from edv_ray.results.views import connect
    from edv_ray.runtime.plan import finished_attempts

    monkeypatch.setattr(S, "COMPACT_CHUNK_FILES", 3)  # several chunks stream into one segment
    store = S.RunStore(tmp_path)
    _write_attempts(store, 6)
    before = finished_attempts(tmp_path, "eval")
    assert S.compact_stage(tmp_path, "eval", min_files=9) == {}  # below the threshold
    assert S.compact_stage(tmp_path, "eval") == {"episodes": 8, "llm_calls": 8}
    assert S.compact_stage(tmp_path, "eval") == {}  # nothing left to merge
    folder = tmp_path / "episodes" / "stage=eval"
    assert [p.name for p in folder.iterdir()] == ["compacted-00001.parquet"]
    assert finished_attempts(tmp_path, "eval") == before
    assert before["e0"] == (2, "ok") and before["e5"] == (1, "ok")
    assert load_episode(str(tmp_path), "eval", "e0")["attempt"] == 2
    # a resumed attempt written next to the segment, then a second compaction: a new segment
    store.write_episode("eval", {"run_id": "r", "stage": "eval", "episode_id": "e5",
                                 "attempt": 2, "status": "ok", "experiences": [],
                                 "retrieved_item_ids": [], "retrieved_banks": []}, [])
    assert load_episode(str(tmp_path), "eval", "e5")["attempt"] == 2  # file beats segment
    assert S.compact_stage(tmp_path, "eval") == {"episodes": 1, "llm_calls": 0}
    assert [p.name for p in S.segments(folder)] == ["compacted-00001.parquet",
                                                    "compacted-00002.parquet"]
    # a merged file of an earlier version is read as a segment and never overwritten
    (folder / "compacted-00002.parquet").rename(folder / S.COMPACTED)
    store.write_episode("eval", {"run_id": "r", "stage": "eval", "episode_id": "e6",
                                 "attempt": 1, "status": "ok", "experiences": [],
                                 "retrieved_item_ids": [], "retrieved_banks": []}, [])
    assert S.compact_stage(tmp_path, "eval", tables=("episodes",)) == {"episodes": 1}
    assert [p.name for p in S.segments(folder)] == [
        "compacted-00001.parquet", "compacted-00002.parquet", S.COMPACTED]
    assert load_episode(str(tmp_path), "eval", "e5")["attempt"] == 2
    con = connect(tmp_path)
    assert con.execute("SELECT count(*) FROM episode_attempts").fetchone()[0] == 10
    assert con.execute("SELECT count(*) FROM episodes").fetchone()[0] == 7
    assert con.execute("SELECT count(*) FROM llm_calls").fetchone()[0] == 8


def test_compaction_that_crashed_loses_and_duplicates_nothing(tmp_path):
    from edv_ray.results import store as S
    from edv_ray.results.parquet_io import write_text_atomic
    from edv_ray.results.views import connect

    store = S.RunStore(tmp_path)
    _write_attempts(store, 4)
    folder = tmp_path / "episodes" / "stage=eval"
    inputs = sorted(p.name for p in folder.glob("*.parquet"))
    # crashed before its segment appeared: the listing is dropped, the files stay
    write_text_atomic(folder / ".compacted-00001.parquet.inputs", "\n".join(inputs))
    S.compact_stage(tmp_path, "eval", tables=("episodes",), min_files=100)
    assert not list(folder.glob(".*.inputs")) and len(list(folder.glob("*.parquet"))) == 6
    # crashed after the segment appeared but before every input was deleted
    assert S.compact_stage(tmp_path, "eval", tables=("episodes",)) == {"episodes": 6}
    (folder / inputs[0]).write_bytes(b"")  # a leftover the listing names (content moot)
    write_text_atomic(folder / ".compacted-00001.parquet.inputs", "\n".join(inputs))
    assert S.compact_stage(tmp_path, "eval", tables=("episodes",)) == {}
    assert [p.name for p in folder.iterdir()] == ["compacted-00001.parquet"]
    assert connect(tmp_path).execute("SELECT count(*) FROM episode_attempts").fetchone()[0] == 6


def test_tool_schemas_are_parsed_once_per_process_and_match_tau2():
    from tau2.environment.tool import Tool

    from edv_ray.envs.tau2 import tool_cache

    state = domain_state("airline")  # installs the cache
    first = state.fresh_env()
    parsed = tool_cache.cached_schemas()
    second = state.fresh_env(solo_mode=False)
    assert tool_cache.cached_schemas() == parsed  # a second episode parses nothing new
    tools, before = second.get_tools(), {t.name: t for t in first.get_tools()}
    assert len(tools) > 5
    for tool in tools:
        own = tool_cache.ORIGINAL(Tool, tool.__signature__, tool.__doc__, {})
        assert tool.openai_schema["function"]["parameters"] == own["params"].model_json_schema()
        assert tool.short_desc == own["short_desc"]
        # each episode's tools call its own toolkit (its own database), never another's
        assert tool._func.__self__ is not before[tool.name]._func.__self__


def test_resume_reads_the_run_folder_once_per_stage(tmp_path, monkeypatch):
    """``pending_specs`` keeps unfinished specs, bumps the attempt of errored ones and
    drops finished ones — reading each stage's results once, however many specs (it used
    to open DuckDB once per spec: ~50 ms an episode at the end of every stage)."""
    from edv_ray.config import Sampling
    from edv_ray.llm.client import Endpoint
    from edv_ray.results.store import RunStore
    from edv_ray.runtime import plan
    from edv_ray.runtime.spec import EpisodeSpec

    def spec(stage, task):
        return EpisodeSpec(run_id="r", stage=stage, method="m", benchmark={}, domain="d",
                           task_id=task, task_type="x", agent="a", model="m",
                           prompt_strategy="native_tools", sampling=Sampling(),
                           agent_endpoint=Endpoint("m", "openai/m", "http://x"), solo=True)

    specs = [spec(stage, f"t{i}") for stage in ("eval", "execute") for i in range(40)]
    store = RunStore(tmp_path)
    for s, status in ((specs[0], "ok"), (specs[1], "error"), (specs[40], "ok")):
        store.write_episode(s.stage, {"run_id": "r", "stage": s.stage, "episode_id": s.episode_id,
                                      "attempt": 1, "status": status, "experiences": [],
                                      "retrieved_item_ids": [], "retrieved_banks": []}, [])
    reads = []
    real = plan.finished_attempts
    monkeypatch.setattr(plan, "finished_attempts",
                        lambda run_dir, stage: reads.append(stage) or real(run_dir, stage))
    todo = plan.pending_specs(specs, tmp_path)
    assert sorted(reads) == ["eval", "execute"]
    ids = {s.episode_id: s.attempt for s in todo}
    assert len(todo) == 78 and specs[0].episode_id not in ids and specs[40].episode_id not in ids
    assert ids[specs[1].episode_id] == 2 and ids[specs[2].episode_id] == 1
