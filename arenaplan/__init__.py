"""arenaplan: ONNX training graph in, memory plan out.

The top-level package holds only the version and the command-line front end; the work is done by
the sibling packages `schemas`, `planner`, `runtime` and `service` (see DESIGN.md).
"""

from planner.version import PLANNER_VERSION as __version__

__all__ = ["__version__"]
