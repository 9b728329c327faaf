"""Open MPI's ``mpirun`` / ``mpiexec`` (and launchers built on it: Spectrum MPI, ``horovodrun``
with its MPI controller).

Open MPI sets ``OMPI_COMM_WORLD_RANK``, ``_SIZE``, ``_LOCAL_RANK`` and ``_LOCAL_SIZE`` in every
process it starts, and Open MPI 4 also the number of nodes (``OMPI_MCA_orte_num_nodes``).
Beware ``OMPI_COMM_WORLD_NODE_RANK``: despite its name it is the rank *among the processes of
this node* (like the local rank), not the node's index, so it is not read. No variable gives
the node's index; it is known without asking the peers only when every rank runs on this node.
Otherwise ``initialize()`` asks the peers, grouping ranks by their node's Open MPI daemon
(``OMPI_MCA_orte_local_daemon_uri``), which tells nodes apart even when host names repeat.

Rank 0's address is ``MASTER_ADDR`` when exported (``mpirun -x MASTER_ADDR=<host of rank 0>``),
else ``127.0.0.1`` when every rank runs on this node, else unknown: ``initialize()`` then
says to export it. The port is ``MASTER_PORT`` when exported, else derived from the job id
(``OMPI_MCA_ess_base_jobid``, or ``PMIX_NAMESPACE`` in Open MPI 5), which every rank shares.
"""

from __future__ import annotations

from collections.abc import Mapping

from distbridge.environments.base import (
    LaunchEnvironment,
    Variables,
    master_addr,
    master_port,
    read_int,
)

__all__ = ["LAUNCHER", "detect"]

LAUNCHER = "openmpi"
_VARIABLES = Variables(  # node_rank is not read (see above)
    "Open MPI variables",
    {
        "rank": "OMPI_COMM_WORLD_RANK",
        "world_size": "OMPI_COMM_WORLD_SIZE",
        "local_rank": "OMPI_COMM_WORLD_LOCAL_RANK",
        "local_world_size": "OMPI_COMM_WORLD_LOCAL_SIZE",
        "nnodes": "OMPI_MCA_orte_num_nodes",
    },
)


def detect(env: Mapping[str, str]) -> LaunchEnvironment | None:
    """Read ``OMPI_COMM_WORLD_*`` from ``env``; None unless RANK and SIZE are both set.

    Example:
        >>> detect({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2",
        ...         "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
        ...         "OMPI_MCA_ess_base_jobid": "164167681"}).master_addr
        '127.0.0.1'
    """
    rank = read_int(env, "OMPI_COMM_WORLD_RANK")
    world_size = read_int(env, "OMPI_COMM_WORLD_SIZE")
    if rank is None or world_size is None:
        return None
    local_size = read_int(env, "OMPI_COMM_WORLD_LOCAL_SIZE")
    one_node = local_size == world_size
    nnodes = 1 if one_node else read_int(env, "OMPI_MCA_orte_num_nodes")
    job = env.get("OMPI_MCA_ess_base_jobid") or env.get("PMIX_NAMESPACE")
    return LaunchEnvironment(
        launcher=LAUNCHER,
        rank=rank,
        world_size=world_size,
        local_rank=read_int(env, "OMPI_COMM_WORLD_LOCAL_RANK"),
        local_world_size=local_size,
        node_rank=0 if one_node else None,
        nnodes=nnodes,
        master_addr=master_addr(env, one_node=one_node),
        master_port=master_port(env, f"{LAUNCHER}:{job}" if job else None),
        node_id=_daemon(env),
        variables=_VARIABLES,
    )


def _daemon(env: Mapping[str, str]) -> str | None:
    """The name of this node's Open MPI daemon (``jobid.vpid``, one daemon per node), from
    ``OMPI_MCA_orte_local_daemon_uri`` (Open MPI 4); None when absent."""
    uri = env.get("OMPI_MCA_orte_local_daemon_uri", "")
    name = uri.split(";", 1)[0]
    return f"{LAUNCHER}-daemon:{name}" if name else None
