"""``ignite.distributed.comp_models``'s import path, kept:
``from distbridge.comp_models import has_xla_support`` keeps working.

It re-exports the names of the mirror, ``distbridge.compat.ignite_comp_models``: the same
objects, no logic.
"""

from __future__ import annotations

from distbridge.compat.ignite_comp_models import *  # noqa: F403  (a mirror's path: its names, all of them)
from distbridge.compat.ignite_comp_models import __all__ as __all__
