"""Mirrors the public names of ``ignite.distributed.comp_models``: the support flags and the
registered models, so ``from distbridge.comp_models import has_native_dist_support`` (this
module's names, re-exported at ignite's path) is
``from ignite.distributed.comp_models import has_native_dist_support`` with one import
changed.

Every name is the facade's own object; this module has no logic. ignite's model classes
(``_SerialModel``, ``_NativeDistModel``, ...) are private there and have no counterpart
here: distbridge's models are ``distbridge.models`` (see docs/plugins.md).
"""

from __future__ import annotations

from distbridge import (
    has_hvd_support,
    has_native_dist_support,
    has_xla_support,
    registered_computation_models,
)

__all__ = [
    "has_hvd_support",
    "has_native_dist_support",
    "has_xla_support",
    "registered_computation_models",
]
