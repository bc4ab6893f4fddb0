"""Where benchmark log records go in a run: all to the run folder, to the console only
what a reader needs.

τ²-bench logs through loguru: every step at INFO, and some domain tools warn about their
own implementation on every call (airline ``cancel_reservation``: "Seats release not
implemented for cancellation!!!", once per cancellation — dozens of times in a small
run). :func:`route_benchmark_logs`, called in every episode worker before the benchmark
is imported, sends

* every record at ``LOGURU_LEVEL`` (default WARNING) or above to
  ``<run>/logs/benchmark.log`` (time, level, process, source, message);
* to the console (stderr): errors always; a *tool-implementation notice* — a warning
  logged by a benchmark domain's tools module (``tau2.domains.<domain>.tools``) — once
  per run (a marker file under ``<run>/logs/notices/`` decides across worker processes;
  once per process without a run folder), with a pointer to the log file; every other
  warning as it comes. The import notices of :data:`edv_ray.envs.protocol.IMPORT_NOTICES`
  never reach the console.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import threading
from pathlib import Path
from typing import Any, TextIO

from edv_ray.envs.protocol import not_a_notice

TOOL_MODULE = re.compile(r"^tau2\.domains\.[^.]+\.tools$")
LOG_FILE = "benchmark.log"
_ERROR = 40  # loguru's ERROR level number


def is_tool_notice(record: dict[str, Any]) -> bool:
    """A below-error record of a benchmark domain's tools module."""
    return record["level"].no < _ERROR and bool(TOOL_MODULE.match(record["name"] or ""))


class OncePerRun:
    """``first(message)``: True for the first sighting of a message in this run (marker
    files under ``folder``, created exclusively, so one process wins) or, without a
    folder, in this process."""

    def __init__(self, folder: Path | None):
        self.folder = folder
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def first(self, message: str) -> bool:
        key = hashlib.sha1(message.encode("utf-8", "replace")).hexdigest()[:16]
        with self._lock:
            if key in self._seen:
                return False
            self._seen.add(key)
        if self.folder is None:
            return True
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            os.close(os.open(self.folder / key, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return False
        except OSError:  # an unwritable run folder: fall back to once per process
            return True
        return True


def route_benchmark_logs(run_dir: str | Path | None = None,
                         console: TextIO | None = None) -> Path | None:
    """Replace loguru's sinks as described in the module docstring; returns the log
    file (None without a run folder). ``console`` defaults to ``sys.stderr``."""
    try:
        from loguru import logger
    except ImportError:
        return None
    level = os.environ.get("LOGURU_LEVEL", "WARNING")
    logs = Path(run_dir) / "logs" if run_dir is not None else None
    path = logs / LOG_FILE if logs is not None else None
    once = OncePerRun(logs / "notices" if logs is not None else None)
    where = f"; every occurrence: {path}" if path is not None else ""

    def show(record) -> bool:
        return not_a_notice(record) and (not is_tool_notice(record)
                                         or once.first(record["message"]))

    def fmt(record) -> str:
        tail = (f" [benchmark tool notice, shown once{where}]".replace("{", "{{").replace("}", "}}")
                if is_tool_notice(record) else "")
        return ("{time:HH:mm:ss} | {level: <7} | {name}:{function}:{line} - {message}"
                + tail + "\n{exception}")

    logger.remove()
    logger.add(console or sys.stderr, level=level, filter=show, format=fmt)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        logger.add(path, level=level, mode="a", encoding="utf-8",
                   format="{time:YYYY-MM-DD HH:mm:ss.SSS} | {level: <7} | pid {process} | "
                          "{name}:{function}:{line} - {message}")
    return path
