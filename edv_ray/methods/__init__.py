"""Methods by name (configs pick behaviour by string): each runs its stages on a RunContext."""

from __future__ import annotations

from typing import Callable

from edv_ray.methods.edv import run_edv
from edv_ray.methods.no_memory import run_no_memory

METHODS: dict[str, Callable] = {
    "no_memory": run_no_memory,
    "edv": run_edv,
}
