"""Turn memory (loop anchors): record once, find, latest, hybrid search, slices within a budget, and restart."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec
import pytest

from autarch.contracts import subjects
from autarch.contracts.errors import ErrorCode
from autarch.contracts.turns import (
    FindTurn,
    LatestTurn,
    RecordTurns,
    SearchTurns,
    SliceView,
    TurnFound,
    TurnHits,
    TurnRecord,
    TurnSlice,
    TurnsRecorded,
)
from autarch.runtime.errors import RemoteError
from autarch.runtime.requests import request
from autarch.runtime.settings import load_settings
from autarch.services.indexer.service import start
from autarch.services.indexer.turn_memory import TurnMemory

PROJECT = "/srv/shop"
T0 = datetime(2026, 11, 25, 6, 0, tzinfo=UTC)

TEXTS = [
    "Designed the payment flow: Stripe checkout sessions, webhooks confirm the charge before the order ships.",
    "Renamed the CSS classes of the header and fixed the logo's alignment on small screens.",
    "Added pagination to the product list endpoint with limit and offset query parameters.",
    "Wrote the database migration that adds an index on orders.created_at for the monthly report.",
    "Set up the logging configuration: JSON lines to stdout, request ids in every record.",
]


def turn(n: int, text: str, *, session: str = "s1", project: str = PROJECT, tokens: int = 100) -> TurnRecord:
    return TurnRecord(turn_id=f"t{n}", session_id=session, project_path=project, index=n, user_text=f"step {n}",
                      text=text, occurred_at=T0 + timedelta(minutes=n), tokens=tokens)


@pytest.fixture
def memory(tmp_path, embedder):
    memory = TurnMemory(tmp_path / "turns.sqlite", embedder)
    yield memory
    memory.close()


def test_record_is_idempotent_and_find_respects_the_project(memory):
    assert memory.record([turn(i, t) for i, t in enumerate(TEXTS)]) == (5, 5)
    assert memory.record([turn(0, TEXTS[0]), turn(9, "other", project="/srv/other")]) == (1, 6)
    found = memory.find("t2")
    assert found is not None and found.text == TEXTS[2]
    assert memory.find("t2", PROJECT) == found
    assert memory.find("t2", "/srv/other") is None and memory.find("nope") is None
    assert memory.latest(PROJECT).turn_id == "t4" and memory.latest("/srv/other").turn_id == "t9"
    assert memory.latest("/srv/none") is None


def test_search_finds_the_paraphrased_turn_first(memory):
    memory.record([turn(i, t) for i, t in enumerate(TEXTS)])
    # Asked the way a goal is written, with none of the turn's own words for the key idea.
    hits = memory.search(PROJECT, "accept card payments at checkout", limit=3)
    assert hits[0].turn_id == "t0" and 0 < hits[0].score <= 1
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert memory.search(PROJECT, "slow monthly report query", limit=1)[0].turn_id == "t3"
    assert memory.search("/srv/none", "anything", limit=3) == []


def test_a_slice_grows_around_the_anchor_within_the_budget(memory):
    memory.record([turn(i, t, tokens=100) for i, t in enumerate(TEXTS)])
    memory.record([turn(20, "another conversation", session="s2")])
    whole = memory.slice("t2", 1000)
    assert whole.turn_ids == ["t0", "t1", "t2", "t3", "t4"] and whole.node_count == 5 and whole.depth == 2
    three = memory.slice("t2", 300)
    assert three.turn_ids == ["t1", "t2", "t3"] and three.tokens == 300
    assert memory.slice("t2", 300).slice_id == three.slice_id != whole.slice_id
    assert memory.slice("t0", 250).turn_ids == ["t0", "t1"]
    assert memory.slice("t2", 50).turn_ids == ["t2"]  # the anchor always, even over the budget
    assert memory.slice("nope", 100) is None


def _reference_slice(turns: list[TurnRecord], turn_id: str, budget: int) -> list[str]:
    """The slice rule written out plainly: the anchor's session sorted by index, grown before then after."""
    anchor = next(t for t in turns if t.turn_id == turn_id)
    conversation = sorted((t for t in turns if t.session_id == anchor.session_id), key=lambda t: t.index)
    position = next(i for i, t in enumerate(conversation) if t.turn_id == turn_id)
    first = last = position
    spent = anchor.tokens
    before = after = True
    while before or after:
        if before:
            if first > 0 and spent + conversation[first - 1].tokens <= budget:
                first -= 1
                spent += conversation[first].tokens
            else:
                before = False
        if after:
            if last + 1 < len(conversation) and spent + conversation[last + 1].tokens <= budget:
                last += 1
                spent += conversation[last].tokens
            else:
                after = False
    return [t.turn_id for t in conversation[first:last + 1]]


