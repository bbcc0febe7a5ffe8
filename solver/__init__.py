"""lambdadnn's solver: from a provisioning instance to the cheapest plan that meets its deadline."""

from lambdadnn.models.bounds import Bounds
from lambdadnn.models.noise import NoiseModel
from lambdadnn.solver.errors import (
    DerivationError,
    InstanceError,
    LambdaDnnError,
    NoValidPlanError,
    SolverError,
)
from lambdadnn.solver.instance import Instance, load_instance
from lambdadnn.solver.pipeline import deadline_crossings, evaluate, solve
from lambdadnn.solver.plan import CostBreakdown, Evaluation, Plan, TimeBreakdown

__all__ = [
    "Bounds", "CostBreakdown", "DerivationError", "Evaluation", "Instance", "InstanceError",
    "LambdaDnnError", "NoValidPlanError", "NoiseModel", "Plan", "SolverError", "TimeBreakdown",
    "deadline_crossings", "evaluate", "load_instance", "solve",
]
