"""``horovodrun`` with its Gloo controller (``horovodrun --gloo``, or without MPI installed).

``HOROVOD_CROSS_RANK`` / ``_SIZE`` are this rank's index among the ranks of the same local
rank on other hosts, and their number: the host's index and the number of hosts only when
every host runs as many ranks (``LOCAL_SIZE * CROSS_SIZE == SIZE``, checked); otherwise
``initialize()`` asks the peers. Without MASTER_PORT, the port is derived from horovodrun's
own rendezvous server (``HOROVOD_GLOO_RENDEZVOUS_ADDR`` / ``_PORT``), unique per run. (With
the MPI controller, horovodrun runs ``mpirun``, read by the Open MPI environment.)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from distbridge.environments.base import LaunchEnvironment, Variables, detect_from, read_int

__all__ = ["LAUNCHER", "detect"]

LAUNCHER = "horovodrun"
_VARIABLES = Variables(
    "horovodrun variables",
    {
        "rank": "HOROVOD_RANK",
        "world_size": "HOROVOD_SIZE",
        "local_rank": "HOROVOD_LOCAL_RANK",
        "local_world_size": "HOROVOD_LOCAL_SIZE",
        "node_rank": "HOROVOD_CROSS_RANK",
        "nnodes": "HOROVOD_CROSS_SIZE",
    },
)


def detect(env: Mapping[str, str]) -> LaunchEnvironment | None:
    """Read ``HOROVOD_*`` from ``env``; None unless ``HOROVOD_RANK`` and ``HOROVOD_SIZE`` are set.

    Example:
        >>> detect({"HOROVOD_RANK": "2", "HOROVOD_SIZE": "4", "HOROVOD_LOCAL_RANK": "0",
        ...         "HOROVOD_LOCAL_SIZE": "2", "HOROVOD_CROSS_RANK": "1",
        ...         "HOROVOD_CROSS_SIZE": "2"}).node_rank
        1
    """
    rendezvous = env.get("HOROVOD_GLOO_RENDEZVOUS_PORT")
    job = f"{env.get('HOROVOD_GLOO_RENDEZVOUS_ADDR', '')}:{rendezvous}" if rendezvous else None
    found = detect_from(env, LAUNCHER, _VARIABLES, job)
    if found is None:
        return None
    local_size, cross_size = found.local_world_size, read_int(env, "HOROVOD_CROSS_SIZE")
    if local_size and cross_size and local_size * cross_size == found.world_size:
        # every host runs as many ranks: the cross rank and size are the host's index and count
        return replace(found, node_rank=read_int(env, "HOROVOD_CROSS_RANK"), nnodes=cross_size)
    return found