def test_slices_of_a_long_session_whose_turns_came_out_of_order(memory, tmp_path, embedder):
    import random

    rng = random.Random(5)
    # A loop's session of 400 turns, some recorded late (a retried iteration), two sessions interleaved, and
    # repeated indexes (a resumed conversation): the slice is the same stretch a sort of the session gives.
    numbers = list(range(400))
    for _ in range(40):
        i, j = rng.randrange(400), rng.randrange(400)
        numbers[i], numbers[j] = numbers[j], numbers[i]
    turns = [TurnRecord(turn_id=f"t{n}", session_id="loop" if n % 3 else "other", project_path=PROJECT,
                        index=n // 2, user_text=f"iteration {n}", text=f"did step {n}",
                        occurred_at=T0 + timedelta(seconds=n), tokens=rng.randrange(20, 200))
             for n in numbers]
    for batch in range(0, len(turns), 7):
        memory.record(turns[batch:batch + 7])
    for turn_id in ("t0", "t1", "t2", "t199", "t200", "t398", "t399", *(f"t{rng.randrange(400)}" for _ in range(30))):
        for budget in (10, 150, 600, 5000, 100_000):
            assert memory.slice(turn_id, budget).turn_ids == _reference_slice(turns, turn_id, budget), (turn_id, budget)
    memory.close()
    again = TurnMemory(tmp_path / "turns.sqlite", embedder)  # loaded back in one batch, in recorded order
    try:
        for turn_id in ("t5", "t250", "t399"):
            assert again.slice(turn_id, 600).turn_ids == _reference_slice(turns, turn_id, 600)
    finally:
        again.close()


def test_a_search_sees_the_turns_recorded_after_it_and_not_before(memory):
    memory.record([turn(i, t) for i, t in enumerate(TEXTS)])
    assert memory.search(PROJECT, "stripe webhooks", limit=1)[0].turn_id == "t0"
    # The postings grow in place: a later turn sharing the query's words is found, and ranks by the same rule.
    for n in range(5, 60):
        memory.record([turn(n, f"unrelated work number {n} on the admin pages")])
    memory.record([turn(60, "Stripe webhooks retried with idempotency keys; the checkout confirms once.")])
    ids = [h.turn_id for h in memory.search(PROJECT, "stripe webhooks", limit=2)]
    assert set(ids) == {"t0", "t60"}


def test_the_turn_memory_holds_numpy_to_one_blas_thread(tmp_path):
    import subprocess
    import sys

    # In a process of its own: the limit is per process, and this one may have set it already.
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from threadpoolctl import threadpool_info\n"
        "from autarch.services.indexer.turn_memory import TurnMemory\n"
        "class Flat:\n"
        "    dim = 8\n"
        "    def embed(self, texts, kind='document'):\n"
        "        import numpy as np\n"
        "        return np.ones((len(texts), 8), dtype=np.float32)\n"
        "TurnMemory(Path(sys.argv[1]), Flat()).close()\n"
        "print(sorted({i['num_threads'] for i in threadpool_info() if i['user_api'] == 'blas'}))\n"
    )
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path / "turns.sqlite")], capture_output=True,
                         text=True, check=True, env={"OPENBLAS_NUM_THREADS": "2", "PATH": "/usr/bin:/bin"})
    assert out.stdout.strip() == "[1]"


def test_turns_survive_a_restart(tmp_path, embedder):
    first = TurnMemory(tmp_path / "turns.sqlite", embedder)
    first.record([turn(i, t) for i, t in enumerate(TEXTS)])
    first.close()
    again = TurnMemory(tmp_path / "turns.sqlite", embedder)
    try:
        assert again.find("t3").text == TEXTS[3]
        assert again.search(PROJECT, "accept card payments at checkout", limit=1)[0].turn_id == "t0"
        assert again.record([turn(1, TEXTS[1])]) == (0, 5)
    finally:
        again.close()


# --- the service, over a real nats-server ------------------------------------------------------------

VERB = {verb: subjects.request("indexer", verb) for verb in subjects.INDEXER_VERBS}
SHOP_TURNS = [
    ("Add JWT validation to the API",
     "Added a middleware that checks the bearer token's signature and expiry on every /api route; a bad token "
     "is a 401 with a JSON body. Tests cover an expired token and a token signed with another key."),
    ("Speed up the product list",
     "The product list endpoint now pages with limit and offset, and the category filter uses the new index on "
     "products.category_id. The list answers in 40 ms instead of 900 ms on the staging data."),
    ("Fix the flaky checkout test",
     "The checkout test waited on a fixed sleep for the webhook; it now waits for the order's paid event. "
     "Ran it 200 times without a failure."),
    ("Make emails readable on phones",
     "Rewrote the order confirmation email template with a single-column layout and inline styles; checked it "
     "in the mail preview at 375 px."),
    ("Nightly export of orders",
     "A scheduled job writes yesterday's orders to a CSV file in the reports bucket at 02:00 UTC, and retries "
     "three times when the upload fails."),
    ("Translate the storefront",
     "Moved every storefront string into the messages catalogue and added German and French translations; "
     "the language follows the Accept-Language header."),
]


