"""Write the JSON Schema of every public model to schemas/json/ (`python -m schemas.generate`).

The committed files are what other tools (CI jobs, clients in other languages) read; a test
regenerates them in memory and fails when they drift from the pydantic models.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pydantic import BaseModel

from schemas.graph import GraphSummary
from schemas.plan import Plan, PlanRequest
from schemas.profile import Profile
from schemas.service import ApiError, PlanList, PlanStatus

PUBLIC_MODELS: tuple[type[BaseModel], ...] = (
    GraphSummary, Profile, PlanRequest, Plan, PlanStatus, PlanList, ApiError,
)
SCHEMA_DIR = Path(__file__).parent / "json"


def schema_files() -> dict[str, str]:
    """File name -> JSON text for every public model."""
    return {
        f"{model.__name__}.json": json.dumps(model.model_json_schema(), indent=2, sort_keys=True)
        + "\n"
        for model in PUBLIC_MODELS
    }


def main() -> int:
    SCHEMA_DIR.mkdir(exist_ok=True)
    for name, text in schema_files().items():
        (SCHEMA_DIR / name).write_text(text)
        print(f"wrote {SCHEMA_DIR / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
