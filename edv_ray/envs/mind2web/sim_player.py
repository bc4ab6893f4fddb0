"""Mind2Web as the simulated engine plays it (see ``SimulatedPlayer`` in
:mod:`edv_ray.envs.protocol`): its multi-choice rounds answered from the server side.

A round prompt shows the task, the previous actions and up to five options (plus "A.
None of the above"). The step is the one whose previous actions match; a positive
candidate is recognised by its rendering (the benchmark's own renderer). Playing for
success: pick the positive when it is listed (with the gold operation and value), else
A. Playing to fail, at the failing step: never pick the positive — A (``stop_early``:
no prediction) or a listed negative (``wrong_argument``: a wrong element).
"""

from __future__ import annotations

import re
import threading
from typing import Any

from edv_ray.envs.file_env import FilePlayer
from edv_ray.envs.mind2web.dom import index_elements, render_element
from edv_ray.envs.protocol import SimulatedPlay

_PREVIOUS = re.compile(r"Previous actions:\n(.*?)\n\s*\n", re.DOTALL)
_OPTION = re.compile(r"^([B-Z])\. (.*)$", re.MULTILINE)

_CACHE: dict[tuple[str, int], frozenset[str]] = {}
_LOCK = threading.Lock()


def _positives(task, index: int) -> frozenset[str]:
    """How the step's positive candidates render as options (once per step)."""
    key = (task.annotation_id, index)
    with _LOCK:
        if key in _CACHE:
            return _CACHE[key]
    step = task.steps[index]
    elements = index_elements(step.cleaned_html)
    got = frozenset(render_element(elements.get(c.backend_node_id), c) for c in step.pos_candidates)
    with _LOCK:
        return _CACHE.setdefault(key, got)


def _steps_matching(task, previous: list[str]) -> list[int]:
    n = len(task.steps)
    if not previous:
        return list(range(n))  # step 0, or previous actions not shown
    k = len(previous)
    return [i for i in range(k, n) if list(task.action_reprs[:i])[-k:] == previous]


def parse_round(prompt: str) -> tuple[list[str], dict[str, str]]:
    """(previous actions, option letter → rendering) of a round prompt."""
    m = _PREVIOUS.search(prompt)
    prev = m.group(1).strip().split("\n") if m else []
    prev = [] if prev == ["None"] else [p for p in prev if p.strip()]
    return prev, {letter: text.strip() for letter, text in _OPTION.findall(prompt)}


def answer(task, prompt: str, fail_step: int | None, mode: str) -> str:
    """The round's answer text (``fail_step`` None: play every step right)."""
    prev, options = parse_round(prompt)
    steps = _steps_matching(task, prev)
    if prev == [] and 0 in steps:
        steps = [0] + [i for i in steps if i]
    for i in steps:
        pos = _positives(task, i)
        hits = [letter for letter, text in options.items() if text in pos]
        if not hits:
            continue
        if i != fail_step:
            step = task.steps[i]
            value = "" if step.op == "CLICK" else f"\nValue: {step.value}"
            return f"Answer: {hits[0]}\nAction: {step.op}{value}"
        wrong = [letter for letter in options if letter not in hits]
        if mode == "wrong_argument" and wrong:
            return f"Answer: {wrong[0]}\nAction: CLICK"
        return "Answer: A"
    step_i = steps[0] if steps else None
    if step_i is not None and step_i == fail_step and mode == "wrong_argument" and options:
        return f"Answer: {next(iter(options))}\nAction: CLICK"
    return "Answer: A"


class Mind2WebPlayer(FilePlayer):
    """Mind2Web's ``SimulatedPlayer``: a failing episode fails at one drawn step."""

    def agent_message(self, domain: str, task, req: dict[str, Any],
                      play: SimulatedPlay) -> dict[str, Any]:
        fail = None if play.success else play.choose(list(range(len(task.steps))), "fail_step")
        prompt = "\n".join(str(m.get("content") or "") for m in req["messages"]
                           if m.get("role") == "user")
        text = answer(task, prompt, fail, play.failure_mode)
        return {"role": "assistant", "content": f"{text}\nNote: {play.marker}"}
