"""Keys never land in a config (issue 22 item 4): a credential anywhere in a run config
(URL user information, a key query parameter, a known key format, a value under a
credential's name, a key pasted into `api_key_env`) is refused by `edv validate`,
`edv run` and `edv sweep` with one line that names the field, never the key; nothing
under the working folder (run folder, W&B offline files, sweep folder) nor the console
holds the key afterwards."""

from __future__ import annotations

from pathlib import Path

import pytest

from edv_ray.cli import main
from edv_ray.testing.helpers import scripted_config
from tests.hostile.security_kit import one_line, write_yaml

KEY = "sk-proj-Zq3x9Lw0Vb7Hn2Rt5Ys8Kd1Fg4Jm6Pc"
HF = "hf_QwErTyUiOpAsDfGhJkLzXcVbNm1234"
HOST = "llm.example.org"


def _with(tmp_path: Path, model: dict | None = None, **top) -> dict:
    cfg = scripted_config(f"http://{HOST}/v1", tmp_path, **{"wandb": {"mode": "offline"}, **top})
    cfg["models"]["scripted"].update(model or {})
    return cfg


CASES = {
    # name: (config, the secret that must not leak, the field the line must name)
    "url_userinfo": (lambda t: _with(t, {"api_base": f"https://me:{KEY}@{HOST}/v1"}), KEY,
                     "models.scripted.api_base"),
    "url_user_only": (lambda t: _with(t, {"api_base": f"https://{KEY}@{HOST}/v1"}), KEY,
                      "models.scripted.api_base"),
    "query_api_key": (lambda t: _with(t, {"api_base": f"https://{HOST}/v1?api_key=abc123secret"}),
                      "abc123secret", "api_key=…"),
    "query_key": (lambda t: _with(t, {"api_base": f"https://{HOST}/v1?alt=json&key=abc123secret"}),
                  "abc123secret", "key=…"),
    "query_token": (lambda t: _with(t, {"api_base": f"https://{HOST}/v1?token=abc123secret"}),
                    "abc123secret", "token=…"),
    "engine_args_api_key": (lambda t: _with(t, {"engine_args": {"api_key": "plain-words-key"}}),
                            "plain-words-key", "engine_args.api_key"),
    "engine_args_hf_token": (lambda t: _with(t, {"engine_args": {"hf_token": HF}}), HF,
                             "engine_args.hf_token"),
    "engine_args_header": (lambda t: _with(t, {"engine_args": {"extra_headers": {
        "Authorization": "Bearer abcdefghijklmnop123"}}}), "abcdefghijklmnop123", "Authorization"),
    "engine_args_nested_key": (lambda t: _with(t, {"engine_args": {"cli": ["--x", KEY]}}), KEY,
                               "engine_args.cli.1"),
    "key_as_mapping_key": (lambda t: _with(t, {"engine_args": {KEY: 1}}), KEY, "engine_args"),
    "litellm_model": (lambda t: _with(t, {"litellm_model": f"openai/{KEY}"}), KEY,
                      "litellm_model"),
    "elsewhere": (lambda t: _with(t, wandb={"mode": "offline", "project": HF}), HF,
                  "wandb.project"),
    "api_key_env_is_a_key": (lambda t: _with(t, {"api_key_env": KEY}), KEY, "api_key_env"),
    "api_key_env_is_hf": (lambda t: _with(t, {"api_key_env": HF}), HF, "api_key_env"),
    "api_key_env_random": (lambda t: _with(t, {"api_key_env": "a1b2c3d4e5f6a7b8c9d0e1f2"}),
                           "a1b2c3d4e5f6a7b8c9d0e1f2", "api_key_env"),
}


def _leaks(root: Path, secret: str, skip: Path) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and p != skip
            and secret.encode() in p.read_bytes()]


def refused_everywhere(cfg: dict, secret: str, field: str, tmp_path: Path, capsys) -> list[str]:
    """`edv validate`, `edv run` and `edv sweep` of ``cfg`` each exit 2 with one line that
    names ``field`` and never ``secret``; nothing is left holding it. The lines."""
    path = Path(write_yaml(tmp_path / "cfg.yaml", cfg))
    sweep = Path(write_yaml(tmp_path / "sweep.yaml", {"sweep_id": "s", "base": "cfg.yaml",
                                                      "output_dir": str(tmp_path / "sweeps"),
                                                      "axes": {"seed": [1, 2]}}))
    lines = []
    for cmd in (["validate", str(path)], ["run", "--no-progress", str(path)], ["sweep", str(sweep)]):
        assert main(cmd) == 2, cmd
        out = capsys.readouterr()
        lines.append(one_line(out.err))
        assert field in lines[-1] and secret not in out.out + out.err, lines[-1]
    assert not (tmp_path / "runs").exists() and not (tmp_path / "sweeps").exists()
    assert _leaks(tmp_path, secret, skip=path) == []
    return lines


@pytest.mark.parametrize("name", sorted(CASES))
def test_credential_in_config_is_refused_and_never_echoed(name, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    make, secret, field = CASES[name]
    for line in refused_everywhere(make(tmp_path), secret, field, tmp_path, capsys):
        if "api_key_env" not in field:
            assert "api_key_env" in line  # where the key belongs


def test_names_and_ordinary_urls_pass(tmp_path):
    from edv_ray.config import load_config_dict

    cfg = _with(tmp_path, {"api_base": f"https://{HOST}:8443/v1?alt=json", "api_key_env": "OPENAI_API_KEY",
                           "engine_args": {"max_tokens": 5, "tokenizer": "x", "api_key_env": "K"}})
    assert load_config_dict(cfg).models["scripted"].api_key_env == "OPENAI_API_KEY"
