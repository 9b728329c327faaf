"""Mirrors detectron2's ``detectron2.engine.launch``: ``launch`` (written in
``distbridge/_detectron2.py``); ``spawn`` picks the port and runs the workers, so
detectron2's private helpers are not mirrored."""

from __future__ import annotations

from distbridge import launch
from distbridge._detectron2 import DEFAULT_TIMEOUT

__all__ = ["DEFAULT_TIMEOUT", "launch"]
