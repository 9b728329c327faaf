"""The first line of a hang's error names the rank at fault, for real (issue 38, item 2):
3 gloo ranks, rank 2 stuck in Python (hang_targets.py, ``sleep``) while ranks 0 and 1 wait
in the fourth all-reduce.

- under ``spawn``: `WorkerFailedError`'s first line is the verdict's headline, and the
  victim's traceback that follows keeps only the user's frames;
- under torchrun: torchrun's summary, the last thing it prints, shows the headline in its
  "Root Cause" (the error file the victims write);
- the stack reports leave out distbridge's own daemon threads.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import distbridge as idist
from distbridge._frames import PACKAGE
from distbridge.errors import WorkerFailedError
from distbridge.reliability.hang.stacks import format_stacks
from tests.distributed import hang_targets as targets
from tests.distributed.hang_checks import site
from tests.ports import free_port

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(180)]

REPO = Path(__file__).resolve().parents[2]
HEADLINE = (
    f"rank 2 of 3 is stuck at {site('stuck')} in stuck_here; ranks 0, 1 wait in all_reduce #4 "
    f"({site('fourth')})."
)


def test_the_first_line_of_a_spawn_hang_names_the_stuck_rank(tmp_path: Path) -> None:
    with pytest.raises(WorkerFailedError) as info:
        idist.spawn("gloo", targets.spawned, args=(str(tmp_path), "sleep"), nproc_per_node=3,
                    timeout=5, job_timeout=150)  # fmt: skip

    text = str(info.value)
    assert text.splitlines()[0] == HEADLINE, text
    assert text.splitlines()[1].startswith(f"Worker rank {info.value.rank} "), text
    # the victim's traceback: its own frames only (the whole one stays on the error)
    where = text.split(f"Where rank {info.value.rank} raised it, in your code")[1]
    assert f'{targets.__file__}", line ' in where, text
    assert f'File "{PACKAGE}' not in text, text
    assert f'File "{PACKAGE}' in info.value.worker_traceback


def test_torchruns_summary_names_the_stuck_rank(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHELASTIC_", "OMPI_"))}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "src"), env.get("PYTHONPATH", "")])
    env["OMP_NUM_THREADS"] = "1"
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "3",
        "--master-port", str(free_port()), targets.__file__, str(tmp_path), "sleep",
    ]  # fmt: skip
    done = subprocess.run(
        command, cwd=REPO, env=env, capture_output=True, text=True, timeout=150, check=False
    )
    assert done.returncode != 0, done.stdout + done.stderr
    summary = done.stderr.rsplit("Root Cause (first observed failure):", 1)
    assert len(summary) == 2, done.stderr
    root_cause = re.sub(r"\s+", " ", summary[1])
    assert f"traceback : {HEADLINE}" in root_cause, done.stderr


def test_stack_reports_leave_out_distbridges_own_threads() -> None:
    stop = threading.Event()
    ours = threading.Thread(target=stop.wait, name="distbridge-reporter", daemon=True)
    users = threading.Thread(target=stop.wait, name="loader", daemon=True)
    ours.start()
    users.start()
    try:
        text = format_stacks()
    finally:
        stop.set()
    assert f"Thread {users.ident:#018x}" in text, text
    assert f"{ours.ident:#018x}" not in text, text
