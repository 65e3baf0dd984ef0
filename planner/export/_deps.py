"""The optional `export` extra: torch and onnxscript, imported only when an export is asked for."""

from __future__ import annotations

import importlib
from types import ModuleType

from planner.errors import InvalidInputError

INSTALL_HINT = "install arenaplan[export] (pip install 'arenaplan[export]')"


def require(module: str) -> ModuleType:
    """Import `module` (torch, onnxscript, ...) or say how to install the export extra."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise InvalidInputError(
            f"exporting a torch model needs the '{module}' package, which is not installed: "
            f"{INSTALL_HINT}"
        ) from exc


def require_torch() -> ModuleType:
    require("onnxscript")
    return require("torch")
