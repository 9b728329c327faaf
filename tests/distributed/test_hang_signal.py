"""The hang report on demand, for real: SIGUSR2 to the ranks of a hung torchrun job (3 gloo
ranks, ``DISTBRIDGE_HANG_DIR`` set) makes each write its report there, and ``python -m
distbridge why DIR`` names the rank at fault while the job still hangs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.distributed import hang_targets as targets
from tests.distributed.hang_checks import (
    STUCK_IN_PYTHON,
    assert_engine_lines,
    assert_rank_2_behind,
    one_line,
    wait_for,
)
from tests.distributed.process_checks import assert_gone
from tests.ports import free_port

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(180)]

REPO = Path(__file__).resolve().parents[2]


def test_sigusr2_writes_every_rank_report_for_why(tmp_path: Path) -> None:
    dumps = tmp_path / "dumps"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHELASTIC_", "OMPI_"))}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "src"), env.get("PYTHONPATH", "")])
    env["OMP_NUM_THREADS"] = "1"
    env["DISTBRIDGE_HANG_DIR"] = str(dumps)
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "3",
        "--master-port", str(free_port()), targets.__file__, str(tmp_path), "sleep",
    ]  # fmt: skip
    job = subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        wait_for(tmp_path / "started", 90)  # ranks 0, 1 enter the all-reduce that hangs
        time.sleep(targets.SETTLE_SECONDS + 0.5)  # rank 2 is in stuck_here
        pids = [int(p.read_text()) for p in sorted(tmp_path.glob("worker-*.pid"))]
        assert len(pids) == 3
        for path in dumps.glob("rank*.json"):  # the reporters' own files: the signal writes anew
            path.unlink()
        for pid in pids:
            os.kill(pid, signal.SIGUSR2)
        for rank in range(3):
            wait_for(dumps / f"rank{rank}.json", 5)
        why = [sys.executable, "-m", "distbridge", "why", str(dumps)]
        done = subprocess.run(why, capture_output=True, text=True, timeout=60, check=False)
        assert all(os.path.exists(f"/proc/{pid}") for pid in pids), "the signal ended a rank"
        output = job.communicate(timeout=120)[0]  # the 10 s timeout ends the job
    finally:
        if job.poll() is None:
            job.kill()
            job.communicate()
    assert done.returncode == 0, done.stderr
    text = one_line(done.stdout)
    assert_rank_2_behind(text, STUCK_IN_PYTHON)
    assert_engine_lines(text)  # the reports the signal wrote carry torch's flight recorder
    for rank in range(3):
        assert f"distbridge: rank {rank} wrote its hang report to {dumps}/rank{rank}.json" in output
    assert_gone(pids, timeout=5)
