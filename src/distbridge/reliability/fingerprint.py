"""What the debug mode compares before a collective: a fingerprint of the call and its site.

A fingerprint names the collective, the arguments every member must agree on (dtype,
shape, op, src / dst, ...), notes that may legitimately differ across ranks (the shapes
of a gather), the group's members and the user's call site: the first frame outside
the distbridge package. Fingerprints travel as JSON text through the store, so nothing
received is evaluated or unpickled.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import torch

from distbridge._frames import outside, site
from distbridge.algorithms import codec

__all__ = ["Fingerprint", "call_site", "describe"]

Fields = tuple[tuple[str, str], ...]
_CATEGORIES = {
    codec.KIND_INT: "number",
    codec.KIND_FLOAT: "number",
    codec.KIND_BOOL: "number",
    codec.KIND_STR: "text",
    codec.KIND_PATH: "text",
}


@dataclass(frozen=True)
class Fingerprint:
    """One rank's description of the collective it is about to run: its name ``call``
    (``"all_reduce"``), the (name, value) ``fields`` every member must agree on, the
    ``notes`` shown in a report but allowed to differ, the group's global ranks
    (``members``, sorted) and the ``site`` of the user's call (``file:line in function``)."""

    call: str
    fields: Fields
    notes: Fields
    members: tuple[int, ...]
    site: str

    def agrees_with(self, other: Fingerprint) -> bool:
        """Whether ``other`` is the same collective with the same must-match arguments."""
        return (self.call, self.fields, self.members) == (other.call, other.fields, other.members)

    def text(self) -> str:
        """``all_reduce(type=tensor, dtype=float32, shape=[3], op=SUM)``."""
        args = ", ".join(f"{k}={v}" for k, v in (*self.fields, *self.notes))
        return f"{self.call}({args})"

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str | bytes) -> Fingerprint:
        data = json.loads(text)
        return cls(
            call=str(data["call"]),
            fields=tuple((str(k), str(v)) for k, v in data["fields"]),
            notes=tuple((str(k), str(v)) for k, v in data["notes"]),
            members=tuple(int(r) for r in data["members"]),
            site=str(data["site"]),
        )


def call_site() -> str:
    """``file:line in function`` of the first frame outside the distbridge package."""
    return site(outside(sys._getframe(1)))


# ---- what must match, per collective ------------------------------------------------------


def _dtype(tensor: torch.Tensor) -> str:
    return str(tensor.dtype).removeprefix("torch.")


def _kind(value: object) -> str:
    """``tensor``, ``int``, ``float``, ``bool``, ``str``, ``Path`` or ``object``."""
    if isinstance(value, torch.Tensor):
        return "tensor"
    return codec.KIND_NAMES.get(codec.kind_of(value), type(value).__name__)


def _tensor_fields(value: object, *, shape: bool) -> list[tuple[str, str]]:
    """type=<kind>, and for a tensor its dtype and (when ``shape``) its shape."""
    fields = [("type", _kind(value))]
    if isinstance(value, torch.Tensor):
        fields.append(("dtype", _dtype(value)))
        if shape:
            fields.append(("shape", str(list(value.shape))))
    return fields


def _gathered(value: object) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """A gathered value: tensors agree on dtype (shapes, number of dims included, may
    differ); other values on their category (numbers, text, objects), since a gather mixes
    ints and floats but not kinds."""
    if isinstance(value, torch.Tensor):
        return _tensor_fields(value, shape=False), [("shape", str(list(value.shape)))]
    category = _CATEGORIES.get(codec.kind_of(value), "object")
    return [("type", category)], [("value", _kind(value))]


def _shapes(shapes: object) -> str:
    try:
        return str([[int(d) for d in s] for s in shapes])  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        return repr(shapes)


def _tensors(tensors: object) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """A list of tensors sent to every rank: count and dtypes agree, shapes may differ."""
    if not isinstance(tensors, (list, tuple)):
        return [("tensors", type(tensors).__name__)], []
    dtypes = sorted({_dtype(t) if isinstance(t, torch.Tensor) else _kind(t) for t in tensors})
    shapes = [list(t.shape) if isinstance(t, torch.Tensor) else _kind(t) for t in tensors]
    return [("count", str(len(tensors))), ("dtype", "/".join(dtypes))], [("shapes", str(shapes))]


def describe(
    call: str, args: Mapping[str, Any], op_name: Callable[[object], str]
) -> tuple[Fields, Fields]:
    """The must-match fields and the notes of ``call`` with ``args``; never raises on bad
    arguments (the collective itself reports those), so every rank can compare."""
    fields: list[tuple[str, str]] = []
    notes: list[tuple[str, str]] = []
    x = args.get("x")
    tensor = isinstance(x, torch.Tensor)
    vouched = args.get("same_shape") is True  # the caller vouched for one shape everywhere
    if call in ("all_reduce", "reduce", "reduce_scatter"):
        fields = [*_tensor_fields(x, shape=True), ("op", op_name(args["op"]))]
    elif call == "all_gather":  # tensors: one shape everywhere; other values: any size
        fields, notes = (_tensor_fields(x, shape=True), []) if tensor else _gathered(x)
    elif call == "broadcast":
        if tensor and not args["safe_mode"]:
            fields = _tensor_fields(x, shape=True)
        else:  # only the source's value matters: the others may pass placeholders
            fields, notes = [("type", "not a tensor, or safe_mode")], [("value", _kind(x))]
    elif call == "gather":
        fields, notes = (_tensor_fields(x, shape=True), []) if vouched else _gathered(x)
    elif call == "all_gather_tensors_with_shapes":
        fields = [*_tensor_fields(x, shape=False), ("shapes", _shapes(args["shapes"]))]
    elif call == "all_to_all" and tensor:  # one tensor: one shape everywhere
        fields = _tensor_fields(x, shape=True)
    elif call == "all_to_all":
        fields, notes = _tensors(x)
        if vouched:
            fields, notes = [*fields, *notes], []
    elif call in ("scatter", "scatter_object") and "x" in args:
        notes = [("sent", f"{len(x)} values")] if isinstance(x, list) else []
        if args.get("out") is not None:  # every rank receives into a tensor of one shape
            fields = _tensor_fields(args["out"], shape=True)
    for root in ("src", "dst"):
        if root in args:
            fields.append((root, repr(args[root])))
    return tuple(fields), tuple(notes)
