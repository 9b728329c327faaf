"""Elapsed time on pytest's progress, for a run that takes minutes: each file's line ends
with ``[ 45% 3m12s]`` instead of ``[ 45%]``, and the header says how long the run takes
and how to run the fast subset. Used by ``tests/conftest.py``.

It wraps a private method of pytest's terminal reporter; when that method is missing or
another progress style is chosen (``-o console_output_style=count``, ``-v``), pytest's
own output stays as it is.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

#: What README says; measured with ``python -m pytest`` on 2 cores (see README, Quick start).
HEADER = (
    "distbridge: the whole suite takes about 30 minutes on 2 cores (it starts real processes); "
    "-m 'not distributed' runs the fast subset (about two minutes)"
)


def _clock(seconds: float) -> str:
    minutes, seconds = divmod(int(seconds), 60)
    return f"{minutes}m{seconds:02d}s"


def show_elapsed_time(config: pytest.Config) -> None:
    """Make the terminal reporter end each progress mark with the time since the start."""
    reporter: Any = config.pluginmanager.get_plugin("terminalreporter")
    original = getattr(reporter, "_get_progress_information_message", None)
    if original is None or getattr(reporter, "_show_progress_info", None) != "progress":
        return
    start = time.monotonic()

    def with_elapsed_time() -> str:
        message = str(original())
        if not message.endswith("]"):
            return message
        return f"{message[:-1]} {_clock(time.monotonic() - start)}]"

    reporter._get_progress_information_message = with_elapsed_time
