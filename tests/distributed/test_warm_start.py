"""The warm starter: spawn's default start method forks every worker from one server per
process that has imported torch. A later job reuses it; nothing of one job reaches the next
(environment variables, seeds, process groups, the active model, CUDA), a job sees the
parent's environment of its own start, and a SIGKILLed parent leaves no worker and no server.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

import distbridge as idist
from tests.distributed import supervisor_targets
from tests.distributed import warm_start_targets as targets
from tests.distributed.process_checks import assert_gone

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(120)]

REPO_ROOT = Path(__file__).resolve().parents[2]


def _job(**kwargs: Any) -> list[dict[str, Any]]:
    return idist.spawn("gloo", targets.state_and_mess, nproc_per_node=2, **kwargs)


def test_a_later_job_forks_from_the_same_server_and_inherits_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    first = _job()
    monkeypatch.setenv(targets.LATE, "set by the parent between the jobs")
    monkeypatch.chdir(tmp_path)
    second = _job()
    fresh = _job(start_method="spawn")  # the reference: brand-new interpreters

    for job in (first, second):
        assert [found["sum"] for found in job] == [3.0, 3.0]
    servers = {found["ppid"] for found in first + second}
    assert len(servers) == 1 and os.getpid() not in servers  # one server, reused
    assert not {found["pid"] for found in first} & {found["pid"] for found in second}
    for found in second:
        assert found["leaked"] is None  # the first job's variable stayed in its workers
        assert found["late"] == "set by the parent between the jobs"  # today's environment
        assert found["cwd"] == str(tmp_path)  # today's working directory
        assert (found["model"], found["world"], found["default_group"]) == ("native-dist", 2, True)
        assert found["cuda_initialized"] is False
    everyone = first + second + fresh
    for seeded in ("random", "numpy", "torch_seed"):  # as fresh interpreters: no two alike
        assert len({found[seeded] for found in everyone}) == len(everyone), seeded


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_warm_workers_use_cuda_after_the_parent_initialized_it() -> None:
    torch.ones(1, device="cuda").sum().item()  # the parent's CUDA context: no fork may copy it
    for _ in range(2):  # the job that starts the server, and one forked from it
        found = idist.spawn("gloo", targets.uses_cuda, nproc_per_node=2)
        assert found == [(False, 4.0), (False, 4.0)]


def test_a_function_of_python_c_runs_with_the_default_arguments() -> None:
    code = textwrap.dedent("""\
        import distbridge as idist, torch
        def work(local_rank, base):
            print("hello from", idist.get_rank())
            return float(idist.all_reduce(torch.tensor(float(base))))
        print(idist.spawn("gloo", work, args=(3,), nproc_per_node=2, tag_output=True))
    """)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=90, check=False
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert sorted(lines[:-1]) == ["[rank0]: hello from 0", "[rank1]: hello from 1"]
    assert lines[-1] == "[6.0, 6.0]"


def test_a_python_c_function_that_cannot_be_sent_fails_before_any_worker_starts() -> None:
    code = textwrap.dedent("""\
        import threading
        from multiprocessing import forkserver
        import distbridge as idist
        def make():
            lock = threading.Lock()
            return lambda local_rank: lock.locked()
        try:
            idist.spawn("gloo", make(), nproc_per_node=2)
        except Exception as err:
            print(type(err).__name__, err)
        print("server started:", forkserver._forkserver._forkserver_pid is not None)
    """)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=90, check=False
    )
    assert done.returncode == 0, done.stderr
    error, started = done.stdout.splitlines()
    assert error.startswith(
        "PicklingError The function make.<locals>.<lambda> cannot be sent to the workers: "
        "the closure variable 'lock' of make.<locals>.<lambda> = <unlocked _thread.lock"
    )
    assert started == "server started: False"


def _parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _server_pids(parent: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (stat.parent / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == parent and b"forkserver" in cmdline:
            found.append(int(stat.parent.name))
    return found


def test_sigkill_to_the_parent_ends_the_warm_workers_and_the_server(tmp_path: Path) -> None:
    script = textwrap.dedent("""\
        import functools, os, sys
        from distbridge.launch.supervisor import run_workers
        from tests.distributed import supervisor_targets as t
        first, second = (os.path.join(sys.argv[1], name) for name in ("first", "second"))
        os.makedirs(first), os.makedirs(second)
        run_workers(functools.partial(t.rank_values, first), 2)  # starts the server
        run_workers(functools.partial(t.sleep_forever, second), 2)
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT / "src"), str(REPO_ROOT)])}
    parent = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], cwd=REPO_ROOT, env=env)
    try:
        pids = supervisor_targets.wait_for_pids(tmp_path / "second", 2)
        servers = _server_pids(parent.pid)
        assert len(servers) == 1
        assert {_parent_of(pid) for pid in pids} == set(servers)  # forked by the server
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
    assert_gone([*pids, *servers], timeout=15)
