"""The candidate ranker's scores (``scores_all_data.pkl`` of the Mind2Web release), read
without running anything the file asks for.

Format (``src/candidate_generation`` of the release)::

    {"scores": {sid: {backend_node_id: float}}, "ranks": {sid: {backend_node_id: int}}}

with ``sid = f"{annotation_id}_{action_uid}"`` and 0-based ranks over positives and
negatives together. The pickle is unpickled by a restricted unpickler: dicts (also
``collections.defaultdict``, as the release's ranker writes them), lists and numbers
(also NumPy scalars) only. A file that names any other global — the way a crafted
pickle runs code — is refused before that global is loaded.

Bounds (a crafted pickle must not cost more than its size): the file is at most
:data:`MAX_FILE_BYTES`; the allowed globals are wrappers that refuse arguments which
copy (``dict(d)``, ``defaultdict(dict, d)``: a table memo-shared 40,000 times would be
copied 40,000 times) or are not numeric NumPy scalars; a per-step table shared by many
steps is converted once (the steps share the result); a bad value is echoed by
:func:`~edv_ray.envs.bounded_load.brief` (≤ 200 characters, a container by its type).
"""

from __future__ import annotations

import operator
import pickle
from dataclasses import dataclass
from numbers import Real
from pathlib import Path
from typing import Any

from edv_ray.envs.bounded_load import GiB, brief, check_size
from edv_ray.envs.errors import BenchmarkDataError

SCORES_FILE = "scores_all_data.pkl"
FORMAT = ('{"scores": {sid: {backend_node_id: float}}, '
          '"ranks": {sid: {backend_node_id: int}}}')
MAX_FILE_BYTES = 8 * GiB  # the release's file is a few hundred MB
_NUMERIC_DTYPES = {f"{order}{kind}{size}" for order in ("", "<", ">", "=") for kind in "iuf"
                   for size in (1, 2, 4, 8)} | {"b1", "?"}


class _Refused(Exception):
    pass


class _BadCall(Exception):
    pass


class _Factory:
    """``dict`` / ``list`` / ``int`` / ``float`` as a pickle may name them: a
    defaultdict's factory, or called without arguments (never to copy a shared table)."""

    def __init__(self, kind: type):
        self.kind = kind

    def __call__(self, *args: Any) -> Any:
        if args:
            raise _BadCall(f"{self.kind.__name__}(…) from arguments (a copy of another table)")
        return self.kind()


def _mapping(*args: Any) -> dict:
    """``defaultdict(factory)`` / ``OrderedDict()``: read as a plain dict (its items follow)."""
    if len(args) > 1 or (args and not (args[0] is None or isinstance(args[0], _Factory))):
        raise _BadCall("a dict from arguments (a copy of another table)")
    return {}


def _dtype(name: Any, *flags: Any) -> Any:
    import numpy as np

    if not isinstance(name, str) or name not in _NUMERIC_DTYPES or \
            not all(isinstance(f, bool) for f in flags) or len(flags) > 2:
        raise _BadCall(f"numpy.dtype({brief(name, 40)}), not a number type")
    return np.dtype(name, *flags)


def _scalar(dtype: Any, data: Any = None) -> Any:
    import numpy as np

    if not (isinstance(dtype, np.dtype) and dtype.kind in "biuf" and isinstance(data, bytes)
            and len(data) == dtype.itemsize):
        raise _BadCall("a NumPy scalar that is not one number")
    return np.frombuffer(data, dtype=dtype)[0]


def _encode(text: Any, encoding: Any = "utf-8") -> bytes:
    if not (isinstance(text, str) and encoding in ("latin1", "latin-1")):
        raise _BadCall("_codecs.encode other than a NumPy scalar's latin1 bytes")
    return text.encode("latin1")


_SAFE_GLOBALS: dict[tuple[str, str], Any] = {
    (module, kind.__name__): _Factory(kind)
    for module in ("builtins", "__builtin__")
    for kind in (dict, list, int, float)
} | {
    ("collections", "defaultdict"): _mapping, ("collections", "OrderedDict"): _mapping,
    ("numpy", "dtype"): _dtype,
    ("numpy.core.multiarray", "scalar"): _scalar, ("numpy._core.multiarray", "scalar"): _scalar,
    ("_codecs", "encode"): _encode,  # how protocol 2 spells the bytes of a NumPy scalar
}


