"""Plans: a schedule turned into a `schemas.Plan` (builder), and the independent validator.

The validator shares no code with the solvers or their memory model: it replays what the plan
declares against the graph IR.
"""
