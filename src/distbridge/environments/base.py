"""What a launcher tells a process about where it is in the job."""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NoReturn

__all__ = [
    "LOOPBACK",
    "LaunchEnvironment",
    "Variables",
    "derived_port",
    "detect_from",
    "master_port",
    "port_number",
    "read_int",
]

#: the address of rank 0 when every rank runs on this machine
LOOPBACK = "127.0.0.1"
_PORT_BASE, _PORT_SPAN = 20000, 10000  # derived ports: below Linux's ephemeral range (32768+)


@dataclass(frozen=True)
class LaunchEnvironment:
    """A process's place in a job, as read from its launcher's environment variables.

    Fields that the launcher does not provide are None. ``node_id`` names this process's
    node (the same on every rank of the node, different elsewhere) where the launcher gives
    a better name than the host name; ``initialize()`` groups ranks by it when it must ask
    the peers for the layout.
    """

    launcher: str
    rank: int
    world_size: int
    local_rank: int | None = None
    local_world_size: int | None = None
    node_rank: int | None = None
    nnodes: int | None = None
    master_addr: str | None = None
    master_port: int | None = None
    node_id: str | None = None

    #: where the detector read the fields, named in its errors; not part of equality
    variables: Variables | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        _check(self, self.variables or Variables(f"{self.launcher} launcher"))


@dataclass(frozen=True)
class Variables:
    """Where a detector read a ``LaunchEnvironment``'s fields, for its error messages.

    ``family`` says whose variables they are (``"torchrun variables"``). ``names`` maps a
    field (``"rank"``, ``"world_size"``, ``"local_rank"``, ``"local_world_size"``,
    ``"node_rank"``, ``"nnodes"``) to the variable it was read from, shown as ``NAME=value``;
    a value derived from several variables maps to the whole text to show, which names them
    with their values (it contains ``=``: ``"WORLD_SIZE=8 / LOCAL_WORLD_SIZE=2 = 4 nodes"``).
    A field missing from ``names`` is shown by its own name (``world size 4``).
    """

    family: str
    names: Mapping[str, str] = field(default_factory=dict)

    def show(self, what: str, value: int) -> str:
        """How the value of field ``what`` is named: ``RANK=4``, or the derivation given."""
        name = self.names.get(what)
        if name is None:
            return f"{what.replace('_', ' ')} {value}"
        return name if "=" in name else f"{name}={value}"


def _check(launch: LaunchEnvironment, variables: Variables) -> None:
    """ValueError unless the fields are consistent: sizes at least 1, each index in
    ``[0, size)``, a node no bigger than the job. Each message names the variables with their
    values and says how to fix them, e.g. ``RANK=3 is not below WORLD_SIZE=2 (torchrun
    variables): ...``."""
    fields = (  # index, size, what the indices are called, why a size is at least 1
        ("rank", "world_size", "ranks", "a job has at least 1 process"),
        ("local_rank", "local_world_size", "local ranks", "a node has at least 1 process"),
        ("node_rank", "nnodes", "node indices", "a job has at least 1 node"),
    )
    for index_field, size_field, indices, at_least_one in fields:
        index, size = getattr(launch, index_field), getattr(launch, size_field)
        if size is not None and size < 1:
            _refuse(variables, f"{variables.show(size_field, size)} is below 1", at_least_one, 1)
        if size_field == "local_world_size" and size is not None and size > launch.world_size:
            _refuse(variables, f"{variables.show(size_field, size)} is above "
                    f"{variables.show('world_size', launch.world_size)}",
                    "a node cannot run more processes than the whole job", 2)  # fmt: skip
        if index is not None and index < 0:
            _refuse(variables, f"{variables.show(index_field, index)} is negative",
                    f"{indices} count from 0", 1)  # fmt: skip
        if index is not None and size is not None and index >= size:
            _refuse(variables, f"{variables.show(index_field, index)} is not below "
                    f"{variables.show(size_field, size)}",
                    f"{indices} run from 0 to {size - 1}", 2)  # fmt: skip


def _refuse(variables: Variables, problem: str, rule: str, count: int) -> NoReturn:
    them = "it" if count == 1 else "them"
    raise ValueError(
        f"{problem} ({variables.family}): {rule}; fix {them}, or unset {them} if another "
        f"launch left {them} behind."
    )


def detect_from(
    env: Mapping[str, str], launcher: str, variables: Variables, job: str | None = None
) -> LaunchEnvironment | None:
    """The place in the job that ``env`` gives through the variables ``variables.names`` maps
    ``rank``, ``world_size``, ``local_rank`` and ``local_world_size`` to; None unless the rank
    and the world size are set (this launcher did not start the process).

    When every rank runs on this node (local world size == world size) the node is 0 of 1
    and rank 0's address defaults to the loopback, else they are unknown; the port is
    MASTER_PORT, else derived from ``launcher:job`` (``job``: the launcher's job id).
    """
    names = variables.names
    rank, world_size = read_int(env, names["rank"]), read_int(env, names["world_size"])
    if rank is None or world_size is None:
        return None
    local_size = read_int(env, names["local_world_size"])
    one_node = local_size == world_size
    return LaunchEnvironment(
        launcher=launcher,
        rank=rank,
        world_size=world_size,
        local_rank=read_int(env, names["local_rank"]),
        local_world_size=local_size,
        node_rank=0 if one_node else None,
        nnodes=1 if one_node else None,
        master_addr=env.get("MASTER_ADDR") or (LOOPBACK if one_node else None),
        master_port=master_port(env, f"{launcher}:{job}" if job else None),
        variables=variables,
    )


def read_int(env: Mapping[str, str], key: str) -> int | None:
    """Return ``env[key]`` as an int, None when absent; ValueError naming the key when malformed."""
    raw = env.get(key)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError as err:
        raise ValueError(
            f"Environment variable {key}={raw!r} is not an integer; fix or unset it."
        ) from err


def master_port(env: Mapping[str, str], job_key: str | None) -> int | None:
    """MASTER_PORT when set (ValueError naming it unless it is a port number, 1 to 65535);
    else a port derived from ``job_key`` (see ``derived_port``); else None. ``job_key`` is a
    value the launcher gives every rank of one job alike."""
    port = read_int(env, "MASTER_PORT")
    if port is None:
        return derived_port(job_key) if job_key else None
    if port_number(port) is None:
        raise ValueError(
            f"Environment variable MASTER_PORT={env['MASTER_PORT']!r} is not a port number "
            "(1 to 65535); fix or unset it."
        )
    return port


def derived_port(job_key: str) -> int:
    """A port in [20000, 30000) that every rank computes alike from ``job_key``, without
    talking: a stable hash (crc32, not Python's salted ``hash``). Two jobs on one machine get
    different ports unless their keys collide (1 in 10,000); set MASTER_PORT to choose."""
    return _PORT_BASE + zlib.crc32(job_key.encode("utf-8")) % _PORT_SPAN


def port_number(value: object) -> int | None:
    """``value`` as a TCP port, an int in 1..65535 (a str of digits is taken, as argparse
    gives it); None when it is not one."""
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 65536:
        return value
    return None
