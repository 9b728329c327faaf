"""``distbridge.compat`` holds mirrors only, and the import paths users have keep working.

A mirror binds other libraries' names to objects written elsewhere (the facade and its
modules): it defines no function or class of its own, beyond a module ``__getattr__`` for a
module variable (detectron2's ``_LOCAL_PROCESS_GROUP``). ignite's own paths
(``distbridge.utils``, ``.comp_models``, ``.launcher``) re-export the mirrors' names.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import distbridge
import distbridge.compat

#: a path users import -> the mirror in compat/ whose names it re-exports
OLD_PATHS = {
    "distbridge.utils": "distbridge.compat.ignite_utils",
    "distbridge.comp_models": "distbridge.compat.ignite_comp_models",
    "distbridge.launcher": "distbridge.compat.ignite_launcher",
}
COMPAT_DIR = Path(distbridge.compat.__file__).parent
MIRRORS = sorted(
    f"distbridge.compat.{info.name}" for info in pkgutil.iter_modules([str(COMPAT_DIR)])
)


def test_the_mirrors_are_found() -> None:
    assert set(OLD_PATHS.values()) | {
        "distbridge.compat.detectron2",
        "distbridge.compat.detectron2_launch",
    } == set(MIRRORS)


@pytest.mark.parametrize("old", sorted(OLD_PATHS))
def test_an_old_path_gives_the_mirrors_objects(old: str) -> None:
    module = importlib.import_module(old)
    mirror = importlib.import_module(OLD_PATHS[old])
    assert module.__all__ == mirror.__all__
    assert mirror.__all__, "a mirror names what it mirrors"
    for name in mirror.__all__:
        assert getattr(module, name) is getattr(mirror, name), (old, name)
    # (pytest's assertion rewriting adds '@py_builtins' to the package's modules)
    public = {n for n in vars(module) if n.isidentifier() and not n.startswith("_")}
    public.discard("annotations")  # from __future__ import annotations
    assert public == set(mirror.__all__), "an old path holds the mirror's names, no others"


def test_the_public_paths_of_each_launcher() -> None:
    from distbridge.compat.detectron2_launch import DEFAULT_TIMEOUT, launch
    from distbridge.launcher import Parallel
    from distbridge.parallel import Parallel as Written

    assert Parallel is distbridge.Parallel is Written
    assert distbridge.launcher.Parallel is distbridge.compat.ignite_launcher.Parallel
    assert launch is distbridge.launch
    assert launch.__module__ == "distbridge._detectron2"
    assert DEFAULT_TIMEOUT is importlib.import_module("distbridge._detectron2").DEFAULT_TIMEOUT


def test_the_old_paths_in_a_fresh_interpreter() -> None:
    # `import a.b as m; m.X` and `from a.b import X` before anything else imported the mirrors.
    code = (
        "import distbridge.utils as u\n"
        "from distbridge.comp_models import registered_computation_models\n"
        "from distbridge.launcher import Parallel\n"
        "import distbridge, distbridge.compat.ignite_utils as m\n"
        "assert u.all_reduce is m.all_reduce is distbridge.all_reduce\n"
        "assert registered_computation_models is distbridge.registered_computation_models\n"
        "assert Parallel is distbridge.Parallel\n"
        "import distbridge.launch\n"  # the spawners' package does not replace the function
        "assert callable(distbridge.launch) and distbridge.launch.__name__ == 'launch'\n"
        "print('ok')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def _defined_here(tree: ast.Module) -> list[str]:
    """The functions and classes a module's source defines, at any depth, but a module
    ``__getattr__``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            name = getattr(node, "name", "<lambda>")
            if not (name == "__getattr__" and node in tree.body):
                found.append(f"{name} (line {node.lineno})")
    return found


@pytest.mark.parametrize("name", MIRRORS)
def test_a_mirror_defines_nothing(name: str) -> None:
    module = importlib.import_module(name)
    assert module.__file__ is not None
    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
    assert _defined_here(tree) == [], f"{name} is a mirror: move the code to the facade"


@pytest.mark.parametrize("name", MIRRORS)
def test_a_mirrors_names_are_written_elsewhere(name: str) -> None:
    module = importlib.import_module(name)
    for attr in module.__all__:
        obj = getattr(module, attr)
        if callable(obj):
            home = getattr(obj, "__module__", "")
            assert not home.startswith("distbridge.compat"), (name, attr, home)


@pytest.mark.parametrize(
    "source",
    [
        "def f():\n    return 1\n",
        "class C:\n    pass\n",
        "f = lambda: 1\n",
        "def __getattr__(name):\n    def inner():\n        pass\n    return inner\n",
    ],
)
def test_the_check_catches_a_definition(source: str) -> None:
    assert _defined_here(ast.parse(source)) != []


def test_the_check_allows_a_module_getattr() -> None:
    source = "from m import x\n__all__ = ['x']\ndef __getattr__(name):\n    return x\n"
    assert _defined_here(ast.parse(source)) == []
