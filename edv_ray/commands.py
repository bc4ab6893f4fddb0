"""Commands we print or hand to a shell, built from argument lists.

A run folder, a config path or a sweep file is user input: a name with a space, ``;`` or
``$(…)`` must reach ``edv`` as one argument, never as shell syntax — Ray Jobs runs an
entrypoint through ``/bin/sh -c``, and a person pastes a printed hint into a shell. Every
command line is :func:`shlex.join` of its arguments. (Printing it through Rich still needs
``rich.markup.escape``: quoting does not protect ``[``.)
"""

from __future__ import annotations

import os
import shlex


def command(*argv: str | os.PathLike) -> str:
    """One shell-safe command line: each argument quoted as needed."""
    return shlex.join(str(a) for a in argv)


def resume_command(run_dir: str | os.PathLike, *options: str) -> str:
    """``edv run [OPTIONS] --resume RUN_DIR``, the folder quoted."""
    return command("edv", "run", *options, "--resume", run_dir)
