"""Launching the native model for real: spawn, two nodes, torchrun, adoption, failures."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
import torch

import distbridge as idist
from distbridge.errors import PicklingError, WorkerFailedError
from distbridge.launch.supervisor import run_workers
from tests.distributed import launch_targets
from tests.distributed.process_checks import default_sigint
from tests.ports import free_port

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(120)]

REPO = Path(__file__).resolve().parents[2]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "src"), env.get("PYTHONPATH", "")])
    return env


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split()[2] == "Z")


def test_spawn_returns_results_in_rank_order_with_afree_port() -> None:
    results = idist.spawn("gloo", launch_targets.layout, nproc_per_node=3)
    assert [r["rank"] for r in results] == [0, 1, 2]
    assert [r["local_rank_arg"] for r in results] == [0, 1, 2]
    assert {r["sum"] for r in results} == {6}
    assert {r["nproc_per_node"] for r in results} == {3}
    assert int(results[0]["master_port"]) > 0


def test_parallel_spawns_and_returns_results() -> None:
    with idist.Parallel(backend="gloo", nproc_per_node=2) as parallel:
        results = parallel.run(launch_targets.layout)
    assert [r["rank"] for r in results] == [0, 1]


def test_spawn_honours_master_port() -> None:
    port = free_port()
    results = idist.spawn("gloo", launch_targets.layout, nproc_per_node=2, master_port=port)
    assert {r["master_port"] for r in results} == {str(port)}


def test_two_nodes_on_localhost() -> None:
    port = free_port()
    code = (
        "import json, sys, distbridge as idist\n"
        "from tests.distributed import launch_targets\n"
        "out = idist.spawn('gloo', launch_targets.layout, nproc_per_node=2, nnodes=2,\n"
        "    node_rank=int(sys.argv[1]), master_addr='127.0.0.1',\n"
        f"    master_port={port}, job_timeout=90)\n"
        "print('RESULT ' + json.dumps(out))\n"
    )
    nodes = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(node)],
            cwd=REPO,
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for node in (0, 1)
    ]
    outputs = [node.communicate(timeout=100) for node in nodes]
    for node, (_out, err) in zip(nodes, outputs, strict=True):
        assert node.returncode == 0, err
    per_node = [json.loads(out.split("RESULT ", 1)[1]) for out, _ in outputs]
    for node_rank, results in enumerate(per_node):
        assert [r["rank"] for r in results] == [2 * node_rank, 2 * node_rank + 1]
        assert [r["local_rank"] for r in results] == [0, 1]
        assert {r["node_rank"] for r in results} == {node_rank}
        assert {r["nnodes"] for r in results} == {2}
        assert {r["world_size"] for r in results} == {4}
        assert {r["sum"] for r in results} == {10}


def test_initialize_under_torchrun(tmp_path: Path) -> None:
    torchrun = [sys.executable, "-m", "torch.distributed.run"]
    proc = subprocess.run(
        [*torchrun, "--standalone", "--nproc-per-node", "2",
         str(REPO / "tests/distributed/torchrun_script.py"), str(tmp_path)],
        cwd=REPO, env=_env(), capture_output=True, text=True, timeout=100,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    infos = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [i["rank"] for i in infos] == [0, 1]
    assert [i["local_rank"] for i in infos] == [0, 1]
    assert {i["nproc_per_node"] for i in infos} == {2}
    assert {i["nnodes"] for i in infos} == {1}
    assert {i["sum"] for i in infos} == {3}
    assert infos[0]["gathered"] == ["r0", "r1"]


def test_adoption_of_a_user_made_group_never_communicates(tmp_path: Path) -> None:
    rdzv = tmp_path / "rdzv"
    results = run_workers(_AdoptTarget(2, str(rdzv)), 2, job_timeout=90)
    for rank, info in enumerate(results):
        assert info["model"] == "native-dist" and info["backend"] == "gloo"
        assert info["rank"] == rank and info["world_size"] == 2
        assert info["device"] == "cpu"
        assert info["sum"] == 2.0
        assert info["after_destroy"] == "serial", "a destroyed group must not stay adopted"
    assert results[0]["second_world_size"] == 1 and results[0]["second_sum"] == 5


class _AdoptTarget:
    def __init__(self, world_size: int, rdzv: str) -> None:
        self.world_size, self.rdzv = world_size, rdzv

    def __call__(self, local_rank: int) -> dict[str, object]:
        return launch_targets.adopt_user_group(local_rank, self.world_size, self.rdzv)


def test_a_raising_worker_stops_the_others_and_names_its_rank() -> None:
    start = time.monotonic()
    with pytest.raises(WorkerFailedError) as info:
        idist.spawn("gloo", launch_targets.fail_on_rank, args=(1,), nproc_per_node=3)
    elapsed = time.monotonic() - start
    err = info.value
    assert err.rank == 1
    assert "rank 1" in str(err) and "ValueError: boom from rank 1" in str(err)
    assert "fail_on_rank" in err.worker_traceback
    assert elapsed < 30, f"the other workers were not stopped quickly ({elapsed:.1f}s)"


def test_a_killed_worker_is_reported() -> None:
    with pytest.raises(WorkerFailedError, match="killed by signal SIGKILL") as info:
        idist.spawn("gloo", launch_targets.kill_self_on_rank, args=(0,), nproc_per_node=2)
    assert info.value.rank == 0


def test_spawn_refuses_a_lambda_before_starting_anything() -> None:
    with pytest.raises(PicklingError, match="lambda"):
        idist.spawn("gloo", lambda local_rank: None, nproc_per_node=2)


def test_sigint_to_the_parent_stops_every_worker(tmp_path: Path) -> None:
    code = (
        "import sys, distbridge as idist\n"
        "from tests.distributed import launch_targets\n"
        "idist.spawn('gloo', launch_targets.sleep_and_record, args=(sys.argv[1],),\n"
        "    nproc_per_node=2)\n"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", code, str(tmp_path)],
        cwd=REPO,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint,
    )
    deadline = time.monotonic() + 60
    while len(list(tmp_path.glob("pid-*"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    pids = [int(p.read_text()) for p in tmp_path.glob("pid-*")]
    assert len(pids) == 2, parent.communicate(timeout=5)
    start = time.monotonic()
    parent.send_signal(signal.SIGINT)
    _, err = parent.communicate(timeout=30)
    assert parent.returncode != 0 and "KeyboardInterrupt" in err
    assert time.monotonic() - start < 15
    assert not [pid for pid in pids if _alive(pid)], "workers outlived the parent"


def test_nnodes_without_master_port_is_refused() -> None:
    with pytest.raises(ValueError, match="master_port"):
        idist.spawn("gloo", launch_targets.layout, nproc_per_node=1, nnodes=2, node_rank=0)


MALFORMED_PORTS = [("abc", "an integer"), ("70000", "a port number"), ("-1", "a port number")]


@pytest.mark.parametrize(("value", "problem"), MALFORMED_PORTS)
def test_a_malformed_master_port_variable_is_refused(
    monkeypatch: pytest.MonkeyPatch, value: str, problem: str
) -> None:
    monkeypatch.setenv("MASTER_PORT", value)
    expected = rf"^Environment variable MASTER_PORT='{value}' is not {problem}"
    with pytest.raises(ValueError, match=expected):
        idist.spawn("gloo", launch_targets.layout, nproc_per_node=1)


@pytest.mark.parametrize("timeout", [-1, 0, "abc", timedelta(seconds=-1)])
def test_a_bad_timeout_is_refused_before_the_store(timeout: object) -> None:
    with pytest.raises(ValueError, match=r"^timeout must be a number of seconds > 0 or None"):
        idist.spawn("gloo", launch_targets.layout, nproc_per_node=1, timeout=timeout)


# detectron2's launch picks NCCL where CUDA is, and NCCL needs a GPU per process.
_ONE_GPU = pytest.mark.skipif(
    torch.cuda.is_available() and torch.cuda.device_count() < 2,
    reason="launch() of 2 processes takes NCCL with CUDA present, and this machine has 1 GPU",
)


@_ONE_GPU
def test_detectron2_launch_with_auto_url() -> None:
    results = idist.launch(launch_targets.detectron2_main, 2, dist_url="auto", args=(100,))
    assert results == [{"value": 100, "world": 2}, {"value": 101, "world": 2}]


@_ONE_GPU
def test_detectron2_launch_with_tcp_url() -> None:
    url = f"tcp://127.0.0.1:{free_port()}"
    results = idist.launch(launch_targets.detectron2_main, 2, dist_url=url, args=(5,))
    assert [r["value"] for r in results] == [5, 6]


def test_detectron2_launch_refuses_auto_across_machines() -> None:
    with pytest.raises(ValueError, match="tcp://<machine 0 address>"):
        idist.launch(launch_targets.detectron2_main, 2, num_machines=2, dist_url="auto")
