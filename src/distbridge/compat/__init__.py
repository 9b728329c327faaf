"""Compatibility modules: other libraries' distributed helpers, built on distbridge's facade.

- ``distbridge.compat.detectron2``: detectron2's ``detectron2.utils.comm``.

They sit at the facade's level: they import ``distbridge`` and nothing below it imports them.
"""
