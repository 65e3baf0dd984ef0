"""Where arenaplan keeps what it learns about this machine between requests: the profile cache
(planner.profile.cache), ONNX Runtime's rewrites of models planned before
(planner.ir.rewrite_cache) and the schedules of least peak found (planner.remat.remembered); and
the two ways the file-per-entry caches write and bound their folders."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def cache_dir() -> Path:
    """`$ARENAPLAN_CACHE_DIR`, else `arenaplan/` in the user's cache dir (`$XDG_CACHE_HOME` or
    `~/.cache`)."""
    env = os.environ.get("ARENAPLAN_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "arenaplan"


def write_whole(target: Path, data: bytes) -> None:
    """`data` written under a temporary name in `target`'s folder (made if missing), then renamed
    to `target`: readers, in this process or another, never see part of it."""
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=".writing-")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.replace(temporary, target)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def prune_oldest(folder: Path, pattern: str, max_total_bytes: int) -> None:
    """Remove the least recently modified files matching `pattern` in `folder` until those left
    hold at most `max_total_bytes` (a reader touches what it uses: the least used go first)."""
    entries = []
    for path in folder.glob(pattern):
        with contextlib.suppress(OSError):
            stat = path.stat()
            entries.append((stat.st_mtime, stat.st_size, path))
    total = sum(size for _, size, _ in entries)
    for _, size, path in sorted(entries):
        if total <= max_total_bytes:
            break
        with contextlib.suppress(OSError):
            path.unlink()
            total -= size
