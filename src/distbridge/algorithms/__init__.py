"""The collective algorithms, written once over a backend's primitives.

What every computation model shares: how values, shapes and Python objects travel
through tensor collectives (codec, carriers, values, shape rows, object frames), the
collectives built from primitives (reduce, gather, scatter, reduce-scatter, all-to-all,
object collectives), the exact fold, the fast paths and the group cache. Nothing here
knows which backend runs it, and nothing here imports a model, the reliability layer or
the facade.
"""
