"""The test run says how long it takes and how far it is (tests/progress.py), and keeps
pytest's own output when another progress style is chosen."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests import progress

REPO = Path(__file__).resolve().parents[2]


def _pytest(*options: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *options,
         "tests/unit/test_messages.py"],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_each_file_line_ends_with_the_progress_and_the_elapsed_time() -> None:
    out = _pytest()
    assert progress.HEADER in out
    assert re.search(r"^tests/unit/test_messages\.py \.+ +\[100% \dm\d\ds\]$", out, re.M), out


def test_another_progress_style_is_left_alone() -> None:
    out = _pytest("-o", "console_output_style=count")
    assert re.search(r"^tests/unit/test_messages\.py \.+ +\[(\d+)/\1\]$", out, re.M), out


def test_the_clock() -> None:
    assert [progress._clock(s) for s in (0, 59.9, 61, 612)] == ["0m00s", "0m59s", "1m01s", "10m12s"]
