"""The solver's errors, all under the one root `LambdaDnnError`."""

from lambdadnn.models.errors import DerivationError, LambdaDnnError

__all__ = [
    "DerivationError", "InstanceError", "LambdaDnnError", "NoValidPlanError", "SolverError",
]


class InstanceError(LambdaDnnError, ValueError):
    """An instance or platform file (or mapping) is malformed; the message names the field."""


class SolverError(LambdaDnnError, RuntimeError):
    """HiGHS did not prove an optimum, or the chosen plan failed its re-check against the model."""


class NoValidPlanError(LambdaDnnError):
    """No plan within the instance's limits is valid at all (e.g. the rate is never positive)."""