def shop_turn(n: int, *, session: str = "loop-1", project: str = PROJECT, tokens: int = 80,
              turn_id: str | None = None) -> TurnRecord:
    user_text, text = SHOP_TURNS[n]
    return TurnRecord(turn_id=turn_id or f"{session}-t{n}", session_id=session, project_path=project, index=n,
                      user_text=user_text, text=text, occurred_at=T0 + timedelta(minutes=n), loop_session_id=session,
                      iteration_number=n + 1, tokens=tokens)


@pytest.fixture
def settings(data_dir):
    return load_settings({"data_dir": str(data_dir)}, environ={})


@pytest.fixture
async def service(nc, settings, embedder):
    stop = await start(nc, settings)
    yield
    await stop()


async def _record(nc, turns: list[TurnRecord]) -> TurnsRecorded:
    return await request(nc, VERB["record_turns"], RecordTurns(turns=turns), TurnsRecorded)


async def _find(nc, turn_id: str, project_path: str | None = None) -> TurnRecord | None:
    return (await request(nc, VERB["find_turn"], FindTurn(turn_id=turn_id, project_path=project_path),
                          TurnFound)).turn


async def _error(call) -> RemoteError:
    with pytest.raises(RemoteError) as error:
        await call
    return error.value


async def test_service_records_once_and_finds_within_the_project(nc, service) -> None:
    turns = [shop_turn(n) for n in range(len(SHOP_TURNS))]
    assert await _record(nc, turns) == TurnsRecorded(recorded=6, total=6)
    again = await _record(nc, [*turns[:2], shop_turn(0, project="/srv/blog", turn_id="blog-t0")])
    assert (again.recorded, again.total) == (1, 7)  # the batch's projects: 6 of the shop, 1 of the blog
    found = await _find(nc, "loop-1-t2", PROJECT)
    assert found == turns[2]
    assert await _find(nc, "loop-1-t2") == turns[2]
    assert await _find(nc, "loop-1-t2", "/srv/blog") is None
    assert await _find(nc, "no-such-turn") is None
    latest = await request(nc, VERB["latest_turn"], LatestTurn(project_path=PROJECT), TurnFound)
    assert latest.turn is not None and latest.turn.turn_id == "loop-1-t5"
    # Same time: the higher index is the later turn.
    await _record(nc, [TurnRecord(turn_id="late-a", session_id="loop-2", project_path="/srv/tie", index=3,
                                  user_text="a", text="a", occurred_at=T0),
                       TurnRecord(turn_id="late-b", session_id="loop-2", project_path="/srv/tie", index=4,
                                  user_text="b", text="b", occurred_at=T0)])
    tie = await request(nc, VERB["latest_turn"], LatestTurn(project_path="/srv/tie"), TurnFound)
    assert tie.turn is not None and tie.turn.turn_id == "late-b"
    nothing = await request(nc, VERB["latest_turn"], LatestTurn(project_path="/srv/empty"), TurnFound)
    assert nothing.turn is None


async def test_service_search_ranks_the_paraphrased_turn_first(nc, service) -> None:
    await _record(nc, [shop_turn(n) for n in range(len(SHOP_TURNS))])
    # Another project's turn on the same subject must not come back.
    await _record(nc, [shop_turn(0, project="/srv/blog", turn_id="blog-auth")])
    for goal, expected in (
        ("reject requests whose access token is forged or out of date", "loop-1-t0"),
        ("the catalogue page is too slow to load", "loop-1-t1"),
        ("the purchase test fails now and then", "loop-1-t2"),
        ("spreadsheet of sales every night", "loop-1-t4"),
        ("support customers who speak other languages", "loop-1-t5"),
    ):
        hits = await request(nc, VERB["search_turns"], SearchTurns(project_path=PROJECT, query=goal, limit=3),
                             TurnHits)
        assert hits.items[0].turn_id == expected, (goal, hits.items)
        assert len(hits.items) == 3 and all(0 <= h.score <= 1 for h in hits.items)
        assert "blog-auth" not in {h.turn_id for h in hits.items}
        first = hits.items[0]
        assert first.session_id == "loop-1" and first.index == int(expected[-1]) and first.excerpt
    none = await request(nc, VERB["search_turns"], SearchTurns(project_path="/srv/empty", query="anything"), TurnHits)
    assert none.items == []


