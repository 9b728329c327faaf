"""Mistakes in the main script that only show once workers start, caught before they do.

A worker started with "spawn" or "forkserver" runs the main script again (as
``__mp_main__``) before its function: code fed on standard input has no file to run again,
and a script without an ``if __name__ == "__main__":`` guard calls ``spawn`` again in every
worker (only the worker can tell; the parent's `WorkerFailedError` gives the same advice).
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from multiprocessing import process

from distbridge.errors import DistributedError

__all__ = ["REIMPORT_EXIT_CODE", "REIMPORT_PROBLEM", "check_main_module", "main_is_interactive"]

#: Exit code of a worker that called spawn while importing the main script.
REIMPORT_EXIT_CODE = 86

#: The problem and the fix, said by the worker and by the parent's WorkerFailedError.
REIMPORT_PROBLEM = (
    'the main script has no `if __name__ == "__main__":` guard, so each worker started with '
    "'spawn' or 'forkserver' runs the spawn call again when it imports the script: put the "
    "spawn call (and everything that should run once) under that guard, or pass "
    'start_method="fork" where forking is safe'
)


def _main_kind() -> str:
    """How the main script runs: "module" (``python -m``: workers import it by name),
    "interactive" (no file: a notebook, IPython, ``python -c``), "stdin", "missing" (its
    file is not there) or "file"."""
    main = sys.modules.get("__main__")
    if main is None or getattr(main, "__spec__", None) is not None:
        return "module"
    path = getattr(main, "__file__", None)
    if not isinstance(path, str):
        return "interactive"
    if path == "<stdin>":
        return "stdin"
    found = os.path.isfile(os.path.join(getattr(process, "ORIGINAL_DIR", None) or "", path))
    return "file" if found else "missing"


def main_is_interactive() -> bool:
    """Whether ``__main__`` has no file a worker could run again and no module it could
    import (a notebook, an IPython shell, ``python -c``): its functions go by value."""
    return _main_kind() in ("interactive", "missing")


def check_main_module(start_method: str) -> None:
    """Stop a spawn that would fail in every worker because of how the main script runs:
    `DistributedError` when the script was read from standard input (or its file is gone),
    so workers started with "spawn" or "forkserver" cannot run it again.

    In a worker that is importing the main script (it has no ``__main__`` guard), print why
    to stderr and end the process with exit code `REIMPORT_EXIT_CODE` (not SystemExit: a
    "forkserver" child turns every exception into exit code 1)."""
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        print(f"distbridge: spawn was called while this worker was starting: {REIMPORT_PROBLEM}.",
              file=sys.stderr, flush=True)  # fmt: skip
        os._exit(REIMPORT_EXIT_CODE)
    kind = "file" if start_method == "fork" else _main_kind()
    if kind in ("stdin", "missing"):
        main = (
            "was read from standard input, which"
            if kind == "stdin"
            else f"{sys.modules['__main__'].__file__!r} is not a file, so"
        )
        raise DistributedError(
            f"The main script {main} workers started with start_method={start_method!r} cannot "
            "read again to re-import it: save the code to a file and run `python file.py`, or "
            'pass start_method="fork" where forking is safe (no CUDA and no threads started '
            "before spawn)."
        )
