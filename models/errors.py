"""The root of lambdadnn's exceptions: upstream of everything, so every layer can raise it."""


class LambdaDnnError(Exception):
    """Root of every error lambdadnn raises on purpose; callers catch this and nothing wider."""


class NoiseError(LambdaDnnError, ValueError):
    """A noise model's setting is out of range; the message names it."""


class DerivationError(LambdaDnnError, RuntimeError):
    """A symbolic fact the bounds rely on could not be proved: the bounds would not be sound."""
