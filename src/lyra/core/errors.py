"""The one error the policy core raises for bad input; adapters turn it into their own (exit code 2, HTTP 422)."""

from __future__ import annotations


class InvalidClusterError(ValueError):
    """A value object or snapshot violates an invariant. The message names the object and the field."""
