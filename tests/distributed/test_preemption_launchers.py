"""Preemption under real launchers: torchrun's agent or mpirun signalled, and a 2-node SLURM
job in which one node's task gets USR2, is requeued once and resumes to an uninterrupted
run's end.

The ranks run tests/distributed/preemption_targets.py as a script (gloo, initialized from the
launcher's variables); the SLURM cluster is the suite's (tests/distributed/slurm_cluster.py,
skipped where slurm-wlm is not installed).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import distbridge as idist
from tests.distributed.preemption_targets import records, train
from tests.distributed.slurm_cluster import SlurmCluster, slurm_cluster
from tests.ports import free_port

__all__ = ["slurm_cluster"]  # the fixture, imported to be found by pytest

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(300)]

SCRIPT = Path(__file__).with_name("preemption_targets.py")
REPO = SCRIPT.parents[2]
_LAUNCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _LAUNCH_VARS}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "src"), env.get("PYTHONPATH", "")])
    return env


def _wait_for(paths: list[Path], proc: subprocess.Popen[str], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not all(p.exists() for p in paths):
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline, f"{paths} not there after {timeout} s"
        time.sleep(0.1)


TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", "-x", "PYTHONPATH"]
LAUNCHERS = {
    "torchrun SIGTERM": ("SIGTERM", TORCHRUN),
    "torchrun SIGUSR2": ("SIGUSR2", [*TORCHRUN, "--signals-to-handle", "SIGTERM,SIGUSR2"]),
    "mpirun SIGUSR2": ("SIGUSR2", [*MPIRUN, sys.executable]),  # Open MPI forwards USR1/USR2
}


@pytest.mark.parametrize("case", LAUNCHERS)
def test_launcher_signalled(tmp_path: Path, case: str) -> None:
    """The launcher forwards the signal to both ranks (torchrun's agent USR2 only when told
    to); they stop at one step and write one complete checkpoint, before torchrun's kill."""
    signame, launcher = LAUNCHERS[case]
    if shutil.which(launcher[0]) is None:
        pytest.skip(f"{launcher[0]} is not installed")
    port = ["--master-port", str(free_port())] if launcher[0] == sys.executable else []
    command = [*launcher, *port, str(SCRIPT), str(tmp_path), "100000", "--sleep", "0.01",
               "--check-every", "10"]  # fmt: skip
    proc = subprocess.Popen(
        command, cwd=REPO, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        _wait_for([tmp_path / "training0", tmp_path / "training1"], proc)
        proc.send_signal(signal.Signals[signame])
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    stops = [records(tmp_path, rank)[0]["stop"] for rank in (0, 1)]
    assert stops[0] is not None and stops[0] == stops[1], err[-3000:]
    assert [p.name for p in tmp_path.glob("*.pt*")] == [f"step-{stops[0]:09d}.pt"]
    assert err.count(f"every rank stops after step {stops[0]}") == 2
    assert ("torchrun forwards only" in err) == (case == "torchrun SIGTERM")
    assert idist.resume(tmp_path, torch.nn.Linear(4, 1))["step"] == stops[0]


def test_the_hang_verdict_yields_sigterm_to_the_guard_and_gets_it_back(tmp_path: Path) -> None:
    """Under torchrun, initialize installs the hang verdict's SIGTERM handler (which ends the
    process); inside the guard SIGTERM is the guard's, after it the verdict's again."""
    command = [*TORCHRUN, "--master-port", str(free_port()), str(SCRIPT), str(tmp_path), "3"]
    done = subprocess.run(command, cwd=REPO, env=_env(), capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    verdict, guard = "distbridge.reliability.hang.signals", "distbridge.preemption"
    for rank in (0, 1):
        assert records(tmp_path, rank)[0]["sigterm"] == [verdict, guard, verdict]


@pytest.mark.skipif(
    importlib.util.find_spec("horovod") is None, reason="horovod is not installed: nox -s horovod"
)
def test_horovodrun_one_rank_signalled(tmp_path: Path) -> None:
    """Under horovodrun on the Horovod backend, rank 1 sends itself SIGUSR2 after step 7: both
    ranks stop at step 10 with one complete checkpoint, and a second run resumes there."""
    launcher = str(Path(sys.executable).with_name("horovodrun"))
    command = [launcher, "-np", "2", "-H", "localhost:2", "--gloo", sys.executable, str(SCRIPT),
               str(tmp_path), "20", "--kill-at", "7", "--backend", "horovod"]  # fmt: skip
    env = dict(_env(), OMP_NUM_THREADS="1")
    for run in (0, 1):
        done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=180)  # fmt: skip
        assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
        first = [records(tmp_path, rank)[run] for rank in (0, 1)]
        if run == 0:
            assert [r["stop"] for r in first] == [10, 10]
            assert [p.name for p in tmp_path.glob("*.pt*")] == ["step-000000010.pt"]
        else:
            assert [r["start"] for r in first] == [10, 10] and first[0]["stop"] is None


@pytest.mark.timeout(420)
def test_slurm_requeue_once_and_resume(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    """2 nodes, one task each; the task on the second node sends itself USR2 after step 7.
    Both stop at step 10, checkpoint once, rank 0 requeues the job; its second run resumes
    from step 10 and ends with the losses and parameters of an uninterrupted spawn run."""
    straight = tmp_path / "straight"
    straight.mkdir()
    idist.spawn("gloo", train, args=(str(straight), 30), nproc_per_node=2, job_timeout=150)
    run = tmp_path / "run"
    run.mkdir()
    job = tmp_path / "job.sh"
    job.write_text(
        "#!/bin/bash\n"
        f"srun -O --kill-on-bad-exit=1 {sys.executable} {SCRIPT} {run} 30 --kill-at 7\n"
    )
    out = tmp_path / "job.out"
    submitted = slurm_cluster.run(
        ["sbatch", "--parsable", "-N2", "-n2", "-O", "--requeue", "--open-mode=append",
         "-o", str(out), str(job)],
        timeout=30, cwd=REPO, extra_env={"PYTHONPATH": f"{REPO}:{REPO / 'src'}"},
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip().split(";")[0]
    # SLURM starts a requeued job once its old credential expired (AuthInfo=cred_expire: 20 s in
    # slurm_cluster.py, 120 s by default); a job started earlier by hand (scontrol update
    # StartTime=now) fails: "credential revoked".
    state = slurm_cluster.wait_job(job_id, timeout=330)
    log = out.read_text(errors="replace")
    assert state == "COMPLETED", f"job {job_id} {state}:\n{log[-4000:]}\n{slurm_cluster.logs()}"
    assert _field(slurm_cluster, job_id, "Restarts") == "1"
    assert log.count(f"requeued SLURM job {job_id}") == 1

    assert sorted(p.name for p in run.glob("*.pt*")) == ["step-000000010.pt"]
    for rank in (0, 1):
        first, second = records(run, rank)
        reference = records(straight, rank)[0]
        assert (first["start"], first["stop"], second["start"], second["stop"]) == (0, 10, 10, None)
        assert {**first["losses"], **second["losses"]} == reference["losses"]
        assert second["params"] == reference["params"]


def _field(cluster: SlurmCluster, job_id: str, name: str) -> str | None:
    shown = cluster.run(["scontrol", "-o", "show", "job", job_id], timeout=10).stdout.split()
    return next((item.split("=", 1)[1] for item in shown if item.startswith(f"{name}=")), None)
