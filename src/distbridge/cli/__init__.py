"""The command line: ``python -m distbridge info`` and ``python -m distbridge check``.

``info`` reports where this process is and what ``initialize()`` would do, without creating
any context. ``check`` runs a short timed all-reduce across the detected world (or a world it
spawns) and reports latency and bandwidth per message size. See ``docs/cli.md``.
"""

from __future__ import annotations

__all__: list[str] = []
