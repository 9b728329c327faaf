"""SLURM: tasks started by ``srun`` (on its own, or inside an ``sbatch`` / ``salloc`` job).

Only a real job step counts: ``srun`` sets SLURM_STEP_ID (SLURM_STEPID before 20.11) in
every task. An ``sbatch`` batch script also sees SLURM_PROCID=0 and the job's SLURM_NTASKS,
but it is one process, not the job's tasks: initializing a world of SLURM_NTASKS there
would wait forever for ranks that never start. That case is not detected, and a warning
(once per process) says to start the script with ``srun``.

Unless set, MASTER_ADDR is the first host of the step's node list, where the block, cyclic
and plane distributions put rank 0 (with ``-m arbitrary``, or node names that do not resolve,
set it), and MASTER_PORT is derived from `job_key`: steps of one job that run at the same time
get different ports.

SLURM host lists (``node[001-003,7],gpu-[01-02]-ib``) expand as ``scontrol show hostnames``
does:

- hosts are separated by commas outside brackets;
- ``[...]`` holds a comma list of numbers and ranges ``lo-hi``; every number of a range is
  printed at least as wide as ``lo`` (``[08-10]`` is ``08, 09, 10``; ``[7]`` is ``7``);
- a host may hold several bracket groups: ``a[1-2]-b[3-4]`` is ``a1-b3, a1-b4, a2-b3,
  a2-b4``. The last group varies fastest; before it, SLURM varies the first group, then the
  second, and so on (``a[1-2]b[3-4]c[5-6]`` starts ``a1b3c5, a1b3c6, a2b3c5, a2b3c6, a1b4c5``),
  and so does this module, so that the order is the one the job's tasks see;
- empty entries (``n1,,n2``) are skipped, as SLURM does.
"""

from __future__ import annotations

import functools
import itertools
import re
import warnings
from collections.abc import Mapping

from distbridge.environments.base import (
    LOOPBACK,
    LaunchEnvironment,
    Variables,
    master_port,
    read_int,
)

__all__ = ["LAUNCHER", "detect", "expand_hostlist", "job_key", "requeue_job_id", "tasks_per_node"]

LAUNCHER = "slurm"
_REPEATED = re.compile(r"^(\d+)(?:\(x(\d+)\))?$")
_BRACKETS = re.compile(r"(?:[^\[\]]|\[[^\[\]]*\])*")  # every '[' closed by a ']', none nested
_OUTER_COMMA = re.compile(r",(?![^\[]*\])")  # a comma that is not inside brackets
_GROUP = re.compile(r"\[([^\]]*)\]")  # a bracket group; split() keeps what it holds


def detect(env: Mapping[str, str]) -> LaunchEnvironment | None:
    """Read an ``srun`` task's place in its job step from ``env``.

    Returns None outside SLURM, and in a SLURM job's shell that was not started by ``srun``
    (warning once when that job asks for more than one task).

    Raises:
        ValueError: a SLURM variable is malformed or contradicts another; the message names it.
    """
    rank = read_int(env, "SLURM_PROCID")
    step = None if rank is None else read_int(env, _first_key(env, "SLURM_STEP_ID", "SLURM_STEPID"))
    job = env.get(_first_key(env, "SLURM_JOB_ID", "SLURM_JOBID"))
    if rank is None or step is None:
        _warn_no_srun(job, read_int(env, _first_key(env, "SLURM_NTASKS", "SLURM_NPROCS")))
        return None
    size_key = _first_key(env, "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS")
    world_size = read_int(env, size_key)
    if world_size is None:
        raise ValueError(
            f"SLURM_PROCID={rank} is set but SLURM_NTASKS is not: these variables do not come "
            "from srun; start the job with srun, or unset SLURM_PROCID."
        )
    list_key = _first_key(env, "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")
    hosts = expand_hostlist(env.get(list_key, ""))
    nodes_key = _first_key(env, "SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES")
    nnodes = read_int(env, nodes_key)
    names = {"rank": "SLURM_PROCID", "world_size": size_key, "local_rank": "SLURM_LOCALID",
             "node_rank": "SLURM_NODEID", "nnodes": nodes_key}  # fmt: skip
    if nnodes is None and hosts:
        nnodes = len(hosts)
        names["nnodes"] = f"the {nnodes} hosts of {list_key}={env[list_key]}"
    node_rank = read_int(env, "SLURM_NODEID")
    local_world_size, names["local_world_size"] = _local_world_size(env, node_rank, nnodes)
    first_host = hosts[0] if hosts else None
    return LaunchEnvironment(
        launcher=LAUNCHER,
        rank=rank,
        world_size=world_size,
        local_rank=read_int(env, "SLURM_LOCALID"),
        local_world_size=local_world_size,
        node_rank=node_rank,
        nnodes=nnodes,
        master_addr=env.get("MASTER_ADDR") or first_host or (LOOPBACK if nnodes == 1 else None),
        master_port=master_port(env, job_key(job, step) if job else None),
        variables=Variables("srun variables", names),
    )


def tasks_per_node(value: str) -> list[int]:
    """Expand SLURM's tasks-per-node notation: ``"2(x3),1"`` is ``[2, 2, 2, 1]``.

    Raises:
        ValueError: ``value`` is not a comma list of ``N`` or ``N(xK)``.
    """
    counts: list[int] = []
    for part in value.split(","):
        match = _REPEATED.match(part.strip())
        if match is None:
            raise ValueError(
                f"SLURM tasks per node {value!r}: {part!r} is not N or N(xK), e.g. '2(x3),1'."
            )
        counts.extend([int(match[1])] * int(match[2] or 1))
    return counts


