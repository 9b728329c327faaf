"""Mirrors ``ignite.distributed.launcher``: ``from distbridge.launcher import Parallel`` is
``from ignite.distributed.launcher import Parallel`` with one import changed.

``Parallel`` is the facade's own class (``distbridge.launcher.Parallel is
distbridge.Parallel``); this module has no logic.
"""

from __future__ import annotations

from distbridge import Parallel

__all__ = ["Parallel"]
