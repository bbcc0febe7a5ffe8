"""Running a plan for real: the worker handler, the Redis parameter channel, local and AWS backends.

Importing the package stays light (no torch): only `launcher.worker` trains, so the CLI and the
AWS backend can import the rest without paying for PyTorch.
"""

from importlib.util import find_spec

# The root error only: importing `solver` would pull SymPy and Pyomo into every Lambda worker.
from ..models.errors import LambdaDnnError

__all__ = ["BACKEND_EXTRAS", "INSTALL_EXTRAS", "LaunchError", "require_extras"]

# The modules each backend imports, with the distribution that provides each one.
BACKEND_EXTRAS: dict[str, dict[str, str]] = {
    "local": {"torch": "torch", "sklearn": "scikit-learn", "redis": "redis"},
    "aws": {"boto3": "boto3", "redis": "redis"},
}
INSTALL_EXTRAS = ("`pip install torch --index-url https://download.pytorch.org/whl/cpu` "
                  "(CPU-only torch), then `pip install 'lambdadnn[launch]'`")


class LaunchError(LambdaDnnError, RuntimeError):
    """A plan could not be run to the end; the message names the step and the cause."""


def _importable(module: str) -> bool:
    try:
        return find_spec(module) is not None
    except (ImportError, ValueError):  # a broken parent package, or a module set to None
        return False


def require_extras(backend: str) -> None:
    """One line naming what to install when a module the backend imports is missing.

    Checked before a launch starts anything, instead of a ModuleNotFoundError half-way.
    """
    missing = [name for module, name in BACKEND_EXTRAS[backend].items()
               if not _importable(module)]
    if missing:
        raise LaunchError(
            f"the {backend} backend needs {', '.join(missing)}, which "
            f"{'is' if len(missing) == 1 else 'are'} not installed: {INSTALL_EXTRAS}"
        )
