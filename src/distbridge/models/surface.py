"""ModelSurface: what a computation model gives the code below the models, beyond its
primitives.

The algorithms and the reliability code may use of a model only the typed contract
``distbridge.model_contract.ModelContract``. Its primitives under public names are
``BackendPrimitives``'; the rest is here, and every model has it: the state the model
declares for them (the group cache, the ledger, the fast paths, the timed barriers and the
stack watcher, made on first use), the tensor round trips to where the backend works, and
the check of a root rank. ``ComputationModel`` (``models/base.py``) builds the public
collectives on top.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Final

import torch

from distbridge.algorithms import byte_view
from distbridge.algorithms.fast_path import FastPath
from distbridge.algorithms.groups import GroupCache
from distbridge.algorithms.in_place import write_back
from distbridge.models._primitives import BackendPrimitives
from distbridge.reliability.hang.ledger import CollectiveLedger, Members
from distbridge.reliability.hang.stacks import StackWatcher
from distbridge.reliability.timed_barrier import StoreBarrier, make_timed_barriers

__all__ = ["NOT_A_MEMBER", "ModelSurface"]

NOT_A_MEMBER: Final = GroupCache.NOT_A_MEMBER


class ModelSurface(BackendPrimitives):
    """The part of ``ModelContract`` a model adds to its primitives.

    Attributes:
        groups: the group cache: ``group=`` arguments resolved, groups of ranks made once.
        ledger: this rank's recent public collectives, per group (always on; read by the
            hang verdict, see ``distbridge.reliability.hang.ledger``).
        fast_all_to_all, fast_scatter, fast_gather: the kinds of tensor whose world
            collective passed every check once (``algorithms/fast_path.py``).
    """

    ledger: CollectiveLedger

    def __init__(self) -> None:
        self.groups = GroupCache(self)
        self.ledger = CollectiveLedger(self._ledger_members)
        self._timed: StoreBarrier | None = None  # made at the first timed_barriers()
        self._stack_watcher: StackWatcher | None = None  # made with them
        self.fast_all_to_all = FastPath()  # one-tensor world all_to_alls
        self.fast_scatter = FastPath()  # the out= of world scatters
        self.fast_gather = FastPath()  # world gathers with same_shape

    @abstractmethod
    def all_reduce(self, x: Any, op: str = "SUM", group: Any = None) -> Any:
        """The public all-reduce (``ComputationModel``'s), which the algorithms call to
        reduce a Python number."""

    def timed_barriers(self) -> StoreBarrier | None:
        """This model's timed barriers over its coordination store (None without one), made
        with the stack watcher beside them on first use, which must happen on every rank
        alike (making the store may take a collective)."""
        if self._timed is None:
            made = make_timed_barriers(self)
            if made is not None:
                self._timed, self._stack_watcher = made
        return self._timed

    @property
    def stack_watcher(self) -> StackWatcher | None:
        """Answers the other ranks' requests for this rank's stacks (None until the timed
        barriers are made)."""
        return self._stack_watcher

    def _ledger_members(self, group: Any) -> Members | None:
        """The ledger's key for ``group`` (not None): its global ranks, sorted; None when
        this rank is not a member."""
        if isinstance(group, list | tuple):
            members = tuple(sorted({int(r) for r in group}))
        else:
            resolved = self.groups.resolve(group)
            if resolved is NOT_A_MEMBER:
                return None
            members = tuple(sorted(self._group_members(resolved)))
        return members if self.get_rank() in members else None

    def to_placement(
        self, tensor: torch.Tensor, device: torch.device | None = None
    ) -> torch.Tensor:
        """``tensor`` on the device the backend works on (``device`` when the caller asked
        already), contiguous; itself when it is."""
        if device is None:
            device = self._placement(tensor)
        if tensor.device == device and tensor.is_contiguous():
            return tensor
        return tensor.to(device).contiguous()

    def gather_tensor(self, x: torch.Tensor, group: Any) -> torch.Tensor:
        """All-gather of tensor ``x`` (dim 0, same shape everywhere), carried as its bytes
        where the backend lacks its dtype, returned on ``x``'s device."""
        work = self.to_placement(x)
        if work.dtype in self.uncarried_dtypes:
            raw = self._do_all_gather(byte_view.as_bytes(work), group)
            rows = self._group_size(group) * work.shape[0]
            out = byte_view.from_bytes(raw, work.dtype, (rows, *work.shape[1:]))
        else:
            out = self._do_all_gather(work, group)
        return out if out.device == x.device else out.to(x.device)

    def broadcast_tensor(self, x: torch.Tensor, src: int, group: Any) -> torch.Tensor:
        """Broadcast of tensor ``x`` from global rank ``src``, written into ``x`` on the
        other ranks (carried as its bytes where the backend lacks its dtype)."""
        work = self.to_placement(x)
        if work.dtype in self.uncarried_dtypes:
            self._do_broadcast(byte_view.as_bytes(work), src, group)  # fills work in place
            out = work
        else:
            out = self._do_broadcast(work, src, group)
        # The source keeps its tensor as it is: it may be read-only (expanded, stride 0).
        return x if self.get_rank() == src else write_back(x, out)

    def check_root(self, name: str, root: object, group: Any) -> None:
        """Validate a source / destination global rank (``src``, ``dst``) for ``group``."""
        if not isinstance(root, int) or isinstance(root, bool):
            raise TypeError(f"{name} must be an int rank, got {root!r}.")
        world = self.get_world_size()
        if not 0 <= root < world:
            raise ValueError(f"{name}={root} is not a rank of this world of size {world}.")
        if group is not None and group is not NOT_A_MEMBER:
            members = self._group_members(group)
            if root not in members:
                raise ValueError(f"{name}={root} is not a member of the group {list(members)}.")

    # ---- failing together (``reliability/fail_together.py``): the native and Horovod models

    #: whether this model takes part; without it, the four methods below answer "nothing"
    fails_together: ClassVar[bool] = False

    def abort_communicator(self) -> None:
        """End this rank's part of the communicator, so that the peers' collectives fail."""
        return

    def known_failure(self) -> tuple[int, str] | None:
        """The failure note this rank's watcher has already read, if any."""
        return None

    def failure_store(self) -> Any | None:
        """The store that holds the job's failure note (any view of it), if there is one."""
        return None

    def hang_verdict(self, notes: Mapping[int, str], wait: float) -> str | None:
        """The verdict from every rank's ledger, asked through the store for up to ``wait``
        seconds (``notes``: rank -> why it cannot answer); None without one."""
        return None

    def interpose(self, name: str, call: Callable[..., Any] | None) -> None:
        """Hand this model's public collective ``name`` to ``call`` (an instance attribute
        over the class's method, so the facade's calls reach it); None: the class's method
        again. ``distbridge.testing``'s layers use it; without one nothing is on the path."""
        if call is None:
            self.__dict__.pop(name, None)
        else:
            setattr(self, name, call)

    def interposed(self, name: str) -> Callable[..., Any] | None:
        """What `interpose` put over the public collective ``name``, if anything."""
        call: Callable[..., Any] | None = self.__dict__.get(name)
        return call
