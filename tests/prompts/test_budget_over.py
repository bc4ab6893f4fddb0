"""A prompt the budget could not bring within a model's context is never passed off as
fitting (issue 29 item 8): it is flagged in its evidence, recorded with its call
(``llm_calls.evidence_final_kept``), and the ``evidence_kept`` validity check fails."""

from __future__ import annotations

from edv_ray.llm.calls import CallContext
from edv_ray.methods.jobkit import with_evidence
from edv_ray.prompts.budget import count_tokens, fit_prompt
from edv_ray.report.validity import run_checks
from edv_ray.results.parquet_io import write_rows_atomic
from edv_ray.results.schema import CALL_SCHEMA

N_CTX, ANSWER = 3000, 500
ROOM = N_CTX - ANSWER - 64


def _transcript(turns: int) -> str:
    lines = [f"user: please look at order {i} and tell me what changed since last week" for i in range(turns)]
    return "\n".join(lines + ["assistant calls get_order(id='9')", "tool result: {'status': 'open'}"])


def shortened_grows(ps: list[str]) -> str:
    """A stage prompt whose own text grows once its evidence is shortened (a note per
    shortened run), so no shortening makes it fit."""
    notes = "\n".join("Note: this run was shortened; weigh its missing middle. " * 100
                      for p in ps if "elided" in p)
    return "Judge these runs.\n" + "\n".join(f"<run>{p}</run>" for p in ps) + "\n" + notes


def test_an_over_budget_prompt_is_flagged_and_fails_the_evidence_check(tmp_path):
    parts = [_transcript(80), _transcript(60)]
    got = fit_prompt(shortened_grows, parts, n_ctx=N_CTX, answer_tokens=ANSWER, who="judge")
    assert count_tokens(got) > ROOM  # nothing could make it fit
    assert got.evidence.fits is False and got.evidence.final_kept is False
    # a prompt that does fit is not flagged
    plain = fit_prompt(lambda ps: "Judge.\n" + "\n".join(ps), parts, n_ctx=N_CTX,
                       answer_tokens=ANSWER, who="judge")
    assert count_tokens(plain) <= ROOM and plain.evidence.fits and plain.evidence.final_kept
    # the call that sends it records the flag; the run's validity check fails on it
    ctx = with_evidence(CallContext(run_id="r", stage="judge", role="judge", agent="a"),
                        [{"role": "user", "content": got}])
    assert ctx.evidence_final_kept is False
    row = dict(run_id="r", role="judge", agent="a", model="m", task_id="t", trial=0,
               episode_id="", epoch=0, prompt_tokens=10, completion_tokens=2, latency_s=0.1,
               attempts=1, ok=True, error=None, started_at=0.0, evidence_chars=ctx.evidence_chars,
               evidence_kept=ctx.evidence_kept, evidence_final_kept=ctx.evidence_final_kept)
    write_rows_atomic([row], tmp_path / "llm_calls" / "stage=judge" / "x.parquet", CALL_SCHEMA)
    check, = [c for c in run_checks(tmp_path) if c.name == "evidence_kept"]
    assert not check.ok and "final state" in check.detail
