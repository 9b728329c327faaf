"""``ignite.distributed.launcher``'s import path: the names of
``distbridge.compat.ignite_launcher``."""

from __future__ import annotations

from distbridge.compat.ignite_launcher import *  # noqa: F403  (a mirror's path: its names, all of them)
from distbridge.compat.ignite_launcher import __all__ as __all__
