"""The docs as written: every Python block in README.md and docs/ compiles, starts processes
only behind a main guard, and runs; and docs/api.md lists every public name.

The rule for a ```python block (write the marker on the line just above the fence):

- no marker: a complete program. It is run as written, in a fresh process from an empty
  directory, and must exit 0 (``test_block_runs``: real processes, so marked distributed).
- ``<!-- docs-test: fragment -->``: a piece of a program (it uses names it does not define,
  such as ``idist``, ``model`` or ``loader``). It must compile; it is not run.
- ``<!-- docs-test: skip: REASON -->``: complete, but needs what this machine lacks (a
  launcher, a GPU, another package). It must compile; the test is skipped with REASON.

A block that is a ``>>>`` session is compiled example by example, whatever its marker. A
complete program (no marker, or skip) that calls ``spawn``, ``launch`` or
``Parallel(..., nproc_per_node=...)`` at module level must do it under
``if __name__ == "__main__":``: the workers import the main module again.
"""

from __future__ import annotations

import ast
import doctest
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import distbridge as idist

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
_MARKER = re.compile(r"^<!-- docs-test: (fragment|skip: (?P<reason>.+?)) -->$")
_STARTS_PROCESSES = ("spawn", "launch", "Parallel")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    code: str
    kind: str  # "run", "fragment" or "skip"
    reason: str = ""

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def _blocks() -> list[Block]:
    found: list[Block] = []
    for path in DOCS:
        lines = path.read_text(encoding="utf-8").splitlines()
        i = 0
        while i < len(lines):
            if lines[i].strip() == "```python":
                end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
                mark = _MARKER.match(lines[i - 1].strip()) if i else None
                kind = "run" if mark is None else mark.group(1).split(":")[0]
                reason = (mark.group("reason") or "") if mark else ""
                found.append(Block(path, i + 1, "\n".join(lines[i + 1 : end]) + "\n", kind, reason))
                i = end
            i += 1
    return found


BLOCKS = _blocks()


def _is_session(block: Block) -> bool:
    return block.code.lstrip().startswith(">>>")


def _compile(block: Block) -> ast.Module | None:
    if _is_session(block):
        for example in doctest.DocTestParser().get_examples(block.code, block.name):
            compile(example.source, block.name, "single")
        return None
    return ast.parse(block.code, block.name)


def test_there_are_blocks_of_every_kind() -> None:
    assert len(BLOCKS) > 40
    assert {b.kind for b in BLOCKS} == {"run", "fragment", "skip"}


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.name)
def test_block_compiles(block: Block) -> None:
    _compile(block)


def _calls_at_module_level(tree: ast.Module) -> list[str]:
    """Names in _STARTS_PROCESSES called by statements outside functions and main guards."""
    called: list[str] = []
    for statement in tree.body:
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        if isinstance(statement, ast.If) and "__main__" in ast.unparse(statement.test):
            continue
        for node in ast.walk(statement):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                spawns = name != "Parallel" or any(k.arg == "nproc_per_node" for k in node.keywords)
                if name in _STARTS_PROCESSES and spawns:
                    called.append(name)
    return called


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.name)
def test_processes_start_behind_a_main_guard(block: Block) -> None:
    tree = _compile(block)
    if tree is None or block.kind == "fragment":
        return
    called = _calls_at_module_level(tree)
    assert not called, (
        f"{block.name} calls {called} at module level; put the call under "
        'if __name__ == "__main__": (the workers import the main module again)'
    )


def test_the_guard_check_catches_a_missing_guard() -> None:
    bad = ast.parse("import distbridge as idist\nidist.launch(main, 2)\n")
    good = ast.parse('def f():\n    spawn()\nif __name__ == "__main__":\n    spawn()\n')
    launcher = ast.parse("with Parallel(backend='gloo') as p:\n    p.run(f)\n")
    assert _calls_at_module_level(launcher) == []
    assert _calls_at_module_level(bad) == ["launch"]
    assert _calls_at_module_level(good) == []


@pytest.mark.distributed
@pytest.mark.timeout(180)
@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.name)
def test_block_runs(block: Block, tmp_path: Path) -> None:
    if block.kind == "fragment" or _is_session(block):
        pytest.skip("a fragment: compiled only")
    if block.kind == "skip":
        pytest.skip(block.reason)
    script = tmp_path / "doc_block.py"
    script.write_text(block.code, encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=150
    )
    assert proc.returncode == 0, f"{block.name} failed:\n{proc.stdout}\n{proc.stderr[-3000:]}"


# ---- the API reference ------------------------------------------------------------------------

API = ROOT / "docs" / "api.md"


def _listed_in_api_reference(text: str) -> set[str]:
    """The names docs/api.md renders: ``::: distbridge.X`` sections, the members of the
    ``::: distbridge`` section, and the contents of ``::: distbridge.errors``."""
    listed = set(re.findall(r"^::: distbridge\.(\w+)\s*$", text, flags=re.MULTILINE))
    facade = text.split("::: distbridge\n", 1)[1].split("\n\n", 1)[0]
    listed |= set(re.findall(r"^\s+- (\w+)$", facade, flags=re.MULTILINE))
    if "errors" in listed:
        listed |= set(idist.errors.__all__)
    return listed


def test_api_reference_lists_every_public_name() -> None:
    listed = _listed_in_api_reference(API.read_text(encoding="utf-8"))
    missing = sorted(set(idist.__all__) - listed - {"__version__"})
    assert not missing, f"docs/api.md does not list {missing}: add them"
