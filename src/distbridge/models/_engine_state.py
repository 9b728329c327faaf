"""What this process's engines have been through, which outlives any model object.

The facade's own state (which model is active) is in ``distbridge._state``, above the
models; these are the models' facts about the engines, kept here rather than on the
model classes so that every piece of process-wide mutable state of the models is in one
place. Each backend reads and writes only its own fields.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["EngineState", "engines"]


@dataclass
class EngineState:
    """Facts about the engines of this process, since it started."""

    #: how often this process called hvd.init() through distbridge (each init gets its
    #: own HOROVOD_HOSTNAME, see HorovodModel)
    horovod_initializations: int = 0
    #: whether a Horovod shutdown here finalized MPI, which cannot start again
    mpi_finalized: bool = False
    #: whether this process called finalize() inside an xmp.spawn replica, whose runtime
    #: cannot be torn down: until initialize() runs again, the replica is not adopted again
    xla_left: bool = False


engines = EngineState()
