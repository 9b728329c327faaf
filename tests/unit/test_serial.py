"""The serial model through the facade: a world of one, validated as on any backend."""

from __future__ import annotations

import math
import socket
import struct
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import distbridge as idist
from distbridge import _collectives

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
FLOATS = st.floats(allow_nan=True, allow_infinity=True)
OPS = ("SUM", "PRODUCT", "MIN", "MAX")
TEXTS = ["", "plain", "héllo wörld", "日本語", "emoji 🎉🚀", "nul\x00byte"]


pytestmark = pytest.mark.usefixtures("serial_model")


CPU = torch.device("cpu")


def _same_float(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return struct.pack("<d", a) == struct.pack("<d", b)


# ---- queries ----------------------------------------------------------------------------------


def test_world_of_one_answers() -> None:
    assert idist.backend() is None
    assert idist.model_name() == "serial"
    assert idist.device() == (torch.device("cuda:0") if torch.cuda.is_available() else CPU)
    assert idist.get_rank() == 0
    assert idist.get_world_size() == 1
    assert idist.get_local_rank() == 0
    assert idist.get_nproc_per_node() == 1
    assert idist.get_nnodes() == 1
    assert idist.get_node_rank() == 0
    assert idist.hostname() == socket.gethostname()


@pytest.mark.skipif(
    torch.cuda.is_available() or torch.distributed.is_mpi_available(),
    reason="expects a CPU-only torch build without MPI",
)
def test_available_backends_on_a_cpu_machine() -> None:
    backends = idist.available_backends()
    assert isinstance(backends, tuple)
    assert "gloo" in backends
    assert "nccl" not in backends  # CPU-only torch wheel
    assert "mpi" not in backends


def test_lifecycle_calls_are_no_ops_without_context() -> None:
    assert idist.finalize() is None
    assert idist.sync() is None
    assert idist.sync(temporary=True) is None
    assert idist.barrier() is None
    assert idist.model_name() == "serial"


def test_set_local_rank_validates() -> None:
    idist.set_local_rank(0)
    assert idist.get_local_rank() == 0
    with pytest.raises(ValueError, match=r"set_local_rank needs an int >= 0, got -1"):
        idist.set_local_rank(-1)
    for bad in (True, 1.0, "0"):
        with pytest.raises(TypeError, match=r"set_local_rank needs an int >= 0, got "):
            idist.set_local_rank(bad)  # type: ignore[arg-type]


def test_show_config_logs_the_serial_layout(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="distbridge")
    idist.show_config()
    lines = [r.getMessage() for r in caplog.records if r.name == "distbridge"]
    assert "distributed configuration: serial" in lines
    assert "backend: None" in lines
    assert "world size: 1" in lines
    assert f"device: {'cuda:0' if torch.cuda.is_available() else 'cpu'}" in lines


# ---- all_reduce -------------------------------------------------------------------------------


def test_all_reduce_int_stays_int() -> None:
    out = idist.all_reduce(3)
    assert type(out) is int
    assert out == 3


def test_all_reduce_float_is_exact() -> None:
    out = idist.all_reduce(0.1)
    assert type(out) is float
    assert out == 0.1


def test_all_reduce_bool_under_or_stays_bool() -> None:
    out = idist.all_reduce(True, "or")
    assert out is True
    assert idist.all_reduce(False, "AND") is False
    assert idist.all_reduce(True, "max") is True


def test_all_reduce_bool_sum_counts() -> None:
    out = idist.all_reduce(True)
    assert type(out) is int
    assert out == 1


def test_all_reduce_int_average_is_float() -> None:
    out = idist.all_reduce(3, "avg")
    assert type(out) is float
    assert out == 3.0


@pytest.mark.parametrize("op", ["sum", "Sum", "SUM", "product", "Min", "max", "AVERAGE", "average"])
def test_op_names_are_case_insensitive(op: str) -> None:
    out = idist.all_reduce(2.5, op)
    assert type(out) is float
    assert out == 2.5


def test_average_alias_on_int_gives_float() -> None:
    out = idist.all_reduce(4, "AVERAGE")
    assert type(out) is float
    assert out == 4.0


def test_int_bitwise_ops() -> None:
    assert idist.all_reduce(6, "AND") == 6
    assert type(idist.all_reduce(6, "or")) is int


def test_invalid_op_lists_allowed_and_suggests() -> None:
    with pytest.raises(
        ValueError, match=r"Unsupported reduction operation 'SUMM'\. Supported: "
    ) as info:
        idist.all_reduce(1, "SUMM")
    message = str(info.value)
    assert "SUM, PRODUCT, MIN, MAX, AND, OR, AVG." in message
    assert "Did you mean 'SUM'?" in message


def test_adasum_is_not_a_serial_op() -> None:
    with pytest.raises(ValueError, match=r"'ADASUM' on the serial model"):
        idist.all_reduce(torch.ones(1), "ADASUM")


def test_op_must_be_a_str() -> None:
    with pytest.raises(TypeError, match=r"op must be a str"):
        idist.all_reduce(1, 0)  # type: ignore[call-overload]


@pytest.mark.parametrize("op", ["AND", "or"])
def test_bitwise_op_on_float_tensor_is_refused(op: str) -> None:
    with pytest.raises(TypeError, match=rf"Reduction {op.upper()} needs a bool or integer tensor"):
        idist.all_reduce(torch.ones(2), op)


def test_bitwise_op_on_float_number_is_refused() -> None:
    with pytest.raises(TypeError, match=r"Reduction OR needs an int or bool, got float 1\.5"):
        idist.all_reduce(1.5, "OR")


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool])
def test_avg_on_non_float_tensor_is_refused(dtype: torch.dtype) -> None:
    with pytest.raises(TypeError, match=r"Reduction AVG needs a floating-point tensor"):
        idist.all_reduce(torch.ones(2, dtype=dtype), "avg")


