"""Fast paths of collectives called in a loop with tensors of one kind, as a training step
does: a kind (dtype, shape, device, layout) that passed every check once and went to the
backend as it was lets later calls with tensors like it skip the checks. At 1 MiB the checks
cost 20-30 us a call with the caches cold between transfers."""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["FastPath"]

_MOST_REMEMBERED = 64  # kinds per collective; beyond them, calls take the checks


class FastPath:
    """The kinds of tensor one collective (of the world) may send without its checks."""

    __slots__ = ("_kinds",)

    def __init__(self) -> None:
        self._kinds: set[tuple[Any, ...]] = set()

    def knows(self, x: torch.Tensor) -> bool:
        """Whether ``x`` may skip the checks: a tensor like it passed them, and it is
        contiguous (so it goes as it is)."""
        return (x.dtype, x.shape, x.device, x.layout) in self._kinds and x.is_contiguous()

    def remember(self, x: torch.Tensor) -> None:
        """Let later tensors like ``x`` skip the checks: ``x`` passed them and went as it was."""
        if len(self._kinds) < _MOST_REMEMBERED:
            self._kinds.add((x.dtype, x.shape, x.device, x.layout))
