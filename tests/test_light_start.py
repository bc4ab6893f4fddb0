"""A light start: `edv --help` loads neither the model-call path (litellm) nor Ray nor
pyarrow. Checked in a fresh interpreter, from the modules it ended up holding."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("litellm", "ray", "pyarrow", "openai", "duckdb", "torch")


def loaded_after(code: str) -> dict:
    probe = (f"import sys\n{code}\n"
             "import json\n"
             f"print(json.dumps({{m: m in sys.modules for m in {HEAVY!r}}}))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_edv_help_loads_no_heavy_package():
    loaded = loaded_after("import edv_ray.cli as c\ntry:\n    c.main(['--help'])\n"
                          "except SystemExit:\n    pass")
    assert not any(loaded.values()), {m for m, yes in loaded.items() if yes}


def test_every_subcommand_help_loads_no_heavy_package():
    for cmd in ("run", "report", "compare", "power", "audit", "audit-import", "view", "validate"):
        loaded = loaded_after(f"import edv_ray.cli as c\ntry:\n    c.main([{cmd!r}, '--help'])\n"
                              "except SystemExit:\n    pass")
        assert not any(loaded.values()), (cmd, {m for m, yes in loaded.items() if yes})


# ---- loading a config, and the commands that only read ---------------------------------
ROOT = Path(__file__).resolve().parent.parent
# what loading any config may load of edv_ray: the config's own modules and the plug-in
# table (base layer); each method's section then adds its pydantic-only config module
CONFIG_MODULES = {"edv_ray", "edv_ray.config", "edv_ray.config_files",
                  "edv_ray.config_simulation", "edv_ray.config_benchmarks", "edv_ray.plugins"}


def probe(code: str, cwd=ROOT) -> dict:
    """Run ``code`` in a fresh interpreter: the heavy packages and edv_ray modules it loaded."""
    script = (f"import sys\n{code}\nimport json\n"
              f"print(json.dumps({{'heavy': [m for m in {HEAVY!r} if m in sys.modules],"
              "'edv': sorted(m for m in sys.modules if m.startswith('edv_ray'))}))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300, cwd=cwd)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _section_modules(methods) -> set[str]:
    """The modules (and their packages) holding the named methods' config classes."""
    from edv_ray.plugins import METHODS

    out = set()
    for n in methods:
        parts = METHODS[n].config.partition(":")[0].split(".")
        out |= {".".join(parts[:i]) for i in range(2, len(parts) + 1)}
    return out


def test_load_config_loads_only_config_modules():
    """Before the table, load_config imported every method (48 edv_ray modules, litellm):
    now the config modules, the table and each named method's pydantic section."""
    for path, methods, most in (
            ("edv_ray/default_run.yaml", ("no_memory", "edv"), 11),
            ("experiments/main_table/embedded.yaml",
             ("no_memory", "reasoning_bank", "judge", "router", "edv_blind", "edv"), 14)):
        got = probe("from edv_ray.config import load_config\n"
                    f"cfg = load_config({path!r})\n"
                    "[cfg.section(n) for n in cfg.method_names()]")
        assert got["heavy"] == [], (path, got["heavy"])
        extra = set(got["edv"]) - CONFIG_MODULES - _section_modules(methods)
        assert not extra, (path, sorted(extra))
        assert len(got["edv"]) <= most, (path, got["edv"])


def test_pool_checks_and_memory_need_no_method_module(tmp_path):
    """A section's pool check and a method's memory are read from the table: load_config
    still rejects a bad pool, and still without loading the method."""
    from edv_ray.config import ConfigError, load_config_dict
    from edv_ray.testing.helpers import scripted_config

    cfg = scripted_config("http://127.0.0.1:9/v1", tmp_path,
                          method=["router"], router={"n_executors": 3})
    with pytest.raises(ConfigError, match="router.n_executors=3 but only 2"):
        load_config_dict(cfg)
    cfg = scripted_config("http://127.0.0.1:9/v1", tmp_path, method=["no_memory"],
                          memory_from="/nonexistent")
    with pytest.raises(ConfigError, match="need a method with memory"):
        load_config_dict(cfg)


def test_the_table_agrees_with_the_registered_methods():
    """plugins.METHODS (read without loading a method) says what the methods register."""
    from edv_ray.memory.retrieval import DEFAULT_K, DEFAULT_TAU
    from edv_ray.methods.edv import config as edv_config
    from edv_ray.plugins import METHODS, config_class, known_methods, resolve

    registered = known_methods()
    assert set(METHODS) <= set(registered)
    for name, spec in METHODS.items():
        m = registered[name]
        assert m.config_cls is config_class(name), name
        assert m.has_memory == spec.has_memory, name
        assert m.check is (resolve(spec.check) if spec.check else None), name
    assert (edv_config.DEFAULT_K, edv_config.DEFAULT_TAU) == (DEFAULT_K, DEFAULT_TAU)


def _cli(*args: str) -> str:
    return ("import edv_ray.cli as c\n"
            f"try:\n    rc = c.main({list(args)!r})\nexcept SystemExit as e:\n    rc = e.code\n"
            "assert rc == 0, rc")


@pytest.mark.slow
def test_validate_loads_neither_litellm_nor_ray():
    """Endpoint checks go over httpx (llm.endpoints), never the model-call client."""
    for config in ("experiments/mind2web_embedded.yaml", "experiments/mmtb_embedded.yaml"):
        got = probe(_cli("validate", config))
        assert not {"litellm", "ray"} & set(got["heavy"]), (config, got["heavy"])
    # τ²-bench's own package imports litellm when its tasks load (tau2.utils.llm_utils):
    # a τ²-bench config needs it to select tasks; Ray it still never loads
    got = probe(_cli("validate", "edv_ray/default_run.yaml"))
    assert "ray" not in got["heavy"], got["heavy"]


@pytest.mark.slow
def test_report_compare_and_power_load_neither_litellm_nor_ray(tmp_path):
    from tests.report.runfolder import simple_run

    a = simple_run(tmp_path, "a", [True, False, True, True])
    b = simple_run(tmp_path, "b", [False, False, True, True], seed=1)
    power_cfg = tmp_path / "power.yaml"  # a profile over MMTB's fixture (no τ²-bench import)
    power_cfg.write_text(f"extends: {ROOT / 'experiments/simulated_example.yaml'}\n"
                         f"benchmark: {{name: mmtb, data_dir: {ROOT / 'tests/fixtures/mmtb'}, "
                         "split: all, train_split: all}\n")
    for args in (("report", str(a)), ("compare", str(a), str(b), "--out", str(tmp_path / "cmp")),
                 ("power", str(power_cfg), "--reps", "100", "--trials-grid", "1", "--tasks", "20",
                  "--no-progress")):
        got = probe(_cli(*args))
        assert not {"litellm", "ray"} & set(got["heavy"]), (args[0], got["heavy"])
