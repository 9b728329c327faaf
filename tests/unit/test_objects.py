"""Object collectives and data helpers without a distributed context, and their frames."""

from __future__ import annotations

import json
import pickle
import threading
from typing import Any

import numpy as np
import pytest
import torch

import distbridge as idist
from distbridge.algorithms.object_collectives import (
    decode_frame,
    encode_frame,
    frame_into,
    frame_size,
)


def _round_trip(obj: Any) -> Any:
    parts = encode_frame(obj, None)
    buffer = np.zeros(frame_size(parts), dtype=np.uint8)
    frame_into(parts, buffer)
    return decode_frame(buffer, None)


def test_large_arrays_and_tensors_travel_out_of_band() -> None:
    array = np.arange(1 << 16, dtype=np.float64)
    tensor = torch.arange(1 << 16, dtype=torch.int32).reshape(256, 256)
    frame = encode_frame({"a": array, "t": tensor}, None)
    stream, buffer, tensor_bytes = frame
    assert stream.nbytes < 1024, "the arrays' bytes must not be inside the pickle stream"
    assert (buffer.nbytes, tensor_bytes.nbytes) == (array.nbytes, tensor.numel() * 4)
    back = _round_trip({"a": array, "t": tensor})
    assert np.array_equal(back["a"], array)
    assert torch.equal(back["t"], tensor)


def test_frames_keep_tensor_metadata() -> None:
    leaf = torch.ones(3, requires_grad=True)
    back = _round_trip([leaf, torch.empty(0, 2), torch.tensor(2.5), torch.arange(6)[::2]])
    assert back[0].requires_grad
    assert back[1].shape == (0, 2)
    assert back[2].dim() == 0 and back[2].item() == 2.5
    assert back[3].tolist() == [0, 2, 4]


def test_a_corrupt_frame_is_refused() -> None:
    with pytest.raises(ValueError, match="corrupt object frame"):
        decode_frame(np.zeros(64, dtype=np.uint8), None)


def test_object_collectives_answer_as_a_world_of_one() -> None:
    obj = {"x": np.arange(3), "y": "ü"}
    (copy,) = idist.all_gather_object(obj)
    assert copy is not obj
    assert np.array_equal(copy["x"], obj["x"])
    assert idist.gather_object(5) == [5]
    assert idist.broadcast_object(obj) is obj
    assert idist.scatter_object(["only"]) == "only"


class _Json:
    def dumps(self, obj: Any) -> bytes:
        return json.dumps(obj).encode()

    def loads(self, data: bytes) -> Any:
        return json.loads(data)


def test_a_serializer_replaces_pickle() -> None:
    assert idist.all_gather_object({"a": [1]}, serializer=_Json()) == [{"a": [1]}]
    with pytest.raises(TypeError, match="not JSON serializable"):
        idist.all_gather_object({1, 2}, serializer=_Json())


def test_unpicklable_objects_and_bad_lists_raise() -> None:
    with pytest.raises(TypeError, match="cannot be serialized"):
        idist.all_gather_object(threading.Lock())
    with pytest.raises(TypeError, match="cannot be serialized"):
        idist.broadcast_object(lambda: 1)
    with pytest.raises(ValueError, match="list of 1 objects"):
        idist.scatter_object([1, 2])
    with pytest.raises(ValueError, match="dst=1"):
        idist.gather_object(1, dst=1)


def test_pickled_data_is_only_unpickled_by_object_collectives() -> None:
    payload = pickle.dumps({"a": 1})
    assert idist.all_gather(payload) == [payload], "bytes are an object; they come back as sent"


def test_dict_reductions_in_a_world_of_one() -> None:
    d = {"loss": torch.tensor([1.0, 3.0]), "n": 4, "flag": True}
    summed = idist.all_reduce_dict(d)
    assert torch.equal(summed["loss"], d["loss"]) and summed["n"] == 4 and summed["flag"] == 1
    mean = idist.all_reduce_dict(d, op="mean")
    assert type(mean["n"]) is float
    assert idist.reduce_dict({"a": torch.tensor(2.0)})["a"].item() == 2.0
    with pytest.raises(ValueError, match="'sum' or 'mean'"):
        idist.all_reduce_dict(d, op="avg")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="tensor or a number"):
        idist.all_reduce_dict({"a": "text"})
    with pytest.raises(TypeError, match="tensor or a dict"):
        idist.average_across_processes([1.0])


