"""What ``edv view`` shows of ReasoningBank's memory (``Method.memory_view``): every item of
every entry (``items_sql``: id ``<entry>:<i>``, in its agent's own bank, so only that
agent's episodes can retrieve it), the entry an item was extracted from and the runs the
agent judged itself on (``provenance``), and the entries and self-judgments an episode
fed (``evidence``)."""

from __future__ import annotations

from edv_ray.methods.registry import MemoryReader, MemoryView

_ITEMS = """
SELECT entry_id || ':' || (i - 1) AS item_id, '{name}' AS method, 'rb' AS kind, 'rb' AS bank,
       agent AS owner, epoch, domain, task_id, it.title AS title,
       {item_text} AS text,
       agent AS distiller, false AS poison, NULL AS host_item_id, 'rb:' || agent AS admitted,
       false AS rejected, []::VARCHAR[] AS aliases, agent AS read_by
FROM (SELECT *, unnest(items) AS it, generate_subscripts(items, 1) AS i
      FROM rb_entries WHERE len(items) > 0)
"""

NO_VERIFICATION = ("ReasoningBank appends what the agent's own judge extracted; there is no "
                   "verification.")


def items_sql(have: set[str], name: str) -> str | None:
    from edv_ray.methods.reasoning_bank.store import ITEM_TEXT_SQL

    return _ITEMS.format(name=name, item_text=ITEM_TEXT_SQL) if "rb_entries" in have else None


def _listed(values) -> str:
    return ", ".join(str(v) for v in values or [])


def provenance(read: MemoryReader, item: dict, name: str) -> dict:
    """The item's entry: the runs it was learned from and how the agent judged them."""
    found = read.rows("SELECT episode_ids, judge_labels, true_success FROM rb_entries "
                      "WHERE entry_id = ?", [item["item_id"].rsplit(":", 1)[0]])
    entry = found[0] if found else {}
    sources = list(entry.get("episode_ids") or [])
    notes = [f"Learned by {item['owner']} from its own run(s); judge labels "
             f"{_listed(entry.get('judge_labels'))} (true success {_listed(entry.get('true_success'))})."
             ] if entry else []
    return {"sources": sources, "notes": [*notes, NO_VERIFICATION],
            "source_roles": {e: "learned from (self-judged, no reward)" for e in sources}}


def evidence(read: MemoryReader, ep: dict, name: str) -> list[dict]:
    """The entries learned from the episode (their items linked) and its self-judgments."""
    eid = ep["episode_id"]
    entries = read.rows("SELECT entry_id, agent, len(items) AS items FROM rb_entries "
                        "WHERE list_contains(episode_ids, ?) ORDER BY entry_id", [eid])
    judged = read.rows("SELECT agent, label, parse_ok FROM rb_judgments WHERE episode_id = ? "
                       "ORDER BY agent, stage", [eid])
    return ([{"cls": "rb-entry", "item_ids": [f"{e['entry_id']}:{i}" for i in range(e["items"] or 0)],
              "text": f"ReasoningBank entry {e['entry_id']} of {e['agent']} ({e['items']} items)"}
             for e in entries]
            + [{"cls": "rb-judgment", "item_ids": [],
                "text": f"Self-judged by {j['agent']}: {j['label']}"
                        + ("" if j["parse_ok"] else " (unparseable)")} for j in judged])


MEMORY_VIEW = MemoryView(items_sql=items_sql, provenance=provenance, evidence=evidence)
