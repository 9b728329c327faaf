"""What a spawner needs from the model its workers join, without importing any model, and
the call every worker makes: join the job, run ``fn`` with the model active, leave.

The model that calls a spawner hands it ``make_model`` (its ``from_backend``), and the
facade hands it ``activate``: a context-manager factory that makes the worker's model the
active one while ``fn`` runs. Both travel to the workers by pickle, by reference, so the
spawners never import a model or the facade's state (the layers point one way).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from distbridge.model_contract import ModelContract
from distbridge.reliability.hang.signals import report_on_signal

__all__ = ["Activate", "JoinedCall", "MakeModel"]

#: ``Model.from_backend``: joins the job described by the environment, returns the model.
MakeModel = Callable[..., ModelContract]
#: Enters a worker's model as the active one for the duration of the block.
Activate = Callable[[Any], AbstractContextManager[Any]]


@dataclass(frozen=True)
class JoinedCall:
    """``fn(local_rank, *args, **kwargs)`` in a worker of the job it joins as
    ``make_model(backend, ...)``; each spawner's worker adds what it needs."""

    make_model: MakeModel
    activate: Activate
    backend: str
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]

    def run(self, local_rank: int | None = None, **init_kwargs: Any) -> Any:
        """Join, call ``fn`` with the model active (``local_rank``: the model's by default)
        and leave the job; SIGUSR2 reports the model's ledger meanwhile."""
        model = self.make_model(self.backend, **init_kwargs)
        report_on_signal(model)
        with self.activate(model):
            try:
                rank = model.get_local_rank() if local_rank is None else local_rank
                return self.fn(rank, *self.args, **self.kwargs)
            finally:  # while an exception propagates, finalize leaves a failure note for peers
                if model.is_current():
                    model.finalize()
