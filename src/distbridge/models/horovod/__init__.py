"""The Horovod model. `HorovodModel` lives in ``model``; ``env`` loads ``horovod.torch``,
``dtypes`` says what Horovod moves itself, ``alltoall`` holds the collectives that go
through ``hvd.alltoall``, ``failure`` its fail-together."""

from __future__ import annotations

from distbridge.models.horovod.model import HorovodModel

__all__ = ["HorovodModel"]
