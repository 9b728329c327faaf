"""SLURM's environment, read from dicts: srun steps, batch shells, tasks per node, host lists.

The dicts are what SLURM 22.05 set in real tasks (``srun -N2 -n4 env`` on the two-node test
cluster of ``tests/distributed/slurm_cluster.py``), trimmed to the variables that matter.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distbridge import environments
from distbridge.environments import LaunchEnvironment, mpi, slurm
from distbridge.environments.base import derived_port
from distbridge.environments.slurm import expand_hostlist

# srun -N2 -n4 (block): rank 1, the second task on node n1.
STEP = {
    "SLURM_JOB_ID": "41",
    "SLURM_JOBID": "41",
    "SLURM_STEP_ID": "0",
    "SLURM_STEPID": "0",
    "SLURM_PROCID": "1",
    "SLURM_LOCALID": "1",
    "SLURM_NODEID": "0",
    "SLURM_NTASKS": "4",
    "SLURM_NPROCS": "4",
    "SLURM_STEP_NUM_TASKS": "4",
    "SLURM_NNODES": "2",
    "SLURM_JOB_NUM_NODES": "2",
    "SLURM_STEP_NUM_NODES": "2",
    "SLURM_JOB_NODELIST": "n[1-2]",
    "SLURM_NODELIST": "n[1-2]",
    "SLURM_STEP_NODELIST": "n[1-2]",
    "SLURM_TASKS_PER_NODE": "2(x2)",
    "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
    "SLURMD_NODENAME": "n1",
    "PATH": "/usr/bin",
}

# The shell of `sbatch -N2 -n4 job.sh` before any srun: SLURM_PROCID=0 but no step.
BATCH_SHELL = {k: v for k, v in STEP.items() if "STEP" not in k} | {
    "SLURM_PROCID": "0",
    "SLURM_LOCALID": "0",
}


def _step(**changes: str | None) -> dict[str, str]:
    """STEP with ``changes`` applied (None removes a variable)."""
    env = dict(STEP)
    for key, value in changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


# ---- srun steps -------------------------------------------------------------------------------


def test_srun_block_task() -> None:
    assert slurm.detect(STEP) == LaunchEnvironment(
        launcher="slurm",
        rank=1,
        world_size=4,
        local_rank=1,
        local_world_size=2,
        node_rank=0,
        nnodes=2,
        master_addr="n1",
        master_port=derived_port("slurm:41.0"),
    )


@pytest.mark.parametrize(
    ("rank", "local", "node"),
    [(0, 0, 0), (1, 0, 1), (2, 1, 0), (3, 1, 1)],  # srun -N2 -n4 -m cyclic, as SLURM sets it
)
def test_srun_cyclic_tasks(rank: int, local: int, node: int) -> None:
    env = _step(SLURM_PROCID=str(rank), SLURM_LOCALID=str(local), SLURM_NODEID=str(node))
    env["SLURM_DISTRIBUTION"] = "cyclic"
    found = slurm.detect(env)
    assert found is not None
    assert (found.rank, found.local_rank, found.node_rank) == (rank, local, node)
    assert (found.local_world_size, found.nnodes, found.master_addr) == (2, 2, "n1")


@pytest.mark.parametrize(("node", "local_size"), [(0, 2), (1, 1)])
def test_uneven_step_gives_each_node_its_own_size(node: int, local_size: int) -> None:
    # srun -N2 -n3: SLURM_STEP_TASKS_PER_NODE=2,1
    env = _step(
        SLURM_NTASKS="3",
        SLURM_STEP_NUM_TASKS="3",
        SLURM_PROCID=str(2 * node),
        SLURM_LOCALID="0",
        SLURM_NODEID=str(node),
        SLURM_TASKS_PER_NODE="2,1",
        SLURM_STEP_TASKS_PER_NODE="2,1",
    )
    found = slurm.detect(env)
    assert found is not None
    assert (found.world_size, found.local_world_size, found.node_rank) == (3, local_size, node)


def test_step_tasks_per_node_wins_over_the_jobs() -> None:
    # sbatch -N2 -n4, then `srun -n2 --ntasks-per-node 1` inside: the step has 1 task per node.
    env = _step(
        SLURM_STEP_NUM_TASKS="2", SLURM_NTASKS="2", SLURM_PROCID="1", SLURM_LOCALID="0",
        SLURM_NODEID="1", SLURM_STEP_TASKS_PER_NODE="1(x2)", SLURM_TASKS_PER_NODE="2(x2)",
    )  # fmt: skip
    found = slurm.detect(env)
    assert found is not None
    assert (found.world_size, found.local_world_size, found.node_rank) == (2, 1, 1)


@pytest.mark.parametrize(
    ("value", "nnodes", "node", "expected"),
    [("2", 3, 1, 2), ("2(x2)", 2, 1, 2), ("3,1", 2, 0, 3), ("3,1", 2, 1, 1), ("1,2(x2)", 3, 2, 2)],
)
def test_ntasks_per_node_is_the_last_resort(
    value: str, nnodes: int, node: int, expected: int
) -> None:
    env = _step(
        SLURM_STEP_TASKS_PER_NODE=None, SLURM_TASKS_PER_NODE=None, SLURM_NTASKS_PER_NODE=value,
        SLURM_NTASKS="5", SLURM_STEP_NUM_TASKS="5", SLURM_NNODES=str(nnodes),
        SLURM_STEP_NUM_NODES=str(nnodes), SLURM_NODEID=str(node), SLURM_PROCID="0",
        SLURM_LOCALID="0",
    )  # fmt: skip
    found = slurm.detect(env)
    assert found is not None
    assert found.local_world_size == expected


def test_tasks_per_node_of_another_node_count_is_not_used() -> None:
    env = _step(SLURM_STEP_TASKS_PER_NODE="2(x3)", SLURM_TASKS_PER_NODE=None)
    found = slurm.detect(env)
    assert found is not None
    assert found.local_world_size is None  # 3 entries for 2 nodes: not this step's layout


def test_without_tasks_per_node_the_local_size_is_unknown() -> None:
    env = _step(SLURM_STEP_TASKS_PER_NODE=None, SLURM_TASKS_PER_NODE=None)
    found = slurm.detect(env)
    assert found is not None
    assert (found.local_rank, found.local_world_size) == (1, None)


def test_old_variable_names() -> None:
    env = {
        "SLURM_JOBID": "7",
        "SLURM_STEPID": "3",
        "SLURM_PROCID": "2",
        "SLURM_LOCALID": "0",
        "SLURM_NODEID": "1",
        "SLURM_NPROCS": "4",
        "SLURM_NNODES": "2",
        "SLURM_NODELIST": "gpu-[01-02]",
        "SLURM_TASKS_PER_NODE": "2(x2)",
    }
    assert slurm.detect(env) == LaunchEnvironment(
        "slurm", 2, 4, 0, 2, 1, 2, "gpu-01", derived_port("slurm:7.3")
    )


def test_nnodes_from_the_node_list_when_unset() -> None:
    env = _step(SLURM_NNODES=None, SLURM_JOB_NUM_NODES=None, SLURM_STEP_NUM_NODES=None)
    env["SLURM_STEP_NODELIST"] = "node[001-003,7]"
    found = slurm.detect(env)
    assert found is not None
    assert (found.nnodes, found.master_addr) == (4, "node001")


def test_the_steps_node_list_wins_over_the_jobs() -> None:
    # srun --relative=1 -N1 in a two-node job: the step runs on n2 only.
    env = _step(SLURM_STEP_NODELIST="n2", SLURM_STEP_NUM_NODES="1", SLURM_NODEID="0")
    env |= {"SLURM_STEP_NUM_TASKS": "2", "SLURM_STEP_TASKS_PER_NODE": "2"}
    found = slurm.detect(env)
    assert found is not None
    assert (found.master_addr, found.nnodes, found.world_size) == ("n2", 1, 2)


# ---- MASTER_ADDR / MASTER_PORT ----------------------------------------------------------------


def test_master_addr_and_port_when_set_win() -> None:
    found = slurm.detect(_step(MASTER_ADDR="10.0.0.5", MASTER_PORT="29400"))
    assert found is not None
    assert (found.master_addr, found.master_port) == ("10.0.0.5", 29400)


def test_master_port_is_the_same_for_every_task_of_a_step() -> None:
    ports = set()
    for rank, (local, node) in enumerate([(0, 0), (1, 0), (0, 1), (1, 1)]):
        env = _step(SLURM_PROCID=str(rank), SLURM_LOCALID=str(local), SLURM_NODEID=str(node))
        found = slurm.detect(env)
        assert found is not None
        ports.add(found.master_port)
    assert ports == {derived_port("slurm:41.0")}


def test_master_port_differs_between_steps_and_jobs_and_is_high() -> None:
    ports = {
        (job, step): slurm.detect(_step(SLURM_JOB_ID=str(job), SLURM_STEP_ID=str(step)))
        for job in range(100, 140)
        for step in range(3)
    }
    values = [found.master_port for found in ports.values() if found and found.master_port]
    assert len(values) == 120
    assert len(set(values)) > 110  # crc32 into 10,000 ports: a few collisions at most
    assert all(20000 <= port < 30000 for port in values)


def test_no_job_id_and_no_master_port_leaves_the_port_unknown() -> None:
    found = slurm.detect(_step(SLURM_JOB_ID=None, SLURM_JOBID=None))
    assert found is not None
    assert found.master_port is None


def test_no_node_list_on_one_node_uses_loopback() -> None:
    env = _step(SLURM_JOB_NODELIST=None, SLURM_NODELIST=None, SLURM_STEP_NODELIST=None)
    env |= {"SLURM_NNODES": "1", "SLURM_STEP_NUM_NODES": "1", "SLURM_STEP_TASKS_PER_NODE": "4"}
    found = slurm.detect(env)
    assert found is not None
    assert found.master_addr == "127.0.0.1"
    env |= {"SLURM_NNODES": "2", "SLURM_STEP_NUM_NODES": "2"}
    found = slurm.detect(env | {"SLURM_STEP_TASKS_PER_NODE": "2(x2)"})
    assert found is not None
    assert found.master_addr is None  # rank 0's host is unknown: initialize() says what to set


# ---- not an srun step -------------------------------------------------------------------------


def test_outside_slurm_is_none() -> None:
    assert slurm.detect({}) is None
    assert slurm.detect({"PATH": "/bin", "RANK": "0"}) is None


def test_batch_shell_is_not_a_step_and_warns_once() -> None:
    slurm._warn_no_srun.cache_clear()
    with pytest.warns(RuntimeWarning, match=r"SLURM job 41 asks for 4 tasks.*srun python"):
        assert slurm.detect(BATCH_SHELL) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert slurm.detect(BATCH_SHELL) is None  # a second time: no warning
        assert environments.detect(BATCH_SHELL) is None


def test_salloc_shell_without_procid_warns() -> None:
    slurm._warn_no_srun.cache_clear()
    env = {k: v for k, v in BATCH_SHELL.items() if k not in ("SLURM_PROCID", "SLURM_LOCALID")}
    with pytest.warns(RuntimeWarning, match=r"not started by srun"):
        assert slurm.detect(env) is None


def test_single_task_job_shell_is_quiet() -> None:
    slurm._warn_no_srun.cache_clear()
    env = BATCH_SHELL | {"SLURM_NTASKS": "1", "SLURM_NPROCS": "1"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert slurm.detect(env) is None


def test_procid_without_ntasks_is_refused() -> None:
    env = {"SLURM_PROCID": "0", "SLURM_STEP_ID": "0"}
    with pytest.raises(ValueError, match=r"SLURM_NTASKS is not.*start the job with srun"):
        slurm.detect(env)


@pytest.mark.parametrize("key", ["SLURM_PROCID", "SLURM_NTASKS", "SLURM_NODEID", "SLURM_LOCALID"])
def test_malformed_values_name_the_variable(key: str) -> None:
    with pytest.raises(ValueError, match=rf"{key}='x' is not an integer"):
        slurm.detect(_step(**{key: "x", "SLURM_STEP_NUM_TASKS": None}))


def test_local_rank_past_this_nodes_task_count_is_refused() -> None:
    with pytest.raises(
        ValueError, match=r"^SLURM_LOCALID=2 is not below the 2 tasks of node SLURM_NODEID=0 "
    ):
        slurm.detect(_step(SLURM_LOCALID="2"))


def test_malformed_tasks_per_node_names_the_variable() -> None:
    with pytest.raises(ValueError, match=r"SLURM_STEP_TASKS_PER_NODE='2\(y2\)'.*N\(xK\)"):
        slurm.detect(_step(SLURM_STEP_TASKS_PER_NODE="2(y2)"))


@pytest.mark.parametrize(
    ("value", "expected"),
    [("4", [4]), ("2(x2)", [2, 2]), ("3,1", [3, 1]), ("2(x3),1", [2, 2, 2, 1]),
     ("1,2(x2),3", [1, 2, 2, 3])],
)  # fmt: skip
def test_tasks_per_node_notation(value: str, expected: list[int]) -> None:
    assert slurm.tasks_per_node(value) == expected


@pytest.mark.parametrize("value", ["", "x", "2(x)", "2x2", "(x2)", "2,,1"])
def test_tasks_per_node_refuses_other_text(value: str) -> None:
    with pytest.raises(ValueError, match=re.escape(repr(value))):
        slurm.tasks_per_node(value)


# ---- detection order --------------------------------------------------------------------------


def test_srun_step_is_detected_by_environments() -> None:
    assert environments.detect(STEP) == slurm.detect(STEP)


def test_torchrun_inside_srun_is_torchrun() -> None:
    # srun --ntasks-per-node=1 torchrun --nproc-per-node 4 ...: SLURM_PROCID is the agent's.
    env = STEP | {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4"}
    found = environments.detect(env)
    assert found is not None
    assert (found.launcher, found.rank, found.world_size) == ("torchelastic", 5, 8)


def test_open_mpi_inside_an_allocation_is_open_mpi() -> None:
    env = STEP | {"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "8"}
    env |= {"OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "4"}
    found = environments.detect(env)
    assert found is not None
    assert (found.launcher, found.rank, found.local_rank) == (mpi.LAUNCHER, 3, 1)


# ---- host lists -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("hostlist", "expected"),
    [
        ("n1", ["n1"]),
        ("n[1-2]", ["n1", "n2"]),
        ("node[001-003,7]", ["node001", "node002", "node003", "node7"]),
        ("a[1-2]-b[3-4]", ["a1-b3", "a1-b4", "a2-b3", "a2-b4"]),
        ("gpu-[01-02],cpu1", ["gpu-01", "gpu-02", "cpu1"]),
        ("n[8-10]", ["n8", "n9", "n10"]),
        ("n[08-10]", ["n08", "n09", "n10"]),
        ("n[9-11],n5", ["n9", "n10", "n11", "n5"]),
        ("127.0.0.[1-2]", ["127.0.0.1", "127.0.0.2"]),
        ("[1-2]", ["1", "2"]),
        ("n[1,1]", ["n1", "n1"]),
        ("n[1-2],,n3", ["n1", "n2", "n3"]),
        ("", []),
        # SLURM's order for three groups (checked against `scontrol show hostnames`):
        ("a[1-2]b[3-4]c[5-6]", ["a1b3c5", "a1b3c6", "a2b3c5", "a2b3c6",
                                "a1b4c5", "a1b4c6", "a2b4c5", "a2b4c6"]),
    ],
)  # fmt: skip
def test_hostlist_examples(hostlist: str, expected: list[str]) -> None:
    assert expand_hostlist(hostlist) == expected


@pytest.mark.parametrize(
    ("hostlist", "message"),
    [
        ("n[1-2", "unclosed"),
        ("n1-2]", "unbalanced"),
        ("n[[1]]", "nested"),
        ("n[3-1]", "runs backwards"),
        ("n[a]", "not a number or a range"),
        ("n[1-]", "not a number or a range"),
    ],
)
def test_hostlist_errors_name_the_list(hostlist: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(repr(hostlist)) + ".*" + message):
        expand_hostlist(hostlist)


_HOST = st.tuples(
    st.text("abcxyz-.", min_size=1, max_size=4),
    st.integers(0, 120),
    st.integers(1, 3),
)


def _compress(hosts: list[str]) -> str:
    """Write ``hosts`` as a SLURM host list: runs of one prefix in one bracket group."""
    entries: list[tuple[str, list[list[str]]]] = []  # (prefix, [[first, ..., last], ...])
    for host in hosts:
        prefix, digits = re.fullmatch(r"(.*?)(\d*)", host).groups()  # type: ignore[union-attr]
        if not digits:
            entries.append((host, []))
            continue
        if not entries or entries[-1][0] != prefix or not entries[-1][1]:
            entries.append((prefix, []))
        runs = entries[-1][1]
        if runs and digits == str(int(runs[-1][-1]) + 1).zfill(len(runs[-1][0])):
            runs[-1].append(digits)
        else:
            runs.append([digits])
    parts = []
    for prefix, runs in entries:
        groups = ",".join(run[0] if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in runs)
        parts.append(f"{prefix}[{groups}]" if runs else prefix)
    return ",".join(parts)


@given(st.lists(_HOST, max_size=12))
def test_hostlist_round_trip(specs: list[tuple[str, int, int]]) -> None:
    hosts = [prefix + str(number).zfill(width) for prefix, number, width in specs]
    assert expand_hostlist(_compress(hosts)) == hosts


_GROUP = st.lists(
    st.tuples(st.integers(0, 30), st.integers(0, 3), st.integers(1, 3)), min_size=1, max_size=3
).map(lambda ranges: ",".join(
    f"{lo:0{w}d}" if n == 0 else f"{lo:0{w}d}-{lo + n}" for lo, n, w in ranges
))  # fmt: skip
# A host pattern: a name, then one to three bracket groups, each after some text (none too).
_PATTERN = st.lists(
    st.tuples(st.sampled_from(["", "n", "-b", "x."]), _GROUP), min_size=1, max_size=3
).map(lambda groups: "h" + "".join(f"{text}[{group}]" for text, group in groups))


@pytest.mark.skipif(
    shutil.which("scontrol") is None,
    reason="scontrol is not installed (Debian package slurm-client)",
)
@settings(max_examples=40, deadline=None)
@given(st.lists(_PATTERN, min_size=1, max_size=3).map(",".join))
def test_hostlist_matches_scontrol(tmp_path_factory: pytest.TempPathFactory, hostlist: str) -> None:
    conf = tmp_path_factory.getbasetemp() / "scontrol.conf"
    if not conf.exists():
        conf.write_text("ClusterName=x\nSlurmctldHost=localhost\nNodeName=x\n")
    out = subprocess.run(
        ["scontrol", "show", "hostnames", hostlist], env={"SLURM_CONF": str(conf)},
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    assert expand_hostlist(hostlist) == out.stdout.split()
