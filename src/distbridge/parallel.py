"""Parallel: one context manager for every way of starting a job (``distbridge.Parallel``).

ignite's import path for it, ``ignite.distributed.launcher``, is mirrored by
``distbridge.compat.ignite_launcher`` (also importable as ``distbridge.launcher``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

from distbridge import _api, environments
from distbridge.environments.base import port_number
from distbridge.errors import ArgumentTypeError

__all__ = ["Parallel"]

#: ignite's "ignite.distributed.launcher.Parallel" lines, under distbridge's name. No handler is
#: attached (ignite's setup_logger attaches one): configure logging to see them.
_log = logging.getLogger("distbridge.parallel.Parallel")


def _info(message: str) -> None:
    """Log ``message`` at INFO on rank 0 only, as ignite does (its other ranks are silent)."""
    if _api.get_rank() == 0:
        _log.info(message)


class Parallel:
    """Run a function in a distributed job, whichever way the job was started.

    - ``backend=None``: serial; ``run`` calls ``func(0, ...)`` in this process.
    - ``backend`` and ``nproc_per_node``: ``run`` spawns the workers itself (``spawn``).
    - ``backend`` alone: the processes were started by a launcher (torchrun, srun, mpirun,
      jsrun, horovodrun: see ``distbridge.environments``); entering the context initializes,
      leaving it finalizes.
    - ``backend`` and ``nproc_per_node`` under a launcher that started one task per node
      (e.g. ``srun --ntasks-per-node=1``): each task spawns ``nproc_per_node`` workers, and
      ``nnodes``, ``node_rank``, ``master_addr`` and ``master_port`` default to the launcher's.

    Example:
        >>> with Parallel(backend="gloo", nproc_per_node=2) as parallel:   # doctest: +SKIP
        ...     results = parallel.run(train, config)

    Args:
        backend: ``None``, "nccl", "gloo", "mpi", "xla-tpu", "horovod", ...
        nproc_per_node: processes to spawn on this machine; None when a launcher started them.
        nnodes: number of machines (spawn only).
        node_rank: this machine's index (spawn only).
        master_addr: address of node 0 (spawn only).
        master_port: port of node 0 (an int, or a str of digits as argparse gives); a free one
            by default on one machine (spawn only).
        init_method: torch.distributed init method (native backends).
        spawn_kwargs: further arguments for ``spawn`` (``timeout``, ``start_method``, ...).
    """

    def __init__(
        self,
        backend: str | None = None,
        nproc_per_node: int | None = None,
        nnodes: int | None = None,
        node_rank: int | None = None,
        master_addr: str | None = None,
        master_port: int | str | None = None,
        init_method: str | None = None,
        **spawn_kwargs: Any,
    ) -> None:
        # the backend's model; an unknown or unavailable backend raises, saying why
        model = _api.registry.for_backend(backend) if backend is not None else None
        spawn_only = {
            "nnodes": nnodes,
            "node_rank": node_rank,
            "master_addr": master_addr,
            "master_port": master_port,
        }
        given = sorted(k for k, v in spawn_only.items() if v is not None)
        if backend is None:
            # ignite's order: the first argument given is the one named
            needs = {"nproc_per_node": nproc_per_node, **spawn_only, "init_method": init_method}
            for name, value in needs.items():
                if value is not None:
                    raise ValueError(
                        f"If backend is None, argument {name!r} should be also None, but given "
                        f"{value!r}: Parallel(backend=None) runs serially, and {name} needs a "
                        "backend such as 'gloo'."
                    )
        if nproc_per_node is None and given:
            raise ValueError(
                f"{', '.join(given)} {'apply' if len(given) > 1 else 'applies'} only when "
                "Parallel spawns the workers: pass "
                "nproc_per_node too, or set them in the launcher instead."
            )
        self.backend = backend
        self._init_kwargs = {"init_method": init_method} if init_method else {}
        self._spawn_params: dict[str, Any] | None = None
        if nproc_per_node is not None:
            spawn_only = _per_node_defaults(spawn_only)
            spawn_only["master_port"] = _port(spawn_only["master_port"])
            _check_spawn_layout(nproc_per_node, spawn_only, init_method)
            self._spawn_params = {
                "nproc_per_node": nproc_per_node,
                **{k: v for k, v in spawn_only.items() if v is not None},
                **self._init_kwargs,
                **spawn_kwargs,
            }
        if spawn_kwargs:
            unknown = sorted(set(spawn_kwargs) - set(model.spawn_options if model else ()))
            if unknown or nproc_per_node is None:
                known = ", ".join(model.spawn_options) if model else "none"
                raise TypeError(
                    f"Parallel() got unexpected keyword arguments {unknown or sorted(spawn_kwargs)}"
                    f"; this backend's spawn arguments are {known}, and need nproc_per_node."
                )
        self._initialized_here = False

    def run(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call ``func(local_rank, *args, **kwargs)`` in every process of the job.

        Returns:
            When spawning: every worker's return value, in local-rank order. Otherwise
            this process's return value.
        """
        if self._spawn_params is not None and self.backend is not None:
            _info(f"Spawn function '{func}' in {self._spawn_params['nproc_per_node']} processes")
            result = _api.spawn(
                self.backend, func, args=args, kwargs_dict=kwargs, **self._spawn_params
            )
        else:
            _info(f"- Run '{func}' in {_api.get_world_size()} processes")
            result = func(_api.get_local_rank(), *args, **kwargs)
        _info("End of run")
        return result

    def __enter__(self) -> Parallel:
        if self.backend is not None and self._spawn_params is None:
            _api.initialize(self.backend, **self._init_kwargs)
            self._initialized_here = True
            _info(f"Initialized processing group with backend: '{self.backend}'")
        elif self._spawn_params is not None:  # it has a backend
            _info(f"Initialized distributed launcher with backend: '{self.backend}'")
            given = "\n\t".join(f"{k}: {v}" for k, v in self._spawn_params.items() if v is not None)
            _info(f"- Parameters to spawn processes: \n\t{given}")
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._initialized_here:
            self._initialized_here = False
            _info(f"Finalized processing group with backend: '{self.backend}'")
            _api.finalize()


