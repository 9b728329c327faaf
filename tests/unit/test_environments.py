"""Launcher environments (pure functions of a dict) and the layout derived from them."""

from __future__ import annotations

import os
import socket
import time
from datetime import timedelta
from types import ModuleType

import pytest
import torch.distributed as dist

import distbridge as idist
from distbridge import environments
from distbridge.environments import LaunchEnvironment, horovodrun, lsf, mpi, mpich, torchelastic
from distbridge.environments.base import derived_port
from distbridge.errors import DistributedError
from distbridge.models._layout import (
    Layout,
    export_layout,
    layout_from_env,
    layout_from_store,
    node_name,
)
from distbridge.models.native.init import rendezvous_address

LAYOUT_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK")
LAUNCH_VARS = (*LAYOUT_VARS, "GROUP_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")

TORCHRUN = {
    "RANK": "5",
    "WORLD_SIZE": "8",
    "LOCAL_RANK": "1",
    "LOCAL_WORLD_SIZE": "2",
    "GROUP_RANK": "2",
    "GROUP_WORLD_SIZE": "4",
    "MASTER_ADDR": "node0.example",
    "MASTER_PORT": "29500",
    "PATH": "/usr/bin",
}


def _unset(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    """Unset ``names`` so that monkeypatch also removes them again if the code sets them."""
    for name in names:
        monkeypatch.setenv(name, "placeholder")
        monkeypatch.delenv(name)


# ---- torchelastic -----------------------------------------------------------------------------


def test_torchrun_full_set() -> None:
    found = torchelastic.detect(TORCHRUN)
    assert found == LaunchEnvironment(
        launcher="torchelastic",
        rank=5,
        world_size=8,
        local_rank=1,
        local_world_size=2,
        node_rank=2,
        nnodes=4,
        master_addr="node0.example",
        master_port=29500,
    )


@pytest.mark.parametrize("missing", ["RANK", "WORLD_SIZE"])
def test_rank_and_world_size_are_both_needed(missing: str) -> None:
    env = {k: v for k, v in TORCHRUN.items() if k != missing}
    assert torchelastic.detect(env) is None


def test_rank_without_world_size_is_not_torchelastic() -> None:
    assert torchelastic.detect({"RANK": "0", "LOCAL_RANK": "0"}) is None


def test_empty_values_count_as_unset() -> None:
    assert torchelastic.detect({"RANK": "", "WORLD_SIZE": "2"}) is None
    found = torchelastic.detect({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": ""})
    assert found is not None
    assert found.master_addr is None
    assert found.local_rank is None


def test_minimal_set_leaves_unknown_fields_none() -> None:
    found = torchelastic.detect({"RANK": "1", "WORLD_SIZE": "2"})
    assert found == LaunchEnvironment(launcher="torchelastic", rank=1, world_size=2)


@pytest.mark.parametrize(
    "key", ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_PORT"]
)
def test_malformed_value_names_the_variable(key: str) -> None:
    env = {**TORCHRUN, key: "abc"}
    with pytest.raises(ValueError, match=rf"Environment variable {key}='abc' is not an integer"):
        torchelastic.detect(env)


@pytest.mark.parametrize("port", ["70000", "-1", "0", "65536"])
@pytest.mark.parametrize("launcher", [torchelastic, mpi])
def test_master_port_out_of_range_names_the_value(port: str, launcher: ModuleType) -> None:
    """A MASTER_PORT no socket can use fails at detection, not later in the rendezvous."""
    ompi = {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"}
    env = {**TORCHRUN, **ompi, "MASTER_PORT": port}
    with pytest.raises(
        ValueError,
        match=rf"^Environment variable MASTER_PORT='{port}' is not a port number "
        r"\(1 to 65535\); fix or unset it\.$",
    ):
        launcher.detect(env)


def test_rank_at_or_past_world_size_is_refused() -> None:
    with pytest.raises(
        ValueError, match=r"^RANK=4 is not below WORLD_SIZE=4 \(torchrun variables\): .*; fix them"
    ):
        torchelastic.detect({"RANK": "4", "WORLD_SIZE": "4"})


def test_negative_rank_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^RANK=-1 is negative \(torchrun variables\)"):
        torchelastic.detect({"RANK": "-1", "WORLD_SIZE": "4"})


def test_zero_world_size_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^WORLD_SIZE=0 is below 1 \(torchrun variables\)"):
        torchelastic.detect({"RANK": "0", "WORLD_SIZE": "0"})


def test_local_rank_past_local_world_size_is_refused() -> None:
    env = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "2"}
    with pytest.raises(ValueError, match=r"^LOCAL_RANK=2 is not below LOCAL_WORLD_SIZE=2 "):
        torchelastic.detect(env)


def test_node_rank_past_nnodes_is_refused() -> None:
    env = {**TORCHRUN, "GROUP_RANK": "4"}
    with pytest.raises(ValueError, match=r"^GROUP_RANK=4 is not below GROUP_WORLD_SIZE=4 "):
        torchelastic.detect(env)


def test_nnodes_derived_from_world_and_local_world_size() -> None:
    env = {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}
    found = torchelastic.detect(env)
    assert found is not None
    assert (found.nnodes, found.node_rank) == (4, 2)


def test_group_world_size_wins_over_the_derived_nnodes() -> None:
    # Heterogeneous nodes: torchrun's GROUP_WORLD_SIZE is the truth, not 8 // 2.
    env = {**TORCHRUN, "GROUP_WORLD_SIZE": "3", "GROUP_RANK": "1"}
    found = torchelastic.detect(env)
    assert found is not None
    assert (found.nnodes, found.node_rank) == (3, 1)


def test_uneven_world_gives_no_derived_nnodes() -> None:
    env = {"RANK": "5", "WORLD_SIZE": "6", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4"}
    found = torchelastic.detect(env)
    assert found is not None
    assert found.nnodes is None
    assert found.node_rank is None


def test_environments_detect_reads_a_dict() -> None:
    assert environments.detect(TORCHRUN) == torchelastic.detect(TORCHRUN)
    assert environments.detect({}) is None
    assert environments.detect({"PATH": "/bin"}) is None


def test_environments_detect_defaults_to_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    _unset(monkeypatch, *LAUNCH_VARS, "GROUP_WORLD_SIZE")
    assert environments.detect() is None
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "3")
    found = environments.detect()
    assert found is not None
    assert (found.launcher, found.rank, found.world_size) == ("torchelastic", 2, 3)


def test_environments_detect_raises_on_malformed_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "zero")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match=r"RANK='zero' is not an integer; fix or unset it"):
        environments.detect()


# ---- layout_from_env --------------------------------------------------------------------------

_FROM_PEERS = Layout(7, 9, 7, 9, 1, 0)  # what the peers would say, where they are asked


def _peers() -> Layout:
    return _FROM_PEERS


def test_layout_from_a_matching_launcher() -> None:
    launch = torchelastic.detect(TORCHRUN)
    assert layout_from_env(launch, 5, 8) == Layout(5, 8, 1, 2, 4, 2)
    assert layout_from_env(launch, 5, 8, _peers) == Layout(5, 8, 1, 2, 4, 2)


def test_layout_without_node_index_is_asked_for_unless_guessing() -> None:
    # Open MPI on several nodes: the local layout is known, the node's index is not.
    launch = LaunchEnvironment("x", rank=5, world_size=8, local_rank=1, local_world_size=2)
    assert layout_from_env(launch, 5, 8, _peers) is _FROM_PEERS
    assert layout_from_env(launch, 5, 8) == Layout(5, 8, 1, 2, 4, 2)  # nodes filled in order


def test_guessed_node_index_stays_inside_the_guessed_nodes() -> None:
    # 6 ranks, 4 on this node: a rank-order guess must still be a valid layout.
    launch = LaunchEnvironment("x", rank=5, world_size=6, local_rank=1, local_world_size=4)
    assert layout_from_env(launch, 5, 6) == Layout(5, 6, 1, 4, 2, 1)


def test_layout_with_known_nnodes_but_no_node_index() -> None:
    launch = LaunchEnvironment(
        "x", rank=3, world_size=4, local_rank=1, local_world_size=2, nnodes=2
    )
    assert layout_from_env(launch, 3, 4, _peers) is _FROM_PEERS
    assert layout_from_env(launch, 3, 4) == Layout(3, 4, 1, 2, 2, 1)


def test_layout_without_launcher_guesses_one_node() -> None:
    assert layout_from_env(None, 3, 4) == Layout(3, 4, 3, 4, 1, 0)


def test_layout_without_launcher_asks_the_peers_when_they_can_be_asked() -> None:
    assert layout_from_env(None, 3, 4, _peers) is _FROM_PEERS


def test_layout_without_local_world_size_asks_the_peers_when_they_can_be_asked() -> None:
    launch = LaunchEnvironment("x", rank=3, world_size=4, local_rank=1)
    assert layout_from_env(launch, 3, 4, _peers) is _FROM_PEERS
    # With a guess, the launcher's local rank is kept (one node assumed for the rest).
    assert layout_from_env(launch, 3, 4) == Layout(3, 4, 1, 4, 1, 0)


def test_layout_ignores_a_launcher_describing_another_world() -> None:
    launch = torchelastic.detect(TORCHRUN)  # rank 5 of 8
    assert layout_from_env(launch, 0, 2, _peers) is _FROM_PEERS
    layout = layout_from_env(launch, 1, 2)
    assert (layout.rank, layout.world_size, layout.nproc_per_node, layout.nnodes) == (1, 2, 2, 1)


def test_guessed_layout_from_a_mismatched_launcher_is_consistent() -> None:
    launch = torchelastic.detect(TORCHRUN)  # rank 5 of 8, local rank 1
    layout = layout_from_env(launch, 0, 1)
    assert 0 <= layout.local_rank < layout.nproc_per_node


def test_with_local_rank_validates() -> None:
    layout = Layout(0, 2, 0, 2, 1, 0)
    assert layout.with_local_rank(1) == Layout(0, 2, 1, 2, 1, 0)
    for bad in (-1, True, "1"):
        with pytest.raises(ValueError, match=r"A local rank must be an int >= 0, got "):
            layout.with_local_rank(bad)  # type: ignore[arg-type]


# ---- layout_from_store ------------------------------------------------------------------------


@pytest.fixture
def store() -> dist.HashStore:
    s = dist.HashStore()
    s.set_timeout(timedelta(seconds=5))
    return s


HOSTS = ["hostA", "hostB", "hostA", "hostB"]  # interleaved: nodes numbered by lowest rank


@pytest.mark.parametrize(
    ("rank", "expected"),
    [
        (0, Layout(0, 4, 0, 2, 2, 0)),
        (1, Layout(1, 4, 0, 2, 2, 1)),
        (2, Layout(2, 4, 1, 2, 2, 0)),
        (3, Layout(3, 4, 1, 2, 2, 1)),
    ],
)
def test_layout_from_store_four_ranks_on_two_hosts(
    store: dist.HashStore, rank: int, expected: Layout
) -> None:
    for other, host in enumerate(HOSTS):
        if other != rank:
            store.set(f"distbridge/host/{other}", host)
    assert layout_from_store(store, rank, 4, HOSTS[rank]) == expected
    assert store.get(f"distbridge/host/{rank}") == HOSTS[rank].encode()


def test_layout_from_store_every_rank_sees_the_same_nodes(store: dist.HashStore) -> None:
    hosts = ["b", "b", "b", "a"]  # uneven: 3 ranks on one host, 1 on the other
    for rank, host in enumerate(hosts):
        store.set(f"distbridge/host/{rank}", host)
    layouts = [layout_from_store(store, r, 4, hosts[r]) for r in range(4)]
    assert [lay.node_rank for lay in layouts] == [0, 0, 0, 1]
    assert [lay.local_rank for lay in layouts] == [0, 1, 2, 0]
    assert [lay.nproc_per_node for lay in layouts] == [3, 3, 3, 1]
    assert {lay.nnodes for lay in layouts} == {2}


def test_layout_from_store_world_of_one(store: dist.HashStore) -> None:
    assert layout_from_store(store, 0, 1, "solo") == Layout(0, 1, 0, 1, 1, 0)


def test_layout_from_store_non_ascii_hostname(store: dist.HashStore) -> None:
    store.set("distbridge/host/0", "nœud-1")
    assert layout_from_store(store, 1, 2, "nœud-1") == Layout(1, 2, 1, 2, 1, 0)


# ---- export_layout ----------------------------------------------------------------------------


def test_export_layout_sets_only_missing_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    _unset(monkeypatch, *LAYOUT_VARS)
    monkeypatch.setenv("RANK", "7")
    monkeypatch.setenv("GROUP_RANK", "3")
    previous = export_layout(Layout(3, 8, 1, 2, 4, 1))
    assert previous == {"LOCAL_RANK": None, "WORLD_SIZE": None, "LOCAL_WORLD_SIZE": None}
    assert os.environ["RANK"] == "7"
    assert os.environ["GROUP_RANK"] == "3"
    assert os.environ["LOCAL_RANK"] == "1"
    assert os.environ["WORLD_SIZE"] == "8"
    assert os.environ["LOCAL_WORLD_SIZE"] == "2"


def test_export_layout_on_a_clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    _unset(monkeypatch, *LAYOUT_VARS)
    previous = export_layout(Layout(0, 1, 0, 1, 1, 0))
    assert previous == dict.fromkeys(LAYOUT_VARS)
    assert {k: os.environ[k] for k in LAYOUT_VARS} == {
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_WORLD_SIZE": "1",
        "GROUP_RANK": "0",
    }


def test_export_layout_with_everything_set_changes_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for key in LAYOUT_VARS:
        monkeypatch.setenv(key, "9")
    assert export_layout(Layout(0, 1, 0, 1, 1, 0)) == {}
    assert all(os.environ[k] == "9" for k in LAYOUT_VARS)


# ---- Open MPI ---------------------------------------------------------------------------------

OMPI = {  # as measured under `mpirun -np 2` (Open MPI 4.1), rank 1
    "OMPI_COMM_WORLD_RANK": "1",
    "OMPI_COMM_WORLD_SIZE": "2",
    "OMPI_COMM_WORLD_LOCAL_RANK": "1",
    "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
    "OMPI_COMM_WORLD_NODE_RANK": "1",  # the rank among this node's processes, not a node index
    "OMPI_MCA_orte_num_nodes": "1",
    "OMPI_MCA_ess_base_jobid": "164167681",
    "PMIX_NAMESPACE": "164167681",
    "PMIX_RANK": "1",
}
OMPI_TWO_NODES = {  # rank 2 of 4 on two nodes of two
    **OMPI,
    "OMPI_COMM_WORLD_RANK": "2",
    "OMPI_COMM_WORLD_SIZE": "4",
    "OMPI_COMM_WORLD_LOCAL_RANK": "0",
    "OMPI_COMM_WORLD_NODE_RANK": "0",
    "OMPI_MCA_orte_num_nodes": "2",
}


def test_openmpi_one_node() -> None:
    found = mpi.detect(OMPI)
    assert found == LaunchEnvironment(
        launcher="openmpi",
        rank=1,
        world_size=2,
        local_rank=1,
        local_world_size=2,
        node_rank=0,
        nnodes=1,
        master_addr="127.0.0.1",
        master_port=derived_port("openmpi:164167681"),
    )
    assert 20000 <= derived_port("openmpi:164167681") < 30000


def test_openmpi_ranks_of_one_job_agree_on_the_port_and_jobs_differ() -> None:
    rank0 = mpi.detect({**OMPI, "OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_LOCAL_RANK": "0"})
    rank1 = mpi.detect(OMPI)
    other_job = mpi.detect({**OMPI, "OMPI_MCA_ess_base_jobid": "164167937"})
    assert rank0 is not None and rank1 is not None and other_job is not None
    assert rank0.master_port == rank1.master_port != other_job.master_port


def test_openmpi_5_job_id_comes_from_pmix_namespace() -> None:
    env = {k: v for k, v in OMPI.items() if k != "OMPI_MCA_ess_base_jobid"}
    env["PMIX_NAMESPACE"] = "prterun-vm-4242@1"
    found = mpi.detect(env)
    assert found is not None and found.master_port == derived_port("openmpi:prterun-vm-4242@1")


def test_openmpi_several_nodes_leave_node_index_and_master_unknown() -> None:
    found = mpi.detect(OMPI_TWO_NODES)
    assert found is not None
    assert (found.rank, found.world_size, found.local_rank, found.local_world_size) == (2, 4, 0, 2)
    assert (found.nnodes, found.node_rank) == (2, None)
    assert found.master_addr is None  # rank 0 may be on another host
    assert found.master_port == derived_port("openmpi:164167681")


def test_openmpi_exported_master_wins() -> None:
    env = {**OMPI_TWO_NODES, "MASTER_ADDR": "node0", "MASTER_PORT": "29400"}
    found = mpi.detect(env)
    assert found is not None and (found.master_addr, found.master_port) == ("node0", 29400)


def test_openmpi_node_id_is_the_nodes_daemon() -> None:
    uri = "1403518976.2;tcp://192.0.2.2:48071;tcp6://[fd00::2]:50663"
    found = mpi.detect({**OMPI_TWO_NODES, "OMPI_MCA_orte_local_daemon_uri": uri})
    assert found is not None and found.node_id == "openmpi-daemon:1403518976.2"
    assert node_name(found) == "openmpi-daemon:1403518976.2"
    assert node_name(mpi.detect(OMPI_TWO_NODES)) == socket.gethostname()
    assert node_name(None) == socket.gethostname()


def test_openmpi_needs_rank_and_size() -> None:
    assert mpi.detect({"OMPI_COMM_WORLD_RANK": "0"}) is None
    assert mpi.detect({"PMIX_RANK": "0", "PMIX_NAMESPACE": "x"}) is None  # srun --mpi=pmix
    assert mpi.detect({}) is None


def test_openmpi_malformed_and_inconsistent_values() -> None:
    with pytest.raises(ValueError, match=r"OMPI_COMM_WORLD_SIZE='four' is not an integer"):
        mpi.detect({**OMPI, "OMPI_COMM_WORLD_SIZE": "four"})
    with pytest.raises(
        ValueError, match=r"^OMPI_COMM_WORLD_RANK=2 is not below OMPI_COMM_WORLD_SIZE=2 "
    ):
        mpi.detect({**OMPI, "OMPI_COMM_WORLD_RANK": "2"})
    with pytest.raises(
        ValueError, match=r"^OMPI_COMM_WORLD_LOCAL_SIZE=3 is above OMPI_COMM_WORLD_SIZE=2 "
    ):
        mpi.detect({**OMPI, "OMPI_COMM_WORLD_LOCAL_SIZE": "3"})


# ---- MPICH / Intel MPI / MVAPICH2 -------------------------------------------------------------

HYDRA = {"PMI_RANK": "3", "PMI_SIZE": "4", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"}


def test_mpich_hydra_several_nodes() -> None:
    assert mpich.detect(HYDRA) == LaunchEnvironment(
        launcher="mpich", rank=3, world_size=4, local_rank=1, local_world_size=2
    )


def test_mpich_one_node_uses_loopback_but_still_needs_a_port() -> None:
    found = mpich.detect({**HYDRA, "MPI_LOCALNRANKS": "4", "MPI_LOCALRANKID": "3"})
    assert found is not None
    assert (found.nnodes, found.node_rank, found.master_addr, found.master_port) == (
        1, 0, "127.0.0.1", None
    )  # fmt: skip
    exported = mpich.detect({**HYDRA, "MASTER_ADDR": "n0", "MASTER_PORT": "29501"})
    assert exported is not None and (exported.master_addr, exported.master_port) == ("n0", 29501)


def test_mvapich2_variables() -> None:
    env = {
        "MV2_COMM_WORLD_RANK": "5",
        "MV2_COMM_WORLD_SIZE": "8",
        "MV2_COMM_WORLD_LOCAL_RANK": "1",
        "MV2_COMM_WORLD_LOCAL_SIZE": "4",
    }
    found = mpich.detect(env)
    assert found is not None
    assert (found.launcher, found.rank, found.world_size, found.local_rank) == ("mpich", 5, 8, 1)
    assert found.local_world_size == 4


def test_mpich_steps_aside_for_srun_pmi2() -> None:
    srun = {"SLURM_STEP_ID": "0", "SLURM_PROCID": "3", "SLURM_NTASKS": "4"}
    assert mpich.detect({"PMI_RANK": "3", "PMI_SIZE": "4", **srun}) is None
    # mpiexec inside an allocation: its proxies are srun tasks (one per node), ranks are not
    proxy = {**srun, "SLURM_PROCID": "1", "SLURM_NTASKS": "2"}
    found = mpich.detect({**HYDRA, **proxy})
    assert found is not None and (found.rank, found.world_size) == (3, 4)
    # SLURM before 20.11 names the step SLURM_STEPID: the SLURM detector reads it too
    old_srun = {"SLURM_STEPID": "0", "SLURM_PROCID": "3", "SLURM_NTASKS": "4"}
    assert mpich.detect({"PMI_RANK": "3", "PMI_SIZE": "4", **old_srun}) is None


def test_mpich_reads_slurm_variables_only_in_a_step() -> None:
    # outside a step SLURM's task variables are not mpich's business, even malformed ones
    found = mpich.detect({**HYDRA, "SLURM_PROCID": "n/a", "SLURM_NTASKS": ""})
    assert found is not None and found.rank == 3


def test_mpich_inconsistent_values() -> None:
    with pytest.raises(
        ValueError, match=r"^PMI_RANK=4 is not below PMI_SIZE=4 \(MPICH / PMI variables\)"
    ):
        mpich.detect({**HYDRA, "PMI_RANK": "4"})
    with pytest.raises(ValueError, match=r"^MPI_LOCALRANKID=2 is not below MPI_LOCALNRANKS=2 "):
        mpich.detect({**HYDRA, "MPI_LOCALRANKID": "2"})
    assert mpich.detect({"PMI_RANK": "1"}) is None


# ---- LSF (jsrun) ------------------------------------------------------------------------------

JSRUN = {
    "JSM_NAMESPACE_RANK": "7",
    "JSM_NAMESPACE_SIZE": "12",
    "JSM_NAMESPACE_LOCAL_RANK": "1",
    "JSM_NAMESPACE_LOCAL_SIZE": "6",
    "LSB_JOBID": "123456",
    "LSB_MCPU_HOSTS": "batch3 1 a01n01 42 a01n02 42",
}


def test_lsf_jsrun_skips_the_launch_node() -> None:
    assert lsf.detect(JSRUN) == LaunchEnvironment(
        launcher="lsf",
        rank=7,
        world_size=12,
        local_rank=1,
        local_world_size=6,
        master_addr="a01n01",
        master_port=derived_port("lsf:123456"),
    )


def test_lsf_single_host_and_exported_master() -> None:
    one = {**JSRUN, "LSB_MCPU_HOSTS": "hostA 12", "JSM_NAMESPACE_LOCAL_SIZE": "12"}
    found = lsf.detect(one)
    assert found is not None
    assert (found.master_addr, found.nnodes, found.node_rank) == ("hostA", 1, 0)
    exported = lsf.detect({**JSRUN, "MASTER_ADDR": "x", "MASTER_PORT": "1234"})
    assert exported is not None and (exported.master_addr, exported.master_port) == ("x", 1234)


def test_lsf_batch_shell_without_jsrun_is_not_a_job() -> None:
    assert lsf.detect({"LSB_JOBID": "1", "LSB_MCPU_HOSTS": "a 1 b 2"}) is None


@pytest.mark.parametrize("hosts", ["a01n01", "a 1 b", "a x b 2"])
def test_lsf_malformed_host_list_names_the_variable(hosts: str) -> None:
    with pytest.raises(ValueError, match=r"LSB_MCPU_HOSTS=.* is not 'host count host count"):
        lsf.detect({**JSRUN, "LSB_MCPU_HOSTS": hosts})


def test_lsf_without_host_list_has_no_master_address() -> None:
    env = {k: v for k, v in JSRUN.items() if k != "LSB_MCPU_HOSTS"}
    found = lsf.detect(env)
    assert found is not None and found.master_addr is None


# ---- horovodrun -------------------------------------------------------------------------------

HOROVODRUN = {  # horovodrun --gloo -np 4 -H a:2,b:2, rank 2
    "HOROVOD_RANK": "2",
    "HOROVOD_SIZE": "4",
    "HOROVOD_LOCAL_RANK": "0",
    "HOROVOD_LOCAL_SIZE": "2",
    "HOROVOD_CROSS_RANK": "1",
    "HOROVOD_CROSS_SIZE": "2",
    "HOROVOD_GLOO_RENDEZVOUS_ADDR": "10.0.0.1",
    "HOROVOD_GLOO_RENDEZVOUS_PORT": "41234",
}


def test_horovodrun_two_hosts() -> None:
    assert horovodrun.detect(HOROVODRUN) == LaunchEnvironment(
        launcher="horovodrun",
        rank=2,
        world_size=4,
        local_rank=0,
        local_world_size=2,
        node_rank=1,
        nnodes=2,
        master_addr=None,
        master_port=derived_port("horovodrun:10.0.0.1:41234"),
    )


def test_horovodrun_one_host_uses_loopback() -> None:
    env = {**HOROVODRUN, "HOROVOD_RANK": "1", "HOROVOD_LOCAL_RANK": "1", "HOROVOD_LOCAL_SIZE": "4"}
    env.update(HOROVOD_CROSS_RANK="0", HOROVOD_CROSS_SIZE="1")
    found = horovodrun.detect(env)
    assert found is not None and (found.master_addr, found.nnodes, found.node_rank) == (
        "127.0.0.1", 1, 0
    )  # fmt: skip


def test_horovodrun_uneven_hosts_leave_the_node_index_unknown() -> None:
    # -H a:2,b:1: rank 1 is local rank 1 on a, the only host with a second slot.
    env = {**HOROVODRUN, "HOROVOD_RANK": "1", "HOROVOD_SIZE": "3", "HOROVOD_LOCAL_RANK": "1"}
    env.update(HOROVOD_CROSS_RANK="0", HOROVOD_CROSS_SIZE="1")
    found = horovodrun.detect(env)
    assert found is not None and (found.nnodes, found.node_rank) == (None, None)


def test_horovodrun_inconsistent_values() -> None:
    with pytest.raises(
        ValueError, match=r"^HOROVOD_CROSS_RANK=2 is not below HOROVOD_CROSS_SIZE=2 "
    ):
        horovodrun.detect({**HOROVODRUN, "HOROVOD_CROSS_RANK": "2"})
    with pytest.raises(ValueError, match=r"HOROVOD_RANK='x' is not an integer"):
        horovodrun.detect({**HOROVODRUN, "HOROVOD_RANK": "x"})


# ---- detection order ------------------------------------------------------------------------

SLURM_STEP = {"SLURM_JOB_ID": "77", "SLURM_STEP_ID": "0", "SLURM_PROCID": "1", "SLURM_NTASKS": "2"}


def test_torchrun_inside_srun_reads_torchrun() -> None:
    # srun --ntasks-per-node=1 torchrun ...: SLURM_PROCID is the agent's, RANK the worker's
    found = environments.detect({**SLURM_STEP, **TORCHRUN})
    assert found is not None and (found.launcher, found.rank) == ("torchelastic", 5)


def test_mpirun_inside_an_allocation_reads_open_mpi() -> None:
    found = environments.detect({**SLURM_STEP, **OMPI_TWO_NODES})
    assert found is not None and (found.launcher, found.rank) == ("openmpi", 2)


def test_jsrun_with_spectrum_mpi_variables_reads_lsf() -> None:
    ompi = {**OMPI, "OMPI_COMM_WORLD_RANK": "7", "OMPI_COMM_WORLD_SIZE": "12"}
    ompi.update(OMPI_COMM_WORLD_LOCAL_RANK="1", OMPI_COMM_WORLD_LOCAL_SIZE="6")
    found = environments.detect({**ompi, **JSRUN})
    assert found is not None and (found.launcher, found.master_addr) == ("lsf", "a01n01")


def test_every_launcher_is_in_the_order() -> None:
    for env, launcher in [
        (TORCHRUN, "torchelastic"),
        (HOROVODRUN, "horovodrun"),
        (JSRUN, "lsf"),
        (OMPI, "openmpi"),
        (HYDRA, "mpich"),
    ]:
        found = environments.detect(env)
        assert found is not None and found.launcher == launcher


# ---- rank 0's address for initialize() --------------------------------------------------------


def test_rendezvous_address_from_the_environment() -> None:
    launch = mpi.detect(OMPI)
    assert launch is not None
    assert rendezvous_address(launch) == ("127.0.0.1", derived_port("openmpi:164167681"))


@pytest.mark.parametrize(
    ("env", "missing", "how"),
    [
        (OMPI_TWO_NODES, "MASTER_ADDR cannot", "mpirun -x MASTER_ADDR=<host> -x MASTER_PORT="),
        (HYDRA, "MASTER_ADDR and MASTER_PORT cannot", "mpiexec -genv MASTER_ADDR <host>"),
        (HOROVODRUN, "MASTER_ADDR cannot", "MASTER_ADDR=<host> MASTER_PORT=<port> horovodrun"),
    ],
)
def test_missing_master_says_what_to_export(env: dict[str, str], missing: str, how: str) -> None:
    launch = environments.detect(env)
    assert launch is not None
    with pytest.raises(DistributedError, match="Export MASTER_ADDR") as caught:
        rendezvous_address(launch)
    assert missing in str(caught.value)
    assert how in str(caught.value)
    assert f"rank {launch.rank} of {launch.world_size}" in str(caught.value)


def test_initialize_without_master_fails_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    _unset(monkeypatch, *LAUNCH_VARS, "GROUP_WORLD_SIZE", "OMPI_COMM_WORLD_RANK")
    for key, value in OMPI_TWO_NODES.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(DistributedError, match=r"mpirun -x MASTER_ADDR=<host>"):
        idist.initialize("gloo", timeout=5)
    assert not dist.is_initialized()


def _launched_as(monkeypatch: pytest.MonkeyPatch, rank: int, port: int) -> None:
    _unset(monkeypatch, *LAUNCH_VARS, "GROUP_WORLD_SIZE")
    env = {**OMPI_TWO_NODES, "OMPI_COMM_WORLD_RANK": str(rank), "OMPI_COMM_WORLD_LOCAL_RANK": "0"}
    for key, value in {**env, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}.items():
        monkeypatch.setenv(key, value)


def test_rank_zero_on_a_taken_port_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as taken:
        taken.bind(("", 0))
        taken.listen()
        port = taken.getsockname()[1]
        _launched_as(monkeypatch, 0, port)
        with pytest.raises(DistributedError, match=rf"Rank 0 could not host .* 127.0.0.1:{port}"):
            idist.initialize("gloo", timeout=5)
    assert not dist.is_initialized()


def test_a_rank_that_cannot_reach_rank_zero_fails_within_the_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nobody listens there
    _launched_as(monkeypatch, 2, port)
    started = time.monotonic()
    with pytest.raises(DistributedError, match=rf"Rank 2 could not reach .* 127.0.0.1:{port}"):
        idist.initialize("gloo", timeout=2)
    assert time.monotonic() - started < 60
    assert not dist.is_initialized()
