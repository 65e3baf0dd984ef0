"""Typed errors for everything a user can get wrong when handing a model to the planner.

Each message names what to change. The CLI maps them to exit code 2 (3 for infeasible requests),
the service to 4xx responses.
"""

from schemas.errors import ArenaplanError, InfeasibleError

__all__ = [
    "ArenaplanError",
    "InfeasibleError",
    "ModelError",
    "NotOnnxError",
    "ModelCheckError",
    "GraphCycleError",
    "ExternalDataError",
    "UnsupportedOperatorError",
    "UnsupportedVersionError",
    "UnknownShapeError",
    "OptimizedGraphError",
    "InvalidInputError",
]


class ModelError(ArenaplanError):
    """The ONNX model itself cannot be planned."""


class NotOnnxError(ModelError):
    """The bytes are not a parseable ONNX ModelProto."""


class ModelCheckError(ModelError):
    """The model parses but fails the ONNX checker or strict shape inference."""


class GraphCycleError(ModelError):
    """The graph has a cycle, so there is no execution order."""


class ExternalDataError(ModelError):
    """The model refers to tensor data in external files, which the planner never reads."""


class UnsupportedOperatorError(ModelError):
    """An operator the planner cannot schedule (control flow, unknown domain)."""


class UnsupportedVersionError(ModelError):
    """IR or opset version outside the supported range."""


class UnknownShapeError(ModelError):
    """A tensor whose byte size cannot be determined (unbound symbolic or unknown dimension)."""


class OptimizedGraphError(ModelError):
    """ONNX Runtime's optimized graph cannot be planned (its rewrite changed the training state),
    or is not the one a plan was made for (another ONNX Runtime rewrites differently)."""


class InvalidInputError(ArenaplanError):
    """Malformed non-model input: a request, a CSV file, a profile, a budget string."""
