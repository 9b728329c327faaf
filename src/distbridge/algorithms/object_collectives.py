"""Picklable objects through tensor collectives, without copying large arrays through pickle:
all_gather_object, gather_object, broadcast_object and scatter_object over model primitives.

Each object travels as a frame: a pickle stream (protocol 5) and the out-of-band buffers it
refers to, in the order pickle meets them: numpy arrays hand theirs over themselves, and
plain CPU tensors are reduced to their raw bytes (a ``pickle.PickleBuffer``), dtype and
shape (torch cannot unpickle some dtypes it pickles, such as uint16 or float8). Frame
layout: int64 part count, int64 part lengths, then each part at a 64-byte aligned offset.
The receiver unpickles straight from the received bytes: arrays and tensors in the result
are writable views of the receive buffer (each its own bytes; the buffer lives as long as
any of them does).

Frame sizes travel first; a rank that cannot serialize its object sends size -1, so
every rank raises together instead of some waiting forever. Frames then move as one
uint8 buffer on the model's object transport (a CPU gloo group under NCCL): each
rank writes its frame into its own slot of the receive buffer, so no separate send
copy is made, and the backend fills the other slots (NCCL in place; gloo, for large
frames, one broadcast per slot, since its all-gather stages everything in a scratch
buffer of its own).

Unpickling runs code chosen by the sender; object collectives unpickle only what the
caller asked for (it called an ``*_object`` function), and a ``serializer`` (a
``dumps`` / ``loads`` pair) replaces pickle entirely for those who want something else.
"""

from __future__ import annotations

import io
import pickle
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch

from distbridge._types import Group
from distbridge.algorithms.byte_view import as_bytes, from_bytes
from distbridge.algorithms.groups import NOT_A_MEMBER

if TYPE_CHECKING:
    from distbridge.model_contract import ModelContract

__all__ = [
    "Serializer",
    "all_gather_object",
    "broadcast_object",
    "dumps",
    "gather_object",
    "scatter_object",
]

_ALIGN = 64
_FAILED = -1  # a size: the sender could not serialize its object (TypeError everywhere)
_NOT_A_LIST = -2  # a size: scatter_object's source got no list of the right length (ValueError)

#: a frame's parts: the pickle stream (or a serializer's bytes), then the out-of-band buffers
Frame = tuple[memoryview, ...]


class Serializer(Protocol):
    """Replaces pickle in the object collectives: ``loads(dumps(obj))`` must rebuild ``obj``."""

    def dumps(self, obj: Any, /) -> bytes: ...
    def loads(self, data: bytes, /) -> Any: ...


class _Pickler(pickle.Pickler):
    """Pickle protocol 5 that sends plain CPU tensors as their raw bytes, dtype and shape (a
    tensor met twice goes once, by pickle's memo); with ``buffers``, every out-of-band buffer
    (the tensors' bytes, numpy's) goes there, else all stays in the stream."""

    def __init__(self, file: io.BytesIO, buffers: list[memoryview] | None = None) -> None:
        keep = None if buffers is None else (lambda buffer: buffers.append(buffer.raw()))
        super().__init__(file, protocol=5, buffer_callback=keep)

    def reducer_override(self, obj: Any) -> Any:
        # Out of band: a tensor whose bytes come back as a plain tensor (autograd or
        # quantization metadata keeps it in band, where pickle keeps it).
        if type(obj) is not torch.Tensor or obj.device.type != "cpu":
            return NotImplemented
        if obj.layout != torch.strided or obj.requires_grad or obj.is_quantized:
            return NotImplemented
        data = as_bytes(obj.resolve_conj().resolve_neg()).numpy().data
        return _tensor, (pickle.PickleBuffer(data), obj.dtype, tuple(obj.shape))


_NO_BYTES = torch.empty(0, dtype=torch.uint8)  # torch.frombuffer refuses an empty buffer


def _tensor(raw: bytearray | memoryview, dtype: torch.dtype, shape: Any) -> torch.Tensor:
    """The tensor whose bytes are ``raw`` (shared, not copied): what unpickling a tensor
    that ``_Pickler`` reduced calls."""
    flat = torch.frombuffer(raw, dtype=torch.uint8) if len(raw) else _NO_BYTES
    return from_bytes(flat, dtype, tuple(shape))


def dumps(obj: Any) -> bytes:
    """``obj`` as one pickle stream (``pickle.loads`` reads it), tensors as their raw bytes:
    for values too small for a frame."""
    stream = io.BytesIO()
    _Pickler(stream).dump(obj)
    return stream.getvalue()


