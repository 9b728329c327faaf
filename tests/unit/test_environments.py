"""Launcher environments (pure functions of a dict) and the layout derived from them."""

from __future__ import annotations

import os
from datetime import timedelta

import pytest
import torch.distributed as dist

from distbridge import environments
from distbridge.environments import LaunchEnvironment, torchelastic
from distbridge.models._layout import Layout, export_layout, layout_from_env, layout_from_store

LAYOUT_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK")
LAUNCH_VARS = (*LAYOUT_VARS, "GROUP_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")

TORCHRUN = {
    "RANK": "5",
    "WORLD_SIZE": "8",
    "LOCAL_RANK": "1",
    "LOCAL_WORLD_SIZE": "2",
    "GROUP_RANK": "2",
    "GROUP_WORLD_SIZE": "4",
    "MASTER_ADDR": "node0.example",
    "MASTER_PORT": "29500",
    "PATH": "/usr/bin",
}


def _unset(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    """Unset ``names`` so that monkeypatch also removes them again if the code sets them."""
    for name in names:
        monkeypatch.setenv(name, "placeholder")
        monkeypatch.delenv(name)


# ---- torchelastic -----------------------------------------------------------------------------


def test_torchrun_full_set() -> None:
    found = torchelastic.detect(TORCHRUN)
    assert found == LaunchEnvironment(
        launcher="torchelastic",
        rank=5,
        world_size=8,
        local_rank=1,
        local_world_size=2,
        node_rank=2,
        nnodes=4,
        master_addr="node0.example",
        master_port=29500,
    )


@pytest.mark.parametrize("missing", ["RANK", "WORLD_SIZE"])
def test_rank_and_world_size_are_both_needed(missing: str) -> None:
    env = {k: v for k, v in TORCHRUN.items() if k != missing}
    assert torchelastic.detect(env) is None


def test_rank_without_world_size_is_not_torchelastic() -> None:
    assert torchelastic.detect({"RANK": "0", "LOCAL_RANK": "0"}) is None


def test_empty_values_count_as_unset() -> None:
    assert torchelastic.detect({"RANK": "", "WORLD_SIZE": "2"}) is None
    found = torchelastic.detect({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": ""})
    assert found is not None
    assert found.master_addr is None
    assert found.local_rank is None


def test_minimal_set_leaves_unknown_fields_none() -> None:
    found = torchelastic.detect({"RANK": "1", "WORLD_SIZE": "2"})
    assert found == LaunchEnvironment(launcher="torchelastic", rank=1, world_size=2)


@pytest.mark.parametrize(
    "key", ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_PORT"]
)
def test_malformed_value_names_the_variable(key: str) -> None:
    env = {**TORCHRUN, key: "abc"}
    with pytest.raises(ValueError, match=rf"Environment variable {key}='abc' is not an integer"):
        torchelastic.detect(env)


def test_rank_at_or_past_world_size_is_refused() -> None:
    with pytest.raises(ValueError, match=r"torchelastic: rank 4 is outside \[0, 4\)"):
        torchelastic.detect({"RANK": "4", "WORLD_SIZE": "4"})


def test_negative_rank_is_refused() -> None:
    with pytest.raises(ValueError, match=r"rank -1 is outside \[0, 4\)"):
        torchelastic.detect({"RANK": "-1", "WORLD_SIZE": "4"})


def test_zero_world_size_is_refused() -> None:
    with pytest.raises(ValueError, match=r"world size 0 must be at least 1"):
        torchelastic.detect({"RANK": "0", "WORLD_SIZE": "0"})


def test_local_rank_past_local_world_size_is_refused() -> None:
    env = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "2"}
    with pytest.raises(ValueError, match=r"local rank 2 is outside \[0, 2\)"):
        torchelastic.detect(env)


def test_node_rank_past_nnodes_is_refused() -> None:
    env = {**TORCHRUN, "GROUP_RANK": "4"}
    with pytest.raises(ValueError, match=r"node rank 4 is outside \[0, 4\)"):
        torchelastic.detect(env)


def test_nnodes_derived_from_world_and_local_world_size() -> None:
    env = {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}
    found = torchelastic.detect(env)
    assert found is not None
    assert (found.nnodes, found.node_rank) == (4, 2)


def test_group_world_size_wins_over_the_derived_nnodes() -> None:
    # Heterogeneous nodes: torchrun's GROUP_WORLD_SIZE is the truth, not 8 // 2.
    env = {**TORCHRUN, "GROUP_WORLD_SIZE": "3", "GROUP_RANK": "1"}
    found = torchelastic.detect(env)
    assert found is not None
    assert (found.nnodes, found.node_rank) == (3, 1)


def test_uneven_world_gives_no_derived_nnodes() -> None:
    env = {"RANK": "5", "WORLD_SIZE": "6", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4"}
    found = torchelastic.detect(env)
    assert found is not None
    assert found.nnodes is None
    assert found.node_rank is None


def test_environments_detect_reads_a_dict() -> None:
    assert environments.detect(TORCHRUN) == torchelastic.detect(TORCHRUN)
    assert environments.detect({}) is None
    assert environments.detect({"PATH": "/bin"}) is None


def test_environments_detect_defaults_to_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    _unset(monkeypatch, *LAUNCH_VARS, "GROUP_WORLD_SIZE")
    assert environments.detect() is None
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "3")
    found = environments.detect()
    assert found is not None
    assert (found.launcher, found.rank, found.world_size) == ("torchelastic", 2, 3)


def test_environments_detect_raises_on_malformed_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "zero")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match=r"RANK='zero' is not an integer; fix or unset it"):
        environments.detect()


