"""What a spawner needs from the model its workers join, without importing any model.

The model that calls a spawner hands it ``make_model`` (its ``from_backend``), and the
facade hands it ``activate``: a context-manager factory that makes the worker's model the
active one while ``fn`` runs. Both travel to the workers by pickle, by reference, so the
spawners never import a model or the facade's state (the layers point one way).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from distbridge.model_contract import ModelContract

__all__ = ["Activate", "MakeModel"]

#: ``Model.from_backend``: joins the job described by the environment, returns the model.
MakeModel = Callable[..., ModelContract]
#: Enters a worker's model as the active one for the duration of the block.
Activate = Callable[[Any], AbstractContextManager[Any]]
