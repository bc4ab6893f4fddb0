"""Stage 1 of MMTB scoring: the model's turns must walk a path of the gold call graph.

The paths are the ones the official code enumerates (``tool_call_graph.py``), in its
order; the walk reproduces its request loop. Facts of that code this module keeps:

* Paths come from a depth-first walk over the *ready* nodes (all dependencies done),
  taken in answer-list order. At each state every non-empty subset of the ready nodes
  is a candidate step, by size then position; a candidate whose name sequence was
  already offered at this state is dropped (names only, not nodes).
* Ready nodes that share a name and stand next to each other in the ready list form a
  run. A run is performed whole in one step, or — when its first node is taken alone —
  serialized in list order, one node per step. A step that starts with part of a run
  (and is not extended to the whole run) is not offered; a run member joined after
  other names is.
* A tool-call turn is matched on names only (sorted), against the paths still alive,
  in order; the first match fixes which gold nodes were performed and prunes the
  paths that differ at this step. Arguments play no part here.
* A text turn is accepted where the first alive path whose step holds
  ``ask_user_for_required_parameters`` or ``prepare_to_answer`` has it (clarification:
  the gold ``user_input`` follows; prepare: the mission is over). The official code
  does not prune at a clarification.
* Optimal = the mission ends in as many turns as the shortest path (over all paths).

``mode="official"`` keeps the official behaviour, crashes included (:class:`Crash`: the
official pipeline raises and loses the rest of the dialogue). ``mode="corrected"``
(see the package README): a text turn matches only a step that is exactly the
clarification or the final answer, and prunes like a call; the shortest path counts
only such paths; no crash (a turn past every path is simply wrong).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import lru_cache
from itertools import combinations

from edv_ray.envs.mmtb.data import ASK, PREPARE, SPECIAL, GoldNode

MODES = ("official", "corrected")
MAX_PATHS = 100_000  # the official code gives up after 60 s ("graph generate timeout.")

Step = tuple[int, ...]
Path = tuple[Step, ...]


class Crash(Exception):
    """Where the official request pipeline raises: the dialogue's remaining missions
    are never scored (its per-dialogue ``except`` skips them)."""


class GraphTooLarge(Exception):
    """More than MAX_PATHS paths (the official code times out on such graphs)."""


def _offers(ready: list[int], names: Sequence[str]) -> Iterator[list[Step]]:
    """The steps offered from one state, in the official order; a serialized run is
    several steps at once."""
    runs: list[list[int]] = []
    for i in ready:
        if runs and names[runs[-1][-1]] == names[i]:
            runs[-1].append(i)
        else:
            runs.append([i])
    whole = {tuple(r) for r in runs if len(r) > 1}
    part = {c for r in whole for k in range(1, len(r)) for c in combinations(r, k)}
    first = {r[0]: r for r in whole}
    offered: set[str] = set()
    for size in range(1, len(ready) + 1):
        for comb in combinations(ready, size):
            key = "|".join(names[i] for i in comb)
            if key in offered:
                continue
            offered.add(key)
            heads = [comb[:k] for k in range(1, size + 1)]
            if size > 1 and any(h in part for h in heads) and not any(h in whole for h in heads):
                continue
            yield [(i,) for i in first[comb[0]]] if size == 1 and comb[0] in first else [comb]


@lru_cache(maxsize=512)
def enumerate_paths(names: tuple[str, ...], deps: tuple[tuple[int, ...], ...]) -> tuple[Path, ...]:
    """Every path through the graph (node positions per step), in the official order."""
    n = len(names)
    children: list[list[int]] = [[] for _ in range(n)]
    waiting = [0] * n
    for i, ds in enumerate(deps):
        for d in ds:
            children[d].append(i)
            waiting[i] += 1
    out: list[Path] = []

    def walk(waiting: list[int], done: frozenset[int], path: list[Step]) -> None:
        if len(done) == n:
            out.append(tuple(path))
            if len(out) > MAX_PATHS:
                raise GraphTooLarge(f"more than {MAX_PATHS} paths")
            return
        ready = [i for i in range(n) if not waiting[i] and i not in done]
        for steps in _offers(ready, names):
            taken = [i for s in steps for i in s]
            after = list(waiting)
            for i in taken:
                for c in children[i]:
                    after[c] -= 1
            walk(after, done | set(taken), path + steps)

    walk(waiting, frozenset(), [])
    return tuple(out)


class CallGraph:
    """One mission's stage-1 walk; feed it the model's turns in order."""

    def __init__(self, nodes: Sequence[GoldNode], mode: str = "official"):
        if mode not in MODES:
            raise ValueError(f"MMTB metrics mode must be one of {MODES}, not {mode!r}")
        self.nodes = list(nodes)
        self.mode = mode
        self.names = tuple(n.name for n in self.nodes)
        self.alive = enumerate_paths(self.names, tuple(n.dependency_list for n in self.nodes))
        usable = self.alive if mode == "official" else [p for p in self.alive if self._plain(p)]
        self.min_turns = min((len(p) for p in usable or self.alive), default=0)
        self.turns = 0

    def _plain(self, path: Path) -> bool:
        """Every step holding a clarification or the final answer holds nothing else."""
        return all(len(s) == 1 for s in path if any(self.names[i] in SPECIAL for i in s))

    def _sorted(self, step: Step) -> list[GoldNode]:
        return sorted((self.nodes[i] for i in step), key=lambda n: n.name)

    def _advance(self, step: Step) -> None:
        at = self.turns
        if self.mode == "official" and any(len(p) <= at for p in self.alive):
            raise Crash("a path shorter than the turn reached (IndexError while pruning)")
        self.alive = tuple(p for p in self.alive if len(p) > at and p[at] == step)

    def accept_calls(self, names: Sequence[str]) -> list[GoldNode] | None:
        """The gold nodes this turn performs, sorted by name (the order of the official
        tool results), or None when no alive path allows these names now."""
        want = sorted(names)
        for path in self.alive:
            if len(path) > self.turns and [n.name for n in self._sorted(path[self.turns])] == want:
                step = path[self.turns]
                self._advance(step)
                self.turns += 1
                return self._sorted(step)
        return None

    def accept_text(self) -> GoldNode | None:
        """The clarification or final-answer node a text turn performs, or None."""
        if self.turns >= len(self.nodes):
            if self.mode == "official":
                raise Crash("a text turn past the last step (KeyError)")
            return None
        for path in self.alive:
            if len(path) <= self.turns:
                continue
            step = path[self.turns]
            names = {self.names[i] for i in step}
            if not names & {ASK, PREPARE}:
                continue
            if len(step) != 1:
                if self.mode == "official":
                    raise Crash("a clarification batched with other calls (AssertionError)")
                continue
            if self.mode == "corrected":
                self._advance(step)
            self.turns += 1
            return self.nodes[step[0]]
        return None

    def optimal(self) -> bool:
        return self.turns == self.min_turns
