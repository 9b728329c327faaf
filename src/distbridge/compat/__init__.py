"""Compatibility modules: other libraries' import paths, mirrored over distbridge's facade:
``ignite_utils``, ``ignite_comp_models`` and ``ignite_launcher`` (``ignite.distributed.utils``,
``.comp_models`` and ``.launcher``, also at ignite's own paths ``distbridge.utils``, ...),
``detectron2`` (``detectron2.utils.comm``) and ``detectron2_launch`` (``.engine.launch``).

Mirrors only: each module binds names to objects written elsewhere (the facade and its
modules) and defines none of its own, beyond a module ``__getattr__`` for a module variable.
They sit above the facade: they import ``distbridge`` and nothing in distbridge imports them.
"""
