"""The planner's version: part of every plan id, so a new planner never serves stale plans."""

from importlib.metadata import PackageNotFoundError, version

try:
    PLANNER_VERSION = version("arenaplan")
except PackageNotFoundError:  # running from a source tree that was never installed
    PLANNER_VERSION = "0+source"
