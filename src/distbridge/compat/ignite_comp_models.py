"""Mirrors ``ignite.distributed.comp_models``' public names: the support flags and the
registered models. ignite's private model classes have no counterpart (see docs/plugins.md)."""

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
