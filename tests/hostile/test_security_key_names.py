"""Keys shaped like variable names, and keys only typing reveals (issue 28 D3, D11).

D3: `api_key_env` took anything with a `_`, so a pasted Groq `gsk_…`, Stripe-style
`sk_live_…`, Replicate `r8_…` or Fireworks `fw_…` key passed and was printed in
"environment variable gsk_… is not set". D11: the credential scan read only `str` values
of the raw YAML, so a `!!binary` `api_base` carrying `user:password@` became a string in
the typed config and reached config.yaml and W&B. Each is refused by `edv validate`,
`edv run` and `edv sweep` in one line naming the field, and the key is nowhere after."""

from __future__ import annotations

import pytest

from edv_ray.config_files import env_name_problem
from tests.hostile.test_security_secrets import HOST, KEY, _with, refused_everywhere

# made-up values in each vendor's format (letters, digits and '_': valid variable names)
SHAPED = {
    "groq": "gsk_Wq8Lz2Xn5Vb9Tr3Ym6Kp1Hd4Jf7Gs0Ac2Ne5Qu8Ri3Ow6Ey9Tp1Lk4Mj7Zh0",
    "stripe_live": "sk_live_51Hq8LzWn5Vb9Tr3Ym6Kp1Hd4Jf7Gs",
    "stripe_restricted": "rk_test_51Hq8LzWn5Vb9Tr3Ym6Kp1Hd",
    "replicate": "r8_Hq8LzWn5Vb9Tr3Ym6Kp1Hd4Jf7Gs0Ac2Ne5",
    "fireworks": "fw_3Zq8LzWn5Vb9Tr3Ym6Kp1Hd4J",
    "random_after_prefix": "MY_Zq8Lw0Vb7Hn2Rt5Ys8Kd1Fg4Jm6Pc",
}

CASES = {f"api_key_env_{k}": (lambda t, v=v: _with(t, {"api_key_env": v}), v, "api_key_env")
         for k, v in SHAPED.items()}
CASES["binary_api_base_userinfo"] = (
    lambda t: _with(t, {"api_base": f"https://me:{KEY}@{HOST}/v1".encode()}), KEY,
    "models.scripted.api_base")
CASES["binary_wandb_project"] = (
    lambda t: _with(t, wandb={"mode": "offline", "project": KEY.encode()}), KEY, "wandb.project")


@pytest.mark.parametrize("name", sorted(CASES))
def test_key_shaped_or_binary_value_is_refused_and_never_echoed(name, tmp_path, capsys,
                                                                monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    make, secret, field = CASES[name]
    for line in refused_everywhere(make(tmp_path), secret, field, tmp_path, capsys):
        assert secret[:8] not in line  # not even its start


@pytest.mark.parametrize("name", ["OPENAI_API_KEY", "GROQ_API_KEY", "HF_TOKEN", "K",
                                  "AZURE_OPENAI_API_KEY_2", "AzureOpenAIKey", "fw_api_key",
                                  "gsk_key_for_prod", "OPENROUTERAPIKEY", "MY_JUDGE_KEY"])
def test_variable_names_still_pass(name):
    assert env_name_problem(name) is None
