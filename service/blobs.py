"""Uploaded models, stored on disk by content: `MODEL_DIR/ab/abcdef...` named by their sha256.

An upload is streamed into a temporary file beside the store (same file system), hashed on the
way, and renamed into place atomically; the same bytes uploaded twice are stored once.

A blob's modification time is its last upload (an upload of bytes already stored touches it):
`service.retention` removes blobs idle longer than the retention that no job still needs.

A file's name is a promise its bytes may break (a bad disk, a careless hand): a blob is checked
against its sha256 before a job or a report reads it, and an upload of the right bytes replaces
a stored file that no longer matches its name, so uploading the model again repairs the store.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

SHA256_PATTERN = re.compile(r"^[0-9a-f]{64}$")
HASH_CHUNK = 1 << 20
UPLOAD_PREFIX = "upload-"  # temporary files: upload-HOST-PID-RANDOM, named by their writer
STALE_UPLOAD_AGE_S = 6 * 3600  # an upload idle this long has no owner left, whatever its name


class DamagedBlobError(Exception):
    """A stored model's bytes no longer match its sha256: the store's fault, not the user's."""

    def __init__(self, sha256: str):
        super().__init__(
            f"the service's stored copy of model {sha256} is damaged (its bytes no longer match "
            "their sha256); upload the model again (POST /plan with the same model file) to "
            "repair it")
        self.sha256 = sha256


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


class ModelBlobs:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.tmp = self.root / "tmp"
        self.tmp.mkdir(parents=True, exist_ok=True)
        self.host = re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname())

    def path_for(self, sha256: str) -> Path:
        if not SHA256_PATTERN.match(sha256):
            raise ValueError(f"not a sha256: {sha256!r}")
        return self.root / sha256[:2] / sha256

    def exists(self, sha256: str) -> bool:
        return self.path_for(sha256).is_file()

    def is_intact(self, sha256: str) -> bool:
        """The blob exists and its bytes hash to its name."""
        try:
            return file_sha256(self.path_for(sha256)) == sha256
        except FileNotFoundError:
            return False

    def check_intact(self, sha256: str) -> None:
        """Raise DamagedBlobError when a stored blob's bytes do not match its name."""
        if self.exists(sha256) and not self.is_intact(sha256):
            raise DamagedBlobError(sha256)

    def stored(self) -> Iterator[str]:
        """The sha256 of every stored blob (`ab/abcdef...`; the folders beside them are not)."""
        for folder in self.root.glob("??"):
            for path in folder.glob(folder.name + "*"):
                if SHA256_PATTERN.match(path.name):
                    yield path.name

    def idle_since(self, sha256: str, cutoff: float) -> bool:
        """The blob exists and was last uploaded before `cutoff` (a time.time())."""
        try:
            return self.path_for(sha256).stat().st_mtime < cutoff
        except FileNotFoundError:
            return False

    def remove(self, sha256: str) -> None:
        self.path_for(sha256).unlink(missing_ok=True)

    def new_upload(self) -> BlobWriter:
        return BlobWriter(self)

    def remove_stale_uploads(self) -> int:
        """Delete temporary files left by uploads that were cut off (at startup).

        Several instances may share the model folder, so a temporary file is removed only when
        no live process can own it: its writer was a process of this host that is gone, or it
        has not been written to for `STALE_UPLOAD_AGE_S` (an owner on another host, or a name
        without an owner).
        """
        removed = 0
        idle_since = time.time() - STALE_UPLOAD_AGE_S
        for path in self.tmp.glob(UPLOAD_PREFIX + "*"):
            owner = _upload_owner(path.name)
            try:
                orphaned = owner is not None and owner[0] == self.host and not _alive(owner[1])
                if orphaned or path.stat().st_mtime < idle_since:
                    path.unlink()
                    removed += 1
            except FileNotFoundError:  # committed or removed meanwhile
                continue
        return removed


def _upload_owner(name: str) -> tuple[str, int] | None:
    """(host, pid) of the process that writes a temporary upload file, from its name."""
    parts = name[len(UPLOAD_PREFIX):].rsplit("-", 2)
    if len(parts) != 3 or not parts[1].isdigit():
        return None
    return parts[0], int(parts[1])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


class BlobWriter:
    """One upload in progress: write chunks, then `commit` (store it) or `discard`."""

    def __init__(self, blobs: ModelBlobs):
        self._blobs = blobs
        fd, name = tempfile.mkstemp(prefix=f"{UPLOAD_PREFIX}{blobs.host}-{os.getpid()}-",
                                    dir=blobs.tmp)
        self._file = os.fdopen(fd, "wb")
        self._path = Path(name)
        self._hash = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> None:
        self._file.write(data)
        self._hash.update(data)
        self.size += len(data)

    def commit(self) -> str:
        """Close, move into the content-addressed place and return the sha256.

        A stored file of the same name is kept only when its bytes are right; a damaged one is
        replaced by these.
        """
        self._file.close()
        sha256 = self._hash.hexdigest()
        target = self._blobs.path_for(sha256)
        if self._blobs.is_intact(sha256):
            self._path.unlink(missing_ok=True)
            os.utime(target)  # uploaded again: its retention starts over
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(self._path, target)
        return sha256

    def discard(self) -> None:
        if not self._file.closed:
            self._file.close()
        self._path.unlink(missing_ok=True)