def _plain(name: str) -> str:
    """A global's name as it may be echoed: 80 characters, control characters escaped."""
    return repr(str(name)[:80])[1:-1]


class _ScoresUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _SAFE_GLOBALS:
            raise _Refused(f"{_plain(module)}.{_plain(name)}")
        return _SAFE_GLOBALS[module, name]

    def persistent_load(self, pid: Any) -> Any:
        raise _Refused("a persistent id")


@dataclass(frozen=True)
class RankerScores:
    scores: dict[str, dict[str, float]]
    ranks: dict[str, dict[str, int]]


def _key(path: Path, where: str, key: Any) -> str:
    """A step id or backend_node_id: a string (or a plain integer, as some rankers write)."""
    if isinstance(key, str):
        return key
    if isinstance(key, int) and not isinstance(key, bool) and key.bit_length() <= 64:
        return str(key)
    raise BenchmarkDataError(f"{path}: {where} has the key {brief(key)} "
                             f"({type(key).__name__}), expected a string id; expected {FORMAT}")


def _table(path: Path, data: dict, key: str, convert) -> dict[str, dict[str, Any]]:
    table = data.get(key, {})
    if not isinstance(table, dict):
        raise BenchmarkDataError(f"{path}: {key!r} is {type(table).__name__}, expected a dict; "
                                 f"expected {FORMAT}")
    out: dict[str, dict[str, Any]] = {}
    done: dict[int, dict[str, Any]] = {}  # id(per-step table) → converted: shared ones once
    for sid, per_step in table.items():
        sid = _key(path, key, sid)
        if not isinstance(per_step, dict):
            raise BenchmarkDataError(f"{path}: {key}[{brief(sid)}] is {type(per_step).__name__}, "
                                     f"expected a dict; expected {FORMAT}")
        if id(per_step) not in done:
            done[id(per_step)] = _per_step(path, f"{key}[{brief(sid)}]", per_step, convert)
        out[sid] = done[id(per_step)]
    return out


def _per_step(path: Path, where: str, per_step: dict, convert) -> dict[str, Any]:
    out = {}
    for c, v in per_step.items():
        c = _key(path, where, c)
        try:
            out[c] = convert(v)
        except (TypeError, ValueError, OverflowError):
            raise BenchmarkDataError(
                f"{path}: {where}[{brief(c)}] is {brief(v)} ({type(v).__name__}), expected "
                f"{'an integer rank' if where.startswith('ranks') else 'a number'}") from None
    return out


def _rank(value: Any) -> int:
    if isinstance(value, bool):
        raise TypeError("a bool is not a rank")
    return operator.index(value)  # ints and NumPy integers; floats are refused


def _score(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError("not a number")
    return float(value)


def load_scores(path: str | Path) -> RankerScores:
    path = Path(path)
    if not path.is_file():
        raise BenchmarkDataError(f"candidate-ranker scores file {path} not found; expected "
                                 f"{SCORES_FILE} = {FORMAT}")
    check_size(path, MAX_FILE_BYTES, "a candidate-ranker scores file")
    try:
        with path.open("rb") as fh:
            data = _ScoresUnpickler(fh).load()
    except _Refused as err:
        raise BenchmarkDataError(
            f"{path} refused: it asks to load {err}, and a ranker-scores file may hold only "
            f"dicts, lists and numbers ({FORMAT}); nothing from it was run") from None
    except _BadCall as err:
        raise BenchmarkDataError(
            f"{path} refused: it builds {err}, and a ranker-scores file may hold only dicts, "
            f"lists and numbers ({FORMAT}); nothing from it was run") from None
    except Exception as err:  # noqa: BLE001 - any unpickling failure is a data error
        raise BenchmarkDataError(f"{path} is not a readable pickle ({type(err).__name__}: "
                                 f"{_plain(str(err))}); expected {SCORES_FILE} from the "
                                 "Mind2Web release") from None
    if not (isinstance(data, dict) and "ranks" in data):
        raise BenchmarkDataError(f"{path} must be a dict with keys 'scores' and 'ranks' "
                                 f"({FORMAT})")
    return RankerScores(scores=_table(path, data, "scores", _score),
                        ranks=_table(path, data, "ranks", _rank))
