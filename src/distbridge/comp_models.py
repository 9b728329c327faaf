"""``ignite.distributed.comp_models``'s import path: the names of
``distbridge.compat.ignite_comp_models``."""

from __future__ import annotations

from distbridge.compat.ignite_comp_models import *  # noqa: F403  (a mirror's path: its names, all of them)
from distbridge.compat.ignite_comp_models import __all__ as __all__