def _per_node_defaults(spawn_only: dict[str, Any]) -> dict[str, Any]:
    """``spawn_only`` with the gaps filled from a launcher that started one task per node; as
    given without a launcher. ValueError when the launcher started several tasks here (they
    must not spawn more)."""
    launch = environments.detect()
    if launch is None:
        return spawn_only
    if launch.local_world_size != 1:
        here = launch.local_world_size or "an unknown number of"  # None: unknown (0 is refused)
        raise ValueError(
            f"This process was started by {launch.launcher} (rank {launch.rank} of "
            f"{launch.world_size}, {here} processes on this node), so Parallel must not spawn "
            "more workers: drop nproc_per_node, or start one task per node (e.g. srun "
            "--ntasks-per-node=1) to spawn nproc_per_node workers on each."
        )
    from_launcher = {
        "nnodes": launch.nnodes if launch.nnodes is not None else launch.world_size,
        "node_rank": launch.node_rank if launch.node_rank is not None else launch.rank,
        "master_addr": launch.master_addr,
        "master_port": launch.master_port,
    }
    return {k: v if v is not None else from_launcher[k] for k, v in spawn_only.items()}


def _port(port: object) -> int | None:
    """``port`` as an int in 1..65535 (or None): a str of digits is taken, as ignite takes what
    argparse gives."""
    if port is not None and port_number(port) is None:
        raise ValueError(f"master_port must be a port number (1..65535), got {port!r}.")
    return port_number(port)


def _check_spawn_layout(
    nproc_per_node: object, spawn_only: dict[str, Any], init_method: str | None
) -> None:
    """ValueError, in ignite's order, for a layout ``spawn`` cannot start; ``spawn_only`` holds
    nnodes, node_rank, master_addr and master_port (None: not given)."""
    nnodes = 1 if spawn_only["nnodes"] is None else spawn_only["nnodes"]
    for name, value in (("nproc_per_node", nproc_per_node), ("nnodes", nnodes)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            error = ValueError if isinstance(value, (int, float)) else ArgumentTypeError
            raise error(f"Argument {name} should positive, but given {value!r}: pass an int >= 1.")
    node_rank = spawn_only["node_rank"]
    if node_rank is None and nnodes > 1:
        raise ValueError(
            f"If number of nodes larger than one, arguments node_rank should be given: nnodes="
            f"{nnodes} needs this machine's index in 0..{nnodes - 1}."
        )
    if node_rank is not None and (not isinstance(node_rank, int) or not 0 <= node_rank < nnodes):
        error = ValueError if isinstance(node_rank, (int, float)) else ArgumentTypeError
        raise error(
            f"Argument node_rank should be between 0 and {nnodes - 1}, but given {node_rank!r}."
        )
    addr = spawn_only["master_addr"] or os.environ.get("MASTER_ADDR")
    port = spawn_only["master_port"] or os.environ.get("MASTER_PORT")
    if nnodes > 1 and init_method is None and (not addr or not port):
        raise ValueError(
            "If number of nodes larger than one, arguments master_addr and master_port (node "
            f"0's address and a port that every node passes) or init_method should be given, got "
            f"master_addr={spawn_only['master_addr']!r}, master_port={spawn_only['master_port']!r}"
            ": pass both (or export MASTER_ADDR / MASTER_PORT on every node), or an init_method."
        )