def test_min_on_complex_tensor_is_refused() -> None:
    with pytest.raises(TypeError, match=r"Reduction MIN is undefined for complex"):
        idist.all_reduce(torch.ones(2, dtype=torch.complex64), "MIN")


@pytest.mark.parametrize("value", ["3", None, [1], {"a": 1}, b"1", 1j, Path("x")])
def test_all_reduce_refuses_non_numbers(value: Any) -> None:
    with pytest.raises(TypeError, match=r"all_reduce takes a tensor or a Python number"):
        idist.all_reduce(value)


def test_all_reduce_tensor_in_place() -> None:
    t = torch.tensor([1.0, 2.0])
    out = idist.all_reduce(t, "avg")
    assert out is t
    assert out.tolist() == [1.0, 2.0]


def test_all_reduce_refuses_sparse_tensor() -> None:
    sparse = torch.eye(2).to_sparse()
    with pytest.raises(TypeError, match=r"all_reduce needs a dense \(strided\) tensor"):
        idist.all_reduce(sparse)


@pytest.mark.parametrize("value", [2**63, -(2**63) - 1, 10**40])
def test_int_outside_64_bits_is_refused(value: int) -> None:
    for call in (idist.all_reduce, idist.all_gather, idist.broadcast):
        with pytest.raises(ValueError, match=r"does not fit in 64 bits"):
            call(value)


def test_int64_extremes_pass() -> None:
    for value in (2**63 - 1, -(2**63)):
        assert idist.all_reduce(value) == value
        assert idist.all_gather(value) == [value]
        assert idist.broadcast(value) == value


# ---- all_gather -------------------------------------------------------------------------------


def test_all_gather_tensor_is_a_copy() -> None:
    t = torch.tensor([[1, 2], [3, 4]])
    out = idist.all_gather(t)
    assert out is not t
    assert out.shape == (2, 2)
    assert torch.equal(out, t)
    out[0, 0] = 99
    assert t[0, 0] == 1


def test_all_gather_zero_dim_tensor_has_shape_one() -> None:
    out = idist.all_gather(torch.tensor(5.0))
    assert out.shape == (1,)
    assert out.tolist() == [5.0]


def test_all_gather_numbers_keep_type() -> None:
    for value in (3, 0.1, True, -0.0):
        out = idist.all_gather(value)
        assert isinstance(out, list)
        assert len(out) == 1
        assert type(out[0]) is type(value)
        assert out[0] == value
    assert math.copysign(1.0, idist.all_gather(-0.0)[0]) == -1.0


@pytest.mark.parametrize("text", TEXTS)
def test_all_gather_str(text: str) -> None:
    out = idist.all_gather(text)
    assert out == [text]
    assert type(out[0]) is str


