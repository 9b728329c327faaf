"""IBM LSF with ``jsrun`` (IBM Job Step Manager, as on Summit / Lassen-type machines).

``jsrun`` sets ``JSM_NAMESPACE_*`` in every process; a batch shell without ``jsrun`` has
none and is not detected (it is one process, not a job of several ranks), and ``mpirun``
inside an LSF job sets ``OMPI_COMM_WORLD_*`` instead (read by the Open MPI environment).
Unless set, rank 0's address is the first *compute* host of ``LSB_MCPU_HOSTS`` (``"host1 n1
host2 n2 ..."``: the first host listed is the launch node, where jsrun places no rank) and
the port is derived from ``LSB_JOBID``. The nodes are known only when every rank runs on
this node; otherwise ``initialize()`` asks the peers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from distbridge.environments.base import LaunchEnvironment, Variables, detect_from

__all__ = ["LAUNCHER", "detect"]

LAUNCHER = "lsf"
_VARIABLES = Variables(  # node_rank and nnodes are not read: 0 and 1 when on one node
    "jsrun variables",
    {
        "rank": "JSM_NAMESPACE_RANK",
        "world_size": "JSM_NAMESPACE_SIZE",
        "local_rank": "JSM_NAMESPACE_LOCAL_RANK",
        "local_world_size": "JSM_NAMESPACE_LOCAL_SIZE",
    },
)


def detect(env: Mapping[str, str]) -> LaunchEnvironment | None:
    """Read ``JSM_NAMESPACE_*``, ``LSB_JOBID`` and ``LSB_MCPU_HOSTS`` from ``env``; None unless
    ``JSM_NAMESPACE_RANK`` and ``JSM_NAMESPACE_SIZE`` are both set.

    Example:
        >>> detect({"JSM_NAMESPACE_RANK": "0", "JSM_NAMESPACE_SIZE": "12", "LSB_JOBID": "7",
        ...         "LSB_MCPU_HOSTS": "batch1 1 a01n01 42 a01n02 42"}).master_addr
        'a01n01'
    """
    found = detect_from(env, LAUNCHER, _VARIABLES, env.get("LSB_JOBID"))
    if found is None:
        return None
    mcpu_hosts = env.get("LSB_MCPU_HOSTS", "")
    words = mcpu_hosts.split()  # host name, slot count, host name, slot count, ...
    if len(words) % 2 or not all(count.isdigit() for count in words[1::2]):
        raise ValueError(
            f"Environment variable LSB_MCPU_HOSTS={mcpu_hosts!r} is not 'host count host "
            "count ...'; fix or unset it, or set MASTER_ADDR."
        )
    # the first compute host: the launch node, listed first, runs no rank when there are others
    hosts = words[2::2] or words[0::2]
    return replace(found, master_addr=env.get("MASTER_ADDR") or (hosts[0] if hosts else None))
