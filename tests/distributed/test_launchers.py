"""Real launchers start the processes; distbridge reads their environment.

Each launch runs ``launcher_script.py`` in every process: it records the rank queries before
``initialize("gloo")`` (from the launcher's variables alone), initializes from the
environment, checks the layout again and reduces for real. Every launch is bounded in time
and uses free ports only.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.distributed.launch_env import launcher_free_env
from tests.ports import free_port

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(300)]

REPO = Path(__file__).resolve().parents[2]
SCRIPT = str(REPO / "tests/distributed/launcher_script.py")
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]
LAUNCH_TIMEOUT = 240  # seconds for one launch (two cores shared by every process)
LAYOUT = ("rank", "local_rank", "world_size", "nproc_per_node", "nnodes", "node_rank")


def _run_all(commands: list[list[str]]) -> None:
    """Start every command at once; fail with their output if one fails or runs too long."""
    procs = [
        subprocess.Popen(cmd, cwd=REPO, env=launcher_free_env(), stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
        for cmd in commands
    ]  # fmt: skip
    outputs = []
    try:
        for proc in procs:
            outputs.append(proc.communicate(timeout=LAUNCH_TIMEOUT)[0])
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    for proc, cmd, out in zip(procs, commands, outputs, strict=True):
        assert proc.returncode == 0, f"{' '.join(cmd)} exited {proc.returncode}:\n{out[-4000:]}"


def _results(folder: Path, world: int) -> list[dict[str, Any]]:
    found = sorted(p.name for p in folder.glob("rank*.json"))
    assert found == sorted(f"rank{r}.json" for r in range(world)), found
    return [json.loads((folder / f"rank{r}.json").read_text()) for r in range(world)]


def _check_job(results: list[dict[str, Any]], launcher: str, nnodes: int, nproc: int) -> None:
    """Every rank saw the same layout before and after initialize, and reduced for real."""
    world = nnodes * nproc
    for rank, info in enumerate(results):
        before, after = info["before"], info["after"]
        assert info["launcher"] == launcher
        assert {k: before[k] for k in LAYOUT} == {k: after[k] for k in LAYOUT}, info
        assert after["rank"] == rank and after["world_size"] == world
        assert (after["nnodes"], after["nproc_per_node"]) == (nnodes, nproc)
        assert 0 <= after["local_rank"] < nproc and 0 <= after["node_rank"] < nnodes
        assert before["model"] == "serial" and after["model"] == "native-dist"
        assert before["rank_zero_only"] == (True if rank == 0 else None)
        assert "Call idist.initialize(backend) first" in before["collective_before_init"]
        assert after["sum"] == world * (world + 1) // 2
        assert after["gathered"] == [f"r{r}" for r in range(world)]
    places = {(i["after"]["node_rank"], i["after"]["local_rank"]) for i in results}
    assert len(places) == world, f"two ranks claim one (node, local rank): {places}"


def test_torchrun_two_static_nodes(tmp_path: Path) -> None:
    port = str(free_port())
    _run_all([
        [*TORCHRUN, "--nnodes", "2", "--node-rank", str(node), "--nproc-per-node", "2",
         "--master-addr", "127.0.0.1", "--master-port", port, SCRIPT, str(tmp_path)]
        for node in (0, 1)
    ])  # fmt: skip
    results = _results(tmp_path, 4)
    _check_job(results, "torchelastic", nnodes=2, nproc=2)
    # static node ranks: node n runs ranks 2n and 2n+1
    assert [(i["after"]["node_rank"], i["after"]["local_rank"]) for i in results] == [
        (0, 0), (0, 1), (1, 0), (1, 1)
    ]  # fmt: skip


def test_torchrun_two_nodes_with_c10d_rendezvous(tmp_path: Path) -> None:
    endpoint = f"127.0.0.1:{free_port()}"
    _run_all([
        [*TORCHRUN, "--nnodes", "2", "--nproc-per-node", "2", "--rdzv-backend", "c10d",
         "--rdzv-endpoint", endpoint, "--rdzv-id", f"job{os.getpid()}", SCRIPT, str(tmp_path)]
        for _ in (0, 1)
    ])  # fmt: skip
    results = _results(tmp_path, 4)
    _check_job(results, "torchelastic", nnodes=2, nproc=2)
    for info in results:  # node ranks are assigned by the rendezvous; ranks follow them
        after = info["after"]
        assert after["rank"] == 2 * after["node_rank"] + after["local_rank"]


needs_mpirun = pytest.mark.skipif(
    shutil.which("mpirun") is None, reason="Open MPI's mpirun is not installed (openmpi-bin)"
)
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe"]


@needs_mpirun
def test_mpirun_on_one_node_derives_the_rendezvous(tmp_path: Path) -> None:
    # No MASTER_ADDR / MASTER_PORT: every rank is on this node (127.0.0.1), and the port is
    # derived from Open MPI's job id. reinit: a second rendezvous on rank 0's kept store.
    _run_all([[*MPIRUN, "-np", "4", sys.executable, SCRIPT, str(tmp_path), "reinit"]])
    results = _results(tmp_path, 4)
    _check_job(results, "openmpi", nnodes=1, nproc=4)
    assert [i["after"]["local_rank"] for i in results] == [0, 1, 2, 3]
    assert {i["after"]["sum_again"] for i in results} == {100}
    (addr, port), *_ = {tuple(i["master"]) for i in results}
    assert len({tuple(i["master"]) for i in results}) == 1 and addr == "127.0.0.1"
    assert 20000 <= port < 30000


@needs_mpirun
def test_mpirun_host_list_with_exported_master(tmp_path: Path) -> None:
    # Open MPI counts localhost and 127.0.0.1 as this one node; MASTER_* travel with -x.
    port = str(free_port())
    _run_all([
        [*MPIRUN, "-H", "localhost:2,127.0.0.1:2", "-np", "4",
         "-x", "MASTER_ADDR=127.0.0.1", "-x", f"MASTER_PORT={port}",
         sys.executable, SCRIPT, str(tmp_path)]
    ])  # fmt: skip
    results = _results(tmp_path, 4)
    _check_job(results, "openmpi", nnodes=1, nproc=4)
    assert {tuple(i["master"]) for i in results} == {("127.0.0.1", int(port))}


FAKE_SSH = """#!/bin/sh
# Open MPI's rsh agent for hosts that are this machine under another address: drop ssh's
# options and the host name, run the daemon's command here.
while [ $# -gt 0 ]; do case "$1" in -*) shift ;; *) break ;; esac; done
shift
exec /bin/sh -c "$*"
"""


def _two_fake_nodes(tmp_path: Path) -> list[str]:
    """mpirun over two "hosts", 127.0.0.2 and 127.0.0.3: Open MPI does not count them as this
    machine, so it starts one daemon per host through the rsh agent (here a script that runs
    it locally), and the ranks see a real two-node layout (local size 2, two nodes)."""
    agent = tmp_path / "fake_ssh"
    agent.write_text(FAKE_SSH)
    agent.chmod(0o755)
    # rtc ^hwloc: two daemons on one machine race to write hwloc's shared topology, and
    # orted can crash in hwloc_shmem_topology_write (~1 run in 20 here); nothing binds anyway.
    return [*MPIRUN, "--mca", "plm_rsh_agent", str(agent), "--mca", "rtc", "^hwloc",
            "-H", "127.0.0.2:2,127.0.0.3:2",
            "-np", "4"]  # fmt: skip


@needs_mpirun
def test_mpirun_two_nodes_with_exported_master(tmp_path: Path) -> None:
    # Open MPI gives no node index: initialize() asks the peers, grouping ranks by their
    # node's daemon (the host name is the same for both "nodes" here).
    out = tmp_path / "out"
    out.mkdir()
    port = str(free_port())
    _run_all([[*_two_fake_nodes(tmp_path), "-x", "MASTER_ADDR=127.0.0.1",
               "-x", f"MASTER_PORT={port}", sys.executable, SCRIPT, str(out)]])  # fmt: skip
    results = _results(out, 4)
    _check_job(results, "openmpi", nnodes=2, nproc=2)
    assert [(i["after"]["node_rank"], i["after"]["local_rank"]) for i in results] == [
        (0, 0), (0, 1), (1, 0), (1, 1)
    ]  # fmt: skip


@needs_mpirun
def test_mpirun_two_nodes_without_master_says_what_to_export(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    command = [*_two_fake_nodes(tmp_path), sys.executable, SCRIPT, str(out)]
    env = launcher_free_env()
    proc = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=LAUNCH_TIMEOUT)  # fmt: skip
    assert proc.returncode != 0
    assert "MASTER_ADDR cannot be derived" in proc.stderr + proc.stdout
    assert "mpirun -x MASTER_ADDR=<host> -x MASTER_PORT=<port>" in proc.stderr + proc.stdout
    assert not list(out.glob("rank*.json"))


@pytest.mark.skipif(
    shutil.which("horovodrun") is None,
    reason="horovodrun is not installed here (`nox -s horovod` builds Horovod and runs this test)",
)
def test_horovodrun_gloo_initializes_native_gloo(tmp_path: Path) -> None:
    # horovodrun's Gloo controller sets HOROVOD_*; initialize("gloo") reads them (one host:
    # 127.0.0.1, a port derived from horovodrun's rendezvous port), then again after finalize.
    horovodrun = [str(shutil.which("horovodrun")), "-np", "4", "-H", "localhost:4", "--gloo"]
    _run_all([[*horovodrun, sys.executable, SCRIPT, str(tmp_path), "reinit"]])
    results = _results(tmp_path, 4)
    _check_job(results, "horovodrun", nnodes=1, nproc=4)
    assert {i["after"]["sum_again"] for i in results} == {100}
    assert {i["master"][0] for i in results} == {"127.0.0.1"}
