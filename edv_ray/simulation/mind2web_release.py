"""A synthetic Mind2Web release in the official file layout, for the simulated engine
where many cheap tasks are wanted: the scale benchmark (10⁵ episodes need tens of
thousands of tasks) and the validation suite's construction world (hundreds of training
tasks per task type, where τ²-bench has 30-74 a domain).

Every task is one step (a CLICK among ``candidates`` elements: one multi-choice round,
one model call per episode) on a website of the domain the caller names, so the Ability
Matrix's task type (the website's domain) is whatever the caller asks. Not data a model
could learn anything from: the engine plays it by its planted profile. The files are the
release's own formats (``train/train_0.json``, ``test_task/test_task_0.json``,
``scores_all_data.pkl``), read by :class:`~edv_ray.envs.mind2web.data.Mind2WebData`
like the real release.
"""

from __future__ import annotations

import json
import os
import pickle
from collections.abc import Sequence
from pathlib import Path

SPLIT_PREFIX = {"train": "tr", "test_task": "tt"}
SITES = 40  # websites the tasks spread over (by task number)


def record(prefix: str, i: int, domain: str, candidates: int = 5) -> tuple[dict, dict, dict]:
    """Task ``i`` of a split: (its record, the ranker's scores, its ranks) in the
    release's formats; the positive candidate is ranked first."""
    aid, uid = f"{prefix}-{i}", "a1"
    ids = [str(1000 + k) for k in range(candidates)]
    html = "".join(f'<a backend_node_id="{n}" href="/p/{n}">item {n} of task {i}</a>' for n in ids)
    html = f'<html backend_node_id="1"><body backend_node_id="2">{html}</body></html>'

    def cand(n: str, target: bool) -> dict:
        return {"tag": "a", "is_original_target": target, "is_top_level_target": target,
                "backend_node_id": n, "attributes": json.dumps({"backend_node_id": n,
                                                                 "href": f"/p/{n}"})}

    rec = {"annotation_id": aid, "website": f"site{i % SITES}", "domain": domain,
           "subdomain": "General", "confirmed_task": f"Open item {ids[0]} ({domain}, task {i})",
           "action_reprs": [f"[link]  item {ids[0]} -> CLICK"],
           "actions": [{"action_uid": uid, "raw_html": html, "cleaned_html": html,
                        "operation": {"op": "CLICK", "original_op": "CLICK", "value": ""},
                        "pos_candidates": [cand(ids[0], True)],
                        "neg_candidates": [cand(n, False) for n in ids[1:]]}]}
    key = f"{aid}_{uid}"
    return rec, {key: {n: 1.0 - k / 100 for k, n in enumerate(ids)}}, {key: {n: k for k, n in enumerate(ids)}}


def write_release(root: str | Path, train: Sequence[str], test: Sequence[str],
                  candidates: int = 5) -> Path:
    """Write a release under ``root``: ``train`` and ``test`` give each task's website
    domain, in order (task ``i`` of the training split is ``tr-i``, of ``test_task``
    ``tt-i``). Each file is written to a temporary name and renamed into place."""
    root = Path(root)
    scores: dict = {}
    ranks: dict = {}
    for split, domains in (("train", train), ("test_task", test)):
        (root / split).mkdir(parents=True, exist_ok=True)
        recs = []
        for i, domain in enumerate(domains):
            rec, s, r = record(SPLIT_PREFIX[split], i, domain, candidates)
            recs.append(rec)
            scores.update(s)
            ranks.update(r)
        _write(root / split / f"{split}_0.json", json.dumps(recs).encode())
    _write(root / "scores_all_data.pkl", pickle.dumps({"scores": scores, "ranks": ranks}))
    return root


def _write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
