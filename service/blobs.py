"""Uploaded models, stored on disk by content: `MODEL_DIR/ab/abcdef...` named by their sha256.

An upload is streamed into a temporary file beside the store (same file system), hashed on the
way, and renamed into place atomically; the same bytes uploaded twice are stored once.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from pathlib import Path

SHA256_PATTERN = re.compile(r"^[0-9a-f]{64}$")


class ModelBlobs:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.tmp = self.root / "tmp"
        self.tmp.mkdir(parents=True, exist_ok=True)

    def path_for(self, sha256: str) -> Path:
        if not SHA256_PATTERN.match(sha256):
            raise ValueError(f"not a sha256: {sha256!r}")
        return self.root / sha256[:2] / sha256

    def exists(self, sha256: str) -> bool:
        return self.path_for(sha256).is_file()

    def new_upload(self) -> BlobWriter:
        return BlobWriter(self)

    def remove_stale_uploads(self) -> int:
        """Delete temporary files left by uploads that were cut off (at startup)."""
        removed = 0
        for path in self.tmp.glob("upload-*"):
            path.unlink(missing_ok=True)
            removed += 1
        return removed


class BlobWriter:
    """One upload in progress: write chunks, then `commit` (store it) or `discard`."""

    def __init__(self, blobs: ModelBlobs):
        self._blobs = blobs
        fd, name = tempfile.mkstemp(prefix="upload-", dir=blobs.tmp)
        self._file = os.fdopen(fd, "wb")
        self._path = Path(name)
        self._hash = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> None:
        self._file.write(data)
        self._hash.update(data)
        self.size += len(data)

    def commit(self) -> str:
        """Close, move into the content-addressed place and return the sha256."""
        self._file.close()
        sha256 = self._hash.hexdigest()
        target = self._blobs.path_for(sha256)
        if target.is_file() and target.stat().st_size == self.size:
            self._path.unlink(missing_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(self._path, target)
        return sha256

    def discard(self) -> None:
        if not self._file.closed:
            self._file.close()
        self._path.unlink(missing_ok=True)