def expand_hostlist(hostlist: str) -> list[str]:
    """Return the host names in ``hostlist``, in order, duplicates kept.

    Examples:
        >>> expand_hostlist("node[001-003,7],gpu-[01-02]")
        ['node001', 'node002', 'node003', 'node7', 'gpu-01', 'gpu-02']

    Raises:
        ValueError: unbalanced or nested brackets, or a bracket entry that is not a number
            or a range ``lo-hi`` with ``lo <= hi``; the message names the host list.
    """
    if _BRACKETS.fullmatch(hostlist) is None:
        raise ValueError(
            f"Host list {hostlist!r} has unbalanced brackets: an unclosed '[', a ']' without "
            "its '[', or nested brackets."
        )
    hosts: list[str] = []
    for item in _OUTER_COMMA.split(hostlist):
        if item.strip():
            hosts.extend(_expand_item(item.strip(), hostlist))
    return hosts


def _expand_item(item: str, hostlist: str) -> list[str]:
    """One host pattern (text with bracket groups) to its names, in SLURM's order."""
    parts = _GROUP.split(item)  # text, group, text, group, ..., the text after the last group
    texts, rest = parts[0:-1:2], parts[-1]
    groups = [_expand_group(group, hostlist) for group in parts[1::2]]
    if not groups:
        return [item]
    # Slowest to fastest: groups k-1, ..., 1, then group k (SLURM's order, see the module doc).
    order = [*range(len(groups) - 2, -1, -1), len(groups) - 1]
    names = []
    for picked in itertools.product(*(groups[i] for i in order)):
        numbers = dict(zip(order, picked, strict=True))
        names.append("".join(t + numbers[i] for i, t in enumerate(texts)) + rest)
    return names


def _expand_group(group: str, hostlist: str) -> list[str]:
    """``001-003,7`` to ``['001', '002', '003', '7']``."""
    numbers: list[str] = []
    for part in group.split(","):
        lo, sep, hi = part.strip().partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ValueError(
                f"Host list {hostlist!r}: {part!r} in [{group}] is not a number or a range lo-hi."
            )
        first, last = int(lo), int(hi) if sep else int(lo)
        if last < first:
            raise ValueError(f"Host list {hostlist!r}: range {part!r} runs backwards.")
        numbers.extend(str(n).zfill(len(lo)) for n in range(first, last + 1))
    return numbers


def job_key(job_id: str, step_id: int) -> str:
    """The key MASTER_PORT is derived from: ``slurm:<job id>.<step id>``."""
    return f"{LAUNCHER}:{job_id}.{step_id}"


def requeue_job_id(env: Mapping[str, str]) -> str | None:
    """The id ``scontrol requeue`` takes for this job: ``<array job>_<task>`` in a job array,
    else SLURM_JOB_ID; None outside SLURM."""
    array, task = env.get("SLURM_ARRAY_JOB_ID"), env.get("SLURM_ARRAY_TASK_ID")
    if array and task:
        return f"{array}_{task}"
    return env.get(_first_key(env, "SLURM_JOB_ID", "SLURM_JOBID")) or None


def _local_world_size(
    env: Mapping[str, str], node_rank: int | None, nnodes: int | None
) -> tuple[int | None, str]:
    """Tasks on this node: this node's entry in the step's (else the job's) tasks per node,
    with the text that names it in errors (``SLURM_NTASKS_PER_NODE=2``; ``the 2 tasks of
    node SLURM_NODEID=1 in ...`` where the nodes differ).

    SLURM_NTASKS_PER_NODE, the ``--ntasks-per-node`` request, is the last resort.
    """
    for key in ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE"):
        raw = env.get(key)
        if not raw:
            continue
        try:
            counts = tasks_per_node(raw)
        except ValueError as err:
            raise ValueError(f"{key}={raw!r}: {err}") from err
        if len(counts) == 1:
            return counts[0], f"{key}={raw}"  # one count for every node
        if node_rank is not None and 0 <= node_rank < len(counts) and nnodes in (None, len(counts)):
            count = counts[node_rank]
            tasks = f"the {count} task{'s' * (count != 1)} of node SLURM_NODEID={node_rank}"
            return count, f"{tasks} in {key}={raw}"
    return None, ""  # unknown: never shown


@functools.cache
def _warn_no_srun(job: str | None, ntasks: int | None) -> None:
    """Warn (once per job) when a process that srun did not start is in a job of several
    tasks: a batch or salloc shell."""
    if job and ntasks is not None and ntasks > 1:
        warnings.warn(
            f"SLURM job {job} asks for {ntasks} tasks, but this process was not started by srun "
            "(SLURM_STEP_ID is unset: an sbatch or salloc shell). It runs alone: a process "
            f"group of {ntasks} would wait for ranks that never start. Start it with `srun "
            "python ...` inside the job.",
            RuntimeWarning,
            stacklevel=2,
        )


def _first_key(env: Mapping[str, str], *keys: str) -> str:
    """The first of ``keys`` set to a non-empty value in ``env``, else the first key."""
    return next((k for k in keys if env.get(k)), keys[0])
