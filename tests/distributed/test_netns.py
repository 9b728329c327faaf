"""Two hosts with addresses of their own: torchrun --nnodes 2, one node per network namespace.

The fixture makes two network namespaces joined by a veth pair (10.213.0.1 and 10.213.0.2,
nothing else: no loopback route between them), so every byte between the nodes crosses
that link. It needs root (CAP_NET_ADMIN) and iproute2's ``ip``; without them the test skips
and says which is missing.

Both namespaces share this machine's host name, which resolves to 127.0.0.1 here; gloo
would advertise that address to the other node. ``GLOO_SOCKET_IFNAME`` names each node's
interface instead, as on a real cluster whose host names resolve to the wrong network.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ports import free_port

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(240)]

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tests" / "distributed" / "torchrun_script.py"
ADDRESSES = ("10.213.0.1", "10.213.0.2")


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)


@pytest.fixture
def two_hosts() -> Iterator[list[tuple[str, str]]]:
    """Two namespaces joined by a veth pair: [(namespace, interface)] for node 0 and 1."""
    if shutil.which("ip") is None:
        pytest.skip("`ip` is not installed (Debian package iproute2)")
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root (CAP_NET_ADMIN)")
    tag = f"db{os.getpid()}"
    hosts = [(f"{tag}n0", f"{tag}v0"), (f"{tag}n1", f"{tag}v1")]
    made: list[str] = []
    try:
        for ns, _ in hosts:
            created = _ip("netns", "add", ns)
            if created.returncode != 0:
                pytest.skip(f"cannot create a network namespace here: {created.stderr.strip()}")
            made.append(ns)
        (ns0, if0), (ns1, if1) = hosts
        steps = [
            ("link", "add", if0, "netns", ns0, "type", "veth", "peer", "name", if1, "netns", ns1),
            *[("-n", ns, "link", "set", "lo", "up") for ns, _ in hosts],
            *[("-n", ns, "addr", "add", f"{ADDRESSES[n]}/24", "dev", i)
              for n, (ns, i) in enumerate(hosts)],
            *[("-n", ns, "link", "set", i, "up") for ns, i in hosts],
        ]  # fmt: skip
        for step in steps:
            done = _ip(*step)
            assert done.returncode == 0, f"ip {' '.join(step)}: {done.stderr}"
        yield hosts
    finally:
        for ns in made:  # deleting a namespace deletes its end of the veth pair, hence both
            _ip("netns", "del", ns)


def test_torchrun_two_hosts_in_network_namespaces(
    two_hosts: list[tuple[str, str]], tmp_path: Path
) -> None:
    port = str(free_port())
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), env.get("PYTHONPATH", "")])
    nodes = []
    for node_rank, (ns, interface) in enumerate(two_hosts):
        command = [
            "ip", "netns", "exec", ns, "env", f"GLOO_SOCKET_IFNAME={interface}",
            sys.executable, "-m", "torch.distributed.run", "--nnodes", "2",
            "--node-rank", str(node_rank), "--nproc-per-node", "2",
            "--master-addr", ADDRESSES[0], "--master-port", port, str(SCRIPT), str(tmp_path),
        ]  # fmt: skip
        nodes.append(
            subprocess.Popen(
                command,
                cwd=REPO,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    try:
        outputs = [node.communicate(timeout=180)[0] for node in nodes]
    finally:
        for node in nodes:
            if node.poll() is None:
                node.kill()
                node.wait(timeout=30)
    for node, output in zip(nodes, outputs, strict=True):
        assert node.returncode == 0, output[-4000:]
    infos = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(4)]
    assert [i["node_rank"] for i in infos] == [0, 0, 1, 1]
    assert [i["local_rank"] for i in infos] == [0, 1, 0, 1]
    assert {(i["world_size"], i["nnodes"], i["nproc_per_node"], i["sum"]) for i in infos} == {
        (4, 2, 2, 10)
    }
    assert infos[0]["gathered"] == ["r0", "r1", "r2", "r3"]


def test_the_namespaces_are_really_separate(two_hosts: list[tuple[str, str]]) -> None:
    """Node 1 reaches node 0 over the veth link, and not over its own loopback."""
    (ns0, _), (ns1, _) = two_hosts
    port = str(free_port())
    listen = f"import socket, time; s = socket.socket(); s.bind(('0.0.0.0', {port})); s.listen()"
    server = subprocess.Popen(
        ["ip", "netns", "exec", ns0, sys.executable, "-c", listen + "; time.sleep(60)"]
    )

    def connect(address: str) -> subprocess.CompletedProcess[str]:
        probe = f"import socket; socket.create_connection(({address!r}, {port}), 2)"
        return subprocess.run(
            ["ip", "netns", "exec", ns1, sys.executable, "-c", probe],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip

    try:
        over_veth = connect(ADDRESSES[0])
        for _ in range(30):  # the server may still be starting
            if "refused" not in over_veth.stderr:
                break
            over_veth = connect(ADDRESSES[0])
        assert over_veth.returncode == 0, over_veth.stderr
        loopback = connect("127.0.0.1")
        assert loopback.returncode != 0 and "refused" in loopback.stderr
    finally:
        server.kill()
        server.wait(timeout=30)