# ---- layout_from_env --------------------------------------------------------------------------


def test_layout_from_a_matching_launcher() -> None:
    launch = torchelastic.detect(TORCHRUN)
    assert layout_from_env(launch, 5, 8) == Layout(5, 8, 1, 2, 4, 2)
    assert layout_from_env(launch, 5, 8, guess=False) == Layout(5, 8, 1, 2, 4, 2)


def test_layout_derives_nnodes_and_node_rank_when_missing() -> None:
    launch = LaunchEnvironment("x", rank=5, world_size=8, local_rank=1, local_world_size=2)
    assert layout_from_env(launch, 5, 8, guess=False) == Layout(5, 8, 1, 2, 4, 2)


def test_layout_without_launcher_guesses_one_node() -> None:
    assert layout_from_env(None, 3, 4) == Layout(3, 4, 3, 4, 1, 0)


def test_layout_without_launcher_and_no_guess_is_none() -> None:
    assert layout_from_env(None, 3, 4, guess=False) is None


def test_layout_without_local_world_size_and_no_guess_is_none() -> None:
    launch = LaunchEnvironment("x", rank=3, world_size=4, local_rank=1)
    assert layout_from_env(launch, 3, 4, guess=False) is None
    # With a guess, the launcher's local rank is kept (one node assumed for the rest).
    assert layout_from_env(launch, 3, 4) == Layout(3, 4, 1, 4, 1, 0)


def test_layout_ignores_a_launcher_describing_another_world() -> None:
    launch = torchelastic.detect(TORCHRUN)  # rank 5 of 8
    assert layout_from_env(launch, 0, 2, guess=False) is None
    layout = layout_from_env(launch, 1, 2)
    assert (layout.rank, layout.world_size, layout.nproc_per_node, layout.nnodes) == (1, 2, 2, 1)


def test_guessed_layout_from_a_mismatched_launcher_is_consistent() -> None:
    launch = torchelastic.detect(TORCHRUN)  # rank 5 of 8, local rank 1
    layout = layout_from_env(launch, 0, 1)
    assert 0 <= layout.local_rank < layout.nproc_per_node