def test_dict_checks_in_a_world_of_one_raise_this_rank_s_own_error() -> None:
    # The header every rank sends first changes nothing here: no other rank can differ.
    with pytest.raises(TypeError, match=r"^Value of 'a' must be a tensor or a number, got 'x'"):
        idist.reduce_dict({"a": "x"})
    with pytest.raises(ValueError, match=r"^Value of 'n' does not fit in 64 bits"):
        idist.all_reduce_dict({"n": 2**64})
    assert idist.all_reduce_dict({}) == {}
    mean = idist.reduce_dict({"n": 3, "x": torch.tensor([1.0, 2.0])}, average=True)
    assert mean["n"] == 3.0 and type(mean["n"]) is float and mean["x"].tolist() == [1.0, 2.0]


def test_gather_results_validates_its_arguments() -> None:
    assert idist.gather_results([3, 1, 2], total=2) == [3, 1]
    with pytest.raises(ValueError, match="order must be"):
        idist.gather_results([1], order="random")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="only 1 results"):
        idist.gather_results([1], total=5)


def test_shared_random_seed_follows_numpy() -> None:
    np.random.seed(3)
    first = idist.shared_random_seed()
    np.random.seed(3)
    assert idist.shared_random_seed() == first


def test_rank_zero_only_reads_the_launcher_before_initialization(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    @idist.rank_zero_only
    def log() -> str:
        return "logged"

    assert log() == "logged"
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    idist.sync()  # the launcher's variables are read once; sync() reads them again
    assert log() is None


def test_process_helpers_in_a_world_of_one() -> None:
    assert idist.is_main_process()
    idist.synchronize()
    assert idist.get_local_size() == 1
    assert idist.get_local_group() == [0]
    assert idist.is_module_wrapper(torch.nn.DataParallel(torch.nn.Linear(1, 1)))
    assert idist.launch(lambda a, b: a + b, 1, args=(2, 3)) == [5]
    with pytest.raises(ValueError, match="'auto', 'tcp://host:port'"):
        idist.launch(print, 2, dist_url="http://x")


@pytest.mark.parametrize(
    "url", ["tcp://127.0.0.1", "tcp://:29555", "tcp://host:99999", "tcp://h:0"]
)
def test_launch_refuses_a_tcp_url_without_host_and_port(url: str) -> None:
    """Before any worker starts (before: each worker failed in torch's rendezvous, 'port
    number missing', or urlparse's 'Port out of range' without the URL)."""
    with pytest.raises(
        ValueError, match=rf"^dist_url='{url}' needs machine 0's address and a port"
    ):
        idist.launch(print, 2, dist_url=url)


# ---- regressions: a tensor before an array took the array's buffer (issue 16) ---------------


def test_a_tensor_before_an_array_keeps_both_apart() -> None:
    (got,) = idist.all_gather_object({"t": torch.arange(4), "a": np.arange(4) * 100})
    assert torch.equal(got["t"], torch.arange(4))
    assert np.array_equal(got["a"], np.arange(4) * 100)


def test_an_array_the_size_of_a_tensor_is_not_read_from_its_bytes() -> None:
    (got,) = idist.all_gather_object([torch.tensor([0.5]), np.array([7], dtype=np.int32)])
    assert torch.equal(got[0], torch.tensor([0.5]))
    assert got[1].dtype == np.int32 and got[1].tolist() == [7]


def test_evaluation_records_of_arrays_and_tensors_are_gathered() -> None:
    records = [
        {"idx": i, "pred": np.arange(i + 1, dtype=np.float32), "score": torch.tensor(i / 3)}
        for i in range(5)
    ]
    got = idist.gather_results(records)
    assert [r["idx"] for r in got] == list(range(5))
    for sent, back in zip(records, got, strict=True):
        assert np.array_equal(sent["pred"], back["pred"])
        assert torch.equal(sent["score"], back["score"])


def test_received_arrays_and_tensors_are_writable_and_separate() -> None:
    t = torch.arange(3)
    (got,) = idist.all_gather_object([t, t, np.ones((2, 3), order="F"), torch.ones(2).conj()])
    assert got[0] is got[1], "one tensor sent twice comes back as one object, as pickle's memo"
    assert got[2].flags.writeable and got[2].flags.f_contiguous
    got[0].add_(1)
    got[2][0, 0] = 5.0
    assert got[0].tolist() == [1, 2, 3] and got[2].sum() == 10.0
    assert t.tolist() == [0, 1, 2], "the sender's tensor is untouched"
