"""detectron2 on the facade: ``launch`` (its ``engine.launch``), and the functions of its
``utils.comm`` that need more than a facade name: the object collectives with detectron2's
signatures (``data``, ``input_dict``, no ``serializer``; ``reduce_dict``'s keys sorted) and the
local process group in blocks of consecutive ranks.

``launch``'s layout is GPUs per machine times machines, the rendezvous a ``dist_url``, and the
function is called without its local rank. It is public as ``distbridge.launch``;
``distbridge.compat.detectron2`` and ``detectron2_launch`` give the rest detectron2's names. The
facade's own ``get_local_group`` finds each rank's machine instead, whatever the placement.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import urlparse

from distbridge import _api, _collectives, objects
from distbridge._types import Group
from distbridge.environments.base import port_number
from distbridge.models._accelerator import default_backend

__all__ = [
    "DEFAULT_TIMEOUT",
    "all_gather",
    "create_local_process_group",
    "gather",
    "get_local_process_group",
    "launch",
    "local_process_group_or_none",
    "reduce_dict",
]

DEFAULT_TIMEOUT = timedelta(minutes=30)


@dataclass(frozen=True)
class _WithoutRank:
    """Calls ``fn(*args)``: detectron2's entry points take no local-rank argument."""

    fn: Callable[..., Any]

    def __call__(self, local_rank: int, *args: Any) -> Any:
        return self.fn(*args)


def launch(
    main_func: Callable[..., Any],
    num_gpus_per_machine: int,
    num_machines: int = 1,
    machine_rank: int = 0,
    dist_url: str | None = None,
    args: tuple[Any, ...] = (),
    timeout: timedelta = DEFAULT_TIMEOUT,
) -> list[Any]:
    """Run ``main_func(*args)`` in ``num_gpus_per_machine`` processes on each of
    ``num_machines`` machines (this one is number ``machine_rank``); ``timeout`` is the process
    group timeout.

    As detectron2's ``engine.launch``: NCCL when CUDA is available, else gloo; with a
    world of one, ``main_func`` runs in this process. ``main_func`` is a top-level function
    (workers import it). ``dist_url`` is "auto" or None (one machine: a free port),
    "tcp://host:port" (machine 0's address, the same on every machine) or
    "file:///shared/path".

    Returns:
        ``main_func``'s return value on each local process, in local-rank order.
    """
    world_size = num_machines * num_gpus_per_machine
    if world_size == 1:
        return [main_func(*args)]
    options: dict[str, Any] = {"nnodes": num_machines, "node_rank": machine_rank}
    url = urlparse(dist_url) if dist_url not in (None, "auto") else None
    if url is None:
        if num_machines > 1:
            raise ValueError(
                f"dist_url={dist_url!r} picks a free port on this machine, which other machines "
                "cannot know: pass dist_url='tcp://<machine 0 address>:<port>' on every machine."
            )
    elif url.scheme == "tcp":
        port = port_number(url.netloc.rpartition(":")[2])
        if not url.hostname or not port:
            raise ValueError(
                f"dist_url={dist_url!r} needs machine 0's address and a port (1 to 65535): "
                "pass 'tcp://<machine 0 address>:<port>', the same on every machine."
            )
        options.update(master_addr=url.hostname, master_port=port)
    elif url.scheme in ("file", "env"):
        options["init_method"] = dist_url
    else:
        raise ValueError(
            f"dist_url={dist_url!r} is not 'auto', 'tcp://host:port' or 'file:///path'."
        )
    backend = default_backend()  # detectron2's: NCCL on CUDA, else gloo (XCCL on XPU, ...)
    return _api.spawn(
        backend,
        _WithoutRank(main_func),
        args=tuple(args),
        nproc_per_node=num_gpus_per_machine,
        timeout=timeout,
        **options,
    )


# ---- comm: the object collectives with detectron2's signatures ----------------------------------


def all_gather(data: Any, group: Group | None = None) -> list[Any]:
    """Every rank's ``data`` (any picklable object), in rank order, on every rank.

    Example:
        >>> comm.all_gather({"rank": comm.get_rank()})
        [{'rank': 0}, {'rank': 1}]   # on each of 2 ranks
    """
    return objects.all_gather_object(data, group)


def gather(data: Any, dst: int = 0, group: Group | None = None) -> list[Any]:
    """Every rank's ``data`` on rank ``dst`` (a list in rank order); ``[]`` on the others.

    Example:
        >>> comm.gather(comm.get_rank() * 10)
        [0, 10]   # on rank 0 of 2; [] on rank 1
    """
    return objects.gather_object(data, dst, group)


def reduce_dict(input_dict: Mapping[str, Any], average: bool = True) -> dict[str, Any]:
    """The values of ``input_dict`` summed (averaged by default) over all ranks, on rank 0,
    keys in sorted order as detectron2 returns them; every rank must pass the same keys.

    Example:
        >>> comm.reduce_dict({"loss": torch.tensor(float(comm.get_rank()))})
        {'loss': tensor(0.5000)}   # on rank 0 of 2; rank 1 gets its input back
    """
    reduced = objects.reduce_dict(input_dict, average)
    return {key: reduced[key] for key in sorted(reduced)}


# ---- comm: the local process group, in blocks of consecutive ranks ------------------------------


def _machine_ranks(num_workers_per_machine: int) -> tuple[list[list[int]], int]:
    """Every machine's ranks (blocks of ``num_workers_per_machine``) and this rank's machine."""
    world = _api.get_world_size()
    if (
        not isinstance(num_workers_per_machine, int)
        or isinstance(num_workers_per_machine, bool)
        or num_workers_per_machine < 1
        or world % num_workers_per_machine
    ):
        raise ValueError(
            f"num_workers_per_machine must be a positive int that divides the world size "
            f"{world}, got {num_workers_per_machine!r}; pass the processes per machine "
            f"(comm.get_local_size() is {_api.get_nproc_per_node()})."
        )
    n = num_workers_per_machine
    machines = [list(range(start, start + n)) for start in range(0, world, n)]
    return machines, _api.get_rank() // n


def create_local_process_group(num_workers_per_machine: int) -> None:
    """Create the group of the ranks on each machine (blocks of ``num_workers_per_machine``
    consecutive ranks, as detectron2's ``launch`` places them). Every rank must call it."""
    machines, _ = _machine_ranks(num_workers_per_machine)
    for ranks in machines:
        _collectives.new_group(ranks)


def get_local_process_group() -> Any:
    """The group of the ranks on this process's machine (blocks of ``get_local_size()``
    ranks). Created by ``create_local_process_group``, which every rank calls first; on one
    machine the first call here may create it instead."""
    machines, mine = _machine_ranks(_api.get_nproc_per_node())
    return _collectives.new_group(machines[mine])


def local_process_group_or_none() -> Any:
    """detectron2's module variable ``_LOCAL_PROCESS_GROUP``: the local group, or None
    without a distributed context."""
    return get_local_process_group() if _api.get_world_size() > 1 else None
