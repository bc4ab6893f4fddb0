"""ReasoningBank held to its paper (issue 29 items 4 and 8), on the scripted server:
k counts past tasks and every item of each is injected (k = 3 → up to 9 items), the
``items_injected`` table reports exactly what the agents' requests held, each injected
item asks the agent to say whether it used it, every rollout of ``runtime.trials`` > 1
is extracted (items keep their episode), and a description of more than one sentence is
a malformed answer (retried, never stored)."""

from __future__ import annotations

import re
from collections import Counter

import pyarrow as pa
import pytest

from edv_ray.methods.reasoning_bank.store import ENTRY_SCHEMA, rb_experiences
from edv_ray.memory import Embedder
from edv_ray.results.parquet_io import write_rows_atomic
from edv_ray.results.views import connect
from tests.methods import scripts
from tests.methods.test_methods import TEST, TRAIN, config, roles_sent, run

_ITEM = re.compile(r"^(\d+)\. ", re.MULTILINE)


def three_items(req, tag):
    return scripts.reply({"items": [
        {"title": f"item {n} of {tag['task_id']}", "description": f"When a task like {tag['task_id']} comes up.",
         "content": f"Step {n} learned on {tag['task_id']} by {tag['agent']}."} for n in (1, 2, 3)]})


def _memory_block(req) -> str:
    system = next((m["content"] for m in req["messages"] if m["role"] == "system"), "") or ""
    got = re.search(r"<experiences>(.*?)</experiences>", system, re.DOTALL)
    return got.group(1) if got else ""


@pytest.mark.slow
def test_k_three_tasks_injects_nine_items_reported_as_sent(server, tmp_path):
    server.add_script("self_judge", scripts.make_self_judge(lambda agent: "success"))
    server.add_script("extractor", three_items)
    run_dir = run(config(server, tmp_path, "reasoning_bank",
                         reasoning_bank={"epochs": 1, "retrieval_k": 3}))
    # what the server received: the numbered items of each inference episode's memory block
    sent: dict[str, int] = {}
    for req in roles_sent(server, "agent"):
        episode = req["user"].split("|")[6]
        if episode.startswith("rb_infer-"):
            block = _memory_block(req)
            numbers = [int(n) for n in _ITEM.findall(block)]
            assert numbers == list(range(1, len(numbers) + 1))
            # the block asks once (after the last item) to say at each step whether each
            # item was used
            flat = " ".join(block.split())
            assert flat.count("shaped that step (used) or not (not used)") == 1
            assert f"for each memory item above (1 to {len(numbers)})" in flat
            sent[episode] = max(sent.get(episode, 0), len(numbers))
    assert len(sent) == 2 * len(TEST)
    assert set(sent.values()) == {9}  # 3 past tasks × 3 items each, all injected
    con = connect(run_dir)
    (episodes, with_items, mean, most), = con.execute(
        "SELECT episodes, with_items, mean_items, max_items FROM items_injected "
        "WHERE method = 'reasoning_bank'").fetchall()
    assert (episodes, with_items, most) == (len(sent), len(sent), max(sent.values()))
    assert mean == sum(sent.values()) / len(sent)
    # the report prints it
    from rich.console import Console

    from edv_ray.report.tables import report

    got = report(run_dir, console=Console(quiet=True), save=False, which=("items_injected",))
    assert got["items_injected"][0]["max_items"] == 9


def _entry(bank, j: int, query: str, vec) -> None:
    eid = f"rb-a-e0-rb_execute-mock-p{j}"
    write_rows_atomic([dict(
        entry_id=eid, run_id="r", agent="a", domain="mock", task_id=f"p{j}", stage="rb_execute",
        query=query, query_embedding=vec.tolist(), episode_ids=[], judge_labels=["success"],
        true_success=[True], items=[{"title": f"t{j}.{k}", "description": f"When {j}.{k}.",
                                     "content": f"content {j}.{k}"} for k in range(3)],
        status="ok", error=None, picked_episode_id=None, seq=j + 1,
        item_episode_ids=[f"ep{j}"] * 3)], bank / "epoch=0" / f"{eid}.parquet", ENTRY_SCHEMA)


def test_max_injected_caps_items_most_similar_task_first(tmp_path):
    queries = ["create a task named groceries", "delete every task of the user",
               "change the flight date of a booking"]
    vecs = Embedder().embed(queries)
    for j, (q, v) in enumerate(zip(queries, vecs)):
        _entry(tmp_path, j, q, v)
    params = dict(_bank_dir=str(tmp_path), k=3, domain="mock", before_seq=None, exclude=[])
    whole = rb_experiences("create a task named groceries", params)
    assert len(whole.item_ids) == 9 and whole.item_ids[0].endswith("-p0:0")
    capped = rb_experiences("create a task named groceries", dict(params, max_injected=4))
    assert capped.item_ids == whole.item_ids[:4] and capped.texts[3].endswith(
        "for each memory item above (1 to 4), whether it shaped that step (used) or not (not used).")
    assert not any("shaped that step" in t for t in capped.texts[:3])


def multi_sentence_first(calls: Counter):
    """``bad``'s extractor always answers a two-sentence description; ``good``'s does on
    its first try at each rollout, then answers well."""
    def extractor(req, tag):
        calls[tag["agent"]] += 1
        two = tag["agent"] == "bad" or calls[tag["agent"]] % 2 == 1
        desc = "When a task is created. Then check the list." if two else "When a task is created."
        return scripts.reply({"items": [{"title": f"from {tag['task_id']} try {calls[tag['agent']]}",
                                         "description": desc, "content": "Confirm the record first."}]})
    return extractor


@pytest.mark.slow
def test_every_rollout_extracted_and_multi_sentence_descriptions_rejected(server, tmp_path):
    calls: Counter = Counter()
    server.add_script("self_judge", scripts.make_self_judge(lambda agent: "success"))
    server.add_script("extractor", multi_sentence_first(calls))
    cfg = config(server, tmp_path, "reasoning_bank", reasoning_bank={"epochs": 1, "retrieval_k": 1,
                                                                     "retries": 1})
    cfg["benchmark"].update(train_task_ids=TRAIN[:1], task_ids=TEST[:1])
    cfg["runtime"] = {**cfg.get("runtime", {}), "trials": 2}
    run_dir = run(cfg)
    con = connect(run_dir)
    rows = {a: (eps, src, items, status, err) for a, eps, src, items, status, err in con.execute(
        "SELECT agent, episode_ids, item_episode_ids, items, status, error FROM rb_entries").fetchall()}
    # good: both rollouts extracted (first answer of each rejected, the retry kept), each
    # item naming the rollout it came from
    eps, src, items, status, _ = rows["good"]
    assert len(eps) == 2 and src == eps and status == "ok"
    assert [i["description"] for i in items] == ["When a task is created."] * 2
    assert [i["title"] for i in items] == ["from create_task_1 try 2", "from create_task_1 try 4"]
    assert calls["good"] == 4
    # bad: every answer had two sentences → nothing stored, the reason recorded
    _, _, items, status, err = rows["bad"]
    assert items == [] and status == "no_items" and "one sentence" in err
    assert calls["bad"] == 2 * 2  # two rollouts, one retry each
    assert pa.types.is_list(ENTRY_SCHEMA.field("item_episode_ids").type)
