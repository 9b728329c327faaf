"""all_gather_object, gather_object, broadcast_object, scatter_object over model primitives.

Frame sizes travel first; a rank that cannot serialize its object sends size -1, so
every rank raises together instead of some waiting forever. Frames then move as one
uint8 buffer on the model's object transport (a CPU gloo group under NCCL): each
rank writes its frame into its own slot of the receive buffer, so no separate send
copy is made, and the backend fills the other slots (NCCL in place; gloo, for large
frames, one broadcast per slot, since its all-gather stages everything in a scratch
buffer of its own).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from distbridge.algorithms.groups import NOT_A_MEMBER
from distbridge.algorithms.object_frames import (
    Frame,
    Serializer,
    decode_frame,
    encode_frame,
    frame_into,
    frame_size,
)

if TYPE_CHECKING:
    from distbridge.model_contract import ModelContract

__all__ = ["all_gather_object", "broadcast_object", "gather_object", "scatter_object"]

_FAILED = -1  # a size: the sender could not serialize its object (TypeError everywhere)
_NOT_A_LIST = -2  # a size: scatter_object's source got no list of the right length (ValueError)


def _try_encode(obj: Any, serializer: Serializer | None) -> tuple[Frame, Exception | None]:
    try:
        return encode_frame(obj, serializer), None
    except RecursionError:  # its text depends on where the stack ran out: say it plainly
        return Frame(), RecursionError("it is nested too deeply (Python's recursion limit)")
    except Exception as err:  # anything pickle or a serializer raises
        return Frame(), err


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
    model: ModelContract, obj: Any, group: Any, serializer: Serializer | None
) -> list[Any]:
    resolved = model.groups.resolve(group)
    if resolved is NOT_A_MEMBER:
        return [obj]
    channel, device = model._object_transport(resolved)
    frame, sizes = _encode_everywhere(model, obj, serializer, channel, device, "all_gather_object")
    longest, me = max(sizes), model._group_rank(resolved)
    received = torch.empty(len(sizes) * longest, dtype=torch.uint8)
    mine = received[me * longest : (me + 1) * longest]
    frame_into(frame, mine.numpy())
    if device.type == "cpu":
        model._do_all_gather_into(received, mine, channel)
    else:
        received.copy_(model._do_all_gather(mine.to(device), channel).cpu())
    data = received.numpy()
    return [
        decode_frame(data[r * longest : (r + 1) * longest], serializer) for r in range(len(sizes))
    ]


def gather_object(
    model: ModelContract, obj: Any, dst: int, group: Any, serializer: Serializer | None
) -> list[Any]:
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


def broadcast_object(
    model: ModelContract, obj: Any, src: int, group: Any, serializer: Serializer | None
) -> Any:
    resolved = model.groups.resolve(group)
    model.check_root("src", src, resolved)
    if resolved is NOT_A_MEMBER:
        return obj
    channel, device = model._object_transport(resolved)
    is_src = model.get_rank() == src
    frame, failure = _try_encode(obj, serializer) if is_src else (Frame(), None)
    size = (frame_size(frame) if failure is None else _FAILED) if is_src else 0
    header = torch.tensor([size], dtype=torch.int64, device=device)
    size = int(model._do_broadcast(header, src, channel).item())
    if failure is not None:
        raise TypeError(
            f"broadcast_object: the object cannot be serialized: {failure}"
        ) from failure
    if size == _FAILED:
        raise TypeError(
            f"broadcast_object: rank {src} could not serialize its object (see its error)."
        )
    data = _filled(frame, size) if is_src else torch.empty(size, dtype=torch.uint8)
    data = model._do_broadcast(data.to(device), src, channel)
    return obj if is_src else decode_frame(data.cpu().numpy(), serializer)


def scatter_object(
    model: ModelContract, objs: Any, src: int, group: Any, serializer: Serializer | None
) -> Any:
    resolved = model.groups.resolve(group)
    model.check_root("src", src, resolved)
    if resolved is NOT_A_MEMBER:
        return None
    channel, device = model._object_transport(resolved)
    size, me = model._group_size(resolved), model._group_rank(resolved)
    is_src = model.get_rank() == src
    problem: Exception | None = None
    frames: list[Frame] = []
    sizes = [_FAILED] * size  # sent by the source only
    if is_src and (not isinstance(objs, (list, tuple)) or len(objs) != size):
        problem = ValueError(
            f"scatter_object needs a list of {size} objects on the source rank, got {objs!r}."
        )
        sizes = [_NOT_A_LIST] * size
    elif is_src:
        encoded = [_try_encode(obj, serializer) for obj in objs]
        frames = [frame for frame, _ in encoded]
        failure = next((err for _, err in encoded if err is not None), None)
        if failure is not None:
            problem = TypeError(f"scatter_object: an object cannot be serialized: {failure}")
        else:
            sizes = [frame_size(frame) for frame in frames]
    table = model._do_broadcast(torch.tensor(sizes, dtype=torch.int64, device=device), src, channel)
    sizes = [int(n) for n in table.tolist()]
    if problem is not None:
        raise problem
    if _NOT_A_LIST in sizes:  # the source's own error type, so every rank raises alike
        raise ValueError(f"scatter_object: rank {src} could not send the objects (see its error).")
    if _FAILED in sizes:
        raise TypeError(f"scatter_object: rank {src} could not send the objects (see its error).")
    longest = max(sizes)
    chunks = [_filled(frame, longest).to(device) for frame in frames] if is_src else None
    out = torch.empty(longest, dtype=torch.uint8, device=device)
    got = model._do_scatter(chunks, out, src, channel)
    return decode_frame(got.cpu().numpy()[: sizes[me]], serializer)
