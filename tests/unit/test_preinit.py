"""Before initialize(): the rank queries answer with the launcher's values, collectives refuse."""

from __future__ import annotations

import pytest
import torch

import distbridge as idist
from distbridge.errors import DistributedError
from distbridge.helpers import rank_zero_only, synchronize

LAUNCHERS = [  # (variables, rank, world, local rank, nproc per node, nnodes, node rank)
    (
        {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
         "GROUP_RANK": "1", "GROUP_WORLD_SIZE": "2"},
        (3, 4, 1, 2, 2, 1),
    ),
    (
        {"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4",
         "OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
         "OMPI_MCA_orte_num_nodes": "2"},
        (2, 4, 0, 2, 2, 1),  # the node index, which Open MPI does not give: nodes in rank order
    ),
    (
        {"PMI_RANK": "1", "PMI_SIZE": "3", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "3"},
        (1, 3, 1, 3, 1, 0),
    ),
    (
        {"HOROVOD_RANK": "5", "HOROVOD_SIZE": "6", "HOROVOD_LOCAL_RANK": "2",
         "HOROVOD_LOCAL_SIZE": "3", "HOROVOD_CROSS_RANK": "1", "HOROVOD_CROSS_SIZE": "2"},
        (5, 6, 2, 3, 2, 1),
    ),
]  # fmt: skip
LAUNCH_PREFIXES = ("OMPI_", "PMI_", "MPI_LOCAL", "MV2_", "HOROVOD_", "JSM_", "SLURM_")
TORCHRUN_VARS = (
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
)  # fmt: skip


def _launch(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    """Make this process look started by a launcher with ``env``, then re-read it."""
    import os

    for key in list(os.environ):
        if key.startswith(LAUNCH_PREFIXES) or key in TORCHRUN_VARS:
            monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    idist.sync()


def _queries() -> tuple[int, ...]:
    return (
        idist.get_rank(),
        idist.get_world_size(),
        idist.get_local_rank(),
        idist.get_nproc_per_node(),
        idist.get_nnodes(),
        idist.get_node_rank(),
    )


@pytest.mark.parametrize(("env", "expected"), LAUNCHERS)
def test_queries_answer_with_the_launchers_values(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], expected: tuple[int, ...]
) -> None:
    _launch(monkeypatch, env)
    assert idist.model_name() == "serial" and idist.backend() is None
    assert _queries() == expected


def test_values_are_read_once_and_sync_reads_them_again(monkeypatch: pytest.MonkeyPatch) -> None:
    _launch(monkeypatch, {"RANK": "1", "WORLD_SIZE": "2"})
    monkeypatch.setenv("RANK", "0")
    assert idist.get_rank() == 1  # read when the serial model was made
    idist.sync()
    assert idist.get_rank() == 0


@pytest.mark.parametrize(
    "call",
    [
        lambda: idist.all_reduce(1),
        lambda: idist.all_reduce(torch.ones(2)),
        lambda: idist.all_gather("x"),
        lambda: idist.broadcast(3, src=0),
        lambda: idist.barrier(),
        lambda: idist.new_group([0, 1]),
        lambda: idist.all_gather_object({"a": 1}),
        lambda: synchronize(),
    ],
)
def test_collectives_refuse_under_a_launcher_of_several_ranks(
    monkeypatch: pytest.MonkeyPatch, call: object
) -> None:
    _launch(monkeypatch, LAUNCHERS[1][0])
    with pytest.raises(DistributedError, match=r"rank 2 of 4 \(openmpi\), but no process group"):
        call()  # type: ignore[operator]
    with pytest.raises(DistributedError, match=r"Call idist.initialize\(backend\) first"):
        call()  # type: ignore[operator]


def test_a_launched_world_of_one_still_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    _launch(monkeypatch, {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "1"})
    assert _queries() == (0, 1, 0, 1, 1, 0)
    assert idist.all_reduce(3) == 3
    assert idist.all_gather("a") == ["a"]


def test_malformed_launcher_variables_warn_and_refuse(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.warns(RuntimeWarning, match=r"RANK='one' is not an integer"):
        _launch(monkeypatch, {"RANK": "one", "WORLD_SIZE": "2"})
    assert _queries() == (0, 1, 0, 1, 1, 0)
    with pytest.raises(DistributedError, match=r"malformed: Environment variable RANK='one'"):
        idist.all_reduce(1)
    monkeypatch.delenv("RANK")
    idist.sync()
    assert idist.all_reduce(1) == 1


@pytest.mark.parametrize(("rank", "runs"), [("0", True), ("1", False)])
def test_rank_zero_only_before_initialize(
    monkeypatch: pytest.MonkeyPatch, rank: str, runs: bool
) -> None:
    _launch(monkeypatch, {"PMI_RANK": rank, "PMI_SIZE": "2"})
    calls: list[int] = []

    @rank_zero_only
    def log(value: int) -> int:
        calls.append(value)
        return value

    assert log(7) == (7 if runs else None)
    assert calls == ([7] if runs else [])


def test_without_a_launcher_everything_is_a_world_of_one(monkeypatch: pytest.MonkeyPatch) -> None:
    _launch(monkeypatch, {})
    assert _queries() == (0, 1, 0, 1, 1, 0)
    assert idist.all_reduce(2) == 2


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: idist.broadcast(1, src="0"), TypeError, "src must be an int rank"),
        (
            lambda: idist.broadcast(1, src=4),
            ValueError,
            "src=4 is not a rank of this world of size 4",
        ),
        (lambda: idist.all_reduce(1, group=[0, 0]), ValueError, "Group ranks must be unique"),
        (lambda: idist.all_reduce(1, "SUMM"), ValueError, "SUMM"),
        (lambda: idist.all_to_all([torch.ones(1)]), ValueError, "a list of 4 tensors"),
    ],
)
def test_bad_arguments_fail_as_on_the_live_model_before_refusing(
    monkeypatch: pytest.MonkeyPatch, call: object, error: type[Exception], match: str
) -> None:
    # The serial model's world is the launcher's: validation matches the 4-rank job's.
    _launch(monkeypatch, LAUNCHERS[1][0])
    with pytest.raises(error, match=match):
        call()  # type: ignore[operator]


def test_every_collective_refuses_rather_than_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    _launch(monkeypatch, LAUNCHERS[1][0])
    calls = [
        lambda: idist.reduce(1),
        lambda: idist.gather(torch.ones(1)),
        lambda: idist.scatter([torch.ones(1)] * 4 if idist.get_rank() == 0 else None),
        lambda: idist.reduce_scatter(torch.ones(4)),
        lambda: idist.all_to_all([torch.ones(1)] * 4),
        lambda: idist.all_gather_tensors_with_shapes(torch.ones(1), [[1]] * 4),
        lambda: idist.broadcast_object("x"),
        lambda: idist.scatter_object(None),
    ]
    for call in calls:
        with pytest.raises(DistributedError, match=r"Call idist.initialize\(backend\) first"):
            call()


@pytest.mark.parametrize("timeout", [float("nan"), float("inf"), -1, 0])
def test_initialize_refuses_a_timeout_that_is_not_positive_and_finite(timeout: float) -> None:
    """Before anything starts: not timedelta's 'cannot convert float NaN to integer'."""
    with pytest.raises(ValueError, match=r"timeout must be a positive, finite number of seconds"):
        idist.initialize("gloo", timeout=timeout)
    assert idist.backend() is None
