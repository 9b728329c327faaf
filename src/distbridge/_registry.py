"""The registry of computation models: which backends exist and which context is live.

Built-in models are registered when this module is imported. Third-party models
come from the ``distbridge.computation_models`` entry-point group, loaded on the
first query that needs the full list, unless ``DISTBRIDGE_DISABLE_PLUGINS=1``.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import overload

from distbridge.errors import ArgumentTypeError, BackendUnavailableError, suggest
from distbridge.models import BUILTIN_MODELS
from distbridge.models.base import ComputationModel

__all__ = ["ENTRY_POINT_GROUP", "RegisteredModels", "Registry", "registry"]

ENTRY_POINT_GROUP = "distbridge.computation_models"
_DISABLE_PLUGINS_VAR = "DISTBRIDGE_DISABLE_PLUGINS"


class Registry:
    """Computation model classes, ordered by ``priority`` (highest first)."""

    def __init__(self) -> None:
        self._models: list[type[ComputationModel]] = []
        self._plugin_models: list[type[ComputationModel]] = []
        self._plugins_loaded = False
        #: ``has_context`` of every model that can have a context now: a model whose
        #: ``context_module`` is not imported yet cannot. Read on the hot path, refreshed
        #: when ``len(sys.modules)`` changes. Until plug-ins are loaded, it holds one probe
        #: that loads them first.
        self.probes: tuple[Callable[[], bool], ...] = (self._load_plugins_then_probe,)
        self.modules_seen = -1

    def register(self, model: type[ComputationModel], *, replace: bool = False) -> None:
        """Add ``model``. A model whose name or backends clash with a registered one is refused
        unless ``replace=True``, which removes the clashing models first."""
        clashes = [
            m for m in self._models if m.name == model.name or set(m.backends) & set(model.backends)
        ]
        if clashes and not replace:
            taken = ", ".join(f"{m.__name__} ({m.name}: {', '.join(m.backends)})" for m in clashes)
            raise ValueError(
                f"Cannot register {model.__name__} (name {model.name!r}, backends "
                f"{model.backends!r}): already taken by {taken}. Pass replace=True to override."
            )
        for m in clashes:
            self._models.remove(m)
        self._models.append(model)
        self._models.sort(key=lambda m: -m.priority)
        self.refresh_probes()

    def unregister(self, model: type[ComputationModel]) -> None:
        """Remove ``model``; ValueError if it was not registered."""
        if model not in self._models:
            raise ValueError(f"{model.__name__} is not registered.")
        self._models.remove(model)
        self.refresh_probes()

    def models(self) -> tuple[type[ComputationModel], ...]:
        """Every registered model, plug-ins included, highest priority first."""
        self._load_plugins()
        return tuple(self._models)

    def known_backends(self) -> tuple[str, ...]:
        """Every backend name any registered model knows, available here or not."""
        return tuple(b for m in self.models() for b in m.backends)

    def available_backends(self) -> tuple[str, ...]:
        """Backend names that can run on this machine."""
        return tuple(b for m in self.models() for b in m.available_backends())

    def for_backend(self, backend: str) -> type[ComputationModel]:
        """The model that runs ``backend``; BackendUnavailableError saying why when none can."""
        if not isinstance(backend, str):
            raise ArgumentTypeError(f"backend must be a str such as 'gloo', got {backend!r}.")
        available = self.available_backends()
        for model in self.models():
            if backend in model.backends:
                if backend in model.available_backends():
                    return model
                reason = model.unavailable_reason(backend) or "its dependency is missing"
                raise BackendUnavailableError(
                    f"Backend {backend!r} is not available: {reason}. Backend should be one "
                    f"of the available backends: {', '.join(available) or 'none'}."
                )
        raise BackendUnavailableError(
            f"Unknown backend {backend!r}. Available backends: {', '.join(available) or 'none'}."
            " Backend should be one of them." + suggest(backend, self.known_backends())
        )

    def detect(self) -> ComputationModel | None:
        """Adopt the first live context found, in priority order; None when there is none.

        Never communicates: each model looks only at its own process-local state.
        """
        for model in self.models():
            if model.has_context():
                found = model.from_context()
                if found is not None:
                    return found
        return None

    def refresh_probes(self) -> None:
        """Recompute ``probes`` after models were registered or modules imported (cheap)."""
        if self._plugins_loaded:
            self.modules_seen = len(sys.modules)
            self.probes = tuple(
                m.has_context
                for m in self._models
                if m.backends and (m.context_module is None or m.context_module in sys.modules)
            )

    def _load_plugins_then_probe(self) -> bool:
        self._load_plugins()
        return any(probe() for probe in self.probes)

    def _load_plugins(self) -> None:
        if self._plugins_loaded:
            return
        self._plugins_loaded = True
        self.refresh_probes()
        if os.environ.get(_DISABLE_PLUGINS_VAR, "") not in ("", "0"):
            return
        for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            try:
                model = entry.load()
                self.register(model)
                self._plugin_models.append(model)
            except Exception as err:  # a broken plug-in must not break distbridge
                warnings.warn(
                    f"distbridge: skipped computation model plug-in {entry.name!r} "
                    f"({entry.value}): {type(err).__name__}: {err}. "
                    f"Set {_DISABLE_PLUGINS_VAR}=1 to skip every plug-in.",
                    RuntimeWarning,
                    stacklevel=2,
                )

    def _reset_plugins(self) -> None:
        """Forget loaded plug-ins so the next query loads them again (for tests); models
        registered by hand stay."""
        self._models = [m for m in self._models if m not in self._plugin_models]
        self._plugin_models.clear()
        self._plugins_loaded = False
        self.probes = (self._load_plugins_then_probe,)
        self.modules_seen = -1


class RegisteredModels(Sequence["type[ComputationModel]"]):
    """A live, read-only view of the registered models (``registered_computation_models``)."""

    def __init__(self, source: Registry) -> None:
        self._source = source

    @overload
    def __getitem__(self, index: int) -> type[ComputationModel]: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[type[ComputationModel]]: ...
    def __getitem__(
        self, index: int | slice
    ) -> type[ComputationModel] | Sequence[type[ComputationModel]]:
        return self._source.models()[index]

    def __len__(self) -> int:
        return len(self._source.models())

    def __repr__(self) -> str:
        return f"[{', '.join(m.__name__ for m in self)}]"


registry = Registry()
for _model in BUILTIN_MODELS:
    registry.register(_model)