def test_all_gather_dict_is_a_list_with_an_equal_copy() -> None:
    value = {"a": 1, "b": [1.5, "x"], "c": None}
    out = idist.all_gather(value)
    assert out == [value]


def test_all_gather_path() -> None:
    out = idist.all_gather(Path("data/ö/file.txt"))
    assert out == [Path("data/ö/file.txt")]
    assert isinstance(out[0], Path)


def test_all_gather_pure_path_comes_back_as_a_path() -> None:
    out = idist.all_gather(PurePosixPath("a/b"))
    assert out == [Path("a/b")]


def test_all_gather_other_objects() -> None:
    assert idist.all_gather(None) == [None]
    assert idist.all_gather((1, "two")) == [(1, "two")]
    assert idist.all_gather(b"\x00\xff") == [b"\x00\xff"]


def test_all_gather_refuses_sparse_tensor() -> None:
    with pytest.raises(TypeError, match=r"all_gather needs a dense \(strided\) tensor"):
        idist.all_gather(torch.eye(2).to_sparse())


# ---- broadcast --------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [7, 0.1, True, "héllo 🎉", Path("a/b")])
def test_broadcast_values(value: Any) -> None:
    out = idist.broadcast(value)
    assert type(out) is type(value)
    assert out == value


@pytest.mark.parametrize("safe_mode", [False, True])
def test_broadcast_tensor(safe_mode: bool) -> None:
    t = torch.arange(6.0).view(2, 3)
    out = idist.broadcast(t, safe_mode=safe_mode)
    assert out is t
    assert torch.equal(out, torch.arange(6.0).view(2, 3))


def test_broadcast_zero_dim_tensor_safe_mode() -> None:
    t = torch.tensor(3, dtype=torch.int16)
    out = idist.broadcast(t, safe_mode=True)
    assert out.shape == ()
    assert out.dtype == torch.int16
    assert out.item() == 3


def test_broadcast_safe_mode_refuses_dtype_outside_the_table() -> None:
    t = torch.zeros(2, dtype=torch.float8_e4m3fn)
    with pytest.raises(TypeError, match=r"with safe_mode=True; supported dtypes"):
        idist.broadcast(t, safe_mode=True)


@pytest.mark.parametrize("safe_mode", [False, True])
def test_broadcast_none_on_the_source_is_refused(safe_mode: bool) -> None:
    with pytest.raises(ValueError, match=r"broadcast got None on the source rank \(src=0\)\."):
        idist.broadcast(None, safe_mode=safe_mode)


def test_broadcast_empty_str() -> None:
    out = idist.broadcast("")
    assert out == ""
    assert type(out) is str


def test_broadcast_object_is_refused() -> None:
    with pytest.raises(
        TypeError,
        match=r"Unhandled input type dict: broadcast takes a tensor, a number, a str or a Path, ",
    ):
        idist.broadcast({"a": 1})


def test_broadcast_src_outside_the_world() -> None:
    with pytest.raises(ValueError, match=r"src=1 is not a rank of this world of size 1"):
        idist.broadcast(1, src=1)
    with pytest.raises(ValueError, match=r"src=-1 is not a rank"):
        idist.broadcast(1, src=-1)


@pytest.mark.parametrize("src", ["0", 0.0, True, None])
def test_broadcast_src_must_be_an_int(src: Any) -> None:
    with pytest.raises(TypeError, match=r"src must be an int rank, got "):
        idist.broadcast(1, src=src)


# ---- groups -----------------------------------------------------------------------------------


@pytest.mark.parametrize("group", [[0], (0,), range(1)])
def test_group_of_rank_zero_works_everywhere(group: Any) -> None:
    assert idist.all_reduce(5, group=group) == 5
    assert idist.all_reduce(torch.ones(1), group=group).tolist() == [1.0]
    assert idist.all_gather("x", group=group) == ["x"]
    assert idist.all_gather(torch.ones(2), group=group).tolist() == [1.0, 1.0]
    assert idist.broadcast(2.5, group=group) == 2.5
    assert idist.barrier(group=group) is None
    out = idist.all_gather_tensors_with_shapes(torch.ones(2), [[2]], group=group)
    assert [t.tolist() for t in out] == [[1.0, 1.0]]


