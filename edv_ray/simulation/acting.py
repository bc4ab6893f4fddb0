"""The engine as an acting agent (role ``agent``) and as τ²-bench's user (``user_sim``).

An episode's success is decided once, consistently across its calls: the agent's planted
rate on the task (its base probability for the task's planted type, or with
``task_spread`` the task's own draw around it), shifted by the items retrieved into its
system prompt (decoded from their hidden tags), against a uniform draw keyed by the
episode (its id holds stage, epoch, domain, task, trial and agent). The agent then plays
the benchmark for real — the gold path, or a planted failure — so the benchmark grades
it; its text turns carry a run marker with the planted outcome. How a benchmark is played
is its own player's business (``Environment.simulated_player``): the engine hands it the
decision as a :class:`~edv_ray.envs.protocol.SimulatedPlay`.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from edv_ray.envs.protocol import SimulatedPlay
from edv_ray.simulation import planted as P
from edv_ray.simulation.codec import uniform
from edv_ray.simulation.prompt_read import experience_items, text_of

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
        p = P.success_probability(profile, agent, task_type, n, (domain, task_id))
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
        P.check_identity(self.sim.profile, tag["agent"], req)
        success, key, _p = self.decide(req, tag)
        agent, domain = tag["agent"], tag["domain"]
        play = SimulatedPlay(success, "" if success else self.failure_mode(agent, key),
                             self.sim.codec.marker(success, agent, key),
                             functools.partial(uniform, key))
        task = self.sim.world.task(domain, tag["task_id"])
        return self.sim.world.player(domain).agent_message(domain, task, req, play)

    def user(self, req: dict[str, Any], tag: dict[str, str]) -> dict[str, Any]:
        """The benchmark player's user turn. With ``type_phrases``, the user's first turn
        opens with its task's planted-type phrase (what the task is about, in words shared
        by every task of the type), so the observed text — the retrieval query, and the
        words the engine's lessons are written after — carries the task's kind; the player
        is shown its own earlier turns without it."""
        domain = tag["domain"]
        task = self.sim.world.task(domain, tag["task_id"])
        phrase = self.sim.profile.type_phrases.get(self.sim.world.task_type(domain, tag["task_id"]))
        if not phrase:
            return self.sim.world.player(domain).user_message(domain, task, req)
        lead = f"{phrase} "
        # the user's own turns are the request's assistant messages (τ²-bench flips roles)
        first = not any(m.get("role") == "assistant" for m in req["messages"])
        shown = {**req, "messages": [
            {**m, "content": m["content"][len(lead):]}
            if not first and m.get("role") == "assistant" and isinstance(m.get("content"), str)
            and m["content"].startswith(lead) else m for m in req["messages"]]}
        out = self.sim.world.player(domain).user_message(domain, task, shown)
        if first and isinstance(out.get("content"), str):
            out = {**out, "content": lead + out["content"]}
        return out
