"""The engine as an acting agent (role ``agent``) and as τ²-bench's user (``user_sim``).

An episode's success is decided once, consistently across its calls: the agent's planted
base probability for the task's planted type, shifted by the items retrieved into its
system prompt (decoded from their hidden tags), against a uniform draw keyed by the
episode (its id holds stage, epoch, domain, task, trial and agent). The agent then plays
the benchmark for real — the gold path, or a planted failure — so the benchmark grades
it; its text turns carry a run marker with the planted outcome.
"""

from __future__ import annotations

import re
from typing import Any

from edv_ray.config import TAU2_DOMAINS
from edv_ray.serving.simulated import mmtb_play, tau2_play, web_play
from edv_ray.serving.simulated import planted as P
from edv_ray.serving.simulated.codec import choose, uniform
from edv_ray.serving.simulated.prompt_read import experience_items, text_of

_EPISODE = re.compile(r"^(?P<stage>.+?)-e(?P<epoch>\d+)-")


def episode_key(profile, tag: dict[str, str], req: dict[str, Any]) -> str:
    """Whose and which episode's randomness this is (see ``draw_identity``)."""
    eid = tag.get("episode_id", "")
    if profile.draw_identity == "agent":
        return "|".join(map(str, (profile.seed, "act", eid)))
    m = _EPISODE.match(eid)
    stage, epoch = (m["stage"], m["epoch"]) if m else (eid, "")
    return "|".join(map(str, (profile.seed, "act", req.get("model"), req.get("seed"), stage, epoch,
                              tag.get("domain"), tag.get("task_id"), tag.get("trial"))))


class Acting:
    def __init__(self, sim) -> None:
        self.sim = sim

    def decide(self, req: dict[str, Any], tag: dict[str, str]) -> tuple[bool, str, float]:
        """(success, the episode's draw key, the planted probability)."""
        profile, codec, world = self.sim.profile, self.sim.codec, self.sim.world
        agent, domain, task_id = tag["agent"], tag["domain"], tag["task_id"]
        task_type = world.task_type(domain, task_id)
        effect = P.block(profile, agent, "memory")
        items = experience_items(text_of(req["messages"], "system"))
        n = P.count_items([codec.item_truth(t) for t in items],
                          codec.h16(f"{domain}/{task_type}"), effect)
        p = P.success_probability(profile, agent, task_type, n)
        key = episode_key(profile, tag, req)
        return uniform(key, "success") < p, key, p

    def failure_mode(self, agent: str, key: str) -> str:
        weights = P.agent_profile(self.sim.profile, agent).failure_modes
        total = sum(weights.values())
        u, acc = uniform(key, "mode") * total, 0.0
        for mode, w in sorted(weights.items()):
            acc += w
            if u < acc:
                return mode
        return max(weights)

    def agent(self, req: dict[str, Any], tag: dict[str, str]) -> dict[str, Any]:
        success, key, _p = self.decide(req, tag)
        agent, domain, task_id = tag["agent"], tag["domain"], tag["task_id"]
        marker = self.sim.codec.marker(success, agent, key)
        mode = "" if success else self.failure_mode(agent, key)
        task = self.sim.world.task(domain, task_id)
        if domain in TAU2_DOMAINS:
            return self._tau2(req, task, domain, task_id, success, mode, key, marker)
        if domain == "mind2web":
            fail = None if success else choose(list(range(len(task.steps))), key, "fail_step")
            text = web_play.answer(task, text_of(req["messages"], "user"), fail, mode)
            return {"role": "assistant", "content": f"{text}\nNote: {marker}"}
        if domain == "mmtb":
            fail = None if success else choose(list(range(len(task.missions))), key, "fail_mission")
            return {"role": "assistant",
                    "content": mmtb_play.answer(task, req["messages"], fail, mode, marker)}
        raise KeyError(f"the simulated engine does not play domain {domain!r}")

    def _tau2(self, req, task, domain, task_id, success, mode, key, marker) -> dict[str, Any]:
        crit = task.evaluation_criteria
        info = ", ".join(crit.communicate_info or [])
        gold = tau2_play.gold_plan(task, tau2_play.is_solo(req))
        if success:
            return tau2_play.agent_turn(gold, req, f"All done. {info} {marker}".replace("  ", " "))
        plan, tell, _used = tau2_play.task_failure_plan(
            task, gold, mode, self.sim.world.write_tools(domain),
            self.sim.world.foreign_write(domain, task_id), uniform(key, "argument"))
        text = "I am sorry, I could not complete your request."
        return tau2_play.agent_turn(plan, req, f"{text} {info if tell else ''} {marker}".replace("  ", " "))

    def user(self, req: dict[str, Any], tag: dict[str, str]) -> dict[str, Any]:
        task = self.sim.world.task(tag["domain"], tag["task_id"])
        return tau2_play.user_turn(req, tau2_play.first_request(task))
