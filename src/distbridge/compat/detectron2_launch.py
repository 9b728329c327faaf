"""Mirrors detectron2's ``detectron2.engine.launch``: ``from
distbridge.compat.detectron2_launch import launch`` is ``from detectron2.engine.launch import
launch`` with one import changed.

``launch`` is the facade's own object (``distbridge.launch``, written in
``distbridge/_spawn_by_url.py``); this module has no logic. detectron2's private helpers
(``_find_free_port``, ``_distributed_worker``) are not mirrored: ``distbridge.spawn`` picks
the port and runs the workers.
"""

from __future__ import annotations

from distbridge import launch
from distbridge._spawn_by_url import DEFAULT_TIMEOUT

__all__ = ["DEFAULT_TIMEOUT", "launch"]
