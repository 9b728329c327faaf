"""The layers hold for calls as well as imports: outside ``models/`` nothing touches a
private member of a computation model but the backend hooks ``ModelContract`` names
(``_do_all_reduce``, ``_group_size``...), and everything it names exists on every model."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Protocol

import torch

from distbridge.model_contract import ModelContract
from distbridge.models.serial import SerialModel

SRC = Path(__file__).resolve().parents[2] / "src" / "distbridge"
MODELS = SRC / "models"


class _Empty(Protocol):
    """What typing itself puts in a Protocol's namespace (``_is_protocol``...)."""


#: every name ModelContract gives the code below the models, hooks and state
CONTRACT = {
    name
    for name in (*vars(ModelContract), *ModelContract.__annotations__)
    if not name.startswith("__") and name not in vars(_Empty)
}


def _private_model_members() -> set[str]:
    """Every ``_name`` (not dunder) that a class under models/ defines: its methods, and the
    attributes its methods assign on ``self``."""
    names: set[str] = set()
    for path in MODELS.rglob("*.py"):
        for cls in ast.walk(ast.parse(path.read_text())):
            if not isinstance(cls, ast.ClassDef):
                continue
            for node in ast.walk(cls):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    names.add(node.name)
                elif (
                    isinstance(node, ast.Attribute)
                    and isinstance(node.ctx, ast.Store)
                    and isinstance(node.value, ast.Name)
                    and node.value.id == "self"
                ):
                    names.add(node.attr)
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def _violations(path: Path, private: set[str], root: Path = SRC) -> list[str]:
    """``file:line expr`` for each private model member used in ``path`` on anything but
    ``self`` / ``cls``, and for any ``model._x`` at all, except the hooks of the contract."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_"):
            continue
        if node.attr.startswith("__") or node.attr in CONTRACT:
            continue
        owner = node.value
        on_itself = isinstance(owner, ast.Name) and owner.id in ("self", "cls")
        named_model = isinstance(owner, ast.Name) and owner.id in ("model", "m")
        if named_model or (node.attr in private and not on_itself):
            where = f"{path.relative_to(root)}:{node.lineno}"
            found.append(f"{where} {ast.unparse(node)}")
    return found


def test_the_check_sees_the_private_members() -> None:
    private = _private_model_members()
    # the hooks a backend overrides, and state the base class keeps, are found
    assert {"_do_all_reduce", "_group_size", "_placement", "_fast_reduce", "_timed"} <= private


def test_nothing_outside_the_models_touches_a_private_member_of_a_model() -> None:
    private = _private_model_members()
    outside = [p for p in SRC.rglob("*.py") if MODELS not in p.parents]
    assert len(outside) > 50
    violations = [v for p in outside for v in _violations(p, private)]
    assert violations == [], "use what distbridge.model_contract names:\n" + "\n".join(violations)


def test_the_check_fails_on_a_private_call(tmp_path: Path) -> None:
    private = _private_model_members()
    probe = tmp_path / "probe.py"
    probe.write_text("def f(model, x):\n    return model._fast_reduce(x)\n")
    assert _violations(probe, private, tmp_path) == ["probe.py:2 model._fast_reduce"]
    probe.write_text("def f(thing):\n    return thing._timed\n")
    assert _violations(probe, private, tmp_path) == ["probe.py:2 thing._timed"]
    probe.write_text("class A:\n    def f(self):\n        return self._timed\n")
    assert _violations(probe, private, tmp_path) == []
    probe.write_text(
        "def f(model, x):\n    return model._do_all_reduce(x, 'SUM', model._group_size(None))\n"
    )
    assert _violations(probe, private, tmp_path) == []  # hooks the contract names


def test_every_member_of_the_contract_is_on_every_model() -> None:
    from distbridge.models.horovod.model import HorovodModel
    from distbridge.models.native.model import NativeModel
    from distbridge.models.xla.model import XlaModel

    assert {"_do_all_reduce", "_group_size", "ledger", "groups"} <= CONTRACT
    methods = sorted(name for name in CONTRACT if callable(getattr(ModelContract, name, None)))
    for model in (SerialModel, NativeModel, XlaModel, HorovodModel):
        assert [name for name in methods if not hasattr(model, name)] == [], model.name
    instance = SerialModel()  # with the state its __init__ makes
    assert [name for name in sorted(CONTRACT) if not hasattr(instance, name)] == []


def test_the_hooks_answer_for_a_world_of_one() -> None:
    """The serial model's hooks, as the code below the models calls them."""
    model = SerialModel()
    x = torch.arange(6.0).reshape(3, 2)
    assert (model._group_size(None), model._group_rank(None)) == (1, 0)
    assert model._group_members(None) == (0,)
    assert model._placement(x) == model._collective_device() == x.device
    assert model._native_avg() is True
    assert model._coordination_store() is None
    assert torch.equal(model._do_all_reduce(x.clone(), "SUM", None), x)
    assert torch.equal(model._do_all_gather(x.clone(), None), x)
    assert torch.equal(model._do_broadcast(x.clone(), 0, None), x)
    assert torch.equal(model._do_reduce_scatter(x.clone(), "SUM", None), x)
    out = torch.empty_like(x)
    model._do_all_gather_into(out, x, None)
    assert torch.equal(out, x)


def test_every_model_is_at_most_three_classes_deep() -> None:
    """A reader finds a model's code in at most three classes: the backend's own,
    ``ComputationModel`` and ``BackendPrimitives`` (no mixins)."""
    from distbridge.models.horovod.model import HorovodModel
    from distbridge.models.native.model import NativeModel
    from distbridge.models.xla.model import XlaModel

    for model in (SerialModel, NativeModel, XlaModel, HorovodModel):
        chain = [c.__name__ for c in model.__mro__ if c.__module__.startswith("distbridge")]
        assert len(chain) <= 3, chain
        assert chain[1:] == ["ComputationModel", "BackendPrimitives"], chain
