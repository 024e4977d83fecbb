"""wait_for: returns the first truthy value, retries only the listed errors, and names what timed out."""

from __future__ import annotations

import itertools

import pytest

from lyra.localcluster.waiting import WaitTimeoutError, wait_for


def test_returns_the_first_truthy_value() -> None:
    answers = iter([None, 0, "", "ready"])

    assert wait_for(lambda: next(answers), 5, "an answer", interval=0.001) == "ready"


def test_a_timeout_names_the_condition_and_the_last_retried_error() -> None:
    def refuses() -> bool:
        raise ConnectionRefusedError("nobody listens")

    with pytest.raises(WaitTimeoutError) as error:
        wait_for(refuses, 0.05, "the API server", interval=0.01, retry_on=(OSError,))

    assert "waiting for the API server" in str(error.value)
    assert "nobody listens" in str(error.value)
    assert error.value.what == "the API server"


def test_errors_not_listed_as_retryable_propagate_at_once() -> None:
    calls = itertools.count()

    def broken() -> bool:
        next(calls)
        raise KeyError("bug")

    with pytest.raises(KeyError):
        wait_for(broken, 5, "something", retry_on=(OSError,))
    assert next(calls) == 1


def test_a_non_positive_timeout_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="timeout must be positive"):
        wait_for(lambda: True, 0, "anything")
