"""The input layer: errors, numeric checks and file reading for everything a user hands in.

It imports nothing else of lambdadnn, so every layer above (models, solver, simulator,
launcher, cli) can check its inputs the same way and raise its own domain's error.
"""
