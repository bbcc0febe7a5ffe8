"""The model's errors, under the one root `LambdaDnnError` of the input layer."""

from ..inputs.errors import InputError, LambdaDnnError

__all__ = ["DerivationError", "LambdaDnnError", "NoiseError"]


class NoiseError(InputError):
    """A noise model's setting is out of range; the message names it."""


class DerivationError(LambdaDnnError, RuntimeError):
    """A symbolic fact the bounds rely on could not be proved: the bounds would not be sound."""