def test_with_local_rank_validates() -> None:
    layout = Layout(0, 2, 0, 2, 1, 0)
    assert layout.with_local_rank(1) == Layout(0, 2, 1, 2, 1, 0)
    for bad in (-1, True, "1"):
        with pytest.raises(ValueError, match=r"A local rank must be an int >= 0, got "):
            layout.with_local_rank(bad)  # type: ignore[arg-type]


# ---- layout_from_store ------------------------------------------------------------------------


@pytest.fixture
def store() -> dist.HashStore:
    s = dist.HashStore()
    s.set_timeout(timedelta(seconds=5))
    return s


HOSTS = ["hostA", "hostB", "hostA", "hostB"]  # interleaved: nodes numbered by lowest rank


@pytest.mark.parametrize(
    ("rank", "expected"),
    [
        (0, Layout(0, 4, 0, 2, 2, 0)),
        (1, Layout(1, 4, 0, 2, 2, 1)),
        (2, Layout(2, 4, 1, 2, 2, 0)),
        (3, Layout(3, 4, 1, 2, 2, 1)),
    ],
)
def test_layout_from_store_four_ranks_on_two_hosts(
    store: dist.HashStore, rank: int, expected: Layout
) -> None:
    for other, host in enumerate(HOSTS):
        if other != rank:
            store.set(f"distbridge/host/{other}", host)
    assert layout_from_store(store, rank, 4, HOSTS[rank]) == expected
    assert store.get(f"distbridge/host/{rank}") == HOSTS[rank].encode()


def test_layout_from_store_every_rank_sees_the_same_nodes(store: dist.HashStore) -> None:
    hosts = ["b", "b", "b", "a"]  # uneven: 3 ranks on one host, 1 on the other
    for rank, host in enumerate(hosts):
        store.set(f"distbridge/host/{rank}", host)
    layouts = [layout_from_store(store, r, 4, hosts[r]) for r in range(4)]
    assert [lay.node_rank for lay in layouts] == [0, 0, 0, 1]
    assert [lay.local_rank for lay in layouts] == [0, 1, 2, 0]
    assert [lay.nproc_per_node for lay in layouts] == [3, 3, 3, 1]
    assert {lay.nnodes for lay in layouts} == {2}


def test_layout_from_store_world_of_one(store: dist.HashStore) -> None:
    assert layout_from_store(store, 0, 1, "solo") == Layout(0, 1, 0, 1, 1, 0)


def test_layout_from_store_non_ascii_hostname(store: dist.HashStore) -> None:
    store.set("distbridge/host/0", "nœud-1")
    assert layout_from_store(store, 1, 2, "nœud-1") == Layout(1, 2, 1, 2, 1, 0)


# ---- export_layout ----------------------------------------------------------------------------


def test_export_layout_sets_only_missing_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    _unset(monkeypatch, *LAYOUT_VARS)
    monkeypatch.setenv("RANK", "7")
    monkeypatch.setenv("GROUP_RANK", "3")
    previous = export_layout(Layout(3, 8, 1, 2, 4, 1))
    assert previous == {"LOCAL_RANK": None, "WORLD_SIZE": None, "LOCAL_WORLD_SIZE": None}
    assert os.environ["RANK"] == "7"
    assert os.environ["GROUP_RANK"] == "3"
    assert os.environ["LOCAL_RANK"] == "1"
    assert os.environ["WORLD_SIZE"] == "8"
    assert os.environ["LOCAL_WORLD_SIZE"] == "2"


def test_export_layout_on_a_clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    _unset(monkeypatch, *LAYOUT_VARS)
    previous = export_layout(Layout(0, 1, 0, 1, 1, 0))
    assert previous == dict.fromkeys(LAYOUT_VARS)
    assert {k: os.environ[k] for k in LAYOUT_VARS} == {
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_WORLD_SIZE": "1",
        "GROUP_RANK": "0",
    }


def test_export_layout_with_everything_set_changes_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for key in LAYOUT_VARS:
        monkeypatch.setenv(key, "9")
    assert export_layout(Layout(0, 1, 0, 1, 1, 0)) == {}
    assert all(os.environ[k] == "9" for k in LAYOUT_VARS)
