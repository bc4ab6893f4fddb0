"""The evidence_kept validity check: one row per (stage, role) with min / mean share of
the transcripts kept; it fails when a judging role saw under half of a prompt's
transcripts, or when any prompt lost a final state — and says nothing for runs without
stage prompts."""

from __future__ import annotations

from edv_ray.report.validity import run_checks
from edv_ray.results.parquet_io import write_rows_atomic
from edv_ray.results.schema import CALL_SCHEMA


def _calls(run_dir, stage: str, rows: list[tuple]) -> None:
    out = [dict(run_id="r", role=role, agent="a", model="m", task_id="t", trial=0,
                episode_id="e", epoch=0, prompt_tokens=10, completion_tokens=2, latency_s=0.1,
                attempts=1, ok=True, error=None, started_at=0.0, evidence_chars=chars,
                evidence_kept=kept, evidence_final_kept=final)
           for role, chars, kept, final in rows]
    write_rows_atomic(out, run_dir / "llm_calls" / f"stage={stage}" / "x.parquet", CALL_SCHEMA)


def _evidence(run_dir) -> dict[str, tuple[bool, str, str]]:
    return {c.figure.split(" (")[0]: (c.ok, c.figure, c.detail)
            for c in run_checks(run_dir) if c.name == "evidence_kept"}


def test_evidence_kept_per_role_and_its_thresholds(tmp_path):
    _calls(tmp_path, "judge", [("judge", 1000, 1000, True), ("judge", 1000, 300, True)])
    _calls(tmp_path, "verify", [("verifier", 800, 800, True), ("verifier", 800, 800, True)])
    _calls(tmp_path, "distill", [("distiller", 900, 600, False)])
    _calls(tmp_path, "rb_learn", [("extractor", 1000, 200, True), ("self_judge", 10, 10, True)])
    _calls(tmp_path, "eval", [("agent", None, None, None)])  # not a stage prompt: no row
    got = _evidence(tmp_path)
    assert set(got) == {"judge", "verifier", "distiller", "extractor", "self_judge"}
    ok, figure, detail = got["judge"]
    assert not ok and "2 calls, kept min 30% / mean 65%, 1 shortened" in figure
    assert "kept under 50%" in detail
    assert got["verifier"][0] and "min 100% / mean 100%, 0 shortened" in got["verifier"][1]
    assert got["verifier"][2] == "every transcript whole"
    assert not got["distiller"][0] and "lost a run's final state" in got["distiller"][2]
    assert got["extractor"][0]  # not a judging role: 20 % kept is shown, not failed
    assert got["self_judge"][0]


def test_no_stage_prompts_no_row(tmp_path):
    _calls(tmp_path, "eval", [("agent", None, None, None)])
    assert _evidence(tmp_path) == {}
    assert _evidence(tmp_path / "empty") == {}
