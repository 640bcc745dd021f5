"""The one retry helper: its backoff sequence, attempts, deadline, and errors it must not retry."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from autarch.runtime.retry import MODEL_STREAM, SUPERVISOR_RESTART, Backoff, retry


def test_backoff_doubles_up_to_its_maximum():
    assert list(itertools.islice(Backoff(initial=0.05, max_delay=0.5).delays(), 6)) == pytest.approx(
        [0.05, 0.1, 0.2, 0.4, 0.5, 0.5])
    assert list(itertools.islice(SUPERVISOR_RESTART.delays(), 7)) == [0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 10.0]
    assert list(itertools.islice(Backoff(initial=0.5, max_delay=0.5).delays(), 3)) == [0.5, 0.5, 0.5]


def test_jitter_only_ever_shortens_a_wait():
    for retry_number, full in ((1, 0.5), (2, 1.0), (5, 8.0), (9, 8.0)):
        for _ in range(50):
            assert 0.75 * full <= MODEL_STREAM.delay(retry_number) <= full


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"initial": 1.0, "max_delay": 0.5}, "initial <= max_delay"),
    ({"initial": 0.1, "max_delay": 1.0, "factor": 0.5}, "factor"),
    ({"initial": 0.1, "max_delay": 1.0, "jitter": 1.0}, "jitter"),
])
def test_a_policy_that_cannot_work_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Backoff(**kwargs)


class Flaky:
    """Fails ``failures`` times with ``error``, then answers "ok"; records the waits it was given."""

    def __init__(self, failures: int, error: Exception) -> None:
        self.waits: list[float]
        self.failures, self.error, self.calls, self.waits = failures, error, 0, []

    async def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return "ok"

    async def sleep(self, delay: float) -> None:
        self.waits.append(delay)


POLICY = Backoff(initial=0.1, max_delay=0.4)


async def test_retries_with_the_policy_s_waits_until_it_succeeds():
    call = Flaky(4, ConnectionError("away"))
    result = await retry(call, policy=POLICY, name="t", retry_on=lambda exc: True, sleep=call.sleep)
    assert result == "ok" and call.calls == 5
    assert call.waits == pytest.approx([0.1, 0.2, 0.4, 0.4])


async def test_an_error_not_retried_propagates_at_once():
    call = Flaky(3, KeyError("bad"))
    with pytest.raises(KeyError):
        await retry(call, policy=POLICY, name="t", retry_on=lambda exc: isinstance(exc, ConnectionError),
                    sleep=call.sleep)
    assert call.calls == 1 and call.waits == []


async def test_the_last_error_propagates_after_the_last_attempt():
    call = Flaky(10, ConnectionError("away"))
    with pytest.raises(ConnectionError):
        await retry(call, policy=POLICY, name="t", retry_on=lambda exc: True, attempts=3, sleep=call.sleep)
    assert call.calls == 3 and call.waits == pytest.approx([0.1, 0.2])


async def test_no_wait_is_begun_that_would_end_past_the_deadline():
    loop = asyncio.get_running_loop()
    call = Flaky(1000, ConnectionError("away"))
    begun: list[tuple[float, float]] = []

    async def sleep(delay: float) -> None:
        begun.append((loop.time(), delay))
        await asyncio.sleep(delay)

    deadline = loop.time() + 0.3
    with pytest.raises(ConnectionError):
        await retry(call, policy=Backoff(initial=0.02, max_delay=0.08), name="t", retry_on=lambda exc: True,
                    deadline=deadline, sleep=sleep)
    assert begun and all(start + delay <= deadline for start, delay in begun)
    assert call.calls == len(begun) + 1  # the last try failed and nothing was retried after it


async def test_a_deadline_already_past_tries_once():
    call = Flaky(5, ConnectionError("away"))
    with pytest.raises(ConnectionError):
        await retry(call, policy=POLICY, name="t", retry_on=lambda exc: True,
                    deadline=asyncio.get_running_loop().time(), sleep=call.sleep)
    assert call.calls == 1 and call.waits == []
