"""A resume never mixes settings silently (issue 28 D7): the stored ``config.yaml`` edited
between runs — trials, an agent's temperature, the task list — is compared with the
settings the finished episodes ran under. A change is refused in one line naming the
field (exit 2, nothing run, nothing written, the lock released); ``--accept-changed``
goes on and records the change in the run folder, W&B and the report. Fields that do
not change episodes (concurrency) may change freely."""

from __future__ import annotations

import json

import pytest
import yaml

from edv_ray.cli import main
from edv_ray.testing import wandb_log
from tests.hostile.security_kit import MOCK_TASKS, episode_rows, mock_config, one_line, write_yaml

HISTORY = "settings_history.json"


def start(server, tmp_path):
    cfg = write_yaml(tmp_path / "cfg.yaml", mock_config(server, tmp_path))
    assert main(["run", "--no-progress", cfg]) == 0
    run_dir = tmp_path / "runs" / "t"
    assert episode_rows(run_dir) == (2, 2, 0)
    return run_dir


def edit(run_dir, change) -> None:
    path = run_dir / "config.yaml"
    data = yaml.safe_load(path.read_text())
    change(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def trials_and_temperature(data):  # the reviewer's edit: trial 1 at 1.5, trial 0 at 0.0
    data["runtime"]["trials"] = 2
    data["agents"][0]["sampling"]["temperature"] = 1.5


def more_tasks(data):
    data["benchmark"]["task_ids"] = [*MOCK_TASKS, "create_task_1_with_env_assertions"]


def fewer_tasks(data):
    data["benchmark"]["task_ids"] = MOCK_TASKS[:1]


def snapshot(run_dir) -> dict:
    return {p.relative_to(run_dir): p.read_bytes() for p in run_dir.rglob("*")
            if p.is_file() and p.name != ".lock"}


@pytest.mark.parametrize("change, fields", [
    (trials_and_temperature, ["runtime.trials", "agents.text.sampling.temperature"]),
    (more_tasks, ["benchmark.task_ids"]),
    (fewer_tasks, ["benchmark.task_ids"]),
], ids=["trials_temperature", "more_tasks", "fewer_tasks"])
@pytest.mark.slow
def test_changed_settings_are_refused_naming_the_field(server, tmp_path, capsys, change,
                                                       fields):
    run_dir = start(server, tmp_path)
    edit(run_dir, change)
    before, calls = snapshot(run_dir), len(server.requests)
    capsys.readouterr()
    assert main(["run", "--no-progress", "--resume", str(run_dir)]) == 2
    line = one_line(capsys.readouterr().err)
    assert all(f in line for f in fields) and "--accept-changed" in line, line
    assert snapshot(run_dir) == before and len(server.requests) == calls  # nothing run
    assert len(json.loads((run_dir / HISTORY).read_text())["settings"]) == 1
    # the lock was released: the same refusal again, not "locked by another run"
    assert main(["run", "--no-progress", "--resume", str(run_dir)]) == 2
    assert "locked" not in capsys.readouterr().err


@pytest.mark.slow  # two runs and an offline W&B session: ~25 s on a busy machine
def test_accept_changed_records_the_change_in_folder_wandb_and_report(
        server, tmp_path, capsys, monkeypatch):
    run_dir = start(server, tmp_path)
    edit(run_dir, trials_and_temperature)
    monkeypatch.setenv("WANDB_MODE", "offline")
    calls = len(server.requests)
    assert main(["run", "--no-progress", "--resume", str(run_dir), "--accept-changed"]) == 0
    out = capsys.readouterr().out
    assert episode_rows(run_dir) == (4, 4, 0)  # trial 1 of both tasks, nothing doubled
    assert {r.get("temperature") for r in server.requests[calls:]} == {1.5}  # trial 1's
    hist = json.loads((run_dir / HISTORY).read_text())["settings"]
    assert [h["number"] for h in hist] == [0, 1]
    assert hist[1]["episodes_before"] == 2
    assert {(c["field"], c["old"], c["new"]) for c in hist[1]["changed"]} == {
        ("runtime.trials", 1, 2), ("agents.text.sampling.temperature", 0.0, 1.5)}
    assert "settings 1 from episode 2" in out
    # W&B: the run config and summary say the settings changed
    recs = list(wandb_log.records(wandb_log.offline_logs(run_dir)[-1]))
    config = {i.key: json.loads(i.value_json) for i in wandb_log.run_record(recs).config.update}
    assert config["settings_number"] == 1
    assert "runtime.trials (1 → 2)" in config["settings_changes"][0]
    assert wandb_log.summary(recs)["settings_number"] == 1
    # the report: which episodes ran under which settings
    assert main(["report", str(run_dir)]) == 0
    report = capsys.readouterr().out
    assert "Settings changed on resume" in report and "runtime.trials" in report
    csv = (run_dir / "report" / "settings_history.csv").read_text().splitlines()
    assert csv[0].startswith("settings,") and len(csv) == 3
    assert [ln.split(",")[3] for ln in csv[1:]] == ["2", "2"]  # episodes under each


@pytest.mark.slow
def test_accept_changed_with_new_tasks_is_one_line_not_a_keyerror(server, tmp_path, capsys):
    run_dir = start(server, tmp_path)
    edit(run_dir, more_tasks)
    capsys.readouterr()
    assert main(["run", "--no-progress", "--resume", str(run_dir), "--accept-changed"]) == 2
    line = one_line(capsys.readouterr().err)
    assert "benchmark.task_ids" in line and "create_task_1_with_env_assertions" in line
    assert len(json.loads((run_dir / HISTORY).read_text())["settings"]) == 1


@pytest.mark.slow
def test_a_free_field_resumes_without_complaint(server, tmp_path, capsys):
    run_dir = start(server, tmp_path)
    edit(run_dir, lambda d: d["runtime"].update(concurrency=1, episode_timeout_s=30))
    capsys.readouterr()
    assert main(["run", "--no-progress", "--resume", str(run_dir)]) == 0
    captured = capsys.readouterr()
    assert "error" not in captured.err and "settings" not in captured.out
    assert episode_rows(run_dir) == (2, 2, 0)
    assert len(json.loads((run_dir / HISTORY).read_text())["settings"]) == 1
