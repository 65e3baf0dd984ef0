"""Persistent state of the service (SQLAlchemy 2): models seen, plan jobs and who may see them.

A SQLite file by default, any SQLAlchemy URL by configuration (PostgreSQL in the compose file).
One row per plan id in `plan_jobs` holds the job's state machine, queued -> running -> done |
failed, its progress, and the plan JSON or the error. `plan_access` records which namespaces (API
keys) submitted a plan; only they can see it. Models themselves live on disk (`service.blobs`).

Running jobs carry an `owner` (the service instance that claimed them) and a `lease_until` that
the owner keeps pushing forward; `recover` re-queues jobs whose owner is gone. All state changes
of a running job are conditional on the owner, so a job reclaimed from a presumed-dead instance
is never finished twice.

Several instances may share one store. On SQLite every write transaction holds the database's
write lock from its start (BEGIN IMMEDIATE), so read-then-write is serial. On PostgreSQL the
rows a transaction reads before changing them are locked (SELECT ... FOR UPDATE): claiming and
recovering skip rows another instance holds (SKIP LOCKED), so instances never wait on each
other nor take the same job, and a recovery never re-queues a job another instance has just
claimed. The schema is kept by Alembic (`service.migrations`): opening a store upgrades it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

from sqlalchemy import (
    BigInteger,
    Boolean,
    Connection,
    CursorResult,
    Engine,
    Float,
    ForeignKey,
    Index,
    Integer,
    Select,
    String,
    Text,
    Update,
    create_engine,
    event,
    func,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, deferred, mapped_column, sessionmaker

from schemas.service import JobState
from service.migrations import SchemaUpgrade, upgrade_schema
from service.settings import sqlite_path

PUBLIC_NAMESPACE = "public"
STATES = ("queued", "running", "done", "failed")


class Base(DeclarativeBase):
    pass


class ModelRecord(Base):
    __tablename__ = "models"

    sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[float] = mapped_column(Float)


class JobRecord(Base):
    __tablename__ = "plan_jobs"

    plan_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    model_sha256: Mapped[str] = mapped_column(String(64), index=True)
    planner_version: Mapped[str] = mapped_column(String(64))
    request_json: Mapped[str] = deferred(mapped_column(Text))
    state: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[float] = mapped_column(Float)
    started_at: Mapped[float | None] = mapped_column(Float)
    finished_at: Mapped[float | None] = mapped_column(Float)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    owner: Mapped[str | None] = mapped_column(String(200))
    lease_until: Mapped[float | None] = mapped_column(Float)
    progress_json: Mapped[str | None] = mapped_column(Text)
    plan_json: Mapped[str | None] = deferred(mapped_column(Text))
    error_json: Mapped[str | None] = mapped_column(Text)
    error_status: Mapped[int | None] = mapped_column(Integer)
    retryable: Mapped[bool] = mapped_column(Boolean, default=False)
    solve_seconds: Mapped[float | None] = mapped_column(Float)
    note: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (Index("ix_plan_jobs_state_created", "state", "created_at"),)


class AccessRecord(Base):
    __tablename__ = "plan_access"

    namespace: Mapped[str] = mapped_column(String(200), primary_key=True)
    plan_id: Mapped[str] = mapped_column(
        String(32), ForeignKey("plan_jobs.plan_id"), primary_key=True
    )
    created_at: Mapped[float] = mapped_column(Float)


@dataclass(frozen=True)
class JobView:
    """A detached snapshot of a job (everything but the request and the plan)."""

    plan_id: str
    model_sha256: str
    planner_version: str
    state: JobState
    created_at: float
    started_at: float | None
    finished_at: float | None
    attempts: int
    progress: dict | None
    error: dict | None
    error_status: int | None
    retryable: bool
    solve_seconds: float | None
    note: str | None

    @property
    def final(self) -> bool:
        return self.state in ("done", "failed")

    @staticmethod
    def of(row: JobRecord) -> JobView:
        return JobView(
            plan_id=row.plan_id, model_sha256=row.model_sha256,
            planner_version=row.planner_version,
            state=cast(JobState, row.state),  # this module writes only the four states
            created_at=row.created_at,
            started_at=row.started_at, finished_at=row.finished_at, attempts=row.attempts,
            progress=json.loads(row.progress_json) if row.progress_json else None,
            error=json.loads(row.error_json) if row.error_json else None,
            error_status=row.error_status, retryable=row.retryable,
            solve_seconds=row.solve_seconds, note=row.note,
        )


@dataclass(frozen=True)
class Claim:
    """A job this instance took off the queue to solve."""

    plan_id: str
    model_sha256: str
    request_json: str
    attempts: int


@dataclass(frozen=True)
class Submitted:
    job: JobView
    outcome: str  # "new", "existing" or "requeued"


@dataclass(frozen=True)
class Recovered:
    requeued: list[str]
    failed: list[str]


_Query = TypeVar("_Query", bound=Select[Any])  # a query of jobs, kept as precise as it came


class QueueFullError(Exception):
    """More jobs are queued than the service accepts."""


class Store:
    """The repository: every query the service makes, each in its own short transaction."""

    def __init__(self, database_url: str):
        self.database_url = database_url
        db_file = sqlite_path(database_url)
        if db_file is not None:
            Path(db_file).parent.mkdir(parents=True, exist_ok=True)
            engine = create_engine(
                database_url, connect_args={"timeout": 30, "check_same_thread": False}
            )
            _use_sqlite_wal_and_immediate_writes(engine)
        else:
            engine = create_engine(database_url, pool_pre_ping=True)
        self.engine = engine
        self._read = sessionmaker(bind=engine, expire_on_commit=False)
        self._write = sessionmaker(
            bind=engine.execution_options(arenaplan_write=True), expire_on_commit=False
        )
        try:
            self.schema: SchemaUpgrade = upgrade_schema(engine)
        except BaseException:
            engine.dispose()  # a store refused (unknown schema, unreachable) holds no connection
            raise

    def close(self) -> None:
        self.engine.dispose()

    @contextmanager
    def _reading(self) -> Iterator[Session]:
        with self._read() as session:
            yield session

    @contextmanager
    def _writing(self) -> Iterator[Session]:
        with self._write() as session, session.begin():
            yield session

    def ping(self) -> None:
        with self._reading() as session:
            session.execute(select(1))

    # --- models and submissions -------------------------------------------------------------

    def record_model(self, sha256: str, size_bytes: int) -> None:
        try:
            with self._writing() as session:
                if session.get(ModelRecord, sha256) is None:
                    session.add(ModelRecord(sha256=sha256, size_bytes=size_bytes,
                                            created_at=time.time()))
        except IntegrityError:
            pass  # recorded concurrently by another request

    def submit(
        self, plan_id: str, model_sha256: str, planner_version: str, request_json: str,
        namespace: str | None, max_queued: int,
    ) -> Submitted:
        """Queue a job unless it exists; grant `namespace` access either way.

        A failed job that may succeed on another try (time limit, crash, interruption) goes
        back to the queue; one that failed on its input stays failed (same input, same answer).
        """
        for _ in range(3):  # an identical submission may race us to the insert
            try:
                return self._submit_once(plan_id, model_sha256, planner_version, request_json,
                                         namespace or PUBLIC_NAMESPACE, max_queued)
            except IntegrityError:
                continue
        raise RuntimeError(f"could not record plan {plan_id}: concurrent inserts kept failing")

    def _submit_once(
        self, plan_id: str, model_sha256: str, planner_version: str, request_json: str,
        namespace: str, max_queued: int,
    ) -> Submitted:
        now = time.time()
        with self._writing() as session:
            row = session.get(JobRecord, plan_id, with_for_update=True)
            outcome = "existing"
            if row is None or (row.state == "failed" and row.retryable):
                queued = session.execute(
                    select(func.count()).select_from(JobRecord).where(JobRecord.state == "queued")
                ).scalar_one()
                if queued >= max_queued:
                    raise QueueFullError(f"{queued} jobs are queued")
            if row is None:
                row = JobRecord(
                    plan_id=plan_id, model_sha256=model_sha256, planner_version=planner_version,
                    request_json=request_json, state="queued", created_at=now, attempts=0,
                    retryable=False,
                )
                session.add(row)
                outcome = "new"
            elif row.state == "failed" and row.retryable:
                row.state, row.attempts, row.error_json, row.error_status = "queued", 0, None, None
                row.progress_json, row.started_at, row.finished_at = None, None, None
                row.owner, row.lease_until, row.retryable = None, None, False
                row.note = "re-queued: resubmitted after a failure that may not repeat"
                outcome = "requeued"
            session.flush()
            if session.get(AccessRecord, (namespace, plan_id)) is None:
                session.add(AccessRecord(namespace=namespace, plan_id=plan_id, created_at=now))
            session.flush()
            return Submitted(JobView.of(row), outcome)

    # --- reads ------------------------------------------------------------------------------

    def _visible(self, query: _Query, namespace: str | None) -> _Query:
        if namespace is None:
            return query
        return query.where(
            JobRecord.plan_id.in_(
                select(AccessRecord.plan_id).where(AccessRecord.namespace == namespace)
            )
        )

    def get(self, plan_id: str, namespace: str | None) -> JobView | None:
        with self._reading() as session:
            row = session.scalar(
                self._visible(select(JobRecord).where(JobRecord.plan_id == plan_id), namespace)
            )
            return JobView.of(row) if row else None

    def plan_json(self, plan_id: str) -> str | None:
        with self._reading() as session:
            return session.scalar(select(JobRecord.plan_json).where(JobRecord.plan_id == plan_id))

    def request_json(self, plan_id: str) -> str | None:
        with self._reading() as session:
            return session.scalar(
                select(JobRecord.request_json).where(JobRecord.plan_id == plan_id)
            )

    def list(self, namespace: str | None, model_sha256: str | None, limit: int) -> list[JobView]:
        query = select(JobRecord).order_by(JobRecord.created_at.desc()).limit(limit)
        if model_sha256:
            query = query.where(JobRecord.model_sha256 == model_sha256)
        with self._reading() as session:
            return [JobView.of(row) for row in session.scalars(self._visible(query, namespace))]

    def counts_by_state(self) -> dict[str, int]:
        with self._reading() as session:
            rows = session.execute(
                select(JobRecord.state, func.count()).group_by(JobRecord.state)
            ).all()
        counts = dict.fromkeys(STATES, 0)
        counts.update({state: n for state, n in rows})
        return counts

    # --- the worker side --------------------------------------------------------------------

    def claim_next(self, owner: str, lease_s: float) -> Claim | None:
        """Take the oldest queued job, or None. Safe against other instances claiming too: the
        row is locked as it is read, and rows another instance is claiming are passed over."""
        with self._writing() as session:
            row = session.scalar(
                select(JobRecord).where(JobRecord.state == "queued")
                .order_by(JobRecord.created_at, JobRecord.plan_id).limit(1)
                .with_for_update(skip_locked=True)
            )
            if row is None:
                return None
            now = time.time()
            row.state, row.owner, row.lease_until = "running", owner, now + lease_s
            row.started_at, row.finished_at, row.progress_json = now, None, None
            row.attempts += 1
            return Claim(row.plan_id, row.model_sha256, row.request_json, row.attempts)

    def heartbeat(self, owner: str, plan_ids: Sequence[str], lease_s: float) -> None:
        if not plan_ids:
            return
        with self._writing() as session:
            session.execute(
                update(JobRecord)
                .where(JobRecord.plan_id.in_(plan_ids), JobRecord.owner == owner,
                       JobRecord.state == "running")
                .values(lease_until=time.time() + lease_s)
            )

    def set_progress(self, plan_id: str, owner: str, progress: dict) -> None:
        with self._writing() as session:
            session.execute(
                update(JobRecord)
                .where(JobRecord.plan_id == plan_id, JobRecord.owner == owner,
                       JobRecord.state == "running")
                .values(progress_json=json.dumps(progress))
            )

    def finish(
        self, plan_id: str, owner: str, *, solve_seconds: float, plan_json: str | None = None,
        error: dict | None = None, error_status: int | None = None, retryable: bool = False,
    ) -> bool:
        """Record the outcome of a run this instance owns; False when it no longer owns it."""
        values: dict = {"finished_at": time.time(), "solve_seconds": solve_seconds,
                        "lease_until": None}
        if plan_json is not None:
            values.update(state="done", plan_json=plan_json, error_json=None, error_status=None)
        else:
            values.update(state="failed", error_json=json.dumps(error),
                          error_status=error_status, retryable=retryable)
        with self._writing() as session:
            return bool(_changed_rows(
                session,
                update(JobRecord)
                .where(JobRecord.plan_id == plan_id, JobRecord.owner == owner,
                       JobRecord.state == "running")
                .values(**values),
            ))

    def release_owned(self, owner: str, plan_ids: Sequence[str]) -> int:
        """Graceful shutdown: put this instance's running jobs back in the queue, uncounted."""
        if not plan_ids:
            return 0
        with self._writing() as session:
            return _changed_rows(
                session,
                update(JobRecord)
                .where(JobRecord.plan_id.in_(plan_ids), JobRecord.owner == owner,
                       JobRecord.state == "running")
                .values(state="queued", owner=None, lease_until=None,
                        attempts=JobRecord.attempts - 1,
                        note="re-queued: the service stopped while it was solving"),
            )

    def recover(self, owner_is_gone: Callable[[str | None], bool], max_attempts: int) -> Recovered:
        """Re-queue running jobs whose instance is gone (lease expired or process dead).

        A job that has already been interrupted `max_attempts` times is marked failed instead,
        so a model that takes the whole service down cannot do so forever. The running rows are
        locked as they are read (those another instance holds wait for the next round), so the
        state judged is the state changed.
        """
        now = time.time()
        requeued: list[str] = []
        failed: list[str] = []
        with self._writing() as session:
            rows = session.scalars(
                select(JobRecord).where(JobRecord.state == "running")
                .with_for_update(skip_locked=True)
            ).all()
            for row in rows:
                expired = row.lease_until is None or row.lease_until < now
                if not (expired or owner_is_gone(row.owner)):
                    continue
                if row.attempts >= max_attempts:
                    row.state, row.finished_at, row.retryable = "failed", now, True
                    row.error_status = 409
                    row.error_json = json.dumps({
                        "error": "interrupted",
                        "detail": f"the service stopped while solving this plan, "
                        f"{row.attempts} time(s) (the last in phase "
                        f"{_phase(row.progress_json)}); it is not retried again "
                        "automatically: resubmit it, maybe with a shorter time limit",
                        "plan_id": row.plan_id,
                    })
                    failed.append(row.plan_id)
                else:
                    row.state = "queued"
                    row.note = (f"re-queued: interrupted, its service instance stopped during "
                                f"attempt {row.attempts}")
                    requeued.append(row.plan_id)
                row.owner, row.lease_until = None, None
        return Recovered(requeued, failed)


def _changed_rows(session: Session, statement: Update) -> int:
    """Rows an UPDATE matched. `Session.execute` is typed as returning a plain Result; for an
    UPDATE it is a CursorResult, which carries the count."""
    return cast(CursorResult[Any], session.execute(statement)).rowcount


def _phase(progress_json: str | None) -> str:
    if not progress_json:
        return "start"
    return str(json.loads(progress_json).get("phase", "start"))


def _use_sqlite_wal_and_immediate_writes(engine: Engine) -> None:
    """WAL lets readers run beside the writer; writes take the lock up front (BEGIN IMMEDIATE)
    so two read-then-write transactions never deadlock on the upgrade."""

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _record: object) -> None:
        dbapi_connection.isolation_level = None  # transactions are begun below
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(connection: Connection) -> None:
        write = connection.get_execution_options().get("arenaplan_write", False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")