async def test_service_slice_keeps_to_the_budget_in_conversation_order(nc, service) -> None:
    await _record(nc, [shop_turn(n, tokens=100) for n in range(len(SHOP_TURNS))])
    await _record(nc, [shop_turn(2, session="loop-2", tokens=100)])  # another conversation: never in the slice
    ask = lambda turn_id, budget: request(nc, VERB["turn_slice"],  # noqa: E731
                                          TurnSlice(turn_id=turn_id, token_budget=budget), SliceView)
    view = await ask("loop-1-t2", 350)
    assert view.turn_ids == ["loop-1-t1", "loop-1-t2", "loop-1-t3"] and view.tokens == 300 <= 350
    assert view.node_count == 3 and view.depth == 2 and view.anchor_turn_id == "loop-1-t2"
    assert [t.turn_id for t in view.turns] == view.turn_ids and [t.index for t in view.turns] == [1, 2, 3]
    # Nearest first, before then after: a fourth turn goes before the anchor.
    assert (await ask("loop-1-t2", 400)).turn_ids == ["loop-1-t0", "loop-1-t1", "loop-1-t2", "loop-1-t3"]
    assert (await ask("loop-1-t2", 350)).slice_id == view.slice_id != (await ask("loop-1-t2", 400)).slice_id
    assert (await ask("loop-1-t5", 10_000)).turn_ids == [f"loop-1-t{n}" for n in range(6)]
    assert (await ask("loop-1-t0", 250)).turn_ids == ["loop-1-t0", "loop-1-t1"]
    tiny = await ask("loop-1-t4", 1)
    assert tiny.turn_ids == ["loop-1-t4"] and tiny.tokens == 100  # the anchor always
    missing = await _error(ask("no-such-turn", 100))
    assert missing.code == ErrorCode.NOT_FOUND


async def test_service_bad_input_is_a_typed_error_and_changes_nothing(nc, service) -> None:
    good = msgspec.to_builtins(shop_turn(0))
    for verb, payload in (
        ("record_turns", {"turns": [{"turn_id": "x"}]}),
        ("record_turns", {"turns": "not a list"}),
        ("record_turns", {"turns": [good, {**good, "turn_id": "y", "project_path": " "}]}),
        ("record_turns", {"turns": [{**good, "turn_id": ""}]}),
        ("record_turns", {"turns": [{**good, "index": -1}]}),
        ("record_turns", {"turns": [{**good, "occurred_at": "yesterday"}]}),
        ("find_turn", {"turn_id": ""}),
        ("find_turn", {}),
        ("latest_turn", {"project_path": ""}),
        ("search_turns", {"project_path": PROJECT, "query": ""}),
        ("search_turns", {"project_path": PROJECT, "query": "   "}),
        ("search_turns", {"project_path": PROJECT, "query": "x", "limit": 0}),
        ("search_turns", {"project_path": PROJECT, "query": "x", "limit": 101}),
        ("turn_slice", {"turn_id": "x", "token_budget": 0}),
        ("turn_slice", {"token_budget": 10}),
    ):
        error = await _error(request(nc, VERB[verb], payload, dict))
        assert error.code == ErrorCode.BAD_REQUEST, (verb, payload)
    raw = await nc.request(VERB["find_turn"], b"{not json", timeout=5)
    assert msgspec.json.decode(raw.data)["code"] == ErrorCode.BAD_REQUEST
    assert await _find(nc, good["turn_id"]) is None  # the rejected batch recorded nothing
    # A naive time is taken as UTC and the service still answers.
    naive = {**good, "occurred_at": "2026-11-25T06:30:00"}
    assert (await request(nc, VERB["record_turns"], {"turns": [naive]}, TurnsRecorded)).recorded == 1
    assert (await _find(nc, good["turn_id"])).occurred_at == datetime(2026, 11, 25, 6, 30, tzinfo=UTC)


async def test_service_turns_survive_a_restart(nc, settings, embedder) -> None:
    stop = await start(nc, settings)
    try:
        await _record(nc, [shop_turn(n) for n in range(len(SHOP_TURNS))])
    finally:
        await stop()
    stop = await start(nc, settings)
    try:
        assert await _find(nc, "loop-1-t3", PROJECT) == shop_turn(3)
        assert (await _record(nc, [shop_turn(3)])) == TurnsRecorded(recorded=0, total=6)
        hits = await request(nc, VERB["search_turns"],
                             SearchTurns(project_path=PROJECT, query="spreadsheet of sales every night", limit=1),
                             TurnHits)
        assert hits.items[0].turn_id == "loop-1-t4"
        view = await request(nc, VERB["turn_slice"], TurnSlice(turn_id="loop-1-t5", token_budget=160), SliceView)
        assert view.turn_ids == ["loop-1-t4", "loop-1-t5"]
    finally:
        await stop()
    assert any(settings.data_path.rglob("turns.sqlite"))  # under the indexer's data dir
