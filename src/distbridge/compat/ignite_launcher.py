"""Mirrors ``ignite.distributed.launcher``: ``from distbridge.compat.ignite_launcher import
Parallel`` (or ``from distbridge.launcher import Parallel``) is
``from ignite.distributed.launcher import Parallel`` with one import changed.

``Parallel`` is the facade's own object (``distbridge.Parallel``, written in
``distbridge/parallel.py``); this module has no logic.
"""

from __future__ import annotations

from distbridge import Parallel

__all__ = ["Parallel"]
