"""lambdadnn's solver: from a provisioning instance to the cheapest plan that meets its deadline."""

from models.bounds import Bounds
from models.noise import NoiseModel
from solver.errors import (
    DerivationError,
    InstanceError,
    LambdaDnnError,
    NoValidPlanError,
    SolverError,
)
from solver.instance import Instance, load_instance
from solver.pipeline import deadline_crossings, evaluate, solve
from solver.plan import CostBreakdown, Evaluation, Plan, TimeBreakdown

__all__ = [
    "Bounds", "CostBreakdown", "DerivationError", "Evaluation", "Instance", "InstanceError",
    "LambdaDnnError", "NoValidPlanError", "NoiseModel", "Plan", "SolverError", "TimeBreakdown",
    "deadline_crossings", "evaluate", "load_instance", "solve",
]