def _every_collective(group: Any) -> list[Any]:
    return [
        lambda: idist.all_reduce(1, group=group),
        lambda: idist.all_reduce(torch.ones(1), group=group),
        lambda: idist.all_gather(1, group=group),
        lambda: idist.all_gather(torch.ones(1), group=group),
        lambda: idist.broadcast(1, group=group),
        lambda: idist.barrier(group=group),
        lambda: idist.all_gather_tensors_with_shapes(torch.ones(1), [[1]], group=group),
    ]


def test_group_rank_outside_the_world_names_the_range() -> None:
    for call in _every_collective([1]):
        with pytest.raises(
            ValueError, match=r"Group ranks \[1\] are outside this world of size 1 "
        ):
            call()
    with pytest.raises(ValueError, match=r"\(valid ranks: 0\.\.0\)"):
        idist.new_group([0, 1])


def test_group_ranks_must_be_unique() -> None:
    for call in _every_collective([0, 0]):
        with pytest.raises(ValueError, match=r"Group ranks must be unique, got \[0, 0\]"):
            call()


def test_empty_group_is_one_no_rank_belongs_to() -> None:
    # as torch's and ignite's: collectives on it give back their input
    assert idist.new_group([]) == []
    assert idist.all_reduce(1, group=[]) == 1
    assert idist.all_gather("x", group=idist.new_group([])) == "x"


@pytest.mark.parametrize("bad", [["a"], [0.0], [True], [None]])
def test_group_ranks_must_be_ints(bad: list[Any]) -> None:
    for call in _every_collective(bad):
        with pytest.raises(TypeError, match=r"Argument ranks should be list of int, got "):
            call()


@pytest.mark.parametrize("group", [object(), "0", 0, {0}])
def test_group_of_another_type_is_refused(group: Any) -> None:
    for call in _every_collective(group):
        with pytest.raises(
            TypeError,
            match=r"Argument group should be list of int or ProcessGroup \(None, a list of ranks",
        ):
            call()


def test_new_group_is_cached() -> None:
    first = idist.new_group([0])
    assert first == [0]
    assert idist.new_group([0]) is first
    assert idist.new_group((0,)) is first


def test_new_group_validates() -> None:
    with pytest.raises(TypeError, match=r"Argument ranks should be list of int, got 0\."):
        idist.new_group(0)  # type: ignore[arg-type]
    # The native model's options, checked as it checks them (and then ignored).
    with pytest.raises(TypeError, match=r"unexpected keyword arguments \['bogus'\]"):
        idist.new_group([0], bogus=1)
    with pytest.raises(ValueError, match=r"new_group\(backend='nope'\): not a backend"):
        idist.new_group([0], backend="nope")
    assert idist.new_group([0], backend="gloo") == [0]


# ---- all_gather_tensors_with_shapes -----------------------------------------------------------


def test_all_gather_tensors_with_shapes_returns_this_tensor() -> None:
    t = torch.arange(6).view(2, 3)
    out = idist.all_gather_tensors_with_shapes(t, [(2, 3)])
    assert isinstance(out, list)
    assert len(out) == 1
    assert out[0].shape == (2, 3)
    assert torch.equal(out[0], t)


def test_all_gather_tensors_with_shapes_zero_dim() -> None:
    out = idist.all_gather_tensors_with_shapes(torch.tensor(4.0), [()])
    assert out[0].shape == ()
    assert out[0].item() == 4.0


def test_all_gather_tensors_with_shapes_needs_a_tensor() -> None:
    with pytest.raises(TypeError, match=r"tensor must be a torch\.Tensor, got list"):
        idist.all_gather_tensors_with_shapes([1, 2], [[2]])  # type: ignore[arg-type]


def test_all_gather_tensors_with_shapes_needs_one_shape_per_rank() -> None:
    with pytest.raises(ValueError, match=r"shapes has 2 entries; the group has 1 ranks"):
        idist.all_gather_tensors_with_shapes(torch.ones(2), [[2], [2]])


def test_all_gather_tensors_with_shapes_checks_this_ranks_shape() -> None:
    with pytest.raises(ValueError, match=r"shapes\[0\] is \(3,\) but this rank's tensor has shape"):
        idist.all_gather_tensors_with_shapes(torch.ones(2), [[3]])
    with pytest.raises(ValueError, match=r"shapes\[0\] is \(2,\)"):
        idist.all_gather_tensors_with_shapes(torch.ones(2, 1), [[2]])


