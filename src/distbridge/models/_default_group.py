"""The live default torch.distributed process group, read fast: the native and XLA models
ask for it on every collective to know whether their context still lives."""

from __future__ import annotations

from typing import Any

import torch.distributed as dist

__all__ = ["default_pg"]

if dist.is_available():
    from torch.distributed import distributed_c10d as _c10d

    if hasattr(_c10d._world, "_default_pg"):
        _WORLD = _c10d._world

        def default_pg() -> Any:
            """The live default process group, read without torch's property chain."""
            return _WORLD._default_pg

    else:  # pragma: no cover - older or newer torch without the private attribute

        def default_pg() -> Any:
            """The live default process group (None when there is none)."""
            return dist.GroupMember.WORLD

else:  # pragma: no cover - torch built without torch.distributed

    def default_pg() -> Any:
        """None: this torch has no torch.distributed."""
        return None
