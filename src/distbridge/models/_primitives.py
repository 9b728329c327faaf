"""BackendPrimitives: the one interface between a backend and everything else.

A backend implements the abstract methods: how to find or create its context, where the
process sits (``_layout``, ``_device``), and the tensor primitives (the ``_do_*`` hooks; the
group queries too, unless its groups list their ranks in ``ranks``). The ops many backends
lack (reduce, gather, scatter, reduce-scatter, all-to-all, in-place all-gather) have
default emulations over the required ones, here: exact, but moving more data than the
native op would (see bench/README.md).

Here too is what the code below the models uses of a model (``ModelContract``) besides the
hooks: the state every model keeps, the tensor round trips, failing together.
``ComputationModel`` (``models/base.py``) builds the public collectives on top.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Final

import torch
from typing_extensions import Self

from distbridge._types import SpawnResult
from distbridge.algorithms import byte_view
from distbridge.algorithms.checks import FastPath, write_back
from distbridge.algorithms.groups import GroupCache
from distbridge.errors import BackendUnavailableError
from distbridge.models._failing_together import FailingTogether
from distbridge.models._layout import Layout
from distbridge.reliability.debug import debug_flag
from distbridge.reliability.hang.ledger import CollectiveLedger, Members
from distbridge.reliability.hang.stacks import StackWatcher, while_current
from distbridge.reliability.timed_barrier import CompletedBarrier, StoreBarrier

__all__ = ["NOT_A_MEMBER", "BackendPrimitives"]

NOT_A_MEMBER: Final = GroupCache.NOT_A_MEMBER
_CPU = torch.device("cpu")


class BackendPrimitives(ABC):
    """What a backend supplies, and what every model gives the code below the models.

    Attributes:
        name: the ``model_name()`` string, e.g. ``"native-dist"``.
        backends: the backend strings this model runs.
        priority: detection order, highest first.
        context_module: a module that must be imported before this model can have a
            context (e.g. "horovod.torch"); until it is, the serial model skips its probe.
        spawn_options: keyword arguments ``spawn`` accepts besides ``backend``.
        spawn_takes_activate: whether ``spawn`` takes the facade's ``activate=``; a model
            that does not gets the keywords it always got, and its workers' contexts are
            adopted.
        uncarried_dtypes: dtypes the backend cannot move or reduce; they are carried
            bit-exactly by the base class.
        functional_collectives: whether the groups are torch.distributed process groups,
            so that inside torch.compile the tensor collectives trace as torch's functional
            ones (``algorithms/traceable.py``); other models run their eager path there.
        reduce_ops: the reductions the model accepts (AVG is emulated unless
            ``_native_avg``).

    The state every model keeps (``groups``, ``ledger``, the fast paths) is ``ModelContract``'s
    to describe.
    """

    name: ClassVar[str]
    backends: ClassVar[tuple[str, ...]]
    priority: ClassVar[int] = 0
    context_module: ClassVar[str | None] = None
    spawn_options: ClassVar[tuple[str, ...]] = ()
    spawn_takes_activate: ClassVar[bool] = False
    uncarried_dtypes: ClassVar[frozenset[torch.dtype]] = frozenset()
    functional_collectives: ClassVar[bool] = False
    reduce_ops: ClassVar[frozenset[str]] = frozenset(
        ("SUM", "PRODUCT", "MIN", "MAX", "AND", "OR", "AVG")
    )

    # ---- class level: availability, adoption, creation, launching -------------------------

    @classmethod
    @abstractmethod
    def is_available(cls) -> bool:
        """Whether this model's dependency is installed and usable."""

    @classmethod
    def available_backends(cls) -> tuple[str, ...]:
        """The backends of this model that can run on this machine."""
        return cls.backends if cls.is_available() else ()

    @classmethod
    def unavailable_reason(cls, backend: str) -> str | None:
        """Why ``backend`` cannot run here, or None when it can."""
        return None if backend in cls.available_backends() else f"{cls.__name__} is unavailable"

    @classmethod
    @abstractmethod
    def has_context(cls) -> bool:
        """Cheap, allocation-free probe: does a context this model could adopt exist?"""

    @classmethod
    @abstractmethod
    def from_context(cls) -> Self | None:
        """Adopt a live context created outside distbridge; never communicates."""

    @classmethod
    @abstractmethod
    def from_backend(cls, backend: str, **kwargs: Any) -> Self:
        """Create a context for ``backend`` (the work of ``initialize``)."""

    @classmethod
    def spawn(
        cls,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs_dict: Mapping[str, Any],
        nproc_per_node: int,
        **kwargs: Any,
    ) -> SpawnResult:
        """Start ``nproc_per_node`` workers running ``fn(local_rank, *args, **kwargs_dict)``.

        The facade passes ``backend=``, and ``activate=`` to a model whose
        ``spawn_takes_activate`` is True: a context-manager factory that pickles by
        reference; each worker runs ``fn`` inside ``activate(model)``, so that the facade's
        functions use the worker's own model. Other keywords are the model's spawn options,
        checked here; ``_launcher`` says which function of ``distbridge.launch`` starts the
        workers.
        """
        given = {"backend", "activate"} if cls.spawn_takes_activate else {"backend"}
        unknown = sorted(set(kwargs) - given - set(cls.spawn_options))
        if unknown:
            raise TypeError(
                f"spawn() got unexpected keyword arguments {unknown}; the {cls.name} model "
                f"takes {', '.join(cls.spawn_options) or 'none'}."
            )
        launch = cls._launcher(kwargs)
        return launch(cls.from_backend, fn, args, kwargs_dict, nproc_per_node, **kwargs)

    @classmethod
    def _launcher(cls, options: dict[str, Any]) -> Callable[..., SpawnResult]:
        """What starts this model's workers for the spawn ``options``; it takes
        ``(make_model, fn, args, kwargs_dict, nproc_per_node, **options)``, and may drop from
        ``options`` what its launcher does not take. Default (a model that starts no workers,
        as the serial one): ValueError."""
        raise ValueError(
            f"The {cls.name} model cannot spawn processes; name a backend such as 'gloo'."
        )

    @classmethod
    def _check_init(
        cls, backend: str, options: Mapping[str, Any], takes: tuple[str, ...], note: str = ""
    ) -> bool | None:
        """What ``from_backend`` checks before it starts anything, in this order: the keywords
        (``takes``; ``note`` ends the message), ``debug=`` (returned, for `_set_debug`), and
        that ``backend`` can run here."""
        unknown = sorted(set(options) - set(takes))
        if unknown:
            raise TypeError(
                f"initialize({backend!r}) got unexpected keyword arguments {unknown}; the "
                f"{cls.name} model takes {', '.join(takes)}{note}."
            )
        flag = debug_flag(options.get("debug"))
        reason = cls.unavailable_reason(backend) if backend in cls.backends else "unknown"
        if reason is not None:
            raise BackendUnavailableError(f"Backend {backend!r} is not available: {reason}.")
        return flag

    _layout: Layout  # where this process sits; set by every model
    _device: torch.device  # the device it computes on
    #: its part in failing together (``reliability/fail_together.py``): the native and
    #: Horovod models make one; None: the model does not fail together
    together: FailingTogether | None = None
    _store: Any = None  # the coordination store (see `_coordination_store`)

    def __init__(self) -> None:
        self.groups = GroupCache(self)
        self.ledger = CollectiveLedger(self._ledger_members)
        self._timed: StoreBarrier | None = None  # made at the first timed_barriers()
        #: answers the other ranks' requests for this rank's stacks (made with the timed barriers)
        self.stack_watcher: StackWatcher | None = None
        self.fast_all_to_all = FastPath()  # one-tensor world all_to_alls
        self.fast_scatter = FastPath()  # the out= of world scatters
        self.fast_gather = FastPath()  # world gathers with same_shape

    # ---- instance: where am I --------------------------------------------------------------

    @abstractmethod
    def is_current(self) -> bool:
        """Cheap check that this model's context is still the live one."""

    @abstractmethod
    def backend(self) -> str | None:
        """The backend string, None for the serial model."""

    def get_rank(self) -> int:
        """This process's rank in the job."""
        return self._layout.rank

    def get_world_size(self) -> int:
        """The number of processes in the job."""
        return self._layout.world_size

    def get_local_rank(self) -> int:
        """This process's index on its machine."""
        return self._layout.local_rank

    def get_nproc_per_node(self) -> int:
        """Processes per machine."""
        return self._layout.nproc_per_node

    def get_nnodes(self) -> int:
        """Machines in the job."""
        return self._layout.nnodes

    def get_node_rank(self) -> int:
        """This machine's index in the job."""
        return self._layout.node_rank

    def device(self) -> torch.device:
        """The device this process computes on."""
        return self._device

    def set_local_rank(self, index: int) -> None:
        """Take ``index`` as the local rank (and ``<accelerator>:<index>`` as the device on
        an accelerator): ``idist.set_local_rank``."""
        self._layout = self._layout.with_local_rank(index)
        if self._device.type != "cpu":
            self._device = torch.device(self._device.type, index)

    @abstractmethod
    def finalize(self) -> None:
        """Tear down the context this model created and undo its side effects. A model with
        peers ends its override with this: it forgets the groups and the coordination store."""
        self.groups.clear()
        self._store = None

    # ---- primitives a backend supplies -------------------------------------------------------

    def _collective_device(self) -> torch.device:
        """Where numbers, strings and headers are encoded for this backend's collectives.
        Default: the CPU."""
        return _CPU

    def _number_device(self, dtype: torch.dtype) -> torch.device:
        """Where ``all_reduce`` of a Python number builds its one-element ``dtype`` tensor
        (float64 or int64). Default: the collective device."""
        return self._collective_device()

    def _number_value(self, tensor: torch.Tensor) -> Any:
        """The Python scalar held by the reduced one-element tensor of a number."""
        return tensor.item()

    def _native_avg(self) -> bool:
        """Whether the backend averages itself; otherwise AVG is SUM divided by the group size."""
        return False

    def _placement(self, tensor: torch.Tensor) -> torch.device:
        """The device on which the backend can reduce ``tensor`` (default: the collective one)."""
        return self._collective_device()

    @abstractmethod
    def _do_all_reduce(self, tensor: torch.Tensor, op: str, group: Any) -> torch.Tensor:
        """Reduce ``tensor`` (contiguous, on ``_placement``) with canonical ``op``; may work in
        place and return ``tensor``."""

    @abstractmethod
    def _do_all_gather(self, tensor: torch.Tensor, group: Any) -> torch.Tensor:
        """Concatenate every member's ``tensor`` (same shape everywhere) along dim 0."""

    @abstractmethod
    def _do_broadcast(self, tensor: torch.Tensor, src: int, group: Any) -> torch.Tensor:
        """Fill ``tensor`` with global rank ``src``'s data; may work in place."""

    @abstractmethod
    def _do_barrier(self, group: Any) -> None:
        """Block until every member of ``group`` arrives."""

    def _do_barrier_with(self, group: Any, async_op: bool, device_ids: list[int] | None) -> Any:
        """A barrier with torch.distributed's options: the handle of an ``async_op`` barrier,
        else None. Default: ``_do_barrier``, ``device_ids`` ignored, a finished handle."""
        self._do_barrier(group)
        return CompletedBarrier() if async_op else None

    @abstractmethod
    def _make_group(self, ranks: tuple[int, ...], **kwargs: Any) -> Any:
        """Create a group of ``ranks`` (sorted, unique, validated); every rank calls this."""

    @abstractmethod
    def _check_group(self, group: object) -> None:
        """TypeError unless ``group`` is a group object of this backend."""

    # The group queries: a backend answers ``_group_members`` (default: a group that lists
    # its global ranks in ``ranks``, as Horovod's process sets and XLA's groups do); the
    # other two read it (the native model asks torch for the rank, without the list).

    def _group_members(self, group: Any) -> tuple[int, ...]:
        """Global ranks of the members of ``group`` (None: the world), in group-rank order."""
        return tuple(range(self._layout.world_size)) if group is None else tuple(group.ranks)

    def _group_size(self, group: Any) -> int:
        """Number of ranks in ``group`` (None: the world)."""
        return self._layout.world_size if group is None else len(self._group_members(group))

    def _group_rank(self, group: Any) -> int:
        """This process's rank within ``group`` (None: the world); -1 if not a member."""
        rank = self._layout.rank
        if group is None:
            return rank
        members = self._group_members(group)
        return members.index(rank) if rank in members else -1

    # ---- primitives with a default emulation (override where the backend has the op) ---------

    def _do_reduce(self, tensor: torch.Tensor, dst: int, op: str, group: Any) -> torch.Tensor:
        """Reduce onto global rank ``dst``; the result only matters there. Default: all-reduce."""
        return self._do_all_reduce(tensor, op, group)

    def _do_gather(self, tensor: torch.Tensor, dst: int, group: Any) -> list[torch.Tensor] | None:
        """Every member's ``tensor`` (same shape everywhere) on ``dst``; None elsewhere.
        Default: all-gather (every rank receives everything: fine for small worlds)."""
        stacked = self._do_all_gather(tensor.unsqueeze(0).contiguous(), group)
        return list(stacked.unbind(0))

    def _do_scatter(
        self, chunks: list[torch.Tensor] | None, out: torch.Tensor, src: int, group: Any
    ) -> torch.Tensor:
        """Fill ``out`` with ``chunks[group rank]`` from ``src`` (same shapes); return it.
        Default: one broadcast of every chunk; each rank keeps its own."""
        size = self._group_size(group)
        stacked = torch.stack(chunks) if chunks is not None else out.new_empty((size, *out.shape))
        stacked = self._do_broadcast(stacked, src, group)
        return stacked[self._group_rank(group)].clone()

    def _do_reduce_scatter(self, tensor: torch.Tensor, op: str, group: Any) -> torch.Tensor:
        """Chunk ``group rank`` of the reduction of ``tensor`` split along dim 0; must not modify
        ``tensor``. Default: all-reduce of a copy, then this rank's chunk."""
        full = self._do_all_reduce(tensor.clone(), op, group)
        return full.chunk(self._group_size(group))[self._group_rank(group)].clone()

    def _do_all_to_all(
        self, data: torch.Tensor, in_splits: list[int], out_splits: list[int], group: Any
    ) -> torch.Tensor:
        """Flat all-to-all: send ``data.split(in_splits)[j]`` to group rank j, return what every
        rank sent here, concatenated (``out_splits`` long). Default: all-gathers, of every
        rank's split table, then of every padded buffer."""
        size, me = self._group_size(group), self._group_rank(group)
        header = torch.tensor(
            [data.numel(), *in_splits], dtype=torch.int64, device=self._collective_device()
        )
        table = self._do_all_gather(header, group).view(size, size + 1).cpu()
        longest = int(table[:, 0].max())
        padded = data.new_zeros(longest)
        padded[: data.numel()] = data
        everything = self._do_all_gather(padded, group).view(size, longest)
        pieces = []
        for sender in range(size):
            start = int(table[sender, 1 : 1 + me].sum())  # what the sender sends to ranks before me
            pieces.append(everything[sender, start : start + out_splits[sender]])
        return torch.cat(pieces) if pieces else data.new_empty(0)

    def _do_all_to_all_even(self, tensor: torch.Tensor, group: Any) -> torch.Tensor:
        """All-to-all of a contiguous ``tensor`` whose dim 0 splits into group-size equal
        chunks: chunk j to group rank j; returns a new tensor of its shape whose chunk j came
        from rank j. Default: the flat ``_do_all_to_all``, viewed back in shape."""
        size = self._group_size(group)
        splits = [tensor.numel() // size] * size
        return self._do_all_to_all(tensor.reshape(-1), splits, splits, group).view(tensor.shape)

    def _do_all_gather_into(self, out: torch.Tensor, tensor: torch.Tensor, group: Any) -> None:
        """All-gather ``tensor`` into ``out`` (group size times longer). ``tensor`` may be this
        rank's own slot of ``out``. Default: ``_do_all_gather`` and a copy."""
        out.copy_(self._do_all_gather(tensor, group).reshape(out.shape))

    def _coordination_store(self) -> Any | None:
        """A ``torch.distributed.Store`` the whole world shares beside the communicator (it
        works while a collective is wedged; keys under ``distbridge/``), made on first use on
        every rank alike (it may take a collective), while the context is live, and kept until
        ``finalize``. Without peers: None."""
        if self._store is None and self.get_world_size() > 1 and self.is_current():
            self._store = self._make_coordination_store()
        return self._store

    def _make_coordination_store(self) -> Any | None:
        """Make the coordination store, for a world of several ranks. Default: None."""
        return None

    def _object_transport(self, group: Any) -> tuple[Any, torch.device]:
        """The group and device that carry pickled objects for ``group``. Default: the group
        itself on the collective device; NCCL overrides it with a CPU (gloo) group."""
        return group, self._collective_device()

    def _engine_trace(self, limit: int) -> dict[str, Any] | None:
        """For the hang report, the last ``limit`` entries per group of the engine's own record
        of its collectives (torch's flight recorder): ``{"source": ..., "entries": [{"seq",
        "op", "group", "what", "state"}, ...]}``, or ``{"source": ..., "note": why not}``.
        Default: None (no such record)."""
        return None

    # ---- the rest of the contract: state, round trips, failing together ---------------------

    @abstractmethod
    def all_reduce(self, x: Any, op: str = "SUM", group: Any = None) -> Any:
        """The public all-reduce (``ComputationModel``'s), which the algorithms call to
        reduce a Python number."""

    def timed_barriers(self) -> StoreBarrier | None:
        """This model's timed barriers over its coordination store (None without one), made
        with the stack watcher beside them on first use, which must happen on every rank
        alike (making the store may take a collective)."""
        if self._timed is None:
            store = self._coordination_store()
            if store is not None:
                self._timed = StoreBarrier(store, self)
                self.stack_watcher = StackWatcher(
                    store, self.get_rank(), while_current(self.is_current)
                )
        return self._timed

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

    def abort_communicator(self) -> None:
        """End this rank's part of the communicator, so that the peers' collectives fail."""
        return

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
