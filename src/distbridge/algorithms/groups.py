"""Resolving ``group=`` arguments, and caching groups made from lists of ranks.

torch.distributed's ``new_group`` is a collective and allocates a communicator,
so a group is created once per distinct rank set (and options) and reused:
``all_reduce(x, group=[0, 1])`` in a loop never leaks groups. A one-dimensional DeviceMesh
(``mesh["tp"]``) stands for the process group of its dimension.
"""

from __future__ import annotations

import enum
import itertools
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

try:
    from torch.distributed.device_mesh import DeviceMesh
except ImportError:  # a torch built without distributed support
    DeviceMesh = None  # type: ignore[assignment,misc]

from distbridge.errors import GroupArgumentError

if TYPE_CHECKING:
    from distbridge.model_contract import ModelContract

__all__ = ["NOT_A_MEMBER", "GroupCache", "is_mesh", "mesh_group", "not_a_group", "resolve"]


_SHOWN = 5  # ranks named at most in an error


def _shown(ranks: Sequence[object]) -> str:
    """``ranks`` for an error message, cut short when long."""
    head = [repr(r) for r in itertools.islice(ranks, _SHOWN)]
    return f"[{', '.join(head)}{', ...' if len(ranks) > _SHOWN else ''}]"


def not_a_group(group: object) -> GroupArgumentError:
    """The error every model raises for a ``group`` that is none of the accepted kinds (a
    ValueError as ignite's, and a TypeError)."""
    return GroupArgumentError(
        "Argument group should be list of int or ProcessGroup (None, a list of ranks or a "
        f"group from distbridge.new_group()), got {group!r}."
    )


def mesh_group(mesh: Any, model: ModelContract) -> Any:
    """The process group a one-dimensional DeviceMesh stands for as a ``group=`` argument.

    Raises ValueError for a mesh of several dimensions, naming them, and TypeError on a model
    whose groups are not torch.distributed process groups.
    """
    if not model.functional_collectives:
        raise TypeError(
            f"group={mesh!r} is a DeviceMesh, a torch.distributed group, but the active model "
            f"is {model.name!r}: pass a list of ranks, or run on a torch.distributed backend "
            "(gloo, nccl)."
        )
    if mesh.ndim != 1:
        names = mesh.mesh_dim_names or tuple(range(mesh.ndim))
        raise ValueError(
            f"group= takes a DeviceMesh of one dimension, got one of {mesh.ndim} dimensions "
            f"{tuple(names)}: pick one, e.g. group=mesh[{names[-1]!r}]."
        )
    return mesh.get_group()


def is_mesh(group: object) -> bool:
    """Whether ``group`` is a torch DeviceMesh."""
    return DeviceMesh is not None and isinstance(group, DeviceMesh)


class _Membership(enum.Enum):
    NOT_A_MEMBER = "not a member of the group"


#: what resolving a ``group=`` gives on a rank outside the group
NOT_A_MEMBER = _Membership.NOT_A_MEMBER


def resolve(model: ModelContract, group: object, cache: GroupCache | None = None) -> Any:
    """The backend group for ``group``: None for the world, NOT_A_MEMBER when this rank is
    outside it. A list, tuple or range of ranks goes through ``cache``, which makes the group
    on first use; without one (inside torch.compile: a compiled region cannot run
    ``new_group``, a collective of its own, nor trace the cache's weak proxy of the model)
    the group must exist already in ``model.groups``."""
    if group is None:
        return None
    if isinstance(group, (list, tuple, range)):
        if len(group) == 0:  # as torch's and ignite's: a group no rank belongs to
            return NOT_A_MEMBER
        resolved = model.groups.cached(group) if cache is None else cache.get(group)
        if resolved is None and cache is None:
            raise ValueError(
                f"Inside torch.compile the group of ranks {list(group)!r} must exist already "
                "(a compiled region cannot create one): call idist.new_group(ranks) once "
                "before the compiled function runs."
            )
    elif is_mesh(group):
        resolved = mesh_group(group, model)
    else:
        model._check_group(group)
        resolved = group
    return NOT_A_MEMBER if model._group_rank(resolved) < 0 else resolved


class GroupCache:
    """The groups one model created, keyed by their sorted rank tuple and options."""

    NOT_A_MEMBER = NOT_A_MEMBER

    def __init__(self, model: ModelContract) -> None:
        self._model = weakref.proxy(model)  # no cycle: groups are freed with their model
        self._groups: dict[object, Any] = {}

    def __len__(self) -> int:
        return len(self._groups)

    def resolve(self, group: object) -> Any:
        """The backend group for ``group`` (see ``resolve``), made on first use."""
        return resolve(self._model, group, self)

    def get(self, ranks: Sequence[int], **kwargs: Any) -> Any:
        """The cached group of ``ranks`` with ``kwargs``, created on first use; ``[]`` for no
        ranks (a group no rank belongs to: collectives on it give back their input); the
        group of a one-dimensional DeviceMesh is that mesh's own."""
        if is_mesh(ranks):
            if kwargs:
                raise TypeError(
                    f"new_group() of a DeviceMesh takes no options, got {sorted(kwargs)}: the "
                    "mesh's group exists already."
                )
            return mesh_group(ranks, self._model)
        key_ranks = self._validate(ranks)
        if not key_ranks:
            return []
        key: object = (key_ranks, tuple(sorted(kwargs.items())))
        try:
            hash(key)
        except TypeError:  # options that cannot be hashed (e.g. pg_options): never cached
            return self._model._make_group(key_ranks, **kwargs)
        if key not in self._groups:
            self._groups[key] = self._model._make_group(key_ranks, **kwargs)
        return self._groups[key]

    def cached(self, ranks: Sequence[int]) -> Any | None:
        """The group of ``ranks`` made before without options, or None (creates nothing)."""
        return self._groups.get((tuple(sorted(ranks)), ()))

    def clear(self) -> None:
        self._groups.clear()

    def _validate(self, ranks: object) -> tuple[int, ...]:
        if not isinstance(ranks, (list, tuple, range)):
            raise GroupArgumentError(f"Argument ranks should be list of int, got {ranks!r}.")
        world = self._model.get_world_size()
        # A huge range (range(2**40)) is refused without a walk over all of it.
        listed = () if isinstance(ranks, range) else ranks
        bad = [r for r in listed if isinstance(r, bool) or not isinstance(r, int)]
        if bad:
            raise GroupArgumentError(
                f"Argument ranks should be list of int, got {bad[0]!r} in {_shown(ranks)}."
            )
        outside = list(itertools.islice((r for r in ranks if not 0 <= r < world), _SHOWN + 1))
        if outside:
            raise ValueError(
                f"Group ranks {_shown(outside)} are outside this world of "
                f"size {world} (valid ranks: 0..{world - 1})."
            )
        if len(set(ranks)) != len(ranks):
            raise ValueError(f"Group ranks must be unique, got {list(ranks)!r}.")
        return tuple(sorted(ranks))
