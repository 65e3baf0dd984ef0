"""Public contract of arenaplan: pydantic v2 models for requests, graph summaries, profiles and
plans. Imports nothing else of ours; JSON Schema files generated from these models are committed
under schemas/json/ and a test keeps them in step (`python -m schemas.generate`)."""
