"""Open MPI's ``mpirun`` / ``mpiexec`` (and launchers built on it: Spectrum MPI, ``horovodrun``
with its MPI controller).

``OMPI_COMM_WORLD_NODE_RANK`` is not read: despite its name it is the rank *among the
processes of this node*, not the node's index. No variable gives the node's index, so unless
every rank runs on this node ``initialize()`` asks the peers, grouping ranks by their node's
Open MPI daemon (``OMPI_MCA_orte_local_daemon_uri``), which tells nodes apart even when host
names repeat.
Without MASTER_PORT, the port is derived from the job id (``OMPI_MCA_ess_base_jobid``, or
``PMIX_NAMESPACE`` in Open MPI 5).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from distbridge.environments.base import LaunchEnvironment, Variables, detect_from, read_int

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
    job = env.get("OMPI_MCA_ess_base_jobid") or env.get("PMIX_NAMESPACE")
    found = detect_from(env, LAUNCHER, _VARIABLES, job)
    if found is None:
        return None
    nnodes = found.nnodes or read_int(env, "OMPI_MCA_orte_num_nodes")
    # this node's Open MPI daemon, jobid.vpid (one per node); Open MPI 4 only
    daemon = env.get("OMPI_MCA_orte_local_daemon_uri", "").split(";", 1)[0]
    return replace(found, nnodes=nnodes, node_id=f"{LAUNCHER}-daemon:{daemon}" if daemon else None)
