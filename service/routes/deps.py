"""FastAPI dependencies: the objects each request needs, taken from the running app.

They are `async def`: FastAPI runs a plain `def` dependency in its thread pool, a hop per
dependency per request that costs more than these lookups.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from service.blobs import ModelBlobs
from service.metrics import ServiceMetrics
from service.plan_service import PlanService
from service.store import Store


async def get_plans(request: Request) -> PlanService:
    return request.app.state.plans


async def get_blobs(request: Request) -> ModelBlobs:
    return request.app.state.blobs


async def get_store(request: Request) -> Store:
    return request.app.state.store


async def get_metrics(request: Request) -> ServiceMetrics:
    return request.app.state.metrics


PlansDep = Annotated[PlanService, Depends(get_plans)]
BlobsDep = Annotated[ModelBlobs, Depends(get_blobs)]
StoreDep = Annotated[Store, Depends(get_store)]
MetricsDep = Annotated[ServiceMetrics, Depends(get_metrics)]
