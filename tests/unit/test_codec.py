"""algorithms/codec.py: how numbers, kinds, dtypes and op names travel between ranks."""

from __future__ import annotations

import math
import struct
from pathlib import Path, PurePosixPath

import numpy as np
import pytest
import torch

from distbridge.algorithms import codec

ALL_OPS = frozenset(("SUM", "PRODUCT", "MIN", "MAX", "AND", "OR", "AVG"))


def _bits(value: float) -> bytes:
    return struct.pack("<d", value)


# ---- numbers ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [0.0, -0.0, 0.1, -2.5, 1e308, -1e-308, 5e-324, math.inf, -math.inf, math.pi],
)
def test_float_round_trip_is_bit_exact(value: float) -> None:
    bits = codec.encode_number(value, codec.KIND_FLOAT)
    assert isinstance(bits, int)
    assert -(2**63) <= bits < 2**63
    back = codec.decode_number(bits, codec.KIND_FLOAT)
    assert type(back) is float
    assert _bits(back) == _bits(value)


def test_negative_zero_keeps_its_sign() -> None:
    back = codec.decode_number(codec.encode_number(-0.0, codec.KIND_FLOAT), codec.KIND_FLOAT)
    assert math.copysign(1.0, back) == -1.0
    assert codec.encode_number(-0.0, codec.KIND_FLOAT) != codec.encode_number(0.0, codec.KIND_FLOAT)


def test_nan_round_trips_as_nan() -> None:
    back = codec.decode_number(codec.encode_number(math.nan, codec.KIND_FLOAT), codec.KIND_FLOAT)
    assert type(back) is float
    assert math.isnan(back)


@pytest.mark.parametrize("value", [0, 1, -1, 7, 2**62, 2**63 - 1, -(2**63), -(2**63) + 1])
def test_int_round_trip_is_exact(value: int) -> None:
    bits = codec.encode_number(value, codec.KIND_INT)
    back = codec.decode_number(bits, codec.KIND_INT)
    assert type(back) is int
    assert back == value


@pytest.mark.parametrize("value", [2**63, -(2**63) - 1, 10**30, -(10**30)])
def test_int_outside_64_bits_is_refused(value: int) -> None:
    with pytest.raises(ValueError, match=r"does not fit in 64 bits; send it as a str"):
        codec.encode_number(value, codec.KIND_INT)


@pytest.mark.parametrize("value", [True, False])
def test_bool_round_trip(value: bool) -> None:
    assert codec.kind_of(value) == codec.KIND_BOOL
    bits = codec.encode_number(value, codec.KIND_BOOL)
    assert bits == int(value)
    back = codec.decode_number(bits, codec.KIND_BOOL)
    assert type(back) is bool
    assert back is value


def test_int_kind_decodes_to_int_not_bool() -> None:
    back = codec.decode_number(1, codec.KIND_INT)
    assert type(back) is int


# ---- kinds ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        (3, codec.KIND_INT),
        (0.5, codec.KIND_FLOAT),
        (True, codec.KIND_BOOL),
        ("héllo", codec.KIND_STR),
        (Path("a/b"), codec.KIND_PATH),
        (PurePosixPath("a/b"), codec.KIND_PATH),
        ({"a": 1}, codec.KIND_OBJECT),
        (None, codec.KIND_OBJECT),
        (b"bytes", codec.KIND_OBJECT),
        (1j, codec.KIND_OBJECT),
    ],
)
def test_kind_of_python_values(value: object, kind: int) -> None:
    assert codec.kind_of(value) == kind


def test_numpy_int64_is_an_int_kind() -> None:
    value = np.int64(-(2**63))
    assert codec.kind_of(value) == codec.KIND_INT
    back = codec.decode_number(codec.encode_number(value, codec.KIND_INT), codec.KIND_INT)
    assert type(back) is int
    assert back == -(2**63)


def test_numpy_float32_is_a_float_kind_and_travels_as_float64() -> None:
    value = np.float32(0.1)
    assert codec.kind_of(value) == codec.KIND_FLOAT
    back = codec.decode_number(codec.encode_number(value, codec.KIND_FLOAT), codec.KIND_FLOAT)
    assert type(back) is float
    assert back == float(np.float32(0.1))  # the float32 value, widened exactly


