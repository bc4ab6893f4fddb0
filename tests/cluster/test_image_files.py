"""cluster/docker/ and cluster/runtime_env.yaml, checked the way their tools read them:
the Dockerfile through BuildKit's own parser (the ``dockerfile`` package wraps it), with
every COPY source present in the build context and not excluded by the .dockerignore
(else `docker build` stops at that step); the runtime env through Ray's ``RuntimeEnv``,
which `ray job submit --runtime-env` uses."""

from __future__ import annotations

import fnmatch
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "cluster" / "docker"
INSTRUCTIONS = {"FROM", "ARG", "ENV", "RUN", "WORKDIR", "COPY", "ADD", "CMD", "ENTRYPOINT",
                "LABEL", "EXPOSE", "USER", "VOLUME", "SHELL", "HEALTHCHECK", "STOPSIGNAL",
                "ONBUILD"}


def ignored(path: str, patterns: list[str]) -> bool:
    """.dockerignore semantics: the last pattern matching the path or one of its parent
    folders decides; ``!`` re-includes."""
    parts = path.split("/")
    verdict = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pat = pattern.removeprefix("!").strip("/")
        for i in range(1, len(parts) + 1):
            prefix = "/".join(parts[:i])
            if fnmatch.fnmatchcase(prefix, pat) or (
                    pat.startswith("**/") and fnmatch.fnmatchcase(parts[i - 1], pat[3:])):
                verdict = not negate
                break
    return verdict


def dockerignore() -> list[str]:
    lines = (DOCKER / "Dockerfile.dockerignore").read_text().splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]


def test_the_dockerfile_parses_and_copies_only_what_the_context_ships():
    import dockerfile

    commands = dockerfile.parse_file(str(DOCKER / "Dockerfile"))
    assert {c.cmd.upper() for c in commands} <= INSTRUCTIONS
    assert commands[0].cmd.upper() == "FROM"
    patterns = dockerignore()
    copies = [c for c in commands if c.cmd.upper() == "COPY"]
    assert copies
    for c in copies:
        *sources, _dest = c.value
        for src in sources:
            assert (ROOT / src).exists(), f"COPY {src}: not in the build context"
            assert not ignored(src, patterns), f"COPY {src}: excluded by the .dockerignore"


def test_the_dockerignore_check_is_not_vacuous():
    patterns = dockerignore()
    assert ignored("tests", patterns) and ignored("runs/x.parquet", patterns)
    assert not ignored("edv_ray/cli.py", patterns)
    assert ignored("edv_ray/__pycache__/cli.pyc", patterns)


def test_rays_runtime_env_accepts_the_file():
    from ray.runtime_env import RuntimeEnv

    data = yaml.safe_load((ROOT / "cluster" / "runtime_env.yaml").read_text())
    assert set(data) <= set(RuntimeEnv.known_fields)  # Ray takes other keys as plug-ins
    env = RuntimeEnv(**data)
    assert env.working_dir() == "." and env.env_vars()["WANDB_MODE"] == "offline"
    with pytest.raises(TypeError):
        RuntimeEnv(**{**data, "env_vars": {"WANDB_MODE": 0}})
