"""Picklable objects through tensor collectives, without copying large arrays through pickle.

A frame holds a pickle stream (protocol 5) and the out-of-band buffers it refers to:
numpy arrays hand theirs over through ``buffer_callback`` (pickle numbers those in the
order it meets them), and plain CPU tensors go out of band through ``persistent_id``
(numbered by the pickler itself). The two kinds are kept apart: pickle's own buffers
first, then the tensors'. Frame layout: int64 part count, int64 tensor-part count, int64
part lengths, then each part at a 64-byte aligned offset. The receiver unpickles straight
from the received bytes: arrays and tensors in the result are writable views of the
receive buffer (each its own bytes; the buffer lives as long as any of them does).

Unpickling runs code chosen by the sender; object collectives unpickle only what the
caller asked for (it called an ``*_object`` function), and a ``serializer`` (a
``dumps`` / ``loads`` pair) replaces pickle entirely for those who want something else.
"""

from __future__ import annotations

import io
import pickle
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch

from distbridge.algorithms.byte_view import as_bytes, from_bytes

__all__ = [
    "Frame",
    "Serializer",
    "decode_frame",
    "dumps",
    "encode_frame",
    "frame_into",
    "frame_size",
    "loads",
]

_ALIGN = 64


class Serializer(Protocol):
    """Replaces pickle in the object collectives: ``loads(dumps(obj))`` must rebuild ``obj``."""

    def dumps(self, obj: Any, /) -> bytes: ...
    def loads(self, data: bytes, /) -> Any: ...


def _aligned(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


class _Pickler(pickle.Pickler):
    """Pickle protocol 5 that sends plain CPU tensors as their raw bytes, dtype and shape, out
    of band into ``tensors`` (a tensor met twice goes once, as pickle's memo does for other
    objects), pickle's own out-of-band buffers into ``buffers``; without the two lists, all
    stays in the stream (the tensors' bytes inside their persistent ids)."""

    def __init__(
        self,
        file: io.BytesIO,
        buffers: list[memoryview] | None = None,
        tensors: list[memoryview] | None = None,
    ) -> None:
        keep = None if buffers is None else (lambda buffer: buffers.append(buffer.raw()))
        super().__init__(file, protocol=5, buffer_callback=keep)
        self._tensors = tensors
        self._seen: dict[int, tuple[torch.Tensor, int]] = {}

    def persistent_id(self, obj: Any) -> Any:
        if type(obj) is not torch.Tensor or not _out_of_band(obj):
            return None
        data = as_bytes(obj.resolve_conj().resolve_neg()).numpy()
        if self._tensors is None:  # in band: the bytes themselves
            return ("distbridge.tensor", data.tobytes(), obj.dtype, tuple(obj.shape))
        seen = self._seen.get(id(obj))
        if seen is None:
            self._tensors.append(data.data)
            seen = self._seen[id(obj)] = (obj, len(self._tensors) - 1)  # obj: keeps id() unique
        return ("distbridge.tensor", seen[1], obj.dtype, tuple(obj.shape))


def _out_of_band(tensor: torch.Tensor) -> bool:
    """Whether ``tensor``'s bytes can travel as a raw buffer and come back as a plain tensor
    (autograd or quantization metadata keeps it in band, where pickle keeps it)."""
    return (
        tensor.device.type == "cpu"
        and tensor.layout == torch.strided
        and not tensor.requires_grad
        and not tensor.is_quantized
    )


_NO_BYTES = torch.empty(0, dtype=torch.uint8)  # torch.frombuffer refuses an empty buffer


class _Unpickler(pickle.Unpickler):
    def __init__(
        self,
        file: io.BytesIO,
        buffers: list[memoryview] | None = None,
        tensors: list[memoryview] | None = None,
    ) -> None:
        super().__init__(file, buffers=buffers)
        self._tensors = tensors or []
        self._made: dict[int, torch.Tensor] = {}

    def persistent_load(self, pid: Any) -> Any:
        tag, index, dtype, shape = pid
        if tag != "distbridge.tensor" or not isinstance(dtype, torch.dtype):
            raise pickle.UnpicklingError(f"Unknown persistent id {pid!r}.")
        if isinstance(index, bytes):  # in band: the bytes themselves
            return _tensor(bytearray(index), dtype, shape)
        if index not in self._made:  # a tensor met twice comes back as one
            self._made[index] = _tensor(self._tensors[index], dtype, shape)
        return self._made[index]


def _tensor(raw: bytearray | memoryview, dtype: torch.dtype, shape: Any) -> torch.Tensor:
    """The tensor whose bytes are ``raw`` (shared, not copied)."""
    flat = torch.frombuffer(raw, dtype=torch.uint8) if len(raw) else _NO_BYTES
    return from_bytes(flat, dtype, tuple(shape))


def dumps(obj: Any) -> bytes:
    """``obj`` as one pickle stream, tensors as their raw bytes (torch cannot unpickle some
    dtypes it pickles, such as uint16 or float8): for values too small for a frame."""
    stream = io.BytesIO()
    _Pickler(stream).dump(obj)
    return stream.getvalue()


def loads(data: bytes) -> Any:
    """The object ``dumps`` made ``data`` from."""
    return _Unpickler(io.BytesIO(data)).load()


@dataclass(frozen=True)
class Frame:
    """The parts of one object's frame: the pickle stream (or a serializer's bytes), then
    the last ``tensor_parts`` of ``parts`` are tensors' bytes, the others pickle's buffers."""

    parts: tuple[memoryview, ...] = ()
    tensor_parts: int = 0


def encode_frame(obj: Any, serializer: Serializer | None) -> Frame:
    """The frame of ``obj``: its stream, pickle's out-of-band buffers, the tensors' bytes."""
    if serializer is not None:
        data = serializer.dumps(obj)
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"serializer.dumps must return bytes, got {type(data).__name__}.")
        return Frame((memoryview(data).cast("B"),))
    buffers: list[memoryview] = []
    tensors: list[memoryview] = []
    stream = io.BytesIO()
    _Pickler(stream, buffers, tensors).dump(obj)
    parts = (stream.getbuffer(), *[b.cast("B") for b in buffers], *tensors)
    return Frame(parts, len(tensors))


