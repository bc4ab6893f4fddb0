"""The suite's checks against an OLD commit's behaviour (issue 21: each issue-18 defect a
planted world can show must fail a check on commit 2c5e7a9).

The old framework runs unchanged, from a ``git archive`` of the commit; the simulated
engine is new code, so it is grafted in from outside: the new tree serves it as a
standalone OpenAI-compatible server (``python -m edv_ray.simulation.server``) and
the old run reaches it as ``engine: endpoint``. The old run's tables are dumped by the
OLD code's own views (what the old framework measured), and :class:`LegacyRun` gives the
checks the interface of :class:`edv_ray.validation.measure.Run` over that dump: compare's
cells and paired comparisons (statistics, unchanged since) on the old ``method_results``,
and the views the old run lacks built the old way (every ``execute`` episode is EDV's
and Router's: the old ids did not hold the memory; the bank after an epoch = the items
learned up to it, there being no frozen snapshots).
"""

from __future__ import annotations

import copy
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from edv_ray.report.compare_load import RUN_INFO_SCHEMA
from edv_ray.validation.measure import Run

# which method the old framework credited each stage's episodes to
OLD_STAGES = {"execute": ["router", "edv"], "infer": ["edv"], "route": ["router"],
              "eval": ["no_memory", "judge"], "rb_execute": ["reasoning_bank"],
              "rb_infer": ["reasoning_bank"]}
VIEWS = ("episodes", "method_results", "routing", "votes", "rb_entries", "rb_judgments",
         "memory_items", "llm_calls", "contamination_items")

# run inside the OLD tree: its own views written to parquet (argv: run dir, dump dir, views)
DUMP = """
import sys
from pathlib import Path
import pyarrow.parquet as pq
from edv_ray.results.views import connect
run, out = Path(sys.argv[1]), Path(sys.argv[2])
out.mkdir(parents=True, exist_ok=True)
con = connect(run)
have = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
for v in sys.argv[3].split(","):
    if v in have:
        pq.write_table(con.table(v).to_arrow_table(), out / f"{v}.parquet")
"""


def old_config(cfg: dict, url: str) -> dict:
    """A world's run config in the old schema: the engine as an endpoint, sections and
    fields the old code did not have removed (the behaviour they switch on is new)."""
    cfg = copy.deepcopy(cfg)
    cfg["models"] = {"sim": {"engine": "endpoint", "litellm_model": "openai/sim", "api_base": url,
                             "n_ctx": cfg["models"]["sim"].get("n_ctx", 131072)}}
    shares = cfg.pop("contamination", None) or []
    if shares:
        cfg["contamination"] = float(shares[0])
    cfg.pop("contamination_writer", None)
    cfg.get("edv", {}).pop("retrieval_scope", None)
    cfg.get("reasoning_bank", {}).pop("eval_after_each_epoch", None)
    cfg.get("benchmark", {}).pop("task_type_key", None)
    rt = cfg.get("runtime", {})
    if rt.pop("construction_trials", None) not in (None, rt.get("trials", 1)):
        # the old code ran `trials` rollouts in construction too: not the world's design
        raise ValueError("legacy: the old code cannot run a world whose construction "
                         "rollouts differ from its trials")
    return cfg


class LegacyRun(Run):
    """:class:`Run` over an old run's dump (see the module doc)."""

    def __init__(self, dump_dir: str | Path, run_dir: str | Path) -> None:
        self.dir = Path(run_dir)
        self.dump = Path(dump_dir)
        self.con = duckdb.connect()
        for v in VIEWS:
            f = self.dump / f"{v}.parquet"
            if f.is_file():
                self.con.register(f"_{v}", pq.read_table(f))
                self.con.table(f"_{v}").create_view(v)
        self._derived()
        self.cmp = self.con
        self.group = "old"
        self.info = None
        self._scored = {}

    def _derived(self) -> None:
        rows = [{"stage": s, "used_by": m} for s, ms in OLD_STAGES.items() for m in ms]
        self.con.register("_old_stages", pa.Table.from_pylist(rows))
        self.con.execute("CREATE VIEW method_episodes AS SELECT s.used_by, '' AS condition, "
                         "NULL AS memory_key, false AS shared, e.* FROM episodes e JOIN _old_stages s "
                         "USING (stage)")
        self.con.execute("CREATE VIEW selection AS SELECT DISTINCT 'test' AS selection, domain, task_id "
                         "FROM method_results UNION SELECT DISTINCT 'train', domain, task_id FROM "
                         "episodes WHERE stage IN ('execute', 'rb_execute')")
        self.con.register("_run_info", pa.Table.from_pylist(
            [{"run_id": "old", "stored_run_id": "old", "sweep_id": None, "axes_json": "{}",
              "benchmark": "tau2", "seed": 0}], schema=RUN_INFO_SCHEMA))
        self.con.table("_run_info").create_view("run_info")
        self.con.execute("CREATE OR REPLACE VIEW method_results AS SELECT * REPLACE ('old' AS run_id) "
                         "FROM _method_results")

    def failed_validity(self) -> list[str]:
        return []  # the old code had no validity checks

    def shared_items(self, epoch: int, domain: str) -> list[tuple[str, str]]:
        """No frozen snapshots before issue 18: the shared items learned up to ``epoch``."""
        return [(r, s) for r, s in self.rows(
            "SELECT rule, coalesce(source_task_ids[1], '') FROM memory_items WHERE bank = 'shared' "
            "AND domain = ? AND epoch <= ?", domain, epoch)]

    def bank_ids(self, epoch: int) -> set[str]:
        return {i for (i,) in self.rows("SELECT item_id FROM memory_items WHERE epoch <= ?", epoch)}

    def old_contamination_share(self, share: float) -> None:
        """``contamination_share`` the new way (items per domain, and per agent for RB) over
        what the old code put in its banks (EDV: poison items of the shared bank; RB:
        poison entries of each agent's bank)."""
        cond = f"poison@{share:g}"
        parts = []
        if self._has("memory_items"):
            parts.append(f"""SELECT 'edv' AS method, '{cond}' AS condition, domain, NULL AS owner,
                count(*) FILTER (WHERE distiller IS DISTINCT FROM 'contamination') AS n_clean,
                count(*) FILTER (WHERE distiller = 'contamination') AS n_poison
                FROM memory_items WHERE bank = 'shared' GROUP BY domain""")
        if self._has("rb_entries"):
            parts.append(f"""SELECT 'reasoning_bank', '{cond}', domain, agent,
                sum(len(items)) FILTER (WHERE status IS DISTINCT FROM 'contamination'),
                coalesce(sum(len(items)) FILTER (WHERE status = 'contamination'), 0)
                FROM rb_entries GROUP BY domain, agent""")
        self.con.execute("CREATE OR REPLACE VIEW contamination_share AS SELECT *, n_poison / "
                         "(n_clean + n_poison) AS share_reached FROM (" + " UNION ALL ".join(parts) + ")")
        if self._has("contamination_items"):
            self.con.execute(f"CREATE OR REPLACE VIEW contamination_items AS SELECT *, "
                             f"'{cond}' AS condition FROM _contamination_items")

    def _has(self, view: str) -> bool:
        return (self.dump / f"{view}.parquet").is_file()

    def request_seeds(self) -> list[tuple[str, list]]:
        return [("(seeds not recorded per request before issue 18)", [])]
