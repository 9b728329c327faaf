"""SLURM for real: srun and sbatch on a two-node cluster started by the fixture.

Every task runs ``tests/distributed/slurm_script.py``, which calls ``idist.initialize("gloo")``
with nothing but the backend, so rank, layout, MASTER_ADDR and MASTER_PORT all come from
the variables SLURM sets. Each task writes one JSON file that the test reads.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from distbridge.environments.base import derived_port
from distbridge.environments.slurm import job_key
from tests.distributed.slurm_cluster import NODES, SlurmCluster, slurm_cluster
from tests.ports import free_port

__all__ = ["slurm_cluster"]  # the fixture, imported to be found by pytest

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(240)]

SCRIPT = Path(__file__).with_name("slurm_script.py")
REPO = SCRIPT.parents[2]
STEP_TIMEOUT = 150  # seconds for one srun step: four processes importing torch on 2 cores


def _srun(cluster: SlurmCluster, out: Path, *options: str) -> list[dict[str, Any]]:
    """Run the script as one srun step; return each rank's JSON in rank order."""
    proc = cluster.run(
        ["srun", "-O", "--kill-on-bad-exit=1", *options, sys.executable, str(SCRIPT), str(out)],
        timeout=STEP_TIMEOUT,
        cwd=REPO,
    )
    assert proc.returncode == 0, f"{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return _results(out)


def _results(out: Path) -> list[dict[str, Any]]:
    files = sorted(out.glob("rank*.json"), key=lambda p: int(p.stem[4:]))
    return [json.loads(f.read_text()) for f in files]


def _check_common(infos: list[dict[str, Any]], world: int) -> None:
    """What every step checks: ranks, SLURM's own view, the derived address and port."""
    assert [i["rank"] for i in infos] == list(range(world))
    job = infos[0]["slurm"]["SLURM_JOB_ID"]
    for i in infos:
        slurm = i["slurm"]
        assert i["launcher"] == "slurm"
        assert i["world_size"] == i["before"]["world_size"] == world
        assert i["rank"] == i["before"]["rank"] == int(slurm["SLURM_PROCID"])
        assert i["local_rank"] == i["before"]["local_rank"] == int(slurm["SLURM_LOCALID"])
        assert i["node_rank"] == i["before"]["node_rank"] == int(slurm["SLURM_NODEID"])
        assert i["nnodes"] == i["before"]["nnodes"] == 2
        assert i["nproc_per_node"] == i["before"]["nproc_per_node"]
        assert i["before"]["rank_zero_only"] == (True if i["rank"] == 0 else None)
        # The node this rank really ran on is the node_rank-th of the node list.
        assert slurm["SLURMD_NODENAME"] == NODES[i["node_rank"]]
        assert i["master_addr"] == NODES[0]  # from SLURM_JOB_NODELIST=127.0.0.[1-2]
        assert i["master_port"] == derived_port(job_key(job, int(slurm["SLURM_STEP_ID"])))
        assert i["sum"] == world * (world + 1) // 2
        assert i["nodes"] == [NODES[j["node_rank"]] for j in infos]
        assert i["warnings"] == []


