"""What the client says for the server's refusals that ask a user to wait or resend."""

from __future__ import annotations

import json

import pytest

from orchestrator.base.errors import InputError
from orchestrator.client.remote import Remote


@pytest.mark.parametrize("status, words", [
    (429, "is busy: alice has 2 git commands running"),
    (408, "alice has 2 git commands running"),
])
def test_busy_and_too_slow_are_bad_input_that_says_what_to_do(status, words):
    raw = json.dumps({"error": "alice has 2 git commands running", "hint": None}).encode()
    e = Remote("http://127.0.0.1:1", "t")._error(status, raw)
    assert isinstance(e, InputError) and e.exit_code == 2 and words in e.message
    assert status != 429 or "try again" in (e.hint or "")
