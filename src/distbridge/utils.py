"""``ignite.distributed.utils``'s import path: the names of ``distbridge.compat.ignite_utils``."""

from __future__ import annotations

from distbridge.compat.ignite_utils import *  # noqa: F403  (a mirror's path: its names, all of them)
from distbridge.compat.ignite_utils import __all__ as __all__
