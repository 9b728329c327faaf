"""Interposing on one model's public collectives: the mechanism under telemetry and faults.

While a `Layer` is installed on a model, each collective it asks for is an instance attribute
(set by the model's ``interpose``) that hands the call to the layer; the facade calls
``current().all_reduce(...)``, so the layer sees every facade call. Without a layer nothing is
on the path. Layers stack (the last installed is the outermost) and may leave in any order.
A collective the model runs inside another (``reduce`` of a number runs ``all_reduce``)
reaches each layer as its outer call only.
"""

from __future__ import annotations

import inspect
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import MethodType
from typing import Any, Final

from distbridge.errors import suggest
from distbridge.models.base import COLLECTIVES, ComputationModel

__all__ = ["SPECS", "Layer", "OpSpec", "check_op", "installed"]

#: each model's installed layers; kept here, not on the model (the layers below the models
#: touch only what distbridge.model_contract names, tests/unit/test_model_contract.py)
_INSTALLED: weakref.WeakKeyDictionary[ComputationModel, _Installed] = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class OpSpec:
    """A collective's data argument (the first one, by its name; None: barrier) and the
    position of its ``group`` (read from its signature)."""

    name: str
    payload: str | None
    group: int

    def payload_of(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The data argument of a call, or None."""
        if self.payload is None:
            return None
        return args[0] if args else kwargs.get(self.payload)

    def with_payload(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], value: Any
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The call's arguments with the data argument replaced by ``value``."""
        if self.payload is None:
            return args, kwargs
        if args:
            return (value, *args[1:]), kwargs
        return args, {**kwargs, self.payload: value}


def _spec(name: str) -> OpSpec:
    params = list(inspect.signature(getattr(ComputationModel, name)).parameters)[1:]  # no self
    return OpSpec(name, None if name == "barrier" else params[0], params.index("group"))


SPECS: Final = {name: _spec(name) for name in COLLECTIVES}


def check_op(op: object) -> str:
    """``op`` if it names a collective; TypeError or ValueError (with a suggestion) if not."""
    if not isinstance(op, str):
        raise TypeError(f"op must be the name of a collective (a str), got {op!r}.")
    if op not in SPECS:
        raise ValueError(
            f"op={op!r} is not a distbridge collective. Choose one of: "
            f"{', '.join(COLLECTIVES)}.{suggest(op, COLLECTIVES)}"
        )
    return op


class Layer(ABC):
    """Sees the outermost calls of the collectives in `ops` of the model it is installed on."""

    ops: Iterable[str] = COLLECTIVES
    _depth = 0  # > 0 while one of this layer's calls runs (each layer counts its own)

    @abstractmethod
    def intercept(
        self,
        spec: OpSpec,
        proceed: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        """Handle one call: usually ``return proceed(*args, **kwargs)``, around what the
        layer adds."""


@dataclass
class _Installed:
    base: dict[str, Any]  # the instance attributes the ops had before the first layer
    layers: list[Layer] = field(default_factory=list)


def _wrap(layer: Layer, spec: OpSpec, inner: Callable[..., Any]) -> Callable[..., Any]:
    intercept = layer.intercept

    def call(*args: Any, **kwargs: Any) -> Any:
        if layer._depth:  # a collective the model runs inside one this layer already sees
            return inner(*args, **kwargs)
        layer._depth += 1
        try:
            return intercept(spec, inner, args, kwargs)
        finally:
            layer._depth -= 1

    call.__name__ = call.__qualname__ = spec.name
    call.__doc__ = getattr(inner, "__doc__", None)
    return call


def _rebuild(model: ComputationModel, state: _Installed) -> None:
    for name in COLLECTIVES:
        call = state.base.get(name)
        for layer in state.layers:
            if name in layer.ops:
                # the class's method bound to the model (not the model's attribute, which may
                # be an outer layer's)
                inner = call or MethodType(getattr(type(model), name), model)
                call = _wrap(layer, SPECS[name], inner)
        model.interpose(name, call)


@contextmanager
def installed(layer: Layer, model: ComputationModel) -> Iterator[ComputationModel]:
    """Interpose ``layer`` on ``model``'s collectives for the block; removed on exit."""
    state = _INSTALLED.get(model)
    if state is None:
        before = {name: model.interposed(name) for name in COLLECTIVES}
        state = _INSTALLED[model] = _Installed({k: v for k, v in before.items() if v is not None})
    if layer in state.layers:
        raise RuntimeError(f"{layer!r} is already installed; leave its block before reusing it.")
    state.layers.append(layer)
    _rebuild(model, state)
    try:
        yield model
    finally:
        state.layers.remove(layer)
        _rebuild(model, state)
        if not state.layers:
            del _INSTALLED[model]
