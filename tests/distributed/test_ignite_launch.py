"""The launch paths ignite users rely on, run for real on loopback, with ``ignite.distributed``
and with distbridge side by side: hand-set variables with ``env://`` and ``file://``,
``Parallel`` with ``init_method="env://"`` and a port given as a str, ``tcp://``, and a
2-node ``Parallel`` (both nodes, and one node whose other never comes). Each job gets a free
port or a file rendezvous; process bodies in ``ignite_launch_targets.py``."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ignite", reason="pytorch-ignite is not installed (the test extra has it)")

import ignite.distributed as ignite_dist

import distbridge as idist
from tests.distributed import ignite_launch_targets  # imports ignite
from tests.unit.test_facade import LAUNCH_VARS

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
_LAUNCH_VARS = LAUNCH_VARS  # cleared around each launch


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start(code: str, env: dict[str, str]) -> subprocess.Popen[str]:
    """A Python process running ``code`` from the repository root, with ``env`` added to a
    copy of this one's environment free of launcher variables."""
    base = {k: v for k, v in os.environ.items() if k not in _LAUNCH_VARS}
    base["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "src")])
    return subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**base, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(processes: list[subprocess.Popen[str]], timeout: float) -> list[tuple[int, str, str]]:
    """Each process's exit code, stdout and stderr; all are killed past ``timeout``."""
    deadline = time.monotonic() + timeout
    out = []
    try:
        for proc in processes:
            stdout, stderr = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
            out.append((proc.returncode, stdout, stderr))
    finally:
        for proc in processes:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return out


def last_json(stdout: str) -> Any:
    return json.loads(stdout.strip().splitlines()[-1])


def test_hand_set_variables_on_two_ranks(tmp_path: Path) -> None:
    """Items 1 and 2 on 2 ranks, with ignite and with distbridge in the same processes:
    RANK / LOCAL_RANK / WORLD_SIZE set by hand, with env:// (MASTER_ADDR / MASTER_PORT, a
    free port) and with file:// (the rank read from the environment)."""
    port = str(free_port())
    code = (
        "from tests.distributed.ignite_launch_targets import hand_set_rank; "
        f"hand_set_rank({str(tmp_path / 'rendezvous-')!r})"
    )
    env = {"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}
    processes = [start(code, {**env, "RANK": str(r), "LOCAL_RANK": str(r)}) for r in (0, 1)]
    results = finish(processes, timeout=240)
    for code_, _, stderr in results:
        assert code_ == 0, stderr[-3000:]
    seen = [last_json(stdout) for _, stdout, _ in results]
    for rank, rank_seen in enumerate(seen):
        assert sorted(rank_seen) == [
            "distbridge env",
            "distbridge file",
            "ignite env",
            "ignite file",
        ]
        for case in rank_seen.values():
            assert case["rank"] == rank and case["local_rank"] == rank
            assert (case["world"], case["backend"], case["sum"]) == (2, "gloo", 3.0)
            assert case["master"] == ["127.0.0.1", port]


def test_tcp_init_method_on_two_ranks_works() -> None:
    """Item 7: distbridge's tcp:// (ignite refuses it: migration.md) works on loopback."""
    address = f"tcp://127.0.0.1:{free_port()}"
    code = (
        "import json, os, distbridge as idist; "
        "from tests.distributed.ignite_launch_targets import report; "
        f"idist.initialize('gloo', init_method={address!r}, "
        "rank=int(os.environ['RANK']), world_size=2, timeout=60); "
        "print(json.dumps(report(idist))); idist.finalize()"
    )
    results = finish([start(code, {"RANK": str(r)}) for r in (0, 1)], timeout=180)
    for code_, _, stderr in results:
        assert code_ == 0, stderr[-3000:]
    assert [last_json(out)["sum"] for _, out, _ in results] == [3.0, 3.0]


@pytest.mark.parametrize("lib_name", ["ignite", "distbridge"])
def test_parallel_env_init_method_exports_the_address_to_its_workers(
    lib_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Items 5 and 6: Parallel(init_method="env://") gives its workers MASTER_ADDR /
    MASTER_PORT, and takes master_port as a str."""
    for name in _LAUNCH_VARS:
        monkeypatch.delenv(name, raising=False)
    lib = {"ignite": ignite_dist, "distbridge": idist}[lib_name]
    port = str(free_port())
    with lib.Parallel(
        backend="gloo", nproc_per_node=2, init_method="env://", master_port=port
    ) as parallel:
        parallel.run(ignite_launch_targets.report_to, lib_name, str(tmp_path))
    seen = [json.loads((tmp_path / f"{r}.json").read_text()) for r in (0, 1)]
    for rank, rank_seen in enumerate(seen):
        assert rank_seen["rank"] == rank and rank_seen["world"] == 2
        assert rank_seen["master"] == ["127.0.0.1", port]
        assert rank_seen["sum"] == 3.0


def _left_behind(token: str) -> list[int]:
    """Processes whose environment carries ``token``."""
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if token.encode() in (proc / "environ").read_bytes():
                    pids.append(int(proc.name))
            except OSError:
                continue
    return pids


def test_two_node_parallel_on_loopback() -> None:
    """Item 6: a 2-node Parallel, both nodes on this machine, port given as a str."""
    port, token = free_port(), f"distbridge-test-{uuid.uuid4().hex}"
    code = "from tests.distributed.ignite_launch_targets import node; node({}, {}, 120)"
    nodes = [start(code.format(r, port), {"DISTBRIDGE_TEST_TOKEN": token}) for r in (0, 1)]
    results = finish(nodes, timeout=240)
    for code_, stdout, stderr in results:
        assert code_ == 0, stdout[-2000:] + stderr[-3000:]
    seen = [last_json(out) for _, out, _ in results]
    assert [[w["rank"] for w in workers] for workers in seen] == [[0, 1], [2, 3]]
    assert all(w["sum"] == 10.0 and w["nnodes"] == 2 for workers in seen for w in workers)
    assert [w["node"] for w in seen[1]] == [1, 1]
    assert _left_behind(token) == []


@pytest.mark.parametrize("present", [0, 1])
def test_a_node_whose_other_node_never_comes_ends_in_bounded_time(present: int) -> None:
    """Item 6: only node ``present`` of 2 starts; it ends within the rendezvous timeout with
    an error naming what is missing, and leaves no process behind."""
    port, token = free_port(), f"distbridge-test-{uuid.uuid4().hex}"
    code = (
        f"from tests.distributed.ignite_launch_targets import node; node({present}, {port}, 3, 1)"
    )
    began = time.monotonic()
    [(code_, stdout, stderr)] = finish([start(code, {"DISTBRIDGE_TEST_TOKEN": token})], 180)
    assert time.monotonic() - began < 150
    assert code_ == 3, stdout[-2000:] + stderr[-3000:]
    assert "ERROR " in stdout, stdout[-2000:] + stderr[-3000:]
    said = stdout[stdout.index("ERROR ") :]
    assert said.startswith("ERROR WorkerFailedError"), said
    assert f"127.0.0.1:{port}" in said
    if present == 1:
        assert "node 0 never started its workers or failed at start-up" in said
    else:
        assert "not all 2 ranks of the job joined" in said and "2 node(s)" in said
    time.sleep(1.0)  # the last worker's exit reaches /proc
    assert _left_behind(token) == []
