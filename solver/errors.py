"""The solver's errors, all under the one root `LambdaDnnError`; the input errors it raises
are the input layer's."""

from ..inputs.errors import InputError, InstanceError, LambdaDnnError, PlanError
from ..models.errors import DerivationError

__all__ = [
    "DerivationError", "InputError", "InstanceError", "LambdaDnnError", "NoValidPlanError",
    "PlanError", "SolverError",
]


class SolverError(LambdaDnnError, RuntimeError):
    """HiGHS did not prove an optimum, or the chosen plan failed its re-check against the model."""


class NoValidPlanError(LambdaDnnError):
    """No plan within the instance's limits is valid at all (e.g. the rate is never positive)."""
