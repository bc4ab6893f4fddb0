"""Errors shared by the benchmark adapters (no heavy imports: safe everywhere)."""

from __future__ import annotations


class BenchmarkDataError(ValueError):
    """A benchmark's data folder or file is missing or not in the official format.

    The message always names the path that was read and the files or fields that
    were expected there, so a user can fix the folder without reading code."""
