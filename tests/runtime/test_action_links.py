"""Action links (runtime/action_links.py): what a signed link says, and every way a link is refused before anything
is asked of the orchestrator. The end-to-end use is in tests/notifier/test_approvals_e2e.py."""

from __future__ import annotations

import base64
import json
import stat
from pathlib import Path

import pytest

from autarch.runtime.action_links import KEY_FILE, LinkRefused, key_of, mint, verify

KEY = b"k" * 43
WID = "0b7f6c1e-3a51-4d5e-9a57-5a3c2f0e8b11"


def _mint(**changes: object) -> str:
    fields: dict[str, object] = {"run_id": WID, "stage": "planning", "card_version": 17, "action": "approve",
                                 "channel": "telegram", "ttl": 600, "now": 1_000_000.0, **changes}
    token, _ = mint(KEY, **fields)  # type: ignore[arg-type]  # each test changes some fields; mint checks them
    return token


def _refused(token: str, *, key: bytes = KEY, now: float = 1_000_100.0) -> str:
    with pytest.raises(LinkRefused) as caught:
        verify(key, token, now=now)
    return caught.value.reply.code


def test_a_link_says_one_action_on_one_card_until_its_expiry() -> None:
    link = verify(KEY, _mint(), now=1_000_100.0)
    assert (link.run_id, link.stage, link.card_version, link.action, link.channel, link.expires_at) == (
        WID, "planning", 17, "approve", "telegram", 1_000_600)
    assert len(link.nonce) == 16
    assert verify(KEY, _mint(), now=1_000_100.0).nonce != link.nonce  # every link its own nonce


def test_an_expired_link_is_refused() -> None:
    assert _refused(_mint(), now=1_000_601.0) == "link_expired"


def test_a_changed_link_is_refused_as_forged() -> None:
    token = _mint()
    body, signature = token.split(".")
    fields = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    for change in ({"a": "request_changes"}, {"v": 18}, {"e": 9_999_999_999}, {"w": WID.replace("0", "1")}):
        changed = base64.urlsafe_b64encode(json.dumps({**fields, **change}).encode()).rstrip(b"=").decode()
        assert _refused(f"{changed}.{signature}") == "link_forged", change
    assert _refused(token, key=b"another key") == "link_forged"


def test_no_other_spelling_of_a_signature_is_accepted() -> None:
    # A 43-character signature has two spare bits in its last character, and a lenient base64 decoder skips
    # characters outside its alphabet: a check on the decoded bytes would take these as the same signature.
    body, signature = _mint().split(".")
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    for at in range(len(signature)):
        for other in alphabet.replace(signature[at], ""):
            assert _refused(f"{body}.{signature[:at]}{other}{signature[at + 1:]}") == "link_forged", (at, other)
    for spelling in (signature + "=", signature + "A", signature.replace("-", "+").replace("_", "/"),
                     signature[:10] + "$" + signature[10:]):
        if spelling != signature:
            assert _refused(f"{body}.{spelling}") in ("link_forged", "link_malformed"), spelling


def test_what_is_no_link_at_all_is_malformed() -> None:
    for token in ("", "nodot", ".", "abc.", ".abc", "a.b.c!", "é.é"):
        assert _refused(token) in ("link_malformed", "link_forged"), token
    assert _refused("nodot") == "link_malformed"


def test_the_key_is_the_systems_own_file_readable_by_its_owner_only(tmp_path: Path) -> None:
    key = key_of(tmp_path)
    assert key == key_of(tmp_path)  # made once, then read
    assert stat.S_IMODE((tmp_path / KEY_FILE).stat().st_mode) == 0o600
