"""A persistent SQLite cache of op measurements, shared by every profiling run on a machine.

Key: sha256 of the op signature (planner.profile.signature), the execution provider, the intra-op
thread count, the onnxruntime version, the fingerprint of the machine (CPU model, core count,
GPU name of the device), the clock and the timing rule's revision (planner.profile.timing).
Unsupported results are cached too, so a second run does not retry them.

The file may be used by several processes at once: WAL journal mode, a busy timeout, and every
read or write is its own short transaction.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sqlite3
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from planner.cache_dir import cache_dir
from planner.errors import InvalidInputError
from planner.profile.timing import METHOD_REVISION

CACHE_FILE_NAME = "profile-cache.sqlite"
QUERY_KEYS = 500  # keys per lookup query (SQLite allows 999 parameters in older builds)
_SCHEMA = """
CREATE TABLE IF NOT EXISTS op_cost (
    key TEXT PRIMARY KEY,
    op_type TEXT NOT NULL,
    provider TEXT NOT NULL,
    threads INTEGER NOT NULL,
    ort_version TEXT NOT NULL,
    machine TEXT NOT NULL,
    signature TEXT NOT NULL,
    supported INTEGER NOT NULL,
    median_s REAL,
    spread_s REAL,
    repeats INTEGER,
    workspace_bytes INTEGER,
    reason TEXT,
    created REAL NOT NULL,
    in_place_s REAL
);
CREATE TABLE IF NOT EXISTS machine_value (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL,
    created REAL NOT NULL
);
"""
# Columns of op_cost added after the first release: name -> type (see _add_missing_columns).
ADDED_COLUMNS = {"in_place_s": "REAL"}


def default_cache_path() -> Path:
    """`profile-cache.sqlite` in arenaplan's cache dir (planner.cache_dir)."""
    return cache_dir() / CACHE_FILE_NAME


@dataclass(frozen=True)
class CacheKey:
    signature: str
    op_type: str
    provider: str
    threads: int
    ort_version: str
    machine: str
    clock: str  # planner.profile.timing.CLOCKS: costs timed on another clock are not reused
    method: str = METHOD_REVISION  # costs timed under another rule are not reused either

    @cached_property
    def digest(self) -> str:
        text = json.dumps([self.signature, self.provider, self.threads, self.ort_version,
                           self.machine, self.clock, self.method])
        return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class CachedCost:
    supported: bool
    median_s: float = 0.0
    spread_s: float = 0.0
    repeats: int = 0
    workspace_bytes: int = 0
    reason: str = ""
    in_place_s: float | None = None  # output written over the input it may share (if timed)


class ProfileCache:
    """Open (creating if needed) the cache at `path`. Use as a context manager or call close()."""

    def __init__(self, path: str | Path, timeout_s: float = 30.0):
        self.path = Path(path).expanduser()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(str(self.path), timeout=timeout_s, isolation_level=None)
            self._db.execute(f"PRAGMA busy_timeout = {int(timeout_s * 1000)}")
            self._db.execute("PRAGMA journal_mode = WAL")
            self._db.execute("PRAGMA synchronous = NORMAL")
            with self._transaction():
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        self._db.execute(statement)
                self._add_missing_columns()
        except (sqlite3.DatabaseError, OSError) as exc:
            raise InvalidInputError(
                f"cannot use {self.path} as the profile cache ({exc}); pass another file with "
                "--cache PATH or turn caching off with --no-cache"
            ) from None

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        """One short write transaction; IMMEDIATE takes the write lock up front, so two writers
        wait for each other (busy timeout) instead of failing on a lock upgrade."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def _add_missing_columns(self) -> None:
        """Columns added since a cache file was made (its rows keep NULL there: they were
        timed under an older rule revision, so their keys are never asked for again)."""
        have = {row[1] for row in self._db.execute("PRAGMA table_info(op_cost)")}
        for column, kind in ADDED_COLUMNS.items():
            if column not in have:
                self._db.execute(f"ALTER TABLE op_cost ADD COLUMN {column} {kind}")

    def get(self, key: CacheKey) -> CachedCost | None:
        return self.get_many([key]).get(key.digest)

    def get_many(self, keys: Sequence[CacheKey]) -> dict[str, CachedCost]:
        """The cached costs of `keys` by digest, those not cached left out: one query per
        QUERY_KEYS keys (one query per key took 0.1 s of GPT-2-small's 4,245 ops)."""
        digests = list(dict.fromkeys(key.digest for key in keys))
        found: dict[str, CachedCost] = {}
        for start in range(0, len(digests), QUERY_KEYS):
            chunk = digests[start:start + QUERY_KEYS]
            rows = self._db.execute(
                "SELECT key, supported, median_s, spread_s, repeats, workspace_bytes, reason, "
                f"in_place_s FROM op_cost WHERE key IN ({', '.join('?' * len(chunk))})", chunk,
            ).fetchall()
            for digest, supported, median_s, spread_s, repeats, workspace, reason, shared in rows:
                found[digest] = CachedCost(bool(supported), median_s or 0.0, spread_s or 0.0,
                                           repeats or 0, workspace or 0, reason or "", shared)
        return found

    def put(self, key: CacheKey, cost: CachedCost) -> None:
        with self._transaction():
            self._db.execute(
                "INSERT OR REPLACE INTO op_cost (key, op_type, provider, threads, ort_version, "
                "machine, signature, supported, median_s, spread_s, repeats, workspace_bytes, "
                "reason, created, in_place_s) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (key.digest, key.op_type, key.provider, key.threads, key.ort_version,
                 key.machine, key.signature, int(cost.supported), cost.median_s, cost.spread_s,
                 cost.repeats, cost.workspace_bytes, cost.reason, time.time(), cost.in_place_s),
            )

    def get_value(self, key: str) -> str | None:
        row = self._db.execute("SELECT value FROM machine_value WHERE key = ?", (key,)).fetchone()
        return None if row is None else row[0]

    def put_value(self, key: str, value: str) -> None:
        with self._transaction():
            self._db.execute(
                "INSERT OR REPLACE INTO machine_value (key, value, created) VALUES (?, ?, ?)",
                (key, value, time.time()),
            )

    def count(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM op_cost").fetchone()[0])

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> ProfileCache:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
