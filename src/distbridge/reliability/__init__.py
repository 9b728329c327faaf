"""No silent hangs: the coordination store, timed barriers, the debug mode and its
fingerprints, fail-together (failure notes, the watcher, cutting gloo connections) and
stack dumps.

Built on `distbridge.algorithms` (the group cache, the codec); used by the models and
the spawners; never imports a model or the facade.
"""
