"""Trace-driven evaluation: a discrete-event simulator of training on functions, not the model."""
