"""A backend registered with ``torch.distributed.Backend.register_backend`` under a new name
(tests/distributed/plugin_backend.py: a creator returning ``ProcessGroupGloo``) runs with
``idist.spawn(name, ...)`` and ``idist.initialize(name)`` under torchrun, on 2 real processes.

Each run is its own Python process: a registration cannot be undone, and this test session's
other tests must not see the new name among the known backends.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.distributed.launch_env import launcher_free_env

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(240)]

REPO = Path(__file__).resolve().parents[2]
SCRIPT = str(REPO / "tests/distributed/plugin_backend_script.py")


def _check(reports: list[dict[str, Any]]) -> None:
    assert [r["rank"] for r in reports] == [0, 1]
    for r in reports:
        assert (r["backend"], r["torch_backend"]) == ("wrappedgloo", "wrappedgloo")
        assert (r["model"], r["world_size"], r["device"]) == ("native-dist", 2, "cpu")
        assert r["sum"] == [3.0] and r["max"] == 1
        assert r["gathered"] == ["r0", "r1"]
        assert r["broadcast"] == [0.0, 2.0, 4.0], "rank 1's tensor"
        assert r["object"] == {"from": 0}


def test_spawn_runs_a_registered_backend(tmp_path: Path) -> None:
    out = tmp_path / "reports.json"
    proc = subprocess.run(
        [sys.executable, SCRIPT, "spawn", str(out)],
        cwd=REPO, env=launcher_free_env(), capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    _check(json.loads(out.read_text()))


def test_initialize_runs_a_registered_backend_under_torchrun(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         SCRIPT, "initialize", str(tmp_path)],
        cwd=REPO, env=launcher_free_env(), capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    reports = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    _check(reports)
    assert {r["after_finalize"] for r in reports} == {"serial"}
