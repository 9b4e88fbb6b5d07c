"""History graph, sketch, shedding policies and the reinforcement-learning update.

Planned (DESIGN.md, "Overload"): match vectors, match bundles and match maps built from
unconstrained runs; a fixed-size sketch the device reads in O(1) per match node; the
policies that rank match nodes when the budget is exceeded. Not built yet.
"""
