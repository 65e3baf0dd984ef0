"""Load a model from a `MODULE:FACTORY` reference, as the command line takes it.

MODULE is a dotted module name importable from the current directory or sys.path
(`mypkg.models`), or a path to a Python file (`models/net.py`). FACTORY is a zero-argument
callable in it (a function or an nn.Module class) that returns an nn.Module; dots walk
attributes (`zoo.make_mlp`).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from planner.errors import InvalidInputError
from planner.export._deps import require_torch

_FORM = "expected MODULE:FACTORY, e.g. mypkg.models:make_net or models.py:Net"


def _import_module(module: str) -> ModuleType:
    if module.endswith(".py") or "/" in module or "\\" in module:
        path = Path(module)
        if not path.is_file():
            raise InvalidInputError(f"model file {module!r} does not exist ({_FORM})")
        digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]
        name = f"arenaplan_user_model_{digest}"
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise InvalidInputError(f"cannot load {module!r} as a Python file")
        loaded = importlib.util.module_from_spec(spec)
        sys.modules[name] = loaded
        try:
            spec.loader.exec_module(loaded)
        except Exception as exc:  # noqa: BLE001 - the user's file failed to import
            sys.modules.pop(name, None)
            raise InvalidInputError(
                f"importing {module!r} failed: {type(exc).__name__}: {exc}"
            ) from exc
        return loaded
    if str(Path.cwd()) not in sys.path and "" not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        raise InvalidInputError(f"cannot import module {module!r}: {exc} ({_FORM})") from exc
    except Exception as exc:  # noqa: BLE001 - the user's module failed to import
        raise InvalidInputError(
            f"importing {module!r} failed: {type(exc).__name__}: {exc}"
        ) from exc


def load_factory_model(reference: str) -> Any:
    """Import MODULE, look up FACTORY, call it and check it returned an nn.Module."""
    torch = require_torch()
    module_name, sep, factory_name = reference.rpartition(":")
    if not sep or not module_name or not factory_name:
        raise InvalidInputError(f"bad model reference {reference!r}: {_FORM}")
    target: Any = _import_module(module_name)
    for part in factory_name.split("."):
        if not hasattr(target, part):
            raise InvalidInputError(f"{module_name!r} has no attribute {factory_name!r}")
        target = getattr(target, part)
    if not callable(target):
        raise InvalidInputError(f"{reference!r} is not callable")
    try:
        model = target()
    except Exception as exc:  # noqa: BLE001 - the user's factory failed
        raise InvalidInputError(
            f"calling {reference}() failed: {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(model, torch.nn.Module):
        raise InvalidInputError(
            f"{reference}() returned {type(model).__name__}, not a torch.nn.Module"
        )
    return model
