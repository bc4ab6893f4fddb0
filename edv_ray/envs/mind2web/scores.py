"""The candidate ranker's scores (``scores_all_data.pkl`` of the Mind2Web release), read
without running anything the file asks for.

Format (``src/candidate_generation`` of the release)::

    {"scores": {sid: {backend_node_id: float}}, "ranks": {sid: {backend_node_id: int}}}

with ``sid = f"{annotation_id}_{action_uid}"`` and 0-based ranks over positives and
negatives together. The pickle is unpickled by a restricted unpickler: dicts (also
``collections.defaultdict``, as the release's ranker writes them), lists and numbers
(also NumPy scalars) only. A file that names any other global — the way a crafted
pickle runs code — is refused before that global is loaded.
"""

from __future__ import annotations

import operator
import pickle
from dataclasses import dataclass
from numbers import Real
from pathlib import Path
from typing import Any

from edv_ray.envs.errors import BenchmarkDataError

SCORES_FILE = "scores_all_data.pkl"
FORMAT = ('{"scores": {sid: {backend_node_id: float}}, '
          '"ranks": {sid: {backend_node_id: int}}}')
_SAFE_GLOBALS = {
    (module, name)
    for module in ("builtins", "__builtin__")
    for name in ("dict", "list", "int", "float")
} | {
    ("collections", "defaultdict"), ("collections", "OrderedDict"),
    ("numpy", "dtype"), ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
    ("_codecs", "encode"),  # how protocol 2 spells the bytes of a NumPy scalar
}


class _Refused(Exception):
    pass


class _ScoresUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _SAFE_GLOBALS:
            raise _Refused(f"{module}.{name}")
        return super().find_class(module, name)

    def persistent_load(self, pid: Any) -> Any:
        raise _Refused("a persistent id")


@dataclass(frozen=True)
class RankerScores:
    scores: dict[str, dict[str, float]]
    ranks: dict[str, dict[str, int]]


def _table(path: Path, data: dict, key: str, convert) -> dict[str, dict[str, Any]]:
    table = data.get(key, {})
    if not isinstance(table, dict):
        raise BenchmarkDataError(f"{path}: {key!r} is {type(table).__name__}, expected a dict; "
                                 f"expected {FORMAT}")
    out: dict[str, dict[str, Any]] = {}
    for sid, per_step in table.items():
        if not isinstance(per_step, dict):
            raise BenchmarkDataError(f"{path}: {key}[{sid!r}] is {type(per_step).__name__}, "
                                     f"expected a dict; expected {FORMAT}")
        try:
            out[str(sid)] = {str(c): convert(v) for c, v in per_step.items()}
        except (TypeError, ValueError):
            bad = next((c, v) for c, v in per_step.items() if not _ok(convert, v))
            raise BenchmarkDataError(
                f"{path}: {key}[{sid!r}][{bad[0]!r}] is {bad[1]!r} ({type(bad[1]).__name__}), "
                f"expected {'an integer rank' if key == 'ranks' else 'a number'}") from None
    return out


def _ok(convert, value) -> bool:
    try:
        convert(value)
    except (TypeError, ValueError):
        return False
    return True


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
    try:
        with path.open("rb") as fh:
            data = _ScoresUnpickler(fh).load()
    except _Refused as err:
        raise BenchmarkDataError(
            f"{path} refused: it asks to load {err}, and a ranker-scores file may hold only "
            f"dicts, lists and numbers ({FORMAT}); nothing from it was run") from None
    except Exception as err:  # noqa: BLE001 - any unpickling failure is a data error
        raise BenchmarkDataError(f"{path} is not a readable pickle ({type(err).__name__}: "
                                 f"{err}); expected {SCORES_FILE} from the Mind2Web release") from None
    if not (isinstance(data, dict) and "ranks" in data):
        raise BenchmarkDataError(f"{path} must be a dict with keys 'scores' and 'ranks' "
                                 f"({FORMAT})")
    return RankerScores(scores=_table(path, data, "scores", _score),
                        ranks=_table(path, data, "ranks", _rank))
