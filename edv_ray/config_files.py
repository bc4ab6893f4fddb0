"""Run-config files: YAML with ``extends:`` (deep-merged), and the one error a bad config
raises. Used by :mod:`edv_ray.config` (runs) and :mod:`edv_ray.sweep` (sweep files).

Reading is bounded, so a hostile file is one clear line and never a hang: at most
``MAX_BYTES`` per file, ``MAX_DEPTH`` levels of nesting, ``MAX_ALIASES`` aliases and
``MAX_NODES`` nodes once every alias is expanded (an anchor "bomb" of nine aliases per
level reaches 10⁹ leaves in a few hundred bytes), ``MAX_EXTENDS`` files in one
``extends`` chain. The limits are checked on libyaml's event stream before any object is
built; run configs have tens to hundreds of nodes and a depth below ten.

Credentials never live in configs: a value that looks like one is refused.

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
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import yaml

MAX_BYTES = 1_000_000
MAX_DEPTH = 64
MAX_ALIASES = 1_000
MAX_NODES = 100_000
MAX_EXTENDS = 16
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: fast, bounded nesting


class ConfigError(ValueError):
    """A user-caused configuration problem (one clear message)."""


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` merged into ``base``: dicts recursively (unless ``over`` switches the
    section to another variant by its ``name``), anything else replaced."""
    out = dict(base)
    for key, value in over.items():
        base_value = out.get(key)
        # a section naming another variant (e.g. benchmark.name) replaces, not merges
        # (a benchmark section without a name is τ²-bench's)
        switched = (isinstance(value, dict) and isinstance(base_value, dict) and "name" in value
                    and value["name"] != base_value.get("name", "tau2" if key == "benchmark"
                                                        else value["name"]))
        if isinstance(value, dict) and isinstance(base_value, dict) and not switched:
            out[key] = deep_merge(base_value, value)
        else:
            out[key] = value
    return out


def _check_shape(text: str, where: str) -> None:
    """Depth, alias count and expanded size from the event stream (no objects built)."""
    sizes: dict[str, int] = {}  # anchor → nodes it expands to
    stack: list[list] = [[None, 0]]  # open collections: [anchor, nodes inside]
    aliases = total = 0
    for ev in yaml.parse(text, Loader=_LOADER):
        if isinstance(ev, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            stack.append([ev.anchor, 1])
            total += 1
            if len(stack) - 1 > MAX_DEPTH:
                raise ConfigError(f"{where} nests deeper than {MAX_DEPTH} levels "
                                  f"(line {ev.start_mark.line + 1})")
            continue
        if isinstance(ev, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            anchor, n = stack.pop()
        elif isinstance(ev, yaml.ScalarEvent):
            anchor, n = ev.anchor, 1
            total += 1
        elif isinstance(ev, yaml.AliasEvent):
            aliases += 1
            anchor, n = None, sizes.get(ev.anchor, 1)
            total += n
            if aliases > MAX_ALIASES:
                raise ConfigError(f"{where} has more than {MAX_ALIASES} YAML aliases")
        else:
            continue
        if anchor is not None:
            sizes[anchor] = n
        stack[-1][1] += n
        if total > MAX_NODES:
            raise ConfigError(f"{where} expands to more than {MAX_NODES:,} YAML nodes "
                              f"(anchors and aliases, line {ev.start_mark.line + 1}): refused")


def load_yaml_file(path: Path, what: str = "config") -> Any:
    """One YAML file, read within the limits above; any problem is a :class:`ConfigError`
    naming the file (``what`` names the kind of file in the message)."""
    where = f"{what} {path}"
    try:
        if not path.is_file():
            raise ConfigError(f"{what} file not found: {path}")
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise ConfigError(f"{where} is {size:,} bytes; a config may be at most "
                              f"{MAX_BYTES:,} bytes")
        raw = path.read_bytes()[:MAX_BYTES + 1]  # the file may have grown since
    except OSError as err:
        raise ConfigError(f"{where} cannot be read: {err.strerror or err}") from None
    if len(raw) > MAX_BYTES:
        raise ConfigError(f"{where} is larger than {MAX_BYTES:,} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"{where} is not UTF-8 text ({err.reason} at byte {err.start})") from None
    try:
        _check_shape(text, where)
        return yaml.load(text, Loader=_LOADER)
    except yaml.YAMLError as err:
        raise ConfigError(f"{where} is not valid YAML: {_one_line(err)}") from None
    except RecursionError:  # not reached within MAX_DEPTH; kept as a last guard
        raise ConfigError(f"{where} nests too deeply") from None


def _one_line(err: yaml.YAMLError) -> str:
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    return f"{problem} (line {mark.line + 1}, column {mark.column + 1})" if mark else problem


def read_yaml(path: Path, seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """A config file as a dict; ``extends: OTHER.yaml`` (relative to the file) is loaded
    first and deep-merged under this file's fields (lists are replaced, not merged)."""
    path = Path(path)
    if path.resolve() in seen:
        raise ConfigError(f"config {path}: `extends` cycle")
    if len(seen) >= MAX_EXTENDS:
        raise ConfigError(f"config {path}: `extends` chain longer than {MAX_EXTENDS} files")
    data = load_yaml_file(path) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"invalid config {path}: expected a mapping at the top level")
    parent = data.pop("extends", None)
    if parent is None:
        return data
    if not isinstance(parent, str):
        raise ConfigError(f"config {path}: `extends` must be the name of one config file "
                          f"(a string), not a {type(parent).__name__}")
    if not parent.strip():
        raise ConfigError(f"config {path}: `extends` is empty")
    if not (path.parent / parent).is_file():
        raise ConfigError(f"config {path}: `extends` file {parent} not found "
                          f"(looked for {path.parent / parent})")
    return deep_merge(read_yaml(path.parent / parent, seen + (path.resolve(),)), data)


# --- credentials: refused wherever they appear in a config ---
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
    """Raise :class:`ConfigError` (one line) if ``data`` holds a
    credential anywhere; the message names the field(s), never the value."""
    found = find_credentials(data)
    if not found:
        return
    where, kind = found[0]
    more = f" (and {len(found) - 1} more field(s))" if len(found) > 1 else ""
    if where.endswith("api_key_env"):
        raise ConfigError(f"config {source}: {where} {kind}{more}")
    raise ConfigError(f"config {source}: {where} holds {kind}{more}; {HOW}")
