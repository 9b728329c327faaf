"""Non-tensor values through tensor collectives: headers, inline payloads, byte gathers.

Every value travels behind a fixed header of eight int64 words: its kind, one field (a
number's 64-bit pattern, else its payload's length) and 48 bytes of inline payload (a str's
or Path's UTF-8 bytes, an object's pickle, a tensor's dtype code and shape). A value that
fits inline needs one collective; a longer one needs a second collective for the bytes.
Receivers decode each value from its sender's header, so they need no placeholder of the
right type, and nothing received is evaluated; objects are unpickled only when this rank
asked for objects too.
"""

from __future__ import annotations

import pickle
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from distbridge.algorithms import codec
from distbridge.algorithms.object_collectives import dumps

if TYPE_CHECKING:
    from distbridge.model_contract import ModelContract

__all__ = ["broadcast_failure", "broadcast_value", "gather_values"]

_WORDS = 8  # header: kind, field, 6 words (48 bytes) of inline payload
_INLINE = 8 * (_WORDS - 2)
_SEND_FAILED = 0  # header kind: the sender could not encode its value (its field: which error)
_TEXT_KINDS = frozenset((codec.KIND_STR, codec.KIND_PATH))
#: the kinds one gather takes together: numbers, text or objects, never a mix
_ALIKE = (codec.NUMBER_KINDS, _TEXT_KINDS, frozenset((codec.KIND_OBJECT,)))


def _header(model: ModelContract, kind: int, field: int = 0, payload: bytes = b"") -> Any:
    """The header of a value, with ``payload`` inline where it fits (else it goes next)."""
    inline = payload if len(payload) <= _INLINE else b""
    words = np.zeros(_WORDS, dtype="<i8")
    words[:2] = (kind, field)
    words[2:].view(np.uint8)[: len(inline)] = np.frombuffer(inline, dtype=np.uint8)
    return torch.from_numpy(words).to(model._collective_device())


def _inline_bytes(row: np.ndarray[Any, Any], length: int) -> bytes:
    return row[2:].view(np.uint8)[:length].tobytes()


def _encode(value: Any, objects: bool) -> tuple[int, int, bytes]:
    """Kind, field and payload of a value to send; TypeError / ValueError if it cannot go.
    ``objects``: other values go pickled (a gather), else only a broadcast's tensors do."""
    if isinstance(value, torch.Tensor) and not objects:
        if value.layout != torch.strided:
            raise TypeError(f"broadcast needs a dense (strided) tensor, got {value.layout}.")
        described = np.asarray([codec.dtype_code(value.dtype), *value.shape], dtype="<i8")
        return codec.KIND_TENSOR, described.nbytes, described.tobytes()
    kind = codec.kind_of(value)
    if kind in codec.NUMBER_KINDS:
        return kind, codec.encode_number(value, kind), b""
    if kind in _TEXT_KINDS or objects:
        payload = str(value).encode("utf-8") if kind in _TEXT_KINDS else dumps(value)
        return kind, len(payload), payload
    raise TypeError(
        f"Unhandled input type {type(value).__name__}: broadcast takes a tensor, a number, a "
        f"str or a Path, got {value!r}. Send other picklable objects (dicts, lists, ...) with "
        "broadcast_object(obj, src=...)."
    )


def broadcast_value(model: ModelContract, value: Any, src: int, group: Any) -> Any:
    """Broadcast a non-tensor value, or a tensor in safe mode; ``value`` is None off ``src``.
    A source that cannot encode its value still sends a header (kind 0): every rank raises."""
    is_src = value is not None
    kind, field, payload = _SEND_FAILED, 0, b""  # off the source: a header to receive into
    if is_src:
        try:
            kind, field, payload = _encode(value, objects=False)
        except (TypeError, ValueError) as err:
            broadcast_failure(model, err, src, group)
            raise
    sent = model._do_broadcast(_header(model, kind, field, payload), src, group)
    row = sent.cpu().numpy()
    kind, field = int(row[0]), int(row[1])
    if kind == _SEND_FAILED:  # the source's own error type, so every rank raises alike
        error = ValueError if field else TypeError
        raise error(
            f"Unhandled input type on the source rank {src}: broadcast could not send its value "
            "(see its error)."  # ignite's words, as ignite raises them on every rank
            if error is TypeError
            else f"broadcast: the source rank {src} could not send its value (see its error)."
        )
    if kind in codec.NUMBER_KINDS:
        return codec.decode_number(field, kind)
    if kind not in (*_TEXT_KINDS, codec.KIND_TENSOR):
        raise ValueError(
            f"Received an unknown broadcast header {row.tolist()}: a desynchronized job?"
        )
    if field <= _INLINE:  # the payload's length
        payload = _inline_bytes(row, field)
    else:  # a second broadcast, of the payload's bytes (zeros off the source)
        data = torch.frombuffer(bytearray(payload if is_src else field), dtype=torch.uint8)
        sent = model._do_broadcast(data.to(model._collective_device()), src, group)
        payload = sent.cpu().numpy().tobytes()
    if kind == codec.KIND_TENSOR:
        code, *shape = np.frombuffer(payload, dtype="<i8").tolist()
        dtype = codec.dtype_from_code(code)
        target = value if is_src else torch.empty(shape, dtype=dtype, device=model.device())
        return model.broadcast_tensor(target, src, group)
    return codec.decode_text(payload, kind)


