"""auto_model, auto_optim, auto_dataloader and DistributedProxySampler in a world of one."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset, WeightedRandomSampler
from torch.utils.data.distributed import DistributedSampler

import distbridge as idist


def test_auto_model_moves_but_does_not_wrap_without_a_context() -> None:
    model = torch.nn.Linear(2, 1)
    assert idist.auto_model(model) is model
    assert next(model.parameters()).device == idist.device()
    assert not isinstance(idist.auto_model(model, data_parallel=True), torch.nn.DataParallel)


def test_auto_model_rejects_ddp_arguments_it_cannot_use() -> None:
    with pytest.raises(TypeError, match="find_unused_parameters"):
        idist.auto_model(torch.nn.Linear(2, 1), find_unused_parameters=True)


def test_auto_optim_is_the_identity_without_horovod_or_xla() -> None:
    optimizer = torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.1)
    assert idist.auto_optim(optimizer) is optimizer
    with pytest.raises(TypeError, match="Horovod"):
        idist.auto_optim(optimizer, compression=None)


def test_auto_dataloader_is_a_plain_loader_in_a_world_of_one() -> None:
    dataset = TensorDataset(torch.arange(10.0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loader = idist.auto_dataloader(dataset, batch_size=3, shuffle=False)
    assert isinstance(loader, DataLoader)
    assert loader.batch_size == 3
    assert next(iter(loader))[0].tolist() == [0.0, 1.0, 2.0]


def test_proxy_sampler_shards_any_sampler() -> None:
    weights = torch.ones(10)
    base = WeightedRandomSampler(weights, num_samples=10)
    shards = [idist.DistributedProxySampler(base, num_replicas=3, rank=r) for r in range(3)]
    for shard in shards:
        shard.set_epoch(1)
    got = [list(shard) for shard in shards]
    assert [len(g) for g in got] == [4, 4, 4], "10 indices padded to 12, 4 per replica"
    assert all(0 <= i < 10 for g in got for i in g)
    again = [list(shard) for shard in shards]
    assert got == again, "the same epoch gives the same shards"


def test_proxy_sampler_validates_its_sampler() -> None:
    with pytest.raises(TypeError, match="torch Sampler"):
        idist.DistributedProxySampler([1, 2, 3])  # type: ignore[arg-type]
    dataset = TensorDataset(torch.arange(4.0))
    with pytest.raises(TypeError, match="must not be a distributed sampler already"):
        idist.DistributedProxySampler(DistributedSampler(dataset, num_replicas=1, rank=0))


def test_auto_helpers_refuse_a_launched_process_without_a_context(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under a launcher of 2 ranks but before initialize(), training alone on a shard of the
    data without gradient sync would be a silent wrong answer."""
    for key, value in {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"}.items():
        monkeypatch.setenv(key, value)
    idist.sync()  # the serial model re-reads the launcher's variables
    try:
        with pytest.raises(
            idist.DistributedError, match=r"rank 1 of 2 .* idist.initialize\(backend\)"
        ):
            idist.auto_model(torch.nn.Linear(2, 1))
        with pytest.raises(idist.DistributedError, match=r"auto_dataloader: this process"):
            idist.auto_dataloader(TensorDataset(torch.arange(4.0)), batch_size=2)
    finally:
        monkeypatch.undo()
        idist.sync()


def _world_of_two(monkeypatch: pytest.MonkeyPatch) -> None:
    """auto_dataloader sees rank 0 of a native world of 2 on this machine (no process group)."""
    from distbridge import _api

    answers = {"model_name": "native-dist", "get_world_size": 2, "get_rank": 0,
               "get_nproc_per_node": 2, "device": torch.device("cpu")}  # fmt: skip
    for name, value in answers.items():
        monkeypatch.setattr(_api, name, lambda value=value: value)


@pytest.mark.parametrize("batch_size", [0, -4, 2.5, "8"])
def test_auto_dataloader_refuses_a_bad_global_batch_size(
    monkeypatch: pytest.MonkeyPatch, batch_size: object
) -> None:
    """Before: 0 and -4 became a batch of 1 per rank without a word (DataLoader refuses 0)."""
    _world_of_two(monkeypatch)
    with pytest.raises(ValueError, match=rf"^auto_dataloader\(batch_size={batch_size!r}\): "):
        idist.auto_dataloader(TensorDataset(torch.arange(4.0)), batch_size=batch_size)


def test_auto_dataloader_passes_batch_size_none_through(monkeypatch: pytest.MonkeyPatch) -> None:
    """None (DataLoader: no automatic batching) has nothing to split, as in a world of one."""
    _world_of_two(monkeypatch)
    dataset = TensorDataset(torch.arange(4.0))
    loader = idist.auto_dataloader(dataset, batch_size=None, shuffle=False)
    assert loader.batch_size is None
    assert [x[0].item() for x in loader] == [0.0, 2.0]  # rank 0's shard, one sample at a time


def test_proxy_sampler_of_a_sampler_that_yields_nothing_raises() -> None:
    """Its len() promised indices that never come: before, __iter__ looped for ever."""

    class Empty(torch.utils.data.Sampler[int]):
        def __len__(self) -> int:
            return 4

        def __iter__(self):  # type: ignore[no-untyped-def]
            return iter(())

    shard = idist.DistributedProxySampler(Empty(), num_replicas=2, rank=0)
    with pytest.raises(ValueError, match=r"^Empty yielded no indices, but its len\(\) is 4"):
        list(shard)
