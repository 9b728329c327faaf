"""DeviceMesh on the live backend: ``idist.device_mesh((2, 2), names=("dp", "tp"))``.

A mesh arranges the ranks of a torch.distributed job in a grid; each named dimension is a
process group. Pass one dimension (``mesh["tp"]``) as ``group=`` to any collective, or the
mesh to FSDP2 / tensor parallelism. Meshes exist only where the groups are torch.distributed
process groups (the native model: gloo, nccl, mpi); Horovod, XLA and the serial model have
none, and ``device_mesh`` says so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from distbridge import _api

__all__ = ["device_mesh"]


def device_mesh(shape: Sequence[int] | int, names: Sequence[str] | None = None) -> DeviceMesh:
    """``init_device_mesh(idist.device().type, shape, mesh_dim_names=names)``: a DeviceMesh of
    ``shape`` over every rank of the job, on this process's device type.

    Args:
        shape: the size of each dimension (an int for one dimension); their product must be
            the world size. Ranks fill the grid in row-major order.
        names: one name per dimension (``("dp", "tp")``), to pick a dimension with
            ``mesh["tp"]``.

    Raises:
        RuntimeError: the active model has no torch.distributed process groups (Horovod, XLA,
            or no distributed context: start one with ``idist.initialize("gloo")``).
        ValueError: the shape does not multiply to the world size, or ``names`` does not
            give one name per dimension.
    """
    dims = (shape,) if isinstance(shape, int) else tuple(shape)
    model, world = _api.model_name(), _api.get_world_size()
    if model != "native-dist":
        raise RuntimeError(
            f"device_mesh() needs torch.distributed process groups, but the active model is "
            f"{model!r}: start a torch.distributed backend first (idist.initialize('gloo') "
            "or idist.spawn('gloo', ...)); Horovod and XLA have no DeviceMesh."
        )
    if not dims or any(not isinstance(d, int) or isinstance(d, bool) or d < 1 for d in dims):
        raise ValueError(f"device_mesh() takes positive int dimension sizes, got {shape!r}.")
    if math.prod(dims) != world:
        raise ValueError(
            f"device_mesh({shape!r}) holds {math.prod(dims)} ranks, but the world has {world}: "
            f"the sizes must multiply to {world}."
        )
    named = None if names is None else tuple(names)
    if named is not None and len(named) != len(dims):
        raise ValueError(
            f"device_mesh() got {len(named)} names {named!r} for {len(dims)} dimensions "
            f"{dims}: give one name per dimension."
        )
    return init_device_mesh(_api.device().type, dims, mesh_dim_names=named)
