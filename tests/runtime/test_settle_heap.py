"""``settle_heap``: a started process's long-lived objects leave the collector's sight; its garbage does not stay."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from autarch.runtime.process import settle_heap


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


@pytest.fixture
def unfrozen() -> Iterator[None]:
    yield
    gc.unfreeze()  # the rest of the test session collects as before


@pytest.mark.usefixtures("unfrozen")
def test_what_lives_is_frozen_and_what_is_garbage_is_collected_first():
    kept = _Node()
    cycle_a, cycle_b = _Node(), _Node()
    cycle_a.other, cycle_b.other = cycle_b, cycle_a  # garbage only the cyclic collector can free
    garbage = weakref.ref(cycle_a)
    del cycle_a, cycle_b

    settle_heap()

    assert garbage() is None, "garbage present at start-up was frozen with the rest"
    assert gc.get_freeze_count() > 0
    assert not any(obj is kept for obj in gc.get_objects())  # the collector no longer walks it


@pytest.mark.usefixtures("unfrozen")
def test_without_collecting_it_freezes_at_once_and_keeps_the_garbage():
    cycle_a, cycle_b = _Node(), _Node()
    cycle_a.other, cycle_b.other = cycle_b, cycle_a
    garbage = weakref.ref(cycle_a)
    del cycle_a, cycle_b

    settle_heap(collect=False)
    gc.collect()

    assert garbage() is not None  # frozen: a collection after the freeze never sees it
