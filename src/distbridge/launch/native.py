"""``spawn`` for torch.distributed: start workers on this machine, each in its own world slot.

The parent hosts the job's TCPStore itself, on a free port (port 0, chosen by the
kernel and held by the store from that moment: no race with other jobs), and the
workers connect to it as torchrun's workers connect to the agent's store.

Fail together: a worker whose function raises leaves a note in that store as it finalizes,
and the parent leaves one for a worker that dies without a word (a signal), so the other
workers raise `PeerFailed` naming it at their next collective; the supervisor gives them
``PEER_WINDOW_SECONDS`` to do so before it stops them, and lists what they reported.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from torch._C._distributed_c10d import TCPStore  # where torch defines them

from distbridge.environments import base as environment
from distbridge.errors import DistributedError
from distbridge.launch._joinable import Activate, JoinedCall, MakeModel
from distbridge.launch._output import plan_output
from distbridge.launch.pickling import prepare_call
from distbridge.launch.supervisor import (
    PEER_WINDOW_SECONDS,
    check_seconds,
    check_spawn_options,
    positive_int,
    run_workers,
)
from distbridge.reliability.fail_together import record_failure
from distbridge.reliability.hang.report import collect
from distbridge.reliability.hang.verdict import verdict

__all__ = ["host_store", "job_env", "job_verdict", "spawn_native"]


@dataclass(frozen=True)
class _NativeWorker(JoinedCall):
    """What each worker process runs: join the job in its world slot, call ``fn``, leave."""

    env: Mapping[str, str]
    first_rank: int
    timeout: timedelta | float | None
    init_method: str | None  # None: the store the parent hosts

    def __call__(self, local_rank: int) -> Any:
        rank = self.first_rank + local_rank
        os.environ.update(self.env)
        os.environ["RANK"] = str(rank)
        os.environ["LOCAL_RANK"] = str(local_rank)
        init_kwargs: dict[str, Any] = {} if self.timeout is None else {"timeout": self.timeout}
        if self.init_method is not None:
            world_size = int(self.env["WORLD_SIZE"])
            init_kwargs.update(init_method=self.init_method, rank=rank, world_size=world_size)
        return self.run(local_rank, **init_kwargs)


def spawn_native(
    make_model: MakeModel,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs_dict: Mapping[str, Any],
    nproc_per_node: int,
    *,
    backend: str,
    activate: Activate = contextlib.nullcontext,
    gpu_problem: Callable[[int], str | None] | None = None,
    nnodes: int = 1,
    node_rank: int = 0,
    master_addr: str | None = None,
    master_port: int | str | None = None,
    init_method: str | None = None,
    timeout: timedelta | float | None = None,
    start_method: str = "forkserver",
    job_timeout: float | None = None,
    join: bool = True,
    tag_output: bool | None = None,
    output_ranks: Sequence[int] | None = None,
) -> list[Any]:
    """Run ``fn(local_rank, *args, **kwargs_dict)`` in ``nproc_per_node`` workers of a job of
    ``nnodes`` machines; return this machine's results in local-rank order.

    Each worker joins as ``make_model(backend, ...)`` and runs ``fn`` inside
    ``activate(model)`` (see `distbridge.launch._joinable`). ``gpu_problem(nproc)``, when
    given, says why this machine cannot run the workers (NCCL with too few GPUs), before
    anything starts. "forkserver" forks the workers from the warm starter (`warm_start`); a
    function defined in a notebook, IPython or ``python -c`` travels by value (`pickling`).
    ``tag_output`` and ``output_ranks``: how the workers' output reaches the parent's
    (`_output`)."""
    nproc = positive_int("nproc_per_node", nproc_per_node)
    nnodes = positive_int("nnodes", nnodes)
    if not isinstance(node_rank, int) or not 0 <= node_rank < nnodes:
        raise ValueError(f"node_rank must be an int in [0, {nnodes}), got {node_rank!r}.")
    check_spawn_options(start_method, join)
    seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
    check_seconds("timeout", seconds, none=True)  # before the store and the workers take it
    if init_method == "env://":  # the job's store, its address exported as MASTER_ADDR / _PORT
        init_method = None
    given_port = environment.port_number(master_port)
    if master_port is not None and given_port is None:  # a str of digits is taken, as ignite
        raise ValueError(f"master_port must be an int in 1..65535, got {master_port!r}.")
    problem = None if gpu_problem is None else gpu_problem(nproc)
    if problem is not None:
        raise ValueError(f"spawn(nproc_per_node={nproc}): {problem}")
    output = plan_output(tag_output, output_ranks, nproc, nnodes * nproc)
    fn, args, kwargs_dict = prepare_call(fn, args, kwargs_dict, start_method)  # before the store

    addr = master_addr or os.environ.get("MASTER_ADDR") or "127.0.0.1"
    port = given_port or environment.master_port(os.environ, None)
    if nnodes > 1 and port is None and init_method is None:
        raise ValueError(
            f"nnodes={nnodes} needs a master_port that every node passes (or MASTER_PORT set "
            "on every node): the nodes cannot agree on a free port by themselves."
        )
    world_size = nnodes * nproc
    store = None
    if init_method is None and node_rank == 0:
        store = host_store(port or 0, world_size, seconds)
        port = store.port
    env = job_env(nproc, nnodes, node_rank, addr, port, agent_store=init_method is None)
    worker = _NativeWorker(
        make_model,
        activate,
        backend,
        fn,
        tuple(args),
        dict(kwargs_dict),
        env,
        node_rank * nproc,
        timeout,
        init_method,
    )
    on_death = (
        None if store is None else functools.partial(record_failure, store, world_size=world_size)
    )
    explain = None if store is None else functools.partial(job_verdict, store, world_size)
    try:
        return run_workers(
            worker,
            nproc,
            rank_offset=node_rank * nproc,
            start_method=start_method,
            job_timeout=job_timeout,
            peer_window=PEER_WINDOW_SECONDS,
            on_death=on_death,
            output=output,
            explain=explain,
        )
    finally:
        del store, on_death, explain  # the store lives exactly as long as the job


def job_verdict(store: Any, world_size: int, wait: float) -> str | None:
    """The hang verdict from the workers' ledgers (asked for up to ``wait`` seconds, else
    as they last published them); None when no rank waits in a collective (the failure
    then speaks for itself) or the verdict failed: it only adds to an error, never hides it."""
    try:
        found = verdict(collect(store, world_size, wait=wait), world_size)
    except Exception:
        return None
    return None if found.kind == "no hang" else found.text


def job_env(
    nproc: int,
    nnodes: int = 1,
    node_rank: int = 0,
    addr: str = "127.0.0.1",
    port: int | None = None,
    *,
    agent_store: bool = True,
) -> dict[str, str]:
    """The environment of this node's workers, less their RANK and LOCAL_RANK;
    ``agent_store``: they use the store the parent hosts (see `host_store`)."""
    env = {
        "WORLD_SIZE": str(nnodes * nproc),
        "LOCAL_WORLD_SIZE": str(nproc),
        "GROUP_RANK": str(node_rank),
        "GROUP_WORLD_SIZE": str(nnodes),
        "MASTER_ADDR": addr,
    }
    if port is not None:
        env["MASTER_PORT"] = str(port)
    if agent_store:
        env["TORCHELASTIC_USE_AGENT_STORE"] = "True"
    if "OMP_NUM_THREADS" not in os.environ:
        # As torchrun: without it every CPU worker starts a thread per core and they fight.
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // nproc))
    return env


def host_store(port: int, world_size: int, seconds: float | None, *, host: str = "0.0.0.0") -> Any:
    """The job's TCPStore, listening on ``host``:``port`` (0: a free one, picked by the
    kernel and held from that moment) until the job ends; its timeout is ``seconds`` (None:
    30 minutes)."""
    try:
        return TCPStore(
            host,
            port,
            world_size,
            is_master=True,
            wait_for_workers=False,
            timeout=timedelta(seconds=seconds or 1800),
        )
    except (RuntimeError, OSError) as err:
        raise DistributedError(
            f"Cannot listen on master port {port}: {err}. Another job may hold it: pass another "
            "master_port, or leave it unset so distbridge picks a free one."
        ) from err
