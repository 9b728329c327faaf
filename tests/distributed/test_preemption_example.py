"""examples/train_preemptible.py as a user runs it: preempted, run again, it finishes with the
loss of an uninterrupted run."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from tests.test_examples import EXAMPLES, run

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(300)]

SCRIPT = EXAMPLES / "train_preemptible.py"


def _finished(out: str) -> tuple[int, str]:
    found = re.search(r"finished 60 steps \(from step (\d+)\); loss ([\d.]+)", out)
    assert found is not None, out
    return int(found[1]), found[2]


def test_preempted_then_resumed_equals_uninterrupted(tmp_path: Path) -> None:
    preempted = run(sys.executable, SCRIPT, "--run-dir", tmp_path / "a", "--preempt-at", "25",
                    stderr=True)  # fmt: skip
    assert "every rank stops after step 30" in preempted
    assert "finished" not in preempted
    assert [p.name for p in (tmp_path / "a").iterdir()] == ["step-000000030.pt"]
    resumed = _finished(run(sys.executable, SCRIPT, "--run-dir", tmp_path / "a"))
    straight = _finished(run(sys.executable, SCRIPT, "--run-dir", tmp_path / "b"))
    assert resumed == (30, straight[1])
    assert straight[0] == 0


def test_help_shows_the_whole_description() -> None:
    out = run(sys.executable, SCRIPT, "--help", timeout=60)
    assert "survives a preemption" in out and "See docs/preemption.md." in out
