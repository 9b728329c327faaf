"""Picklable objects through tensor collectives, without copying large arrays through pickle.

A frame holds a pickle stream (protocol 5) and the out-of-band buffers it refers to:
numpy arrays hand theirs over through ``buffer_callback``, and plain CPU tensors go out
of band through ``persistent_id``. Frame layout: int64 part count, int64 part lengths,
then each part at a 64-byte aligned offset. The receiver unpickles straight from the
received bytes: arrays and tensors in the result are views of the receive buffer.

Unpickling runs code chosen by the sender; object collectives unpickle only what the
caller asked for (it called an ``*_object`` function), and a ``serializer`` (a
``dumps`` / ``loads`` pair) replaces pickle entirely for those who want something else.
"""

from __future__ import annotations

import io
import pickle
from typing import Any, Protocol

import numpy as np
import torch

__all__ = ["Serializer", "decode_frame", "encode_frame", "frame_into"]

_ALIGN = 64


class Serializer(Protocol):
    """Replaces pickle in the object collectives: ``loads(dumps(obj))`` must rebuild ``obj``."""

    def dumps(self, obj: Any, /) -> bytes: ...
    def loads(self, data: bytes, /) -> Any: ...


def _aligned(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


class _Pickler(pickle.Pickler):
    """Pickle protocol 5 that sends plain CPU tensors' bytes out of band."""

    def __init__(self, file: io.BytesIO, buffers: list[memoryview]) -> None:
        super().__init__(file, protocol=5, buffer_callback=self._keep)
        self._buffers = buffers

    def _keep(self, buffer: pickle.PickleBuffer) -> None:
        self._buffers.append(buffer.raw())

    def persistent_id(self, obj: Any) -> Any:
        if (
            type(obj) is torch.Tensor
            and obj.device.type == "cpu"
            and obj.layout == torch.strided
            and not obj.requires_grad
            and obj.numel() > 0
        ):
            data = obj.detach().contiguous()
            self._buffers.append(data.reshape(-1).view(torch.uint8).numpy().data)
            return ("distbridge.tensor", len(self._buffers) - 1, data.dtype, tuple(data.shape))
        return None


class _Unpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, buffers: list[memoryview]) -> None:
        super().__init__(file, buffers=buffers)
        self._raw = buffers

    def persistent_load(self, pid: Any) -> Any:
        tag, index, dtype, shape = pid
        if tag != "distbridge.tensor" or not isinstance(dtype, torch.dtype):
            raise pickle.UnpicklingError(f"Unknown persistent id {pid!r}.")
        flat = torch.frombuffer(self._raw[index], dtype=torch.uint8)
        return flat.view(dtype).reshape(shape)


def encode_frame(obj: Any, serializer: Serializer | None) -> list[memoryview]:
    """The parts of ``obj``'s frame: the stream first, then its out-of-band buffers."""
    if serializer is not None:
        data = serializer.dumps(obj)
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"serializer.dumps must return bytes, got {type(data).__name__}.")
        return [memoryview(data).cast("B")]
    buffers: list[memoryview] = []
    stream = io.BytesIO()
    _Pickler(stream, buffers).dump(obj)
    return [stream.getbuffer(), *[b.cast("B") for b in buffers]]


def frame_size(parts: list[memoryview]) -> int:
    """Bytes the frame of ``parts`` occupies."""
    offset = _aligned(8 * (1 + len(parts)))
    for part in parts:
        offset = _aligned(offset + part.nbytes)
    return offset


def frame_into(parts: list[memoryview], out: np.ndarray[Any, Any]) -> None:
    """Write the frame of ``parts`` into the uint8 array ``out`` (at least frame_size long)."""
    table = np.array([len(parts), *[p.nbytes for p in parts]], dtype="<i8")
    out[: table.nbytes] = table.view(np.uint8)
    offset = _aligned(table.nbytes)
    for part in parts:
        out[offset : offset + part.nbytes] = np.frombuffer(part, dtype=np.uint8)
        offset = _aligned(offset + part.nbytes)


def decode_frame(data: np.ndarray[Any, Any], serializer: Serializer | None) -> Any:
    """Rebuild the object whose frame starts at ``data`` (a uint8 array; views are kept)."""
    count = int(data[:8].view("<i8")[0])
    if not 0 < count < 1 << 20:
        raise ValueError(f"Received a corrupt object frame ({count} parts): a desynchronized job?")
    lengths = data[8 : 8 * (1 + count)].view("<i8").tolist()
    offset = _aligned(8 * (1 + count))
    views: list[memoryview] = []
    for length in lengths:
        views.append(data[offset : offset + length].data)
        offset = _aligned(offset + length)
    if serializer is not None:
        return serializer.loads(bytes(views[0]))
    return _Unpickler(io.BytesIO(views[0]), views[1:]).load()
