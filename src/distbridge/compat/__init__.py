"""Compatibility modules: other libraries' import paths, mirrored over distbridge's facade.

- ``distbridge.compat.ignite_utils``, ``ignite_comp_models``, ``ignite_launcher``:
  ``ignite.distributed.utils``, ``.comp_models`` and ``.launcher`` (also importable at
  ignite's own paths, ``distbridge.utils``, ``distbridge.comp_models``, ``distbridge.launcher``).
- ``distbridge.compat.detectron2``: detectron2's ``detectron2.utils.comm``.
- ``distbridge.compat.detectron2_launch``: detectron2's ``detectron2.engine.launch``.

Mirrors only: each module binds names to objects written elsewhere (the facade and its
modules) and defines none of its own, beyond a module ``__getattr__`` for a module variable.
They sit above the facade: they import ``distbridge`` and nothing in distbridge imports them.
"""
