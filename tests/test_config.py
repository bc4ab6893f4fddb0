"""Bad configs fail before any work with one clear message and a non-zero exit."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from edv_ray.cli import main
from edv_ray.config import ConfigError, load_config, load_config_dict
from edv_ray.pipeline import default_config, validate
from edv_ray.testing.helpers import scripted_config


def _base(tmp_path):
    return scripted_config("http://127.0.0.1:9/v1", tmp_path)


@pytest.mark.parametrize("mutate, message", [
    (lambda c: c.update(bogus=1), "bogus: unknown field"),
    (lambda c: c["benchmark"].update(domains=["airlines"]), "unknown τ²-bench domain"),
    (lambda c: c["agents"][0].update(model="gpt-9"), "unknown model 'gpt-9'"),
    (lambda c: c["agents"][0].update(prompt_strategy="telepathy"), "prompt_strategy"),
    (lambda c: c["agents"].append(dict(c["agents"][0])), "duplicate agent name"),
    (lambda c: c["roles"].update(executors=["ghost"]), "unknown agent 'ghost'"),
    (lambda c: c["runtime"].update(concurrency=0), "runtime.concurrency"),
    (lambda c: c["models"]["scripted"].update(engine="llama_cpp"), "needs `weights`"),
    (lambda c: c.update(agents=[]), "pool needs at least one agent"),
])
def test_invalid_configs_name_the_problem(tmp_path, mutate, message):
    cfg = _base(tmp_path)
    mutate(cfg)
    with pytest.raises(ConfigError) as err:
        load_config_dict(cfg, "test.yaml")
    assert message in str(err.value)


def test_unreachable_endpoint_is_caught_before_work(tmp_path):
    cfg = load_config_dict(_base(tmp_path))  # port 9 (discard) has no server
    with pytest.raises(ConfigError, match="unreachable"):
        validate(cfg)


def test_unknown_task_ids_and_split(tmp_path, server):
    cfg = _base(tmp_path)
    cfg["models"]["scripted"]["api_base"] = server.base_url
    cfg["benchmark"] = {"domains": ["airline"], "split": "test", "task_ids": ["nope-1"]}
    with pytest.raises(ConfigError, match="task_ids"):
        validate(load_config_dict(cfg))
    cfg["benchmark"] = {"domains": ["airline"], "split": "dev"}
    with pytest.raises(ConfigError, match="no split 'dev'"):
        validate(load_config_dict(cfg))


def test_tasks_needing_a_user_simulator_without_one(tmp_path, server):
    cfg = _base(tmp_path)
    cfg["models"]["scripted"]["api_base"] = server.base_url
    cfg["roles"] = {}
    with pytest.raises(ConfigError, match="need a user simulator"):
        validate(load_config_dict(cfg))


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "none.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("models: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)


def test_cli_exits_nonzero_with_one_message(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    cfg = _base(tmp_path)
    cfg["benchmark"]["domains"] = ["moon"]
    path.write_text(yaml.safe_dump(cfg))
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert "unknown τ²-bench domain" in err and "Traceback" not in err
    assert not (tmp_path / "runs").exists()  # nothing was started or written


def test_console_script_is_installed_and_reports_errors(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("models: {}\nagents: []\n")
    exe = [sys.executable, "-m", "edv_ray.cli"]
    proc = subprocess.run(exe + ["run", str(path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "at least one agent" in proc.stderr
    proc = subprocess.run(exe + ["report", str(tmp_path / "missing")], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and "not a run folder" in proc.stderr


def test_shipped_configs_validate(tmp_path):
    from pathlib import Path

    cfg = default_config()
    assert cfg.benchmark.domains == ["mock"] and len({a.model for a in cfg.agents}) >= 2
    from edv_ray.sweep import load_sweep

    from edv_ray.config import load_config_dict
    from edv_ray.config_files import read_yaml
    from edv_ray.validation.worlds import WORLDS_DIR, load_world

    sweeps = worlds = 0
    for path in sorted(Path(__file__).parents[1].joinpath("experiments").rglob("*.yaml")):
        if path.parent == WORLDS_DIR:  # validation worlds: run configs once given a size
            if path.stem != "base":
                for size in read_yaml(path)["validation"]["sizes"]:
                    load_config_dict(load_world(path.stem, size, tmp_path).config)
                    worlds += 1
        elif path.parent.name == "sweeps":
            _sweep, variants = load_sweep(path)
            assert len(variants) >= 2, path
            sweeps += 1
        else:
            load_config(path)
    assert worlds >= 9
    assert sweeps >= 7  # contamination is one run over a list of shares (one frozen bank)
