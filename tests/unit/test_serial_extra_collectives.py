"""reduce, gather, scatter, reduce_scatter, all_to_all without a distributed context:
world-of-one answers, and the same validation as with many ranks."""

from __future__ import annotations

import pytest
import torch

import distbridge as idist


def test_reduce_returns_the_input_reduced_over_one_rank() -> None:
    x = torch.tensor([1.5, 2.5])
    assert idist.reduce(x) is x
    assert x.tolist() == [1.5, 2.5]
    assert idist.reduce(3) == 3
    assert type(idist.reduce(3)) is int
    assert idist.reduce(0.1, op="min") == 0.1
    assert idist.reduce(torch.ones(2), op="AVG").tolist() == [1.0, 1.0]


def test_gather_gives_a_list_of_one() -> None:
    x = torch.arange(3)
    (only,) = idist.gather(x)
    assert torch.equal(only, x)
    assert idist.gather(7) == [7]
    assert idist.gather("héllo") == ["héllo"]
    assert idist.gather({"a": 1}) == [{"a": 1}]


def test_scatter_returns_the_first_tensor() -> None:
    assert idist.scatter([torch.tensor([4, 5])]).tolist() == [4, 5]
    assert idist.scatter([torch.tensor(2.0)]).item() == 2.0


def test_reduce_scatter_of_one_chunk_is_a_copy() -> None:
    x = torch.arange(4.0)
    out = idist.reduce_scatter(x)
    assert torch.equal(out, x)
    out.add_(1)
    assert x.tolist() == [0.0, 1.0, 2.0, 3.0], "the input must not be modified"


def test_all_to_all_returns_what_rank_zero_sent_itself() -> None:
    (back,) = idist.all_to_all([torch.tensor([[1, 2]])])
    assert back.tolist() == [[1, 2]]


@pytest.mark.parametrize(
    ("call", "error", "text"),
    [
        (lambda: idist.reduce(torch.ones(1), dst=1), ValueError, "dst=1 is not a rank"),
        (lambda: idist.reduce(torch.ones(1), dst="0"), TypeError, "dst must be an int"),
        (lambda: idist.gather(torch.ones(1), dst=-1), ValueError, "dst=-1"),
        (lambda: idist.scatter([torch.ones(1)], src=2), ValueError, "src=2"),
        (lambda: idist.scatter([], src=0), ValueError, "list of 1 tensors"),
        (lambda: idist.scatter(["x"], src=0), TypeError, "tensors\\[0\\] must be a torch.Tensor"),
        (lambda: idist.reduce_scatter(torch.tensor(1.0)), ValueError, "0-dim"),
        (lambda: idist.reduce_scatter([1.0]), TypeError, "takes a tensor"),
        (lambda: idist.all_to_all([torch.ones(1)] * 2), ValueError, "list of 1 tensors"),
        (lambda: idist.all_to_all([3]), TypeError, "tensors\\[0\\] must be a torch.Tensor"),
        (lambda: idist.reduce(torch.ones(1, dtype=torch.int64), op="AVG"), TypeError, "AVG"),
        (lambda: idist.reduce(torch.ones(1), op="SUMM"), ValueError, "Did you mean 'SUM'"),
        (lambda: idist.gather(torch.ones(1), group=[1]), ValueError, "outside this world"),
        (lambda: idist.all_to_all([torch.ones([1] * 9)]), TypeError, "at most 8"),
    ],
)
def test_bad_input_fails_as_with_many_ranks(call: object, error: type, text: str) -> None:
    with pytest.raises(error, match=text):
        call()  # type: ignore[operator]


def test_all_to_all_of_one_tensor_returns_a_copy_of_it() -> None:
    x = torch.arange(6).reshape(3, 2)
    back = idist.all_to_all(x)
    assert torch.equal(back, x) and back.data_ptr() != x.data_ptr()
    with pytest.raises(ValueError, match="0-dim tensor, which has no dim 0, or pass a list"):
        idist.all_to_all(torch.tensor(1.0))
    with pytest.raises(TypeError, match="dense"):
        idist.all_to_all(torch.ones(2).to_sparse())


def test_all_to_all_of_one_tensor_remembers_what_passed_its_checks() -> None:
    from distbridge._state import current

    x = torch.arange(4.0)
    idist.all_to_all(x)
    assert current().fast_all_to_all.knows(x)
    back = idist.all_to_all(torch.arange(4.0) + 1)  # the fast path
    assert back.tolist() == [1.0, 2.0, 3.0, 4.0]
    with pytest.raises(TypeError, match="dense"):  # same dtype, shape, device: not layout
        idist.all_to_all(torch.arange(4.0).to_sparse())
    with pytest.raises(TypeError, match="same_shape must be True or False"):
        idist.all_to_all(x, same_shape=None)  # type: ignore[arg-type]


def test_chunks_of_one_tensor_are_joined_without_a_copy() -> None:
    from distbridge.algorithms import all_to_all

    def _joined(parts: list[torch.Tensor]) -> torch.Tensor:
        return all_to_all._joined(parts, all_to_all._end_to_end(parts))

    whole = torch.arange(12.0)
    joined = _joined(list(whole.chunk(3)))
    assert joined.data_ptr() == whole.data_ptr()
    assert joined.tolist() == list(range(12))
    part = _joined([whole[2:5], whole[5:6]])  # end to end, not the whole base
    assert part.data_ptr() == whole[2:].data_ptr() and part.tolist() == [2.0, 3.0, 4.0, 5.0]
    for parts in ([whole[5:6], whole[2:5]], [whole[:2], whole[3:5]], [whole[::2][:2], whole[4:6]]):
        joined = _joined(parts)  # out of order, a gap, not contiguous: a copy
        assert joined.tolist() == torch.cat(parts).tolist()
        assert joined.untyped_storage().data_ptr() != whole.untyped_storage().data_ptr()
    # Two separate tensors whose memory happens to touch are copied, never viewed as one.
    memory = memoryview(bytearray(32))
    a = torch.frombuffer(memory[:16], dtype=torch.float32)
    b = torch.frombuffer(memory[16:], dtype=torch.float32)
    assert b.data_ptr() == a.data_ptr() + 16
    assert _joined([a, b]).data_ptr() not in (a.data_ptr(), b.data_ptr())
    assert _joined([torch.zeros(0), torch.zeros(0)]).shape == (0,)
    # Chunks of a view in another dtype have the original tensor as their base: not sent.
    as_ints = _joined(list(whole.view(torch.int32).chunk(3)))
    assert as_ints.dtype == torch.int32 and torch.equal(as_ints, whole.view(torch.int32))


def test_bytes_of_one_element_with_any_stride() -> None:
    from distbridge.algorithms.byte_view import as_bytes

    one = torch.tensor([5, 7], dtype=torch.int64)[::2]  # stride 2, yet "contiguous"
    assert one.is_contiguous() and one.stride() == (2,)
    assert as_bytes(one).view(torch.int64).tolist() == [5]
    assert as_bytes(torch.zeros(0)).shape == (0,)