def broadcast_failure(model: ModelContract, error: Exception, src: int, group: Any) -> None:
    """Tell the other ranks of a broadcast that the source ``src`` cannot send (it is about to
    raise ``error``): they raise the same exception type instead of waiting for data."""
    model._do_broadcast(_header(model, _SEND_FAILED, _failure_code(error)), src, group)


def gather_values(model: ModelContract, value: Any, group: Any) -> list[Any]:
    """All-gather non-tensor values; each comes back with its sender's exact type."""
    failure: Exception | None = None
    try:
        kind, field, payload = _encode(value, objects=True)
    except Exception as err:  # an int past 64 bits, or whatever pickle raises
        failure, kind, field, payload = err, _SEND_FAILED, _failure_code(err), b""
    gathered = model._do_all_gather(_header(model, kind, field, payload), group)
    rows = gathered.cpu().numpy().reshape(-1, _WORDS)
    header = [(int(r[0]), int(r[1])) for r in rows]
    _raise_if_failed(header, failure)
    kinds = {k for k, _ in header}
    if not any(kinds <= alike for alike in _ALIKE):
        # Every rank sees the same header table, so every rank raises here together.
        table = ", ".join(f"rank {r}: {codec.KIND_NAMES[k]}" for r, (k, _) in enumerate(header))
        raise TypeError(f"all_gather got values of different kinds across ranks ({table}).")
    if kinds <= codec.NUMBER_KINDS:
        return [codec.decode_number(bits, k) for k, bits in header]
    sizes = [n for _, n in header]
    longest = max(sizes)
    if longest <= _INLINE:
        chunks = [_inline_bytes(row, n) for row, n in zip(rows, sizes, strict=True)]
    else:  # a second all-gather, of the payloads' bytes padded to the longest
        padded = torch.frombuffer(bytearray(payload.ljust(longest, b"\0")), dtype=torch.uint8)
        gathered = model._do_all_gather(padded.to(model._collective_device()), group)
        received = gathered.cpu().numpy().reshape(len(sizes), longest)
        chunks = [received[i, :n].tobytes() for i, n in enumerate(sizes)]
    return [  # objects: every rank asked for them (kinds alike)
        pickle.loads(chunk) if k == codec.KIND_OBJECT else codec.decode_text(chunk, k)
        for (k, _), chunk in zip(header, chunks, strict=True)
    ]


def _failure_code(err: Exception) -> int:
    """What a failed sender puts in its header: 1 where the others raise ValueError, 0 for
    TypeError."""
    return int(isinstance(err, ValueError))


def _raise_if_failed(header: list[tuple[int, int]], failure: Exception | None) -> None:
    """Raise on every rank, with the same error type, when a rank could not send its value."""
    if isinstance(failure, ValueError):
        raise failure  # e.g. an int past 64 bits: its own message names the value
    if failure is not None:
        raise TypeError(
            f"Cannot gather this rank's value: it cannot be pickled ({type(failure).__name__}: "
            f"{failure}). Send a tensor, number, str or Path, or make the object picklable."
        ) from failure
    failed = [(r, code) for r, (k, code) in enumerate(header) if k == _SEND_FAILED]
    if failed:
        raise (ValueError if failed[0][1] else TypeError)(
            f"Group rank(s) {[r for r, _ in failed]} could not send their value to the gather "
            "(see their error)."
        )
