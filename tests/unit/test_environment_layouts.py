"""Every launcher's detector reads a consistent layout back exactly: hypothesis draws a job
(nodes, processes per node, this process's node and local index), writes it as that
launcher's variables, and ``detect`` must return the same rank, world size, local rank,
local world size, node index and node count (the fields the launcher gives).

The reference is the drawn layout itself; the bad layouts are in test_environment_errors.py.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from distbridge import environments
from tests.unit.test_environment_errors import LAUNCHERS, Fields


@st.composite
def layouts(draw: st.DrawFn) -> Fields:
    """A job of ``nnodes`` nodes with ``local_world_size`` processes each, and one of them."""
    nodes, local = draw(st.integers(1, 16)), draw(st.integers(1, 16))
    node, local_rank = draw(st.integers(0, nodes - 1)), draw(st.integers(0, local - 1))
    return {
        "world_size": nodes * local,
        "rank": node * local + local_rank,
        "local_world_size": local,
        "local_rank": local_rank,
        "nnodes": nodes,
        "node_rank": node,
    }


@pytest.mark.parametrize("name", list(LAUNCHERS))
@given(layout=layouts(), data=st.data())
def test_a_consistent_layout_reads_back_exactly(
    name: str, layout: Fields, data: st.DataObject
) -> None:
    launcher = LAUNCHERS[name]
    env = dict(launcher.base)
    given_fields = {f: v for f, v in layout.items() if f in launcher.names}
    for field, value in given_fields.items():
        env[data.draw(st.sampled_from(launcher.names[field]), label=field)] = str(value)

    found = launcher.detect(env)

    assert found is not None
    read = {field: getattr(found, field) for field in given_fields}
    assert read == given_fields
    assert environments.detect(env) == found  # the first detector that answers is this one
