"""Running a plan for real: the worker handler, the Redis parameter channel, local and AWS backends.

Importing the package stays light (no torch): only `launcher.worker` trains, so the CLI and the
AWS backend can import the rest without paying for PyTorch.
"""

# The root error only: importing `solver` would pull SymPy and Pyomo into every Lambda worker.
from lambdadnn.models.errors import LambdaDnnError

__all__ = ["LaunchError"]


class LaunchError(LambdaDnnError, RuntimeError):
    """A plan could not be run to the end; the message names the step and the cause."""
