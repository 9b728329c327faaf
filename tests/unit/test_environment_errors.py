"""Errors for inconsistent or malformed launcher variables name each variable with its value.

Every detector is a pure function of a dict, so hypothesis draws inconsistent layouts (a rank
at or past the world size, a negative local rank, a node index past the number of nodes,
...), each detector's builder writes them as that launcher's variables, and the error must be
a ValueError whose message holds every offending ``NAME=value`` and says what to do.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from distbridge.environments import (
    LaunchEnvironment,
    horovodrun,
    lsf,
    mpi,
    mpich,
    slurm,
    torchelastic,
)

Fields = dict[str, int]  # LaunchEnvironment field: value (absent: not set)

# Each kind of inconsistency: the fields whose values the message must name.
KINDS: dict[str, tuple[str, ...]] = {
    "world below 1": ("world_size",),
    "negative rank": ("rank",),
    "rank not below world": ("rank", "world_size"),
    "local world below 1": ("local_world_size",),
    "local world above world": ("local_world_size", "world_size"),
    "negative local rank": ("local_rank",),
    "local rank not below local world": ("local_rank", "local_world_size"),
    "nodes below 1": ("nnodes",),
    "negative node index": ("node_rank",),
    "node index not below nodes": ("node_rank", "nnodes"),
}
LOCAL_KINDS = [k for k in KINDS if "node" not in k]
ALL_KINDS = list(KINDS)
HUGE = 10**9


@st.composite
def inconsistent(draw: st.DrawFn, kinds: list[str], *, even: bool = False) -> tuple[Fields, str]:
    """Fields that break exactly one rule (every earlier rule holds), and the rule's kind.

    ``even``: node fields come with a local world size that divides the world evenly (as
    horovodrun needs to read them at all).
    """
    kind = draw(st.sampled_from(kinds))
    world = draw(st.integers(1, 64))
    fields: Fields = {"world_size": world, "rank": draw(st.integers(0, world - 1))}
    beyond = st.integers(0, HUGE)
    if kind == "world below 1":
        fields["world_size"] = draw(st.integers(-HUGE, 0))
    elif kind == "negative rank":
        fields["rank"] = -draw(st.integers(1, HUGE))
    elif kind == "rank not below world":
        fields["rank"] = world + draw(beyond)
    elif kind == "local world below 1":
        fields["local_world_size"] = draw(st.integers(-HUGE, 0))
    elif kind == "local world above world":
        fields["local_world_size"] = world + 1 + draw(beyond)
    elif kind == "negative local rank":
        if draw(st.booleans()):
            fields["local_world_size"] = draw(st.integers(1, world))
        fields["local_rank"] = -draw(st.integers(1, HUGE))
    elif kind == "local rank not below local world":
        fields["local_world_size"] = local = draw(st.integers(1, world))
        fields["local_rank"] = local + draw(beyond)
    elif even:  # a node kind where the nodes must divide the world evenly
        local, nodes = draw(st.integers(1, 8)), draw(st.integers(1, 8))
        fields.update(world_size=local * nodes, rank=draw(st.integers(0, local * nodes - 1)))
        fields.update(local_world_size=local, local_rank=draw(st.integers(0, local - 1)))
        fields["nnodes"] = nodes
        fields["node_rank"] = (
            -draw(st.integers(1, HUGE)) if kind == "negative node index" else nodes + draw(beyond)
        )
    elif kind == "nodes below 1":
        fields["nnodes"] = draw(st.integers(-HUGE, 0))
    elif kind == "negative node index":
        if draw(st.booleans()):
            fields["nnodes"] = draw(st.integers(1, 64))
        fields["node_rank"] = -draw(st.integers(1, HUGE))
    else:
        fields["nnodes"] = nodes = draw(st.integers(1, 64))
        fields["node_rank"] = nodes + draw(beyond)
    return fields, kind


@dataclass(frozen=True)
class Launcher:
    """One detector, the kinds of inconsistency it can see, and how its launcher names the
    fields (a tuple: any of these names, as the launcher may use any)."""

    detect: Callable[[Mapping[str, str]], LaunchEnvironment | None]
    kinds: list[str]
    names: Mapping[str, tuple[str, ...]]
    base: Mapping[str, str]
    even: bool = False


LAUNCHERS = {
    "torchelastic": Launcher(
        torchelastic.detect,
        ALL_KINDS,
        {"rank": ("RANK",), "world_size": ("WORLD_SIZE",), "local_rank": ("LOCAL_RANK",),
         "local_world_size": ("LOCAL_WORLD_SIZE",), "node_rank": ("GROUP_RANK",),
         "nnodes": ("GROUP_WORLD_SIZE",)},
        {"MASTER_ADDR": "127.0.0.1"},
    ),
    "horovodrun": Launcher(
        horovodrun.detect,
        [*LOCAL_KINDS, "negative node index", "node index not below nodes"],
        {"rank": ("HOROVOD_RANK",), "world_size": ("HOROVOD_SIZE",),
         "local_rank": ("HOROVOD_LOCAL_RANK",), "local_world_size": ("HOROVOD_LOCAL_SIZE",),
         "node_rank": ("HOROVOD_CROSS_RANK",), "nnodes": ("HOROVOD_CROSS_SIZE",)},
        {"HOROVOD_GLOO_RENDEZVOUS_ADDR": "10.0.0.1", "HOROVOD_GLOO_RENDEZVOUS_PORT": "4321"},
        even=True,
    ),
    "lsf": Launcher(
        lsf.detect,
        LOCAL_KINDS,
        {"rank": ("JSM_NAMESPACE_RANK",), "world_size": ("JSM_NAMESPACE_SIZE",),
         "local_rank": ("JSM_NAMESPACE_LOCAL_RANK",),
         "local_world_size": ("JSM_NAMESPACE_LOCAL_SIZE",)},
        {"LSB_JOBID": "7", "LSB_MCPU_HOSTS": "batch1 1 a01 42 a02 42"},
    ),
    "openmpi": Launcher(
        mpi.detect,
        [*LOCAL_KINDS, "nodes below 1"],
        {"rank": ("OMPI_COMM_WORLD_RANK",), "world_size": ("OMPI_COMM_WORLD_SIZE",),
         "local_rank": ("OMPI_COMM_WORLD_LOCAL_RANK",),
         "local_world_size": ("OMPI_COMM_WORLD_LOCAL_SIZE",),
         "nnodes": ("OMPI_MCA_orte_num_nodes",)},
        {"OMPI_MCA_ess_base_jobid": "164167681"},
    ),
    "mpich": Launcher(
        mpich.detect,
        LOCAL_KINDS,
        {"rank": ("PMI_RANK",), "world_size": ("PMI_SIZE",), "local_rank": ("MPI_LOCALRANKID",),
         "local_world_size": ("MPI_LOCALNRANKS",)},
        {},
    ),
    "mvapich2": Launcher(
        mpich.detect,
        LOCAL_KINDS,
        {"rank": ("MV2_COMM_WORLD_RANK",), "world_size": ("MV2_COMM_WORLD_SIZE",),
         "local_rank": ("MV2_COMM_WORLD_LOCAL_RANK",),
         "local_world_size": ("MV2_COMM_WORLD_LOCAL_SIZE",)},
        {},
    ),
    "slurm": Launcher(
        slurm.detect,
        ALL_KINDS,
        {"rank": ("SLURM_PROCID",),
         "world_size": ("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS"),
         "local_rank": ("SLURM_LOCALID",),
         "local_world_size": ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE",
                              "SLURM_NTASKS_PER_NODE"),
         "node_rank": ("SLURM_NODEID",),
         "nnodes": ("SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES")},
        {"SLURM_JOB_ID": "41", "SLURM_STEP_ID": "0"},
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", list(LAUNCHERS))
@given(data=st.data())
def test_inconsistent_variables_are_named_with_their_values(name: str, data: st.DataObject) -> None:
    launcher = LAUNCHERS[name]
    fields, kind = data.draw(inconsistent(launcher.kinds, even=launcher.even), label="fields")
    if name == "slurm" and fields.get("local_world_size", 0) < 0:
        fields["local_world_size"] = 0  # "-1" is not tasks-per-node notation: another error
    env = dict(launcher.base)
    shown: dict[str, str] = {}
    for field, value in fields.items():
        key = data.draw(st.sampled_from(launcher.names[field]), label=field)
        env[key] = str(value)
        shown[field] = f"{key}={value}"

    with pytest.raises(ValueError, match=r"; fix (it|them), or unset (it|them) if ") as info:
        launcher.detect(env)

    message = str(info.value)
    for field in KINDS[kind]:
        assert shown[field] in message, (kind, message)


NON_INTEGERS = st.text(min_size=1, max_size=8).filter(lambda text: not _is_int(text))
VALID = {  # a consistent world per launcher, and the variables it always reads
    "torchelastic": {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
                     "GROUP_RANK": "0", "GROUP_WORLD_SIZE": "1", "MASTER_PORT": "29500"},
    "horovodrun": {"HOROVOD_RANK": "1", "HOROVOD_SIZE": "2", "HOROVOD_LOCAL_RANK": "1",
                   "HOROVOD_LOCAL_SIZE": "2", "HOROVOD_CROSS_SIZE": "1"},
    "lsf": {"JSM_NAMESPACE_RANK": "1", "JSM_NAMESPACE_SIZE": "2",
            "JSM_NAMESPACE_LOCAL_RANK": "1", "JSM_NAMESPACE_LOCAL_SIZE": "2"},
    "openmpi": {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4",
                "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
                "OMPI_MCA_orte_num_nodes": "2"},
    "mpich": {"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"},
    "mvapich2": {"MV2_COMM_WORLD_RANK": "1", "MV2_COMM_WORLD_SIZE": "2",
                 "MV2_COMM_WORLD_LOCAL_RANK": "1", "MV2_COMM_WORLD_LOCAL_SIZE": "2"},
    "slurm": {"SLURM_STEP_ID": "0", "SLURM_PROCID": "1", "SLURM_NTASKS": "2",
              "SLURM_LOCALID": "1", "SLURM_NODEID": "0", "SLURM_NNODES": "1"},
}  # fmt: skip


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("name", list(VALID))
@given(data=st.data())
def test_non_integer_variables_are_named_with_their_values(name: str, data: st.DataObject) -> None:
    env = dict(VALID[name])
    assert LAUNCHERS[name].detect(env) is not None  # consistent as given
    key = data.draw(st.sampled_from(sorted(env)), label="key")
    env[key] = raw = data.draw(NON_INTEGERS, label="value")

    with pytest.raises(ValueError, match=r" is not an integer; fix or unset it\.$") as info:
        LAUNCHERS[name].detect(env)

    assert f"{key}={raw!r} is not an integer; fix or unset it" in str(info.value)


# ---- examples: the whole text -----------------------------------------------------------------

FIX = "fix them, or unset them if another launch left them behind."


@pytest.mark.parametrize(
    ("detect", "env", "expected"),
    [
        (torchelastic.detect, {"RANK": "3", "WORLD_SIZE": "2"},
         f"RANK=3 is not below WORLD_SIZE=2 (torchrun variables): ranks run from 0 to 1; {FIX}"),
        (torchelastic.detect,
         {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "4"},
         "GROUP_RANK=4 is not below WORLD_SIZE=8 / LOCAL_WORLD_SIZE=2 = 4 nodes (torchrun "
         f"variables): node indices run from 0 to 3; {FIX}"),
        (torchelastic.detect,
         {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "2", "GROUP_WORLD_SIZE": "2"},
         "RANK=5 // LOCAL_WORLD_SIZE=2 = node 2 is not below GROUP_WORLD_SIZE=2 (torchrun "
         f"variables): node indices run from 0 to 1; {FIX}"),
        (slurm.detect,
         {"SLURM_STEP_ID": "0", "SLURM_PROCID": "1", "SLURM_NTASKS": "4", "SLURM_NODEID": "1",
          "SLURM_LOCALID": "1", "SLURM_STEP_TASKS_PER_NODE": "3,1"},
         "SLURM_LOCALID=1 is not below the 1 task of node SLURM_NODEID=1 in "
         f"SLURM_STEP_TASKS_PER_NODE=3,1 (srun variables): local ranks run from 0 to 0; {FIX}"),
        (slurm.detect,
         {"SLURM_STEP_ID": "0", "SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_NODEID": "2",
          "SLURM_JOB_NODELIST": "n[1-2]"},
         "SLURM_NODEID=2 is not below the 2 hosts of SLURM_JOB_NODELIST=n[1-2] (srun "
         f"variables): node indices run from 0 to 1; {FIX}"),
        (mpi.detect, {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2",
                      "OMPI_COMM_WORLD_LOCAL_SIZE": "3"},
         "OMPI_COMM_WORLD_LOCAL_SIZE=3 is above OMPI_COMM_WORLD_SIZE=2 (Open MPI variables): "
         f"a node cannot run more processes than the whole job; {FIX}"),
        (mpich.detect, {"PMI_RANK": "-1", "PMI_SIZE": "4"},
         "PMI_RANK=-1 is negative (MPICH / PMI variables): ranks count from 0; fix it, or "
         "unset it if another launch left it behind."),
        (lsf.detect, {"JSM_NAMESPACE_RANK": "0", "JSM_NAMESPACE_SIZE": "0"},
         "JSM_NAMESPACE_SIZE=0 is below 1 (jsrun variables): a job has at least 1 process; "
         "fix it, or unset it if another launch left it behind."),
        (horovodrun.detect, {"HOROVOD_RANK": "0", "HOROVOD_SIZE": "2",
                             "HOROVOD_LOCAL_RANK": "2", "HOROVOD_LOCAL_SIZE": "2"},
         "HOROVOD_LOCAL_RANK=2 is not below HOROVOD_LOCAL_SIZE=2 (horovodrun variables): "
         f"local ranks run from 0 to 1; {FIX}"),
    ],
    ids=["torchrun", "torchrun-derived-nodes", "torchrun-derived-node", "slurm-uneven",
         "slurm-nodelist", "openmpi", "mpich", "lsf", "horovodrun"],
)  # fmt: skip
def test_examples(
    detect: Callable[[Mapping[str, str]], LaunchEnvironment | None],
    env: dict[str, str],
    expected: str,
) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(expected)}$"):
        detect(env)


def test_procid_without_ntasks_names_the_rank() -> None:
    with pytest.raises(ValueError, match=r"^SLURM_PROCID=3 is set but SLURM_NTASKS is not"):
        slurm.detect({"SLURM_STEP_ID": "0", "SLURM_PROCID": "3"})


def test_direct_construction_names_the_fields() -> None:
    with pytest.raises(ValueError, match=r"^rank 4 is not below world size 4 \(x launcher\)"):
        LaunchEnvironment("x", rank=4, world_size=4)
