"""The Horovod model. `HorovodModel` lives in ``model``; ``runtime`` loads ``horovod.torch``,
``dtypes`` says what Horovod moves itself and holds ``alltoall``, which the collectives
Horovod lacks go through."""

from __future__ import annotations

from distbridge.models.horovod.model import HorovodModel

__all__ = ["HorovodModel"]
