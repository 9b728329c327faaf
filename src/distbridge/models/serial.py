"""SerialModel: no distributed context; every collective answers as a world of one would.

Its validation is the base class's, so a bad argument fails here exactly as it
would with 4 ranks: bugs surface on the laptop, not on the cluster.

Before ``initialize()``, a process started by a launcher (torchrun, srun, mpirun, ...) is
already one rank of a larger job. The rank queries then answer with the launcher's values,
read once when the model is created (at import, and again by ``idist.sync()``,
``finalize()`` and ``reset_state()``), so logging setup and config parsing can use them.
Its collectives refuse, though: a world-of-one answer on rank 2 of 4 would be silently
wrong, so they raise ``DistributedError`` saying to call ``idist.initialize(backend)``.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from typing import Any, ClassVar, Protocol

import torch
import torch.distributed as dist
from typing_extensions import Self, override

from distbridge import environments
from distbridge.algorithms.groups import not_a_group
from distbridge.errors import DistributedError
from distbridge.models._accelerator import local_device
from distbridge.models._layout import Layout, layout_from_env
from distbridge.models.base import ComputationModel
from distbridge.models.native.backends import check_group_options

__all__ = ["SerialModel"]


class _ProbeSource(Protocol):
    probes: tuple[Callable[[], bool], ...]
    modules_seen: int

    def refresh_probes(self) -> None: ...


_MODULES = sys.modules
_ALONE = Layout(rank=0, world_size=1, local_rank=0, nproc_per_node=1, nnodes=1, node_rank=0)


def _launched() -> tuple[Layout, str | None]:
    """This process's place in the job its launcher describes (a world of one without one),
    and why collectives must refuse (None: they answer as a world of one)."""
    try:
        launch = environments.detect()
    except ValueError as err:
        warnings.warn(
            f"distbridge ignores the launcher's environment: {err} Until then, rank queries "
            "answer as a world of one.",
            RuntimeWarning,
            stacklevel=3,
        )
        return _ALONE, f"the launcher's environment is malformed: {err}"
    if launch is None:
        return _ALONE, None
    layout = layout_from_env(launch, launch.rank, launch.world_size)
    if launch.world_size == 1:
        return layout, None
    return layout, (
        f"this process is rank {launch.rank} of {launch.world_size} ({launch.launcher}), "
        "but no process group is initialized"
    )


class SerialModel(ComputationModel):
    """The model in force when no distributed context exists.

    The rank queries answer with the launcher's values when a launcher started this process
    (read once, here; ``idist.sync()`` reads them again), else as a world of one. Collectives
    answer as a world of one, except under a launcher of several ranks: they raise
    ``DistributedError`` until ``idist.initialize(backend)`` creates the context.
    """

    name: ClassVar[str] = "serial"
    backends: ClassVar[tuple[str, ...]] = ()
    priority: ClassVar[int] = -1000

    def __init__(self, watch: _ProbeSource | None = None) -> None:
        """``watch.probes`` are other models' ``has_context`` checks (the registry keeps them
        up to date); while none of them finds a context (or without ``watch``), this model
        stays current."""
        super().__init__()
        self._watch = watch
        # As in ignite, the accelerator (CUDA, XPU, ...) when one is visible, even without a
        # distributed context; with its index, so that it equals a tensor's device. Asked on
        # first use, not here: this model is made at import, and on a CUDA machine the first
        # driver query makes every later fork of the process unable to use CUDA (the warm
        # starter forks its workers from a process that has imported distbridge).
        self._local_device: torch.device | None = None
        self._layout, self._refusal = _launched()

    @classmethod
    @override
    def is_available(cls) -> bool:
        return True

    @classmethod
    @override
    def has_context(cls) -> bool:
        return False

    @classmethod
    @override
    def from_context(cls) -> Self | None:
        return None

    @classmethod
    @override
    def from_backend(cls, backend: str, **kwargs: Any) -> Self:
        raise ValueError("The serial model has no backend; it is used when none is initialized.")

    @override
    def is_current(self) -> bool:
        watch = self._watch
        if watch is None:
            return True
        if len(_MODULES) != watch.modules_seen:  # something was imported: maybe horovod
            watch.refresh_probes()
        # A plain loop: a generator in any() costs ~350 ns on this hot path.
        for probe in watch.probes:  # noqa: SIM110
            if probe():
                return False
        return True

    @override
    def backend(self) -> str | None:
        return None

    @override
    def device(self) -> torch.device:
        if self._local_device is None:
            self._local_device = local_device()
        return self._local_device

    @override
    def set_local_rank(self, index: int) -> None:
        pass  # the hint is for contexts adopted later; before one, the launcher's value holds

    @override
    def finalize(self) -> None:
        pass

    @override
    def _native_avg(self) -> bool:
        return True  # the average of one value is the value

    @override
    def _placement(self, tensor: torch.Tensor) -> torch.device:
        return tensor.device  # nothing travels: leave tensors where they are

    # Every primitive first refuses under a launcher of several ranks: the arguments are
    # validated by the base class before, so a bad call fails as it would on any model.
    # Reduce, gather, scatter, reduce-scatter, all-to-all and the in-place all-gather keep
    # the base class's defaults, which run over these primitives and refuse with them.

    def _refuse_if_launched(self) -> None:
        if self._refusal is not None:
            raise DistributedError(
                f"Collectives need a distributed context: {self._refusal}. Call "
                "idist.initialize(backend) first (e.g. idist.initialize('gloo'), or "
                "'nccl' on GPUs), or use idist.Parallel(backend)."
            )

    @override
    def _do_all_reduce(self, tensor: torch.Tensor, op: str, group: Any) -> torch.Tensor:
        self._refuse_if_launched()
        return tensor

    @override
    def _do_all_gather(self, tensor: torch.Tensor, group: Any) -> torch.Tensor:
        self._refuse_if_launched()
        return tensor.clone()

    @override
    def _do_broadcast(self, tensor: torch.Tensor, src: int, group: Any) -> torch.Tensor:
        self._refuse_if_launched()
        return tensor

    @override
    def _do_barrier(self, group: Any) -> None:
        self._refuse_if_launched()

    @override
    def _make_group(self, ranks: tuple[int, ...], **kwargs: Any) -> Any:
        self._refuse_if_launched()
        if kwargs and dist.is_available():  # the options of the native model, checked alike
            check_group_options(kwargs)
        elif kwargs:
            raise TypeError(
                f"new_group() got unexpected keyword arguments {sorted(kwargs)} "
                "(this torch has no torch.distributed)."
            )
        return list(ranks)

    @override
    def _check_group(self, group: object) -> None:
        raise not_a_group(group)  # its groups are lists of ranks, such as [0]

    # The world is the launcher's (validation matches the live model's); a group exists
    # only in a world of one (``_make_group`` refuses otherwise), so it is ``[0]``.

    @override
    def _group_members(self, group: Any) -> tuple[int, ...]:
        return tuple(range(self._layout.world_size)) if group is None else (0,)
