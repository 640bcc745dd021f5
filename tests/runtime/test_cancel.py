"""``cancel_and_wait`` ends a task even when its first cancellation is lost (as Python 3.11's ``wait_for`` loses
one that lands while the awaited operation completes), and reports what each task ended with."""

from __future__ import annotations

import asyncio

from autarch.runtime.cancel import cancel_and_wait


async def _loses_one_cancellation(rounds: list[int]) -> None:
    swallowed = False
    while True:
        try:
            await asyncio.sleep(0.01)
        except asyncio.CancelledError:
            if swallowed:
                raise
            swallowed = True  # carries on as if never cancelled, like the relay's loop did
        rounds.append(1)


async def test_a_task_that_lost_its_cancellation_is_cancelled_again() -> None:
    rounds: list[int] = []
    task = asyncio.create_task(_loses_one_cancellation(rounds))
    while len(rounds) < 2:  # the loop is under way: it has gone round twice
        await asyncio.sleep(0.005)
    # One cancel and a wait would never return here.
    single = asyncio.ensure_future(asyncio.gather(asyncio.shield(task), return_exceptions=True))
    task.cancel()
    done, _ = await asyncio.wait({single}, timeout=0.3)
    assert not done and not task.done(), "the loop should have carried on after its lost cancellation"
    outcome = await asyncio.wait_for(cancel_and_wait([task]), 2)
    assert task.cancelled() and isinstance(outcome[0], asyncio.CancelledError)
    await single


async def test_outcomes_of_finished_failed_and_missing_tasks() -> None:
    async def fail() -> None:
        raise ValueError("broken")

    async def finish() -> None:
        return None

    failed, finished = asyncio.create_task(fail()), asyncio.create_task(finish())
    await asyncio.wait([failed, finished], timeout=5)  # both ended before the cancel
    assert failed.done() and finished.done(), "the two tasks did not end within 5 s"
    outcomes = await cancel_and_wait([failed, None, finished])
    assert isinstance(outcomes[0], ValueError) and outcomes[1] is None
