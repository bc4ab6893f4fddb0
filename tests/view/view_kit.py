"""What the `edv view` tests share (issue 32): one small real EDV run with hostile strings
planted in a lesson and in a tool result, the viewer serving it, its static export, and a
headless Debian chromium. Fixtures: tests/view/conftest.py (tests/hostile/test_view_xss.py
uses the same run: it is made once per test session).

The run: EDV + No-Memory on τ²-bench's mock domain, every model the scripted server
(Ray, HTTP, τ²-bench grading all real). Three training tasks; executor ``good`` replays the
gold actions, ``bad`` creates a task whose title is :data:`HOSTILE_TOOL` (so that string is
a tool call's argument and comes back in the tool's result), then stops: every group has a
contrast. The distiller proposes, per task, a lesson both executors approve (its rule is
:data:`HOSTILE_LESSON`, the same on every task: one shared item, merged), one only ``good``
approves (a private item of ``good``) and one nobody approves; one poison twin per task
(rejected). Two test tasks are then answered with memory retrieved (τ = -1: everything
qualifies), so the shared item is retrieved by inference episodes.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

# ---- hostile strings ----------------------------------------------------------------------
SCRIPT = "<script>alert(1)</script>"
JS_LINK = '<a href="javascript:alert(1)">x</a>'
IMG = "<img src=x onerror=alert(1)>"
BREAKOUT = "</textarea></script><script>alert(2)</script>"
BIDI = "\u202e"  # RIGHT-TO-LEFT OVERRIDE: would reverse how the rest of the line reads
PAYLOADS = {"script": SCRIPT, "javascript_link": JS_LINK, "onerror_img": IMG,
            "breakout": BREAKOUT}
HOSTILE_LESSON = (f"UNANIMOUS: always confirm the task id before updating it. {SCRIPT} {JS_LINK} "
                  f"{IMG} {BREAKOUT} evil{BIDI}txt.exe")
HOSTILE_TOOL = f"Meeting {SCRIPT} {JS_LINK} {IMG} {BREAKOUT} evil{BIDI}txt.exe"

TRAIN = ["create_task_1", "update_task_1", "impossible_task_1"]
TEST = ["create_task_1_with_env_assertions", "update_task_with_initialization_actions"]
PARTIAL = {  # one unrelated rule per training task (not near-duplicates: three private items)
    "create_task_1": "check that the user exists before creating any task for them",
    "update_task_1": "only pending or completed are valid values for a status field",
    "impossible_task_1": "re-read the initial database snapshot before acting",
}
NONE_RULE = "NONE: guess the user id when it is missing."


def _reply(obj) -> dict:
    return {"role": "assistant", "content": json.dumps(obj)}


def _distiller(req, tag):
    lessons = [("Confirm the id", HOSTILE_LESSON), ("Check first", f"PARTIAL: {PARTIAL[tag['task_id']]}."),
               ("Guess", NONE_RULE)]
    return _reply({"experiences": [{"title": t, "when_to_use": "When a task must be changed",
                                    "rule": r, "tags": ["mock"], "evidence": ["T1"]} for t, r in lessons]})


def _verifier(req, tag):
    """good approves unanimous + partial lessons, bad only unanimous ones; poison: nobody."""
    lesson = req["messages"][-1]["content"].split("<proposed_lesson>")[1]
    ok = "UNANIMOUS" in lesson or ("PARTIAL" in lesson and tag["agent"] == "good")
    return _reply({"approve": ok, "rationale": f"{tag['agent']} says {ok}"})


def _agent(server):
    from edv_ray.agents.scripted_turns import agent_turn

    def agent(req, tag):
        if tag.get("agent") == "bad":  # a wrong task, titled with the hostile string
            plan = [("create_task", {"user_id": "user_1", "title": HOSTILE_TOOL})]
            return agent_turn(plan, req, "All done.")
        return server._agent_gold(req, tag)
    return agent


def _reset(server) -> None:
    server.reset()


def view_config(base_url: str, out: Path) -> dict:
    from edv_ray.testing.helpers import scripted_config

    agents = [{"name": n, "model": "scripted", "prompt_strategy": "native_tools"}
              for n in ("good", "bad", "judge")]
    bench = {"domains": ["mock"], "split": "all", "num_tasks": None, "solo": "always",
             "train_split": "all", "train_task_ids": TRAIN, "task_ids": TEST}
    cfg = scripted_config(base_url, out, method=["edv", "no_memory"], agents=agents,
                          roles={"executors": ["good", "bad"]}, benchmark=bench)
    cfg["run_id"] = "view"
    cfg["edv"] = {"n_executors": 2, "retrieval_tau": -1.0, "retrieval_k": 3, "poison_per_task": 1}
    return cfg


_CACHE: dict[str, Path] = {}


def make_run(scripted, tmp_path_factory) -> Path:
    """A finished EDV + No-Memory run folder (real pipeline, scripted models), with
    :data:`HOSTILE_LESSON` in shared memory and :data:`HOSTILE_TOOL` in bad's tool calls;
    made once per test session (the scripted server is left reset)."""
    if "run" in _CACHE:
        return _CACHE["run"]
    from rich.console import Console

    from edv_ray import pipeline
    from edv_ray.config import load_config_dict

    _reset(scripted)
    scripted.add_script("agent", _agent(scripted))
    scripted.add_script("distiller", _distiller)
    scripted.add_script("verifier", _verifier)
    try:
        cfg = view_config(scripted.base_url, tmp_path_factory.mktemp("view-run"))
        cfg, run_id, run_dir = pipeline.prepare_from(load_config_dict(cfg))
        pipeline.execute(cfg, run_id, run_dir, console=Console(quiet=True), show_progress=False)
    finally:
        _reset(scripted)
    _CACHE["run"] = Path(run_dir)
    return _CACHE["run"]


# ---- the viewer -----------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(url: str, proc: subprocess.Popen, log, timeout_s: float = 120.0) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            log.seek(0)
            raise RuntimeError(f"edv view exited with {proc.returncode}:\n{log.read().decode(errors='replace')}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"edv view did not answer {url} within {timeout_s:.0f} s")


@contextlib.contextmanager
def serving(run_dir: Path):
    """`edv view RUN --port FREE` as its own process on 127.0.0.1; yields the base URL
    (ending in ``/``)."""
    with serving_many([run_dir]) as base:
        yield base


@contextlib.contextmanager
def serving_many(run_dirs: list[Path]):
    """`edv view RUN... --port FREE` (see :func:`serving`)."""
    port = free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with tempfile.TemporaryFile() as log:  # a file, not a pipe: the server never blocks on it
        proc = subprocess.Popen(
            [sys.executable, "-m", "edv_ray.cli", "view", *map(str, run_dirs), "--host", "127.0.0.1",
             "--port", str(port)], stdout=log, stderr=subprocess.STDOUT, env=env)
        base = f"http://127.0.0.1:{port}/"
        try:
            _wait_for(base, proc, log)
            yield base
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def export(run_dir: Path, tmp_path_factory) -> Path:
    """`edv view RUN --html DIR` (the CLI, its own process): the static export's folder;
    made once per test session."""
    if "export" in _CACHE:
        return _CACHE["export"]
    out = tmp_path_factory.mktemp("view-export") / "site"
    done = subprocess.run([sys.executable, "-m", "edv_ray.cli", "view", str(run_dir), "--html", str(out)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (out / "index.html").is_file(), sorted(p.name for p in out.iterdir())
    _CACHE["export"] = out
    return out


# ---- the browser ----------------------------------------------------------------------------
def browser_missing() -> str | None:
    """Why no browser test can run here ("" / None when Debian's chromium, its driver and
    Selenium are all present)."""
    missing = [name for name in ("chromium", "chromedriver") if not shutil.which(name)]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("selenium (pip install -e .[dev])")
    return ", ".join(missing) or None


def require_browser() -> None:
    """Skip without a browser — except under CI (the CI variable set), where a missing
    browser is a failure: CI installs it through scripts/install.sh and must run these."""
    why = browser_missing()
    if why:
        msg = f"no browser for the view tests: {why} missing (bash scripts/install.sh installs them)"
        if os.environ.get("CI"):
            pytest.fail(msg + " — CI is set, so this fails instead of skipping")
        pytest.skip(msg)


def make_driver(*extra_args: str):
    """Headless Debian chromium through chromedriver, both found on PATH: Selenium
    Manager never runs (SE_OFFLINE, explicit driver path), so nothing is downloaded."""
    os.environ["SE_OFFLINE"] = "true"
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1400,1000", "--no-first-run", "--no-default-browser-check",
                "--disable-extensions", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", *extra_args):
        options.add_argument(arg)
    # the browser's console and network log, to show nothing ran and nothing was fetched
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=shutil.which("chromedriver")),
                              options=options)
    driver.set_page_load_timeout(60)
    return driver
