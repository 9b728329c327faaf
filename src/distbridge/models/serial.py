"""SerialModel: no distributed context; every collective answers as a world of one would.

Its validation is the base class's, so a bad argument fails here exactly as it
would with 4 ranks: bugs surface on the laptop, not on the cluster.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Protocol

import torch
from typing_extensions import Self, override

from distbridge._types import SpawnResult
from distbridge.models.base import ComputationModel

__all__ = ["SerialModel"]

_CPU = torch.device("cpu")


class _ProbeSource(Protocol):
    probes: tuple[Callable[[], bool], ...]
    modules_seen: int

    def refresh_probes(self) -> None: ...


class _NoProbes:
    probes: tuple[Callable[[], bool], ...] = ()
    modules_seen = -1

    def refresh_probes(self) -> None:
        self.modules_seen = len(_MODULES)


_MODULES = sys.modules


class SerialModel(ComputationModel):
    """The model in force when no distributed context exists."""

    name: ClassVar[str] = "serial"
    backends: ClassVar[tuple[str, ...]] = ()
    priority: ClassVar[int] = -1000

    def __init__(self, watch: _ProbeSource | None = None) -> None:
        """``watch.probes`` are other models' ``has_context`` checks (the registry keeps them
        up to date); while none of them finds a context, this model stays current."""
        super().__init__()
        self._watch = watch if watch is not None else _NoProbes()
        # As in ignite: "cuda" when a GPU is visible, even without a distributed context.
        self._device = torch.device("cuda") if torch.cuda.is_available() else _CPU

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

    @classmethod
    @override
    def spawn(
        cls,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs_dict: Mapping[str, Any],
        nproc_per_node: int,
        **kwargs: Any,
    ) -> SpawnResult:
        raise ValueError("The serial model cannot spawn processes; name a backend such as 'gloo'.")

    @override
    def is_current(self) -> bool:
        watch = self._watch
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
    def get_rank(self) -> int:
        return 0

    @override
    def get_world_size(self) -> int:
        return 1

    @override
    def get_local_rank(self) -> int:
        return 0

    @override
    def get_nproc_per_node(self) -> int:
        return 1

    @override
    def get_nnodes(self) -> int:
        return 1

    @override
    def get_node_rank(self) -> int:
        return 0

    @override
    def device(self) -> torch.device:
        return self._device

    @override
    def set_local_rank(self, index: int) -> None:
        pass  # a world of one has local rank 0 whatever the hint

    @override
    def finalize(self) -> None:
        pass

    @override
    def _native_avg(self) -> bool:
        return True  # the average of one value is the value

    @override
    def _collective_device(self) -> torch.device:
        return _CPU

    @override
    def _placement(self, tensor: torch.Tensor) -> torch.device:
        return tensor.device  # nothing travels: leave tensors where they are

    @override
    def _do_all_reduce(self, tensor: torch.Tensor, op: str, group: Any) -> torch.Tensor:
        return tensor

    @override
    def _do_all_gather(self, tensor: torch.Tensor, group: Any) -> torch.Tensor:
        return tensor.clone()

    @override
    def _do_broadcast(self, tensor: torch.Tensor, src: int, group: Any) -> torch.Tensor:
        return tensor

    @override
    def _do_barrier(self, group: Any) -> None:
        pass

    @override
    def _make_group(self, ranks: tuple[int, ...], **kwargs: Any) -> Any:
        if kwargs:
            raise TypeError(
                f"new_group() got unexpected keyword arguments {sorted(kwargs)} "
                "(the serial model takes none)."
            )
        return list(ranks)

    @override
    def _check_group(self, group: object) -> None:
        raise TypeError(
            f"The serial model takes group=None or a list of ranks such as [0], got {group!r}."
        )

    @override
    def _group_size(self, group: Any) -> int:
        return 1

    @override
    def _group_rank(self, group: Any) -> int:
        return 0

    @override
    def _group_members(self, group: Any) -> tuple[int, ...]:
        return (0,)
