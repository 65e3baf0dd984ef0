"""The planning web service (FastAPI): thin, it calls the planner and stores results."""
