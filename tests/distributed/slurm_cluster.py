"""A real SLURM cluster for tests: Debian's slurm-wlm, two fake nodes on this machine.

The cluster lives in a folder of its own (configuration, state, spool, logs), listens on
free ports, authenticates with ``auth/none`` (no munge daemon), and is stopped by the PIDs
it started. Nothing is installed here: where ``slurmctld`` is missing, the fixture skips
and names the package (``.ci/run`` installs it).

The two nodes are named by loopback addresses, ``127.0.0.1`` and ``127.0.0.2`` (node list
``127.0.0.[1-2]``): distbridge takes MASTER_ADDR from the first host of the node list, and
these names resolve without DNS or /etc/hosts entries, so nothing in the tests overrides it.
Job ids start at a random number whose derived MASTER_PORTs are free, so two test runs on
one machine do not share ports.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import random
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from distbridge.environments.base import derived_port
from distbridge.environments.slurm import job_key
from tests.ports import free_port

__all__ = ["NODES", "SlurmCluster", "slurm_cluster", "start_cluster"]

NODES = ("127.0.0.1", "127.0.0.2")
CPUS_PER_NODE = 2
_STARTUP_TIMEOUT = 30.0
_STOP_TIMEOUT = 15.0

_CONF = """\
ClusterName=distbridge
FirstJobId={first_job}
SlurmctldHost={host}(127.0.0.1)
SlurmUser={user}
SlurmdUser={user}
AuthType=auth/none
AuthInfo=cred_expire=20
CredType=cred/none
SlurmctldPort={ctld_port}
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool/%n
SlurmctldPidFile={d}/run/slurmctld.pid
SlurmdPidFile={d}/run/slurmd-%n.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
KillWait=5
{nodes}
PartitionName=debug Nodes={node_list} Default=YES MaxTime=INFINITE State=UP
"""
_NODE = (
    "NodeName={name} NodeHostname={host} NodeAddr=127.0.0.1 Port={port} "
    "CPUs={cpus} RealMemory=1000 State=UNKNOWN"
)


def _port_is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _first_job_id(jobs: int = 20) -> int:
    """A random first job id whose next ``jobs`` jobs' MASTER_PORTs (step 0) are free now."""
    for _ in range(100):
        first = random.randrange(1_000, 10_000_000)
        ports = {derived_port(job_key(str(first + i), 0)) for i in range(jobs)}
        if all(_port_is_free(port) for port in ports):
            return first
    raise RuntimeError("No run of free derived ports found; is this machine out of ports?")


@dataclass
class SlurmCluster:
    """A running controller and one slurmd per fake node, all rooted in ``folder``."""

    folder: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def conf(self) -> Path:
        return self.folder / "slurm.conf"

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """This process's environment with SLURM_CONF pointing at the cluster, plus ``extra``."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env["SLURM_CONF"] = str(self.conf)
        env.update(extra or {})
        return env

    def run(
        self,
        args: Sequence[str],
        *,
        timeout: float,
        extra_env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run a SLURM client command (srun, sbatch, squeue, ...) against this cluster."""
        return subprocess.run(
            list(args), env=self.env(extra_env), cwd=cwd, capture_output=True, text=True,
            timeout=timeout,
        )  # fmt: skip

    def job_state(self, job_id: str) -> str | None:
        """The job's state (PENDING, RUNNING, COMPLETED, ...); None once SLURM forgot the job."""
        out = self.run(["scontrol", "-o", "show", "job", job_id], timeout=10)
        for item in out.stdout.split():
            if item.startswith("JobState="):
                return item.split("=", 1)[1]
        return None

    def wait_job(self, job_id: str, timeout: float) -> str:
        """Poll until the job leaves PENDING/RUNNING/COMPLETING; return its final state."""
        deadline = time.monotonic() + timeout
        state = self.job_state(job_id)
        while state in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING"):
            if time.monotonic() > deadline:
                self.run(["scancel", job_id], timeout=10)
                raise TimeoutError(
                    f"SLURM job {job_id} still {state} after {timeout} s; cancelled."
                )
            time.sleep(0.2)
            state = self.job_state(job_id)
        return state or "UNKNOWN"

    def logs(self) -> str:
        """The daemons' log files, for failure messages."""
        parts = [f"== {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in self._logs()]
        return "\n".join(parts)

    def _logs(self) -> list[Path]:
        return sorted((self.folder / "log").glob("*.log"))

    def stop(self) -> None:
        """Cancel every job, then stop the slurmd daemons and the controller by their PIDs."""
        if self.processes and self.processes[0].poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.run(["scancel", "--full", "--partition", "debug"], timeout=10)
        for proc in reversed(self.processes):  # slurmd first, the controller last
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=_STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=_STOP_TIMEOUT)
        self.processes.clear()


def start_cluster(folder: Path, timeout: float = _STARTUP_TIMEOUT) -> SlurmCluster:
    """Write slurm.conf into ``folder``, start the daemons, wait until both nodes are idle.

    Raises:
        RuntimeError: a daemon died or the nodes were not idle within ``timeout`` seconds;
            the message carries the daemons' logs. Everything started is stopped first.
    """
    for sub in ("state", "spool", "run", "log"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    host = socket.gethostname().split(".")[0]
    nodes = "\n".join(
        _NODE.format(name=name, host=host, port=free_port(), cpus=CPUS_PER_NODE) for name in NODES
    )
    cluster = SlurmCluster(folder)
    cluster.conf.write_text(
        _CONF.format(
            host=host,
            user=getpass.getuser(),
            ctld_port=free_port(),
            first_job=_first_job_id(),
            d=folder,
            nodes=nodes,
            node_list=",".join(NODES),
        )
    )
    log = (folder / "log" / "daemons.out").open("wb")
    daemons = [["slurmctld", "-D", "-f", str(cluster.conf)]]
    daemons += [["slurmd", "-D", "-N", name, "-f", str(cluster.conf)] for name in NODES]
    try:
        for cmd in daemons:
            cluster.processes.append(
                subprocess.Popen(cmd, env=cluster.env(), stdout=log, stderr=subprocess.STDOUT)
            )
        _wait_idle(cluster, timeout)
    except BaseException:
        cluster.stop()
        raise
    finally:
        log.close()
    return cluster


def _wait_idle(cluster: SlurmCluster, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        dead = [p.args for p in cluster.processes if p.poll() is not None]
        if dead:
            raise RuntimeError(f"SLURM daemon exited during startup: {dead}\n{cluster.logs()}")
        out = cluster.run(["sinfo", "-h", "-N", "-o", "%N %T"], timeout=10)
        states = dict(line.split() for line in out.stdout.splitlines() if line.strip())
        if all(states.get(name) == "idle" for name in NODES):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"SLURM nodes not idle after {timeout} s: {states or out.stderr!r}\n"
                + cluster.logs()
            )
        time.sleep(0.1)


@pytest.fixture(scope="module")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """A running two-node SLURM cluster (2 CPUs per node) for the tests of one module."""
    if shutil.which("slurmctld") is None or shutil.which("srun") is None:
        pytest.skip("slurmctld is not installed (Debian package slurm-wlm; .ci/run installs it)")
    cluster = start_cluster(tmp_path_factory.mktemp("slurm"))
    try:
        yield cluster
    finally:
        cluster.stop()