def _layout(lengths: list[int]) -> tuple[list[int], int]:
    """Where each part of a frame whose parts have ``lengths`` starts, and the frame's size."""
    starts, offset = [], _aligned(8 * (2 + len(lengths)))
    for length in lengths:
        starts.append(offset)
        offset = _aligned(offset + length)
    return starts, offset


def frame_size(frame: Frame) -> int:
    """Bytes ``frame`` occupies."""
    return _layout([p.nbytes for p in frame.parts])[1]


def frame_into(frame: Frame, out: np.ndarray[Any, Any]) -> None:
    """Write ``frame`` into the uint8 array ``out`` (at least ``frame_size`` long)."""
    lengths = [p.nbytes for p in frame.parts]
    table = np.array([len(frame.parts), frame.tensor_parts, *lengths], dtype="<i8")
    out[: table.nbytes] = table.view(np.uint8)
    for part, start in zip(frame.parts, _layout(lengths)[0], strict=True):
        out[start : start + part.nbytes] = np.frombuffer(part, dtype=np.uint8)


def decode_frame(data: np.ndarray[Any, Any], serializer: Serializer | None) -> Any:
    """Rebuild the object whose frame starts at ``data`` (a uint8 array; views are kept)."""
    count, tensor_parts = (int(n) for n in data[:16].view("<i8"))
    if not (0 < count < 1 << 20 and 0 <= tensor_parts < count):
        raise ValueError(
            f"Received a corrupt object frame ({count} parts, {tensor_parts} of them tensors):"
            " a desynchronized job?"
        )
    lengths = data[16 : 8 * (2 + count)].view("<i8").tolist()
    views = [data[s : s + n].data for s, n in zip(_layout(lengths)[0], lengths, strict=True)]
    if serializer is not None:
        return serializer.loads(bytes(views[0]))
    first_tensor = count - tensor_parts
    return _Unpickler(io.BytesIO(views[0]), views[1:first_tensor], views[first_tensor:]).load()
