"""The one error type of the compatibility layer: a line for stderr, exit 2."""

from __future__ import annotations


class CompatError(ValueError):
    """A flag this launcher cannot honour, or one that contradicts the topology."""