def encode_frame(obj: Any, serializer: Serializer | None) -> Frame:
    """The frame of ``obj``: its stream, then the out-of-band buffers of its arrays and
    tensors."""
    if serializer is not None:
        data = serializer.dumps(obj)
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"serializer.dumps must return bytes, got {type(data).__name__}.")
        return (memoryview(data).cast("B"),)
    buffers: list[memoryview] = []
    stream = io.BytesIO()
    _Pickler(stream, buffers).dump(obj)
    return (stream.getbuffer(), *buffers)


def _layout(lengths: list[int]) -> tuple[list[int], int]:
    """Where each part of a frame whose parts have ``lengths`` starts, and the frame's size."""
    starts, offset = [], _aligned(8 * (1 + len(lengths)))
    for length in lengths:
        starts.append(offset)
        offset = _aligned(offset + length)
    return starts, offset


def _aligned(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def frame_size(frame: Frame) -> int:
    """Bytes ``frame`` occupies."""
    return _layout([p.nbytes for p in frame])[1]


def frame_into(frame: Frame, out: np.ndarray[Any, Any]) -> None:
    """Write ``frame`` into the uint8 array ``out`` (at least ``frame_size`` long)."""
    lengths = [p.nbytes for p in frame]
    table = np.array([len(frame), *lengths], dtype="<i8")
    out[: table.nbytes] = table.view(np.uint8)
    for part, start in zip(frame, _layout(lengths)[0], strict=True):
        out[start : start + part.nbytes] = np.frombuffer(part, dtype=np.uint8)


def decode_frame(data: np.ndarray[Any, Any], serializer: Serializer | None) -> Any:
    """Rebuild the object whose frame starts at ``data`` (a uint8 array; views are kept)."""
    count = int(data[:8].view("<i8")[0])
    if not 0 < count < 1 << 20:
        raise ValueError(f"Received a corrupt object frame ({count} parts): a desynchronized job?")
    lengths = data[8 : 8 * (1 + count)].view("<i8").tolist()
    views = [data[s : s + n].data for s, n in zip(_layout(lengths)[0], lengths, strict=True)]
    if serializer is not None:
        return serializer.loads(bytes(views[0]))
    return pickle.loads(views[0], buffers=views[1:])


def _try_encode(obj: Any, serializer: Serializer | None) -> tuple[Frame, Exception | None]:
    try:
        return encode_frame(obj, serializer), None
    except RecursionError:  # its text depends on where the stack ran out: say it plainly
        return (), RecursionError("it is nested too deeply (Python's recursion limit)")
    except Exception as err:  # anything pickle or a serializer raises
        return (), err


def _encode_everywhere(
    model: ModelContract,
    obj: Any,
    serializer: Serializer | None,
    channel: Any,
    device: torch.device,
    what: str,
) -> tuple[Frame, list[int]]:
    """``obj``'s frame and every member's frame size; raises on every rank when any rank could
    not serialize its object."""
    frame, failure = _try_encode(obj, serializer)
    size = frame_size(frame) if failure is None else _FAILED
    mine = torch.tensor([size], dtype=torch.int64, device=device)
    sizes = [int(n) for n in model._do_all_gather(mine, channel).tolist()]
    if failure is not None:
        raise TypeError(f"{what}: this rank's object cannot be serialized: {failure}") from failure
    bad = [r for r, n in enumerate(sizes) if n == _FAILED]
    if bad:
        raise TypeError(
            f"{what}: group rank(s) {bad} could not serialize their object (see their error)."
        )
    return frame, sizes


def _filled(frame: Frame, size: int) -> torch.Tensor:
    """A uint8 CPU tensor of ``size`` bytes that starts with ``frame``."""
    out = torch.empty(size, dtype=torch.uint8)
    frame_into(frame, out.numpy())
    return out


def all_gather_object(
    model: ModelContract, obj: Any, group: Group | None = None, serializer: Serializer | None = None
) -> list[Any]:
    """Every rank's ``obj``; see ``distbridge.all_gather_object``."""
    resolved = model.groups.resolve(group)
    if resolved is NOT_A_MEMBER:
        return [obj]
    channel, device = model._object_transport(resolved)
    frame, sizes = _encode_everywhere(model, obj, serializer, channel, device, "all_gather_object")
    received = torch.empty(len(sizes), max(sizes), dtype=torch.uint8)  # a row per rank
    mine = received[model._group_rank(resolved)]
    frame_into(frame, mine.numpy())
    if device.type == "cpu":
        model._do_all_gather_into(received.view(-1), mine, channel)
    else:
        received.view(-1).copy_(model._do_all_gather(mine.to(device), channel).cpu())
    return [decode_frame(row, serializer) for row in received.numpy()]


def gather_object(
    model: ModelContract,
    obj: Any,
    dst: int = 0,
    group: Group | None = None,
    serializer: Serializer | None = None,
) -> list[Any]:
    """Every rank's ``obj`` on ``dst``; see ``distbridge.gather_object``."""
    resolved = model.groups.resolve(group)
    model.check_root("dst", dst, resolved)
    if resolved is NOT_A_MEMBER:
        return []
    channel, device = model._object_transport(resolved)
    frame, sizes = _encode_everywhere(model, obj, serializer, channel, device, "gather_object")
    frames = model._do_gather(_filled(frame, max(sizes)).to(device), dst, channel)
    if model.get_rank() != dst or frames is None:
        return []
    return [decode_frame(f.cpu().numpy(), serializer) for f in frames]


def _frames_from_src(
    model: ModelContract,
    objs: Any,
    count: int,
    src: int,
    transport: tuple[Any, torch.device],
    serializer: Serializer | None,
    what: str,
) -> tuple[list[Frame], list[int]]:
    """On ``src`` (``objs`` is None elsewhere), the frames of ``objs``, a list of ``count``
    objects; on every rank their sizes, broadcast from ``src``. Raises on every rank, with
    the source's error type, when ``src`` has no such list or cannot serialize one of them."""
    channel, device = transport
    problem: Exception | None = None
    frames: list[Frame] = []
    sizes = [_FAILED] * count  # sent by the source only
    if objs is not None and (not isinstance(objs, (list, tuple)) or len(objs) != count):
        problem = ValueError(
            f"{what} needs a list of {count} objects on the source rank, got {objs!r}."
        )
        sizes = [_NOT_A_LIST] * count
    elif objs is not None:
        encoded = [_try_encode(obj, serializer) for obj in objs]
        frames = [frame for frame, _ in encoded]
        failure = next((err for _, err in encoded if err is not None), None)
        if failure is not None:
            problem = TypeError(f"{what}: an object cannot be serialized: {failure}")
            problem.__cause__ = failure
        else:
            sizes = [frame_size(frame) for frame in frames]
    table = model._do_broadcast(torch.tensor(sizes, dtype=torch.int64, device=device), src, channel)
    sizes = [int(n) for n in table.tolist()]
    if problem is not None:
        raise problem
    if _NOT_A_LIST in sizes:  # the source's own error type, so every rank raises alike
        raise ValueError(f"{what}: rank {src} could not send the objects (see its error).")
    if _FAILED in sizes:
        raise TypeError(f"{what}: rank {src} could not serialize its object(s) (see its error).")
    return frames, sizes


def broadcast_object(
    model: ModelContract,
    obj: Any,
    src: int = 0,
    group: Group | None = None,
    serializer: Serializer | None = None,
) -> Any:
    """Rank ``src``'s ``obj`` on every rank; see ``distbridge.broadcast_object``."""
    resolved = model.groups.resolve(group)
    model.check_root("src", src, resolved)
    if resolved is NOT_A_MEMBER:
        return obj
    channel, device = transport = model._object_transport(resolved)
    is_src = model.get_rank() == src
    frames, (size,) = _frames_from_src(
        model, [obj] if is_src else None, 1, src, transport, serializer, "broadcast_object"
    )
    data = _filled(frames[0], size) if is_src else torch.empty(size, dtype=torch.uint8)
    data = model._do_broadcast(data.to(device), src, channel)
    return obj if is_src else decode_frame(data.cpu().numpy(), serializer)


def scatter_object(
    model: ModelContract,
    objs: Any,
    src: int = 0,
    group: Group | None = None,
    serializer: Serializer | None = None,
) -> Any:
    """``objs[r]`` from ``src`` on group rank r; see ``distbridge.scatter_object``."""
    resolved = model.groups.resolve(group)
    model.check_root("src", src, resolved)
    if resolved is NOT_A_MEMBER:
        return None
    channel, device = transport = model._object_transport(resolved)
    size, me = model._group_size(resolved), model._group_rank(resolved)
    is_src = model.get_rank() == src
    frames, sizes = _frames_from_src(
        model, objs if is_src else None, size, src, transport, serializer, "scatter_object"
    )
    longest = max(sizes)
    chunks = [_filled(frame, longest).to(device) for frame in frames] if is_src else None
    out = torch.empty(longest, dtype=torch.uint8, device=device)
    got = model._do_scatter(chunks, out, src, channel)
    return decode_frame(got.cpu().numpy()[: sizes[me]], serializer)
