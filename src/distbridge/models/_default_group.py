"""The live default torch.distributed process group, read fast: the native and XLA models
ask for it on every collective to know whether their context still lives."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch.distributed as dist

__all__ = ["default_pg"]

#: ``default_pg()``: the live default group, or None. It is ``getattr`` bound to its arguments:
#: a call that runs no Python frame of distbridge's (``bench/call_path.py`` counts them).
default_pg: Callable[[], Any]
if dist.is_available():
    from torch.distributed import distributed_c10d as _c10d

    if hasattr(_c10d._world, "_default_pg"):  # read without torch's property chain
        default_pg = functools.partial(getattr, _c10d._world, "_default_pg")
    else:  # pragma: no cover - older or newer torch without the private attribute
        default_pg = functools.partial(getattr, dist.GroupMember, "WORLD")

else:  # pragma: no cover - torch built without torch.distributed: never a default group
    default_pg = functools.partial(getattr, None, "no_default_group", None)
