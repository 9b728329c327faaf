"""spawn from a real Jupyter notebook: a kernel (ipykernel, run by nbclient) executes cells
that define the worker function in the notebook itself and call ``idist.spawn``.

The kernel runs this test's Python (a kernelspec written into a temporary JUPYTER_PATH), so
it works in a fresh virtual environment without ``ipykernel install``.
"""

from __future__ import annotations

import json
import re
import sys
import textwrap
from typing import Any

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(240)]

_KERNEL = "distbridge-test-python"
_LINES = 200  # per rank and cell: enough for the ranks' writes to overlap

_SETUP = """\
import sys

import distbridge as idist
import torch

print(sys.executable)

def train(local_rank, base, lines):
    rank = idist.get_rank()
    for i in range(lines):
        print(f"rank {rank} line {i} " + "x" * 60)
    return float(idist.all_reduce(torch.tensor(float(base + rank))))
"""


def _cell(source: str) -> Any:
    return nbformat.v4.new_code_cell(textwrap.dedent(source))


@pytest.fixture(scope="module")
def executed(tmp_path_factory: pytest.TempPathFactory) -> list[Any]:
    """The notebook's cells after one run of the kernel, each with its outputs."""
    root = tmp_path_factory.mktemp("notebook")
    spec_dir = root / "jupyter" / "kernels" / _KERNEL
    spec_dir.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    spec = {"argv": argv, "display_name": "distbridge tests", "language": "python"}
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    cells = [
        _cell(_SETUP),
        _cell(f'print(idist.spawn("gloo", train, args=(10, {_LINES}), nproc_per_node=2))'),
        _cell(f'idist.spawn("gloo", train, args=(1, {_LINES}), nproc_per_node=2, tag_output=True)'),
        _cell(
            f'idist.spawn("gloo", train, args=(1, {_LINES}), nproc_per_node=2, output_ranks=[1])'
        ),
        _cell(
            f'idist.spawn("gloo", train, args=(1, {_LINES}), nproc_per_node=2, '
            'tag_output=True, start_method="fork")'
        ),
        _cell("""\
            def fails(local_rank):
                if idist.get_rank() == 1:
                    raise ValueError("a mistake in the notebook's worker")
                return "fine"

            idist.spawn("gloo", fails, nproc_per_node=2)
        """),
        _cell(
            'print("after the failure", idist.spawn("gloo", train, args=(0, 1), nproc_per_node=2))'
        ),
    ]
    notebook = nbformat.v4.new_notebook(cells=cells)
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setenv("JUPYTER_PATH", str(root / "jupyter"))
    try:
        client = nbclient.NotebookClient(
            notebook,
            kernel_name=_KERNEL,
            timeout=180,
            allow_errors=True,
            resources={"metadata": {"path": str(root)}},
        )
        client.execute()
    finally:
        monkeypatch.undo()
    return list(notebook.cells)


def _stdout(cell: Any) -> list[str]:
    text = "".join(
        out["text"] for out in cell.outputs if out["output_type"] == "stream" and
        out["name"] == "stdout"
    )  # fmt: skip
    return text.splitlines()


def _errors(cell: Any) -> list[Any]:
    return [out for out in cell.outputs if out["output_type"] == "error"]


def _expected(rank: int, tag: bool = False) -> list[str]:
    prefix = f"[rank{rank}]: " if tag else ""
    return [f"{prefix}rank {rank} line {i} " + "x" * 60 for i in range(_LINES)]


def test_a_notebook_function_runs_with_the_default_arguments(executed: list[Any]) -> None:
    assert not _errors(executed[0]), _errors(executed[0])
    assert _stdout(executed[0]) == [sys.executable]  # the kernel runs this venv's Python
    cell = executed[1]
    assert not _errors(cell), _errors(cell)
    lines = _stdout(cell)
    assert lines[-1] == "[21.0, 21.0]"  # both results came back, in rank order
    assert sorted(lines[:-1]) == sorted(_expected(0) + _expected(1))  # whole lines only


def test_tag_output_tags_every_line_in_the_notebook(executed: list[Any]) -> None:
    cell = executed[2]
    assert not _errors(cell), _errors(cell)
    lines = _stdout(cell)
    for rank in (0, 1):  # each rank's lines whole, tagged and in the order it wrote them
        assert [line for line in lines if line.startswith(f"[rank{rank}]")] == _expected(
            rank, tag=True
        )
    assert len(lines) == 2 * _LINES


def test_output_ranks_filters_the_notebook_output(executed: list[Any]) -> None:
    cell = executed[3]
    assert not _errors(cell), _errors(cell)
    assert _stdout(cell) == _expected(1)


def test_fork_output_is_relayed_whole_and_tagged(executed: list[Any]) -> None:
    cell = executed[4]
    assert not _errors(cell), _errors(cell)
    lines = _stdout(cell)
    assert sorted(lines) == sorted(_expected(0, tag=True) + _expected(1, tag=True))


def test_a_failing_worker_shows_its_traceback_in_the_cell(executed: list[Any]) -> None:
    (error,) = _errors(executed[5])
    assert error["ename"] == "WorkerFailedError"
    shown = error["evalue"] + "\n".join(error["traceback"])
    assert "a mistake in the notebook's worker" in shown
    assert re.search(r"in fails\b", shown), shown  # the worker's own frame, by name
    assert "ValueError" in shown


def test_the_next_cell_spawns_again_after_a_failure(executed: list[Any]) -> None:
    cell = executed[6]
    assert not _errors(cell), _errors(cell)
    assert _stdout(cell)[-1] == "after the failure [1.0, 1.0]"
