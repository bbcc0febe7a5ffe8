"""lambdadnn: the cheapest serverless plan (functions × memory) that meets a training deadline.

The public names are imported on first use (PEP 562), so `import lambdadnn` and the CLI's
`--help` stay light: SymPy, Pyomo and torch load only when something needs them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lambdadnn.models.bounds import Bounds
    from lambdadnn.models.errors import DerivationError, LambdaDnnError
    from lambdadnn.models.noise import NoiseModel
    from lambdadnn.solver.adaptive import Controller, Decision, Observation
    from lambdadnn.solver.errors import InstanceError, NoValidPlanError, SolverError
    from lambdadnn.solver.instance import Instance, load_instance
    from lambdadnn.solver.many import solve_many
    from lambdadnn.solver.pipeline import deadline_crossings, evaluate, solve
    from lambdadnn.solver.plan import CostBreakdown, Evaluation, Plan, TimeBreakdown
    from lambdadnn.solver.schedule import Schedule, ScheduledJob, Submission

__version__ = "0.1.0"

# public name -> the module that defines it
_EXPORTS = {
    "Bounds": "lambdadnn.models.bounds",
    "Controller": "lambdadnn.solver.adaptive",
    "CostBreakdown": "lambdadnn.solver.plan",
    "Decision": "lambdadnn.solver.adaptive",
    "DerivationError": "lambdadnn.models.errors",
    "Evaluation": "lambdadnn.solver.plan",
    "Instance": "lambdadnn.solver.instance",
    "InstanceError": "lambdadnn.solver.errors",
    "LambdaDnnError": "lambdadnn.models.errors",
    "NoValidPlanError": "lambdadnn.solver.errors",
    "NoiseModel": "lambdadnn.models.noise",
    "Observation": "lambdadnn.solver.adaptive",
    "Plan": "lambdadnn.solver.plan",
    "Schedule": "lambdadnn.solver.schedule",
    "ScheduledJob": "lambdadnn.solver.schedule",
    "SolverError": "lambdadnn.solver.errors",
    "Submission": "lambdadnn.solver.schedule",
    "TimeBreakdown": "lambdadnn.solver.plan",
    "deadline_crossings": "lambdadnn.solver.pipeline",
    "evaluate": "lambdadnn.solver.pipeline",
    "load_instance": "lambdadnn.solver.instance",
    "solve": "lambdadnn.solver.pipeline",
    "solve_many": "lambdadnn.solver.many",
}

__all__ = [
    "Bounds", "Controller", "CostBreakdown", "Decision", "DerivationError", "Evaluation",
    "Instance", "InstanceError", "LambdaDnnError", "NoValidPlanError", "NoiseModel",
    "Observation", "Plan", "Schedule", "ScheduledJob", "SolverError", "Submission",
    "TimeBreakdown", "deadline_crossings", "evaluate", "load_instance", "solve", "solve_many",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'lambdadnn' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip this hook
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
