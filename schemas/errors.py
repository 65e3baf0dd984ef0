"""The root of every error a user can cause, shared by planner, runtime and service.

It lives in `schemas` because that is the one package everybody may import; each package defines
its own specific errors below these roots (planner/errors.py, runtime/errors.py).
"""


class ArenaplanError(Exception):
    """An error caused by the input, with a message that says what to change."""


class InfeasibleError(ArenaplanError):
    """The request is well formed but cannot be met (budget or capacity too small).

    `smallest_feasible` carries the smallest value known to work (or a proven lower bound on it,
    flagged by `is_lower_bound`) so the caller can say what to ask for instead.
    """

    def __init__(
        self, message: str, smallest_feasible: int | None = None, is_lower_bound: bool = False
    ):
        super().__init__(message)
        self.smallest_feasible = smallest_feasible
        self.is_lower_bound = is_lower_bound
