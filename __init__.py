"""lambdadnn: the cheapest serverless plan (functions × memory) that meets a training deadline.

The public names are imported on first use (PEP 562), so `import lambdadnn` and the CLI's
`--help` stay light: SymPy, Pyomo and torch load only when something needs them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .inputs.errors import (
        InputError,
        InstanceError,
        LambdaDnnError,
        PlanError,
        TraceError,
        WorldFileError,
    )
    from .models.bounds import Bounds
    from .models.errors import DerivationError
    from .models.noise import NoiseModel
    from .solver.adaptive import Controller, Decision, Observation
    from .solver.errors import NoValidPlanError, SolverError
    from .solver.instance import Instance
    from .solver.instance_yaml import load_instance
    from .solver.many import solve_many
    from .solver.pipeline import deadline_crossings, evaluate, fastest, solve
    from .solver.plan import CostBreakdown, Evaluation, Plan, TimeBreakdown
    from .solver.schedule import Schedule, ScheduledJob, Submission

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
    "InputError": "lambdadnn.inputs.errors",
    "InstanceError": "lambdadnn.inputs.errors",
    "LambdaDnnError": "lambdadnn.inputs.errors",
    "NoValidPlanError": "lambdadnn.solver.errors",
    "NoiseModel": "lambdadnn.models.noise",
    "Observation": "lambdadnn.solver.adaptive",
    "Plan": "lambdadnn.solver.plan",
    "PlanError": "lambdadnn.inputs.errors",
    "Schedule": "lambdadnn.solver.schedule",
    "ScheduledJob": "lambdadnn.solver.schedule",
    "SolverError": "lambdadnn.solver.errors",
    "Submission": "lambdadnn.solver.schedule",
    "TimeBreakdown": "lambdadnn.solver.plan",
    "TraceError": "lambdadnn.inputs.errors",
    "WorldFileError": "lambdadnn.inputs.errors",
    "deadline_crossings": "lambdadnn.solver.pipeline",
    "evaluate": "lambdadnn.solver.pipeline",
    "fastest": "lambdadnn.solver.pipeline",
    "load_instance": "lambdadnn.solver.instance_yaml",
    "solve": "lambdadnn.solver.pipeline",
    "solve_many": "lambdadnn.solver.many",
}

__all__ = [
    "Bounds", "Controller", "CostBreakdown", "Decision", "DerivationError", "Evaluation",
    "InputError", "Instance", "InstanceError", "LambdaDnnError", "NoValidPlanError",
    "NoiseModel", "Observation", "Plan", "PlanError", "Schedule", "ScheduledJob", "SolverError",
    "Submission", "TimeBreakdown", "TraceError", "WorldFileError", "deadline_crossings",
    "evaluate", "fastest", "load_instance", "solve", "solve_many",
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
