"""Stored plans served as bytes: each done plan's JSON and a gzip copy, encoded once.

A plan is big (100 KB and more) and the same plan is fetched again and again (CI jobs fetch by
id before every run), so its answer is never rebuilt per request: when a job finishes, its JSON
and a gzip copy are written beside the stored models (`MODEL_DIR/plans/ab/<plan_id>.json` and
`.json.gz`, atomically, so instances sharing the folder share them), and a fetch serves those
bytes, from memory once read (a least-recently-used cache bounded by ARENAPLAN_PLAN_CACHE_BYTES).

Two facts make the memory cache safe without asking the store again: a done plan never changes
(a job reaches `done` once and nothing rewrites its plan), and a namespace that may see a plan
always may (access is only ever granted). So a plan shown once to a namespace is answered from
memory to that namespace afterwards; anything else goes through the store. Should plans ever be
deleted, `forget` must be called with them.

The files are a copy of the store's plan JSON: one that is missing or does not read back as this
plan (lost, cut short, damaged) is rebuilt from the store, never served.

Beside them, `<plan_id>.profile.json` is the profile a plan was made with when the solver
measured it (a request without a profile): the one record of those costs, kept with the plan
since the plan id names the request, not the measurement (`service.plan_profiles`).
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from fastapi.responses import Response

log = logging.getLogger("arenaplan.service")

PLANS_FOLDER = "plans"
GZIP_LEVEL = 6  # gzip's default: about 10x smaller plans for a millisecond of work, once


@dataclass
class PlanBody:
    """A plan's JSON as served (UTF-8, byte-identical to the stored text) and its gzip copy."""

    plan_json: bytes
    plan_gzip: bytes
    namespaces: set[str | None] = field(default_factory=set)  # shown to these already

    @property
    def size(self) -> int:
        return len(self.plan_json) + len(self.plan_gzip)

    @staticmethod
    def encode(plan_json: str) -> PlanBody:
        data = plan_json.encode()
        # mtime=0: the same plan always compresses to the same bytes, whoever writes it
        return PlanBody(data, gzip.compress(data, compresslevel=GZIP_LEVEL, mtime=0))

    def response(self, accept_encoding: str | None) -> Response:
        """The 200 answer: the gzip copy when the client accepts gzip, else the JSON."""
        headers = {"Vary": "Accept-Encoding"}
        if accepts_gzip(accept_encoding):
            headers["Content-Encoding"] = "gzip"
            return Response(self.plan_gzip, media_type="application/json", headers=headers)
        return Response(self.plan_json, media_type="application/json", headers=headers)


def accepts_gzip(accept_encoding: str | None) -> bool:
    """Whether an Accept-Encoding header accepts gzip (RFC 9110: `gzip` or `*`, q > 0)."""
    quality: dict[str, float] = {}
    for item in (accept_encoding or "").split(","):
        name, *params = (part.strip() for part in item.split(";"))
        q = 1.0
        for param in params:
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        if name:
            quality[name.lower()] = q
    return quality.get("gzip", quality.get("x-gzip", quality.get("*", 0.0))) > 0


class PlanBodies:
    """Plan bodies on disk under `root` and the most recently served ones in memory."""

    def __init__(self, root: Path, memory_bytes: int):
        self.root = Path(root)
        self.memory_bytes = memory_bytes
        self._lock = threading.Lock()
        self._memory: OrderedDict[str, PlanBody] = OrderedDict()
        self._held = 0

    def paths(self, plan_id: str) -> tuple[Path, Path]:
        folder = self.root / plan_id[:2]
        return folder / f"{plan_id}.json", folder / f"{plan_id}.json.gz"

    def profile_path(self, plan_id: str) -> Path:
        return self.root / plan_id[:2] / f"{plan_id}.profile.json"

    # --- memory -----------------------------------------------------------------------------

    def recall(self, plan_id: str, namespace: str | None) -> PlanBody | None:
        """The body of a plan already shown to `namespace`, from memory; no I/O."""
        with self._lock:
            body = self._memory.get(plan_id)
            if body is None or namespace not in body.namespaces:
                return None
            self._memory.move_to_end(plan_id)
            return body

    def remember(self, plan_id: str, namespace: str | None, body: PlanBody) -> None:
        """Keep `body` in memory as shown to `namespace` (the store said it may see it)."""
        with self._lock:
            held = self._memory.get(plan_id)
            if held is not None:
                held.namespaces.add(namespace)
                self._memory.move_to_end(plan_id)
                return
            if body.size > self.memory_bytes:
                return
            body.namespaces.add(namespace)
            self._memory[plan_id] = body
            self._held += body.size
            while self._held > self.memory_bytes:
                _, evicted = self._memory.popitem(last=False)
                self._held -= evicted.size

    def forget(self, plan_id: str) -> None:
        with self._lock:
            body = self._memory.pop(plan_id, None)
            if body is not None:
                self._held -= body.size

    # --- disk -------------------------------------------------------------------------------

    def write(self, plan_id: str, plan_json: str) -> PlanBody:
        """Encode a finished plan and write its two files (atomically: temp file, rename)."""
        body = PlanBody.encode(plan_json)
        json_path, gzip_path = self.paths(plan_id)
        _write_atomically(json_path, body.plan_json)
        _write_atomically(gzip_path, body.plan_gzip)
        return body

    def write_profile(self, plan_id: str, profile_json: str) -> None:
        """Keep the profile the solver measured for this plan (atomically, like the plan)."""
        _write_atomically(self.profile_path(plan_id), profile_json.encode())

    def read_profile(self, plan_id: str, model_sha256: str) -> bytes | None:
        """The stored profile's JSON when its file is there and reads back as a profile of the
        plan's model (a file cut short or damaged is never served); else None."""
        try:
            data = self.profile_path(plan_id).read_bytes()
            if json.loads(data).get("model_sha256") != model_sha256:
                return None
        except (OSError, ValueError, AttributeError):
            return None
        return data

    def read(self, plan_id: str) -> PlanBody | None:
        """The plan's files, when both are there and read back as this plan; else None."""
        json_path, gzip_path = self.paths(plan_id)
        try:
            data, packed = json_path.read_bytes(), gzip_path.read_bytes()
            if gzip.decompress(packed) != data or json.loads(data).get("plan_id") != plan_id:
                return None
        except (OSError, EOFError, ValueError, AttributeError):  # missing, cut short, damaged
            return None
        return PlanBody(data, packed)

    def load(self, plan_id: str, stored_json: Callable[[], str | None]) -> PlanBody | None:
        """The plan's body from its files, else rebuilt from the store's JSON (and written).

        Blocking (disk, store): call it from a worker thread. None when the store has no plan.
        """
        body = self.read(plan_id)
        if body is not None:
            return body
        plan_json = stored_json()
        if plan_json is None:
            return None
        try:
            return self.write(plan_id, plan_json)
        except OSError as exc:  # a full or read-only disk: serve from the store all the same
            log.warning("plan %s: cannot write its files (%s); serving it from the store",
                        plan_id, exc)
            return PlanBody.encode(plan_json)


def _write_atomically(path: Path, data: bytes) -> None:
    """Write `data` to a temporary file beside `path`, then rename it over `path`: a reader (of
    this or another instance sharing the folder) sees the old file or the whole new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=".write-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
