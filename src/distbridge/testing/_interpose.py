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
from types import MethodType
from typing import Any, Final, NamedTuple

from distbridge.models.base import COLLECTIVES, ComputationModel

__all__ = ["Call", "Layer", "installed"]

#: each model's installed layers (innermost first) over what its collectives were before the
#: first (a patch of the user's is kept); kept here, not on the model (the layers below the
#: models touch only what distbridge.model_contract names, tests/unit/test_model_contract.py)
_INSTALLED: weakref.WeakKeyDictionary[ComputationModel, tuple[dict[str, Any], list[Layer]]] = (
    weakref.WeakKeyDictionary()
)


def _signature(name: str) -> tuple[str | None, int]:
    """A collective's data argument (its first, by name; None: barrier) and the position of
    its ``group``, read from its signature."""
    params = list(inspect.signature(getattr(ComputationModel, name)).parameters)[1:]  # no self
    return None if name == "barrier" else params[0], params.index("group")


_SIGNATURES: Final = {name: _signature(name) for name in COLLECTIVES}


class Call(NamedTuple):
    """One call of a collective, as a layer sees it: ``proceed`` runs the call below."""

    op: str
    proceed: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]

    @property
    def data(self) -> Any:
        """The call's data argument (its first one; None for ``barrier``)."""
        name = _SIGNATURES[self.op][0]
        if name is None:
            return None
        return self.args[0] if self.args else self.kwargs.get(name)

    @property
    def group(self) -> Any:
        """The call's ``group`` argument (None: the world)."""
        position = _SIGNATURES[self.op][1]
        return self.args[position] if len(self.args) > position else self.kwargs.get("group")

    def run(self, *data: Any) -> Any:
        """Run the call as it was made, or with ``data`` (one value) as its data argument."""
        name = _SIGNATURES[self.op][0]
        if not data or name is None:
            return self.proceed(*self.args, **self.kwargs)
        if self.args:
            return self.proceed(data[0], *self.args[1:], **self.kwargs)
        return self.proceed(*self.args, **{**self.kwargs, name: data[0]})


class Layer(ABC):
    """Sees the outermost calls of the collectives in `ops` of the model it is installed on."""

    ops: Iterable[str] = COLLECTIVES
    _depth = 0  # > 0 while one of this layer's calls runs (each layer counts its own)

    @abstractmethod
    def intercept(self, call: Call) -> Any:
        """Handle one call: usually ``return call.run()``, around what the layer adds."""


def _wrap(layer: Layer, op: str, inner: Callable[..., Any]) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        if layer._depth:  # a collective the model runs inside one this layer already sees
            return inner(*args, **kwargs)
        layer._depth += 1
        try:
            return layer.intercept(Call(op, inner, args, kwargs))
        finally:
            layer._depth -= 1

    call.__name__ = call.__qualname__ = op
    call.__doc__ = inner.__doc__
    return call


def _rebuild(model: ComputationModel, base: dict[str, Any], layers: list[Layer]) -> None:
    for op in COLLECTIVES:
        call = base.get(op)
        for layer in layers:
            if op in layer.ops:
                # the class's method bound to the model (not the model's attribute, which may
                # be an outer layer's)
                call = _wrap(layer, op, call or MethodType(getattr(type(model), op), model))
        model.interpose(op, call)


@contextmanager
def installed(layer: Layer, model: ComputationModel) -> Iterator[ComputationModel]:
    """Interpose ``layer`` on ``model``'s collectives for the block; removed on exit."""
    if model not in _INSTALLED:
        before = {op: model.interposed(op) for op in COLLECTIVES}
        _INSTALLED[model] = {op: call for op, call in before.items() if call is not None}, []
    base, layers = _INSTALLED[model]
    if layer in layers:
        raise RuntimeError(f"{layer!r} is already installed; leave its block before reusing it.")
    layers.append(layer)
    _rebuild(model, base, layers)
    try:
        yield model
    finally:
        layers.remove(layer)
        _rebuild(model, base, layers)
        if not layers:
            del _INSTALLED[model]
