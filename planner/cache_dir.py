"""Where arenaplan keeps what it learns about this machine between requests: the profile cache
(planner.profile.cache) and ONNX Runtime's rewrites of models planned before
(planner.ir.rewrite_cache)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """`$ARENAPLAN_CACHE_DIR`, else `arenaplan/` in the user's cache dir (`$XDG_CACHE_HOME` or
    `~/.cache`)."""
    env = os.environ.get("ARENAPLAN_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "arenaplan"
