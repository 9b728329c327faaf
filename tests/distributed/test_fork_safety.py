"""Importing distbridge and the warm starter's server ask the accelerator nothing.

On a CUDA machine the first driver query (``torch.cuda.is_available()``, a device count, the
current device) starts the driver's threads and makes every later fork of that process unable
to use CUDA ("Cannot re-initialize CUDA in forked subprocess"). The warm starter forks every
worker from a server that has imported distbridge, so one query at import broke every
``spawn("nccl")``. CI has no GPU, so this test replaces torch's queries with recording ones
(``accelerator_probe.py``, loaded as ``sitecustomize`` in every interpreter of the job) and
checks who asked:

- the parent, from ``import distbridge`` until the job starts: nothing;
- the parent during a gloo job: nothing (an NCCL ``spawn`` counts the GPUs with
  ``torch.cuda.device_count()``, which torch answers from NVML without touching the driver);
- the warm starter's server: nothing, ever;
- the workers: anything (each is the last process of its line; its device is decided there).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import distbridge as idist

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(120)]

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]


def _calls(log: Path) -> list[tuple[int, str, str]]:
    rows = []
    for line in log.read_text(encoding="utf-8").splitlines():
        pid, name, caller = line.split("\t", 2)
        rows.append((int(pid), name, caller))
    return rows


@pytest.mark.gpu  # runs everywhere; on a GPU machine spawn("nccl") runs a real job too
def test_import_and_the_warm_server_ask_the_accelerator_nothing(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    shutil.copy(HERE / "accelerator_probe.py", site / "sitecustomize.py")
    env = dict(os.environ)
    env["DISTBRIDGE_PROBE_DIR"] = str(tmp_path)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(site), str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    out = tmp_path / "found.json"
    done = subprocess.run(
        [sys.executable, str(HERE / "fork_safety_script.py"), str(out)],
        env=env, capture_output=True, text=True, timeout=100, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    found = json.loads(out.read_text(encoding="utf-8"))
    assert [w["sum"] for w in found["workers"]] == [3.0, 3.0]
    workers = {w["pid"] for w in found["workers"]}
    assert {w["ppid"] for w in found["workers"]} == {found["server"]}  # forked from the server

    calls = _calls(tmp_path / "calls.log")
    parent = [(name, caller) for pid, name, caller in calls if pid == found["parent"]]
    marks = [name for name, _ in parent if name.startswith("MARK")]
    assert marks == ["MARK imported", "MARK job done", "MARK nccl done"], parent
    nccl_start = [name for name, _ in parent].index("MARK job done")
    before_nccl = [call for call in parent[:nccl_start] if not call[0].startswith("MARK")]
    during_nccl = {name for name, _ in parent[nccl_start:] if not name.startswith("MARK")}
    server = [(name, caller) for pid, name, caller in calls if pid == found["server"]]
    strangers = {pid for pid, _, _ in calls} - workers - {found["parent"], found["server"]}
    assert before_nccl == [], f"the parent asked the accelerator: {before_nccl}"
    # spawn("nccl") may count the GPUs before any worker starts: through NVML, fork-safe.
    assert during_nccl <= {"torch.cuda.device_count"}, during_nccl
    assert server == [], f"the warm starter's server asked the accelerator: {server}"
    assert not strangers, f"unknown processes asked: {calls}"
    # The probe works: the workers decide their device, and that asks.
    assert any(pid in workers for pid, _, _ in calls), calls
    if not torch.cuda.is_available():  # a CPU wheel has no NCCL; a CUDA one, no GPU here
        assert "nccl" in found["nccl_refusal"].lower(), found["nccl_refusal"]


def _work(local_rank: int) -> int:
    return local_rank


@pytest.mark.parametrize("how", ["spawn", "Parallel"])
def test_fork_after_cuda_was_initialized_is_refused_before_any_process_starts(
    monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """torch's own flag says CUDA is initialized (as after a notebook's CUDA cell); CI has no
    GPU, so the flag is set by hand. A fork of this process could not use CUDA: refused."""
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)

    def start() -> None:
        if how == "spawn":
            idist.spawn("gloo", _work, nproc_per_node=2, start_method="fork")
        else:
            with idist.Parallel(backend="gloo", nproc_per_node=2, start_method="fork") as p:
                p.run(_work)

    before = set(multiprocessing.active_children())  # e.g. the warm worlds of other tests
    with pytest.raises(ValueError, match=r"start_method='fork'.*initialized CUDA") as caught:
        start()
    assert "start_method='forkserver'" in str(caught.value)
    assert set(multiprocessing.active_children()) <= before  # no worker was started


def test_the_warm_starter_runs_after_cuda_was_initialized(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default start method forks the workers from the warm starter's server, a fresh
    interpreter that never touched the accelerator: the caller's CUDA state does not matter."""
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    assert idist.spawn("gloo", _work, nproc_per_node=2) == [0, 1]


def _nccl_work(local_rank: int) -> tuple[float, str]:
    x = torch.ones(1, device=idist.device())
    return idist.all_reduce(x).item(), str(x.device)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_nccl_spawn_with_default_arguments_after_the_caller_used_cuda() -> None:
    """The headline call, after the caller has used CUDA itself (a notebook's CUDA cell)."""
    torch.ones(1, device="cuda").sum().item()
    for _ in range(2):  # the job that starts the warm server, and one forked from it
        assert idist.spawn("nccl", _nccl_work, nproc_per_node=1) == [(1.0, "cuda:0")]
    with pytest.raises(ValueError, match=r"start_method='fork'.*initialized CUDA"):
        idist.spawn("nccl", _nccl_work, nproc_per_node=1, start_method="fork")
