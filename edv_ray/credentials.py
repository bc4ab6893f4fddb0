"""Credentials never live in configs: a value that looks like one is refused.

A run config is saved as the run's ``config.yaml``, logged to W&B (and uploaded by
``wandb sync``), copied into sweep folders and printed in error messages, so a key
written into it leaks everywhere. Keys are read from the environment variable that
``models.<name>.api_key_env`` names. :func:`refuse_credentials` walks a raw config
(every string, every mapping key) and refuses, in one line that names the field and
the kind of credential but never its value:

* a URL with user information (``https://user:KEY@host``, ``https://KEY@host``);
* a URL query parameter that carries a key (``?api_key=``, ``key=``, ``token=``, …);
* a value matching a well-known key format (``sk-…``, ``hf_…``, ``ghp_…``, ``AKIA…``,
  ``AIza…``, ``xox?-…``, ``glpat-…``, JWTs, bearer tokens, PEM private keys);
* a non-empty string under a key named like a credential (``api_key``, ``hf_token``,
  ``password``, ``secret``, …; names ending in ``_env`` hold variable names);
* an ``api_key_env`` that is not an environment variable's name (a pasted key).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl, urlsplit

KEY_FORMATS = (
    ("an OpenAI/Anthropic-style key (sk-…)", r"\bsk-(?:proj-|ant-[a-z0-9]+-)?[A-Za-z0-9_\-]{16,}"),
    ("a Hugging Face token (hf_…)", r"\bhf_[A-Za-z0-9]{20,}"),
    ("a GitHub token", r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})"),
    ("an AWS access key id", r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    ("a Google API key (AIza…)", r"\bAIza[0-9A-Za-z_\-]{30,}"),
    ("a Slack token", r"\bxox[abposr]-[A-Za-z0-9-]{10,}"),
    ("a GitLab token (glpat-…)", r"\bglpat-[A-Za-z0-9_\-]{20,}"),
    ("a JSON web token", r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"),
    ("a bearer token", r"(?i)\bbearer\s+[A-Za-z0-9._~+/\-]{12,}"),
    ("a private key", r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
)
_FORMATS = [(kind, re.compile(rx)) for kind, rx in KEY_FORMATS]
_URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s\"'<>]+")
_SECRET_PARAM = re.compile(
    r"(?i)^(?:api[_-]?key|apikey|x-api-key|key|token|access[_-]?token|auth|authorization|"
    r"secret|client[_-]?secret|password|passwd|pwd|sig|signature|code|sas)$")
_SECRET_NAME = re.compile(
    r"(?i)(?:^|[_\-.])(?:api[_-]?key|apikey|access[_-]?key|token|auth[_-]?token|secret|"
    r"password|passwd|credentials?|private[_-]?key)$")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")

HOW = ("keys never go in a config (it is saved in config.yaml, W&B files and sweep "
       "folders): put the key in an environment variable and give that variable's NAME "
       "as the model's api_key_env")


def credential_kind(text: str) -> str | None:
    """What kind of credential ``text`` holds (None: none found). Never returns the text."""
    for kind, rx in _FORMATS:
        if rx.search(text):
            return kind
    for m in _URL.finditer(text):
        try:
            parts = urlsplit(m.group(0))
            if parts.username is not None or parts.password is not None:
                return "a user name or password in a URL (user:KEY@host)"
            for name, value in parse_qsl(parts.query, keep_blank_values=True):
                if value and _SECRET_PARAM.match(name):
                    return f"a key in a URL query parameter ({name}=…)"
        except ValueError:  # not a well-formed URL (e.g. a bad port): nothing to find
            continue
    return None


# Keys whose format is itself a valid variable name (letters, digits, '_'): Groq gsk_…,
# Stripe sk_live_/sk_test_/rk_…/pk_…, Replicate r8_…, Fireworks fw_…, and the like.
_KEY_PREFIX = re.compile(
    r"(?:gsk|[spr]k_(?:live|test)|r8|fw|tgp_v1|tvly|jina|csk|xai)_"
    r"(?=[A-Za-z0-9_]*(?:[0-9]|[a-z][A-Z]|[A-Z][a-z]))[A-Za-z0-9_]{8,}")


def _looks_random(word: str) -> bool:
    """A run of 16+ characters that mixes cases and digits the way keys do (a variable's
    name is words: OPENAI_API_KEY, AzureOpenAIKey2)."""
    if len(word) < 16:
        return False
    classes = sum(any(f(c) for c in word) for f in (str.islower, str.isupper, str.isdigit))
    switches = sum(a.isdigit() != b.isdigit() or a.islower() != b.islower()
                   for a, b in zip(word, word[1:]))
    return classes >= 2 and switches >= len(word) // 4


def env_name_problem(value: Any) -> str | None:
    """Why ``value`` cannot name an environment variable (None: it is a variable's name).
    The value itself never appears in the answer: a key pasted here must not be echoed."""
    if not isinstance(value, str) or not _ENV_NAME.fullmatch(value):
        return ("must be the NAME of an environment variable (letters, digits, '_'; "
                "e.g. OPENAI_API_KEY), not the key itself (the value is not shown)")
    if (credential_kind(value) or _KEY_PREFIX.fullmatch(value)
            or (len(value) >= 20 and "_" not in value and any(c.isdigit() for c in value))
            or any(_looks_random(w) for w in value.split("_"))):
        return ("looks like a key, not the NAME of the environment variable holding it "
                "(the value is not shown)")
    return None


def _label(key: Any) -> str:
    text = str(key)
    return "<a key that looks like a credential>" if credential_kind(text) else text


def find_credentials(data: Any, path: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """(field path, kind) of every credential-looking value in a raw config."""
    found: list[tuple[str, str]] = []
    if isinstance(data, dict):
        for key, value in data.items():
            here = path + (_label(key),)
            if str(key) == "api_key_env" and value is not None:
                problem = env_name_problem(value)
                if problem:
                    found.append((".".join(here), problem))
                continue
            kind = credential_kind(str(key))
            if kind is None and isinstance(value, str) and value.strip() \
                    and _SECRET_NAME.search(str(key)) and not str(key).endswith("_env"):
                kind = f"a value under a credential's name ({_label(key)})"
            if kind:
                found.append((".".join(here), kind))
                continue
            found += find_credentials(value, here)
    elif isinstance(data, (list, tuple)):
        for i, value in enumerate(data):
            found += find_credentials(value, path + (str(i),))
    elif isinstance(data, (str, bytes, bytearray)):
        text = data if isinstance(data, str) else bytes(data).decode("utf-8", "replace")
        kind = credential_kind(text)
        if kind:
            found.append((".".join(path) or "(top level)", kind))
    return found


def refuse_credentials(data: Any, source: str) -> None:
    """Raise :class:`~edv_ray.config_files.ConfigError` (one line) if ``data`` holds a
    credential anywhere; the message names the field(s), never the value."""
    from edv_ray.config_files import ConfigError

    found = find_credentials(data)
    if not found:
        return
    where, kind = found[0]
    more = f" (and {len(found) - 1} more field(s))" if len(found) > 1 else ""
    if where.endswith("api_key_env"):
        raise ConfigError(f"config {source}: {where} {kind}{more}")
    raise ConfigError(f"config {source}: {where} holds {kind}{more}; {HOW}")
