"""The tensor collectives as torch.compile traces them: torch's functional collectives.

Inside a compiled region (``torch.compiler.is_compiling()``), a model whose groups are
torch.distributed process groups (``ComputationModel.functional_collectives``) runs each
tensor collective here: one functional collective each, no host sync, no shape exchange, so
Dynamo traces it with ``fullgraph=True``. The answers are the eager path's: the same checks
and errors, float MIN / MAX as IEEE's minimum / maximum through the same integer keys, the
dtypes the backend lacks through the same carriers, AVG as a SUM and a division, complex
PRODUCT folded in rank order, and in-place results written into the caller's tensor.

What a compiled region cannot do is learn the other ranks' shapes: ``gather``, ``scatter``
and ``all_to_all`` of a list take every chunk to have the shape of this rank's own (as
``same_shape=True`` says in eager code), and ``scatter`` needs ``out=`` on every rank.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

from distbridge.algorithms import byte_view, carriers, codec, shape_rows
from distbridge.algorithms.checks import check_dense, check_reducible, divide_
from distbridge.algorithms.fold import backend_op, fold
from distbridge.algorithms.groups import NOT_A_MEMBER, resolve

if TYPE_CHECKING:
    from distbridge.model_contract import ModelContract

__all__ = [
    "all_gather",
    "all_reduce",
    "all_to_all",
    "broadcast",
    "gather",
    "reduce",
    "reduce_scatter",
    "scatter",
]

#: canonical op -> the functional collectives' name for it
_FUNCOL_OPS = {"SUM": "sum", "PRODUCT": "product", "MIN": "min", "MAX": "max",
               "AND": "band", "OR": "bor", "AVG": "avg"}  # fmt: skip


def _process_group(resolved: Any) -> Any:
    """The process group a functional collective takes for a resolved ``group``."""
    return dist.group.WORLD if resolved is None else resolved


def _reduced(model: ModelContract, x: torch.Tensor, name: str, resolved: Any) -> torch.Tensor:
    """``x`` all-reduced with canonical ``name`` as the eager path does it (through a carrier
    where the backend lacks the dtype, folded where it lacks the op): a new tensor."""
    work, back = carriers.reduction_carrier(x, name, model.uncarried_dtypes)
    pg = _process_group(resolved)
    engine_op = backend_op(model.backend(), work.dtype, name)  # the eager path's rule
    average = engine_op == "AVG" and not model._native_avg()
    sent = "SUM" if average else engine_op
    if sent is None:  # fold, in rank order, as the eager path does
        rows = funcol.all_gather_tensor(work.reshape(1, -1), 0, pg)
        out = fold(rows, name).view(work.shape)
    elif work.is_complex():  # part by part, as c10d does, from a stacked copy: inductor
        # re-places an all-reduce of view_as_real(work), of its clone() too, into the caller's
        parts = torch.stack((work.real, work.imag), dim=-1)
        out = torch.view_as_complex(funcol.all_reduce(parts, _FUNCOL_OPS[sent], pg).contiguous())
    else:
        out = funcol.all_reduce(work, _FUNCOL_OPS[sent], pg)
    if average:
        out = divide_(out, model._group_size(resolved))
    return out if back is None else back(out)


def _as_bytes(model: ModelContract, dtype: torch.dtype) -> bool:
    """Whether a tensor of ``dtype`` moves as its bytes: the backend lacks the dtype, it is
    complex (the functional all-to-all takes no complex tensors), or it is bool (inductor
    gives the functional all-gather and broadcast of bools back as int64, torch 2.13)."""
    return dtype in model.uncarried_dtypes or dtype.is_complex or dtype is torch.bool


def _sendable(model: ModelContract, x: torch.Tensor) -> torch.Tensor:
    """``x`` as a functional collective moves it: contiguous (inductor hands a broadcast's
    input on in its own strides, so a transposed source sent its elements in memory order;
    torch 2.13), as its bytes where it moves so. The bytes come from a dense copy: a
    compiled ``view(dtype)`` fails on the odd strides torch allows on size-1 dims, which
    eager ``as_bytes`` reads around."""
    if not _as_bytes(model, x.dtype):
        return x.contiguous()
    return byte_view.as_bytes(x.clone(memory_format=torch.contiguous_format))


def _received(
    model: ModelContract, got: torch.Tensor, dtype: torch.dtype, shape: Any
) -> torch.Tensor:
    """What a functional collective gave back (its bytes where it moved them) as a tensor of
    ``dtype`` and ``shape``."""
    if _as_bytes(model, dtype):
        return byte_view.from_bytes(got, dtype, tuple(shape))
    return got.view(shape)


def _write(x: torch.Tensor, result: torch.Tensor) -> torch.Tensor:
    """``result`` written into ``x``, through a view: a compiled ``copy_`` straight into a
    0-d float64 input is lost (aot_eager and inductor, torch 2.13)."""
    with torch.no_grad():
        x.unsqueeze(0).copy_(result.unsqueeze(0))
    return x


def all_reduce(model: ModelContract, x: torch.Tensor, op: str, group: Any) -> torch.Tensor:
    """``all_reduce`` of a tensor inside a compiled region (in place, as eager)."""
    name = codec.canonical_op(op, model.reduce_ops, model.name)
    check_reducible(x, name)
    resolved = resolve(model, group)
    if resolved is NOT_A_MEMBER:
        return x
    return _write(x, _reduced(model, x, name, resolved))


def reduce(model: ModelContract, x: torch.Tensor, dst: int, op: str, group: Any) -> Any:
    """``reduce`` inside a compiled region: an all-reduce whose answer only ``dst`` keeps."""
    name = codec.canonical_op(op, model.reduce_ops, model.name)
    check_reducible(x, name, "reduce")
    resolved = resolve(model, group)
    model.check_root("dst", dst, resolved)
    if resolved is NOT_A_MEMBER:
        return x
    out = _reduced(model, x, name, resolved)
    return _write(x, out) if model.get_rank() == dst else x


def all_gather(model: ModelContract, x: torch.Tensor, group: Any) -> torch.Tensor:
    """``all_gather`` of a tensor inside a compiled region."""
    check_dense(x, "all_gather")
    resolved = resolve(model, group)
    if resolved is NOT_A_MEMBER:
        return x
    x = x.unsqueeze(0) if x.dim() == 0 else x
    size = model._group_size(resolved)
    out = funcol.all_gather_tensor(_sendable(model, x), 0, _process_group(resolved))
    return _received(model, out, x.dtype, (size * x.shape[0], *x.shape[1:]))


def broadcast(model: ModelContract, x: torch.Tensor, src: int, group: Any) -> torch.Tensor:
    """``broadcast`` of a tensor inside a compiled region (in place on the receivers)."""
    check_dense(x, "broadcast")
    resolved = resolve(model, group)
    model.check_root("src", src, resolved)
    if resolved is NOT_A_MEMBER:
        return x
    root = src if resolved is None else dist.get_group_rank(resolved, src)
    sent = _sendable(model, x)
    out = funcol.broadcast(sent, root, _process_group(resolved))
    if model.get_rank() == src:
        return x
    return _write(x, _received(model, out, x.dtype, x.shape))


def gather(model: ModelContract, x: torch.Tensor, dst: int, group: Any) -> list[Any]:
    """``gather`` inside a compiled region: every rank's tensor has ``x``'s shape."""
    resolved = resolve(model, group)
    model.check_root("dst", dst, resolved)
    if resolved is NOT_A_MEMBER:
        return []
    rows = all_gather(model, x.unsqueeze(0), group)
    return list(rows.unbind(0)) if model.get_rank() == dst else []


def scatter(model: ModelContract, tensors: Any, src: int, group: Any, out: Any) -> Any:
    """``scatter`` inside a compiled region: chunk r of ``src``'s equal-shaped ``tensors`` to
    group rank r, by one all-to-all in which only ``src`` sends."""
    resolved = resolve(model, group)
    model.check_root("src", src, resolved)
    if resolved is NOT_A_MEMBER:
        return None
    size, is_src = model._group_size(resolved), model.get_rank() == src
    if not isinstance(out, torch.Tensor):  # on every rank alike: no rank waits for another
        raise ValueError(
            "scatter inside torch.compile needs out= on every rank (a compiled region cannot "
            f"exchange the shape first), got out={out!r}: pass "
            "out=torch.empty(shape, dtype=dtype) on every rank."
        )
    if is_src and (not isinstance(tensors, (list, tuple)) or len(tensors) != size):
        raise ValueError(
            f"scatter needs a list of {size} tensors on the source rank, got {tensors!r}."
        )
    root = src if resolved is None else dist.get_group_rank(resolved, src)
    if is_src:
        sent = torch.cat([_sendable(model, t.reshape(-1)) for t in tensors])
    else:
        sent = _sendable(model, out.reshape(-1))[:0]
    n = out.numel() * (out.dtype.itemsize if _as_bytes(model, out.dtype) else 1)
    ins = [n if is_src else 0] * size
    outs = [n if j == root else 0 for j in range(size)]
    got = funcol.all_to_all_single(sent, outs, ins, _process_group(resolved))
    return _write(out, _received(model, got, out.dtype, out.shape))


def reduce_scatter(model: ModelContract, x: torch.Tensor, op: str, group: Any) -> Any:
    """``reduce_scatter`` inside a compiled region: chunk r of the reduced ``x`` on rank r."""
    name = codec.canonical_op(op, model.reduce_ops, model.name)
    check_reducible(x, name, "reduce_scatter")
    resolved = resolve(model, group)
    if resolved is NOT_A_MEMBER:
        return x
    size = model._group_size(resolved)
    shape_rows.check_equal_chunks("reduce_scatter", x, size, "")
    out = _reduced(model, x, name, resolved)  # one all-reduce: exact for every dtype and op
    return out.chunk(size)[model._group_rank(resolved)].clone()


def all_to_all(model: ModelContract, tensors: Any, group: Any) -> list[torch.Tensor] | torch.Tensor:
    """``all_to_all`` inside a compiled region: a tensor (dim 0 in equal chunks) or a list of
    tensors of one shape, the chunks received having that shape too."""
    resolved = resolve(model, group)
    single = isinstance(tensors, torch.Tensor)
    if resolved is NOT_A_MEMBER:
        return tensors if single else list(tensors)
    size = model._group_size(resolved)
    x = tensors if single else torch.stack(list(tensors))
    if single:
        shape_rows.check_equal_chunks("all_to_all of one tensor", x, size, "")
    got = funcol.all_to_all_single(_sendable(model, x), None, None, _process_group(resolved))
    got = _received(model, got, x.dtype, x.shape)
    return got if single else list(got.unbind(0))
