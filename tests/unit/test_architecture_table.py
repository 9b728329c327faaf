"""docs/architecture.md's table of primitives by model is the one the code gives now."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from distbridge.cli import where
from distbridge.models._primitives import BackendPrimitives
from distbridge.models.native.model import NativeModel

PAGE = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"


def test_the_page_holds_the_table_the_code_gives() -> None:
    block = where.current_block(PAGE.read_text())
    assert block is not None, f"{PAGE} lost its generated table's markers"
    assert where.table() in block, (
        "docs/architecture.md's table of primitives is stale: run "
        "`python -m distbridge where --update docs/architecture.md`"
    )


def test_a_cell_points_at_the_def_line() -> None:
    path, line = where.cell(NativeModel, "_do_all_reduce").strip("`").split(":")
    source = (Path(where.__file__).resolve().parents[1] / path).read_text().splitlines()
    assert source[int(line) - 1].lstrip().startswith("def _do_all_reduce(")


@pytest.mark.parametrize("name", where.PRIMITIVES)
def test_every_row_is_a_hook_of_the_primitives(name: str) -> None:
    assert any(callable(vars(base).get(name)) for base in (BackendPrimitives,))


def test_every_hook_a_backend_may_override_has_a_row() -> None:
    """Every ``_`` hook of the base classes that some backend defines again, and
    ``abort_communicator``, have a row (the public queries and class methods do not)."""
    bases = (BackendPrimitives,)
    hooks = {n for base in bases for n, v in vars(base).items() if callable(v)}
    overridden = {
        name
        for _, model in where.MODELS
        for klass in model.__mro__
        if klass not in (*bases, object) and klass.__name__ != "ComputationModel"
        for name in vars(klass)
        if name in hooks
    }
    rows = {n for n in overridden if n.startswith("_") and not n.startswith("__")}
    assert rows | {"abort_communicator"} <= set(where.PRIMITIVES)


def test_update_rewrites_only_the_block(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(f"# Title\n\n{where.START}\nold\n{where.END}\n\nafter\n")
    assert where.update(page) is True
    text = page.read_text()
    assert text.startswith("# Title\n\n") and text.endswith("\n\nafter\n")
    assert where.table() in text and "old" not in text
    assert where.update(page) is False
    page.write_text("no markers")
    with pytest.raises(ValueError, match="no '<!-- primitives"):
        where.update(page)


def test_the_page_s_layers_are_import_linter_s() -> None:
    """The layers block of the page lists pyproject's import-linter layers, in order."""
    pyproject = (PAGE.parents[1] / "pyproject.toml").read_text()  # no tomllib on Python 3.10
    layers = re.search(r"\nlayers = \[\n(.*?)\n\]", pyproject, re.S)
    assert layers is not None
    want = [line.strip().strip('",').replace("distbridge.", "") for line in layers[1].splitlines()]
    page = PAGE.read_text()
    start = page.index("```text\n") + len("```text\n")
    block = page[start : page.index("```", start)].splitlines()
    got = [line.split("  ")[0].strip() for line in block if not line.startswith(" ")]
    assert got == want