def test_numpy_float64_and_int32_kinds() -> None:
    assert codec.kind_of(np.float64(2.0)) == codec.KIND_FLOAT
    assert codec.kind_of(np.int32(2)) == codec.KIND_INT
    assert codec.kind_of(np.uint8(2)) == codec.KIND_INT


def test_numpy_bool_is_a_bool_kind() -> None:
    assert codec.kind_of(np.bool_(True)) == codec.KIND_BOOL


def test_str_subclass_is_str_kind() -> None:
    class Name(str):
        pass

    assert codec.kind_of(Name("x")) == codec.KIND_STR


def test_decode_text_gives_a_str_or_a_concrete_path() -> None:
    back = codec.decode_text(b"a/b", codec.KIND_PATH)
    assert isinstance(back, Path)
    assert back == Path("a/b")
    assert codec.decode_text("ü".encode(), codec.KIND_STR) == "ü"


# ---- dtypes -----------------------------------------------------------------------------------


def test_dtype_table_round_trips_every_entry() -> None:
    assert len(codec._DTYPES) >= 12
    for code, dtype in enumerate(codec._DTYPES):
        assert codec.dtype_code(dtype) == code
        assert codec.dtype_from_code(code) is dtype


@pytest.mark.parametrize(
    ("dtype", "code"),
    [
        (torch.float32, 0),
        (torch.float64, 1),
        (torch.float16, 2),
        (torch.bfloat16, 3),
        (torch.uint8, 4),
        (torch.int8, 5),
        (torch.int16, 6),
        (torch.int32, 7),
        (torch.int64, 8),
        (torch.bool, 9),
        (torch.complex64, 10),
        (torch.complex128, 11),
    ],
)
def test_dtype_codes_are_a_stable_wire_format(dtype: torch.dtype, code: int) -> None:
    # Ranks of one job agree on these numbers; reordering the table breaks mixed versions.
    assert codec.dtype_code(dtype) == code


@pytest.mark.parametrize("code", [-1, len(codec._DTYPES), 10**6])
def test_bad_dtype_code_is_refused(code: int) -> None:
    with pytest.raises(ValueError, match=rf"Received dtype code {code}, which is not in"):
        codec.dtype_from_code(code)


def test_dtype_outside_the_table_is_refused() -> None:
    with pytest.raises(TypeError, match=r"float8_e4m3fn with safe_mode=True; supported dtypes"):
        codec.dtype_code(torch.float8_e4m3fn)


# ---- op names ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("SUM", "SUM"),
        ("sum", "SUM"),
        ("Sum", "SUM"),
        ("product", "PRODUCT"),
        ("PROD", "PRODUCT"),
        ("min", "MIN"),
        ("MAX", "MAX"),
        ("and", "AND"),
        ("BAND", "AND"),
        ("or", "OR"),
        ("bor", "OR"),
        ("avg", "AVG"),
        ("AVERAGE", "AVG"),
        ("average", "AVG"),
        ("Mean", "AVG"),
    ],
)
def test_canonical_op_aliases(given: str, expected: str) -> None:
    assert codec.canonical_op(given, ALL_OPS, "serial") == expected


def test_canonical_op_unknown_name_lists_allowed_and_suggests() -> None:
    with pytest.raises(
        ValueError, match=r"Unsupported reduction operation 'SUMM'\. Supported: "
    ) as info:
        codec.canonical_op("SUMM", ALL_OPS, "serial")
    message = str(info.value)
    assert "SUM, PRODUCT, MIN, MAX, AND, OR, AVG." in message
    assert message.endswith("Did you mean 'SUM'?")
    assert "serial" not in message  # not a model limitation: the name is unknown everywhere


def test_canonical_op_known_but_unsupported_names_the_model() -> None:
    with pytest.raises(ValueError, match=r"'adasum' on the serial model\. Supported: SUM"):
        codec.canonical_op("adasum", ALL_OPS, "serial")


def test_canonical_op_without_close_match_has_no_suggestion() -> None:
    with pytest.raises(ValueError, match=r"Unsupported reduction operation 'XYZZY'") as info:
        codec.canonical_op("XYZZY", ALL_OPS, "serial")
    assert "Did you mean" not in str(info.value)


@pytest.mark.parametrize("op", [None, 3, ["SUM"]])
def test_canonical_op_needs_a_str(op: object) -> None:
    with pytest.raises(TypeError, match=r"op must be a str such as 'SUM', got "):
        codec.canonical_op(op, ALL_OPS, "serial")