def test_all_gather_tensors_with_shapes_explains_a_flat_shape() -> None:
    with pytest.raises(TypeError, match=r"shapes"):
        idist.all_gather_tensors_with_shapes(torch.ones(3), [3])  # type: ignore[list-item]


# ---- one_rank_only / one_rank_first -----------------------------------------------------------


def test_one_rank_only_runs_on_rank_zero() -> None:
    calls: list[tuple[Any, ...]] = []

    @idist.one_rank_only()
    def work(a: int, b: int = 0) -> int:
        """Docstring."""
        calls.append((a, b))
        return a + b

    assert work(1, b=2) == 3
    assert calls == [(1, 2)]
    assert work.__name__ == "work"
    assert work.__doc__ == "Docstring."


def test_one_rank_only_with_barrier(monkeypatch: pytest.MonkeyPatch) -> None:
    barriers: list[Any] = []
    monkeypatch.setattr(_collectives, "barrier", lambda group=None: barriers.append(group))

    @idist.one_rank_only(with_barrier=True)
    def work() -> str:
        return "done"

    assert work() == "done"
    assert barriers == [None]

    @idist.one_rank_only()
    def quiet() -> None:
        pass

    quiet()
    assert barriers == [None]


def test_one_rank_only_validates_rank_when_called() -> None:
    @idist.one_rank_only(rank=1)
    def work() -> None:
        raise AssertionError("must not run")

    with pytest.raises(ValueError, match=r"rank should be between 0 and 0, but given 1: the world"):
        work()

    @idist.one_rank_only(rank="0")  # type: ignore[arg-type]
    def typed() -> None:
        raise AssertionError("must not run")

    with pytest.raises(TypeError, match=r"rank must be an int, got '0'"):
        typed()


@pytest.mark.parametrize("local", [False, True])
def test_one_rank_first_runs_the_block_then_waits(
    monkeypatch: pytest.MonkeyPatch, local: bool
) -> None:
    events: list[str] = []
    monkeypatch.setattr(_collectives, "barrier", lambda **kwargs: events.append("barrier"))
    with idist.one_rank_first(local=local):
        events.append("block")
    assert events == ["block", "barrier"]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (
            {"rank": 1},
            ValueError,
            r"^rank should be between 0 and 0, but given 1: the world has 1 rank\.$",
        ),
        ({"rank": -1}, ValueError, r"^rank should be between 0 and 0, but given -1"),
        (
            {"rank": 1, "local": True},
            ValueError,
            r"^local rank should be between 0 and 0, but given 1: this node has 1 process\.$",
        ),
        ({"rank": 0.0}, TypeError, r"rank must be an int, got 0\.0"),
        ({"rank": True}, TypeError, r"rank must be an int, got True"),
    ],
)
def test_one_rank_first_validates_rank(
    kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    ran = []
    with pytest.raises(error, match=message), idist.one_rank_first(**kwargs):
        ran.append(1)
    assert ran == []


# ---- properties -------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(value=INT64, op=st.sampled_from(OPS))
def test_ints_round_trip(value: int, op: str) -> None:
    reduced = idist.all_reduce(value, op)
    assert type(reduced) is int
    assert reduced == value
    gathered = idist.all_gather(value)
    assert len(gathered) == 1
    assert type(gathered[0]) is int
    assert gathered[0] == value
    sent = idist.broadcast(value)
    assert type(sent) is int
    assert sent == value


@settings(max_examples=150, deadline=None)
@given(value=FLOATS, op=st.sampled_from((*OPS, "AVG")))
def test_floats_round_trip(value: float, op: str) -> None:
    reduced = idist.all_reduce(value, op)
    assert type(reduced) is float
    assert _same_float(reduced, value)
    gathered = idist.all_gather(value)
    assert len(gathered) == 1
    assert type(gathered[0]) is float
    assert _same_float(gathered[0], value)
    sent = idist.broadcast(value)
    assert type(sent) is float
    assert _same_float(sent, value)


@settings(max_examples=50, deadline=None)
@given(text=st.text(min_size=1))
def test_text_round_trips(text: str) -> None:
    assert idist.all_gather(text) == [text]
    assert idist.broadcast(text) == text
