"""The root of lambdadnn's exceptions and the errors of bad input, one class per domain.

Every `InputError` is a `ValueError` too, and the CLI turns each into one `error:` line and
exit code 1; the subclass says which kind of input was wrong, so a caller can catch one kind.
"""


class LambdaDnnError(Exception):
    """Root of every error lambdadnn raises on purpose; callers catch this and nothing wider."""


class InputError(LambdaDnnError, ValueError):
    """Something a caller handed in (a file, a mapping, an argument) is malformed or out of
    range; the message names the field, the value and the fix."""


class InstanceError(InputError):
    """An instance or platform file (or mapping), or an argument of the solver about an
    instance, is malformed. (A simulator option that is about no instance, file or plan is
    an `InputError` itself.)"""


class TraceError(InputError):
    """A job trace (CSV) or a cluster job log is malformed."""


class PlanError(InputError):
    """A plan (JSON, or its mapping) is malformed."""


class WorldFileError(InputError):
    """A world file (YAML) is malformed."""
