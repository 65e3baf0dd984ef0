"""Retention of uploaded models: a blob idle longer than ARENAPLAN_MODEL_RETENTION_S goes,
unless a job still needs it.

A blob's idle time starts at its last upload (`service.blobs`: an upload of stored bytes touches
the file). A queued or running job needs its model, so those blobs stay whatever their age; a
done or failed job does not (a plan is served without its model, its report shows less without
it, and a resubmission uploads the model again, which restores it). Blobs no job ever needed
(requests refused after the upload) simply age out.

Instances sharing the model folder may all sweep it: removals are idempotent. The needed set is
read after the idle candidates are listed, and each candidate's age is checked again just before
it is removed, so an upload that arrives during a sweep keeps its blob (a job whose blob still
went missing fails retryably, saying to upload the model again).
"""

from __future__ import annotations

import logging
import time

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.blobs import ModelBlobs
from service.store import JobRecord, Store

log = logging.getLogger("arenaplan.service")

NEEDING_STATES = ("queued", "running")
MAX_SWEEP_INTERVAL_S = 3600.0


class ModelRetention:
    """Sweeps the model folder every so often (`sweep_when_due`), from the housekeeping thread.

    `retention_s` 0 keeps every model forever.
    """

    def __init__(self, blobs: ModelBlobs, store: Store, retention_s: float):
        self.blobs, self.store, self.retention_s = blobs, store, retention_s
        self.interval_s = min(MAX_SWEEP_INTERVAL_S, retention_s / 4)
        self._last_sweep = 0.0

    def sweep_when_due(self) -> None:
        now = time.monotonic()
        if self.retention_s <= 0 or now - self._last_sweep < self.interval_s:
            return
        self._last_sweep = now
        removed = self.sweep()
        if removed:
            log.info("removed %d model(s) idle for more than %g s: %s", len(removed),
                     self.retention_s, ", ".join(sha[:12] for sha in removed))

    def sweep(self) -> list[str]:
        """Remove the idle blobs no queued or running job needs; their sha256s."""
        cutoff = time.time() - self.retention_s
        idle = [sha for sha in self.blobs.stored() if self.blobs.idle_since(sha, cutoff)]
        if not idle:
            return []
        needed = self.needed()
        removed = []
        for sha in idle:
            if sha not in needed and self.blobs.idle_since(sha, cutoff):
                self.blobs.remove(sha)
                removed.append(sha)
        return removed

    def needed(self) -> set[str]:
        """Models of the jobs that are queued or running, in any instance."""
        with Session(self.store.engine) as session:
            return set(session.scalars(
                select(JobRecord.model_sha256).where(JobRecord.state.in_(NEEDING_STATES))
                .distinct()))
