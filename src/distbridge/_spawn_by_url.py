"""``launch``: detectron2's ``engine.launch`` on ``distbridge.spawn``.

The layout is GPUs per machine times machines, the rendezvous a ``dist_url``, and the
function is called without its local rank. Public as ``distbridge.launch``; detectron2's
import path for it is mirrored by ``distbridge.compat.detectron2_launch``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import urlparse

from distbridge import _api
from distbridge.environments.base import port_number
from distbridge.models._accelerator import default_backend

__all__ = ["DEFAULT_TIMEOUT", "launch"]

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