def test_srun_block(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    infos = _srun(slurm_cluster, tmp_path, "-N2", "-n4")
    _check_common(infos, 4)
    assert [i["node_rank"] for i in infos] == [0, 0, 1, 1]
    assert [i["local_rank"] for i in infos] == [0, 1, 0, 1]
    assert {i["nproc_per_node"] for i in infos} == {2}
    assert {i["slurm"]["SLURM_JOB_NODELIST"] for i in infos} == {"127.0.0.[1-2]"}


def test_srun_cyclic(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    infos = _srun(slurm_cluster, tmp_path, "-N2", "-n4", "-m", "cyclic")
    _check_common(infos, 4)
    assert [i["node_rank"] for i in infos] == [0, 1, 0, 1]
    assert [i["local_rank"] for i in infos] == [0, 0, 1, 1]
    assert {i["nproc_per_node"] for i in infos} == {2}
    assert [i["local_group_ranks"] for i in infos] == [[0, 2], [1, 3], [0, 2], [1, 3]]


def test_srun_uneven_nodes(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    infos = _srun(slurm_cluster, tmp_path, "-N2", "-n3")
    _check_common(infos, 3)
    assert [i["node_rank"] for i in infos] == [0, 0, 1]
    assert [i["nproc_per_node"] for i in infos] == [2, 2, 1]  # this node's tasks: 2,1
    assert [i["local_group_ranks"] for i in infos] == [[0, 1], [0, 1], [2]]


def test_sbatch_with_srun_inside(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    """An sbatch job: its shell alone is not a step (warned about), its srun step is."""
    job_script = tmp_path / "job.sh"
    job_script.write_text(
        "#!/bin/bash\n"
        "set -e\n"
        f"{sys.executable} {SCRIPT} {tmp_path} shell\n"
        f"srun -O --kill-on-bad-exit=1 {sys.executable} {SCRIPT} {tmp_path}\n"
    )
    submitted = slurm_cluster.run(
        ["sbatch", "--parsable", "-N2", "-n4", "-O", "-o", str(tmp_path / "job.out"),
         str(job_script)],
        timeout=30, cwd=REPO,
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip().split(";")[0]
    state = slurm_cluster.wait_job(job, timeout=STEP_TIMEOUT)
    output = (tmp_path / "job.out").read_text(errors="replace")
    assert state == "COMPLETED", f"job {job} {state}:\n{output[-4000:]}"

    shell = json.loads((tmp_path / "shell.json").read_text())
    assert shell["slurm"]["SLURM_PROCID"] == "0"  # the trap: it looks like rank 0 of 4
    assert "SLURM_STEP_ID" not in shell["slurm"]
    assert shell["launcher"] is None
    assert shell["before"]["world_size"] == 1
    assert len(shell["warnings"]) == 1
    assert f"SLURM job {job} asks for 4 tasks" in shell["warnings"][0]
    assert "srun" in shell["warnings"][0]

    infos = _results(tmp_path)
    _check_common(infos, 4)
    assert {i["slurm"]["SLURM_JOB_ID"] for i in infos} == {job}
    assert [i["node_rank"] for i in infos] == [0, 0, 1, 1]


def test_torchrun_inside_srun(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    """One torchrun per node under srun: torchrun's variables win over SLURM's."""
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2"]
    proc = slurm_cluster.run(
        ["srun", "-O", "-N2", "--ntasks-per-node=1", *torchrun, "--nproc-per-node", "2",
         "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{free_port()}",
         "--rdzv-id", "slurm-test", str(SCRIPT.with_name("torchrun_script.py")), str(tmp_path)],
        timeout=STEP_TIMEOUT, cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    infos = _results(tmp_path)
    assert [i["rank"] for i in infos] == [0, 1, 2, 3]
    assert [i["local_rank"] for i in infos] == [0, 1, 0, 1]
    assert [i["node_rank"] for i in infos] == [0, 0, 1, 1]
    assert {(i["world_size"], i["nnodes"], i["nproc_per_node"], i["sum"]) for i in infos} == {
        (4, 2, 2, 10)
    }


def test_spawn_inside_srun(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    """One srun task per node, each spawning 2 workers (nnodes / node_rank from SLURM)."""
    proc = slurm_cluster.run(
        ["srun", "-O", "-N2", "--ntasks-per-node=1", sys.executable, str(SCRIPT), str(tmp_path),
         "spawn"],
        timeout=STEP_TIMEOUT, cwd=REPO,
        extra_env={"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    infos = _results(tmp_path)
    assert [i["rank"] for i in infos] == [0, 1, 2, 3]
    assert [i["local_rank"] for i in infos] == [i["local_rank_arg"] for i in infos] == [0, 1, 0, 1]
    assert [i["node_rank"] for i in infos] == [0, 0, 1, 1]
    assert {(i["world_size"], i["nnodes"], i["nproc_per_node"], i["sum"]) for i in infos} == {
        (4, 2, 2, 10)
    }
    assert infos[0]["nodes"] == [NODES[0], NODES[0], NODES[1], NODES[1]]
