"""The command line, ``python -m distbridge COMMAND``: one module per command (``info``,
``check``, ``why``, ``where``), each described in its docstring and in ``docs/cli.md``."""

from __future__ import annotations

__all__: list[str] = []
