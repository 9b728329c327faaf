"""``ignite.distributed.launcher``'s import path, kept: ``from distbridge.launcher import Parallel``
keeps working.

It re-exports the names of the mirror, ``distbridge.compat.ignite_launcher``: the same
objects, no logic.
"""

from __future__ import annotations

from distbridge.compat.ignite_launcher import *  # noqa: F403  (a mirror's path: its names, all of them)
from distbridge.compat.ignite_launcher import __all__ as __all__
