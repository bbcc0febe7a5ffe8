"""The independent world: a job's run simulated from mechanisms, apart from the planner's model.

Nothing here imports `lambdadnn.models`, `lambdadnn.solver` or any other lambdadnn module
(tests/test_world_independent.py proves it); the bridge from an instance is
`lambdadnn.simulator.worlds`. The schema and every mechanism: docs/WORLD.md.
"""

from .config import (
    Bandwidth,
    ColdStart,
    Cpu,
    Crashes,
    Drift,
    Measurement,
    Persistent,
    PlatformRamp,
    Ps,
    Startup,
    Stragglers,
    Tail,
    World,
)
from .engine import (
    MAX_CRASHES_WITHOUT_CHECKPOINT,
    MAX_EVENTS,
    MAX_TRIAL_ITERATIONS,
    MAX_WORKER_ITERATIONS,
    Segment,
    Session,
    Trial,
    WorldRun,
    run_plan,
    trial,
)
from .errors import WorldError
from .job import JobSpec
from .streams import Key

__all__ = [
    "MAX_CRASHES_WITHOUT_CHECKPOINT",
    "MAX_EVENTS",
    "MAX_TRIAL_ITERATIONS",
    "MAX_WORKER_ITERATIONS",
    "Bandwidth",
    "ColdStart",
    "Cpu",
    "Crashes",
    "Drift",
    "JobSpec",
    "Key",
    "Measurement",
    "Persistent",
    "PlatformRamp",
    "Ps",
    "Segment",
    "Session",
    "Startup",
    "Stragglers",
    "Tail",
    "Trial",
    "World",
    "WorldError",
    "WorldRun",
    "run_plan",
    "trial",
]
