"""Mirrors ``ignite.distributed.launcher``: ``Parallel`` (written in ``distbridge/parallel.py``)."""

from __future__ import annotations

from distbridge import Parallel

__all__ = ["Parallel"]
