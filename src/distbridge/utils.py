"""``ignite.distributed.utils``'s import path, kept: ``from distbridge.utils import barrier``
keeps working.

It re-exports the names of the mirror, ``distbridge.compat.ignite_utils``: the same
objects, no logic.
"""

from __future__ import annotations

from distbridge.compat.ignite_utils import *  # noqa: F403  (a mirror's path: its names, all of them)
from distbridge.compat.ignite_utils import __all__ as __all__
