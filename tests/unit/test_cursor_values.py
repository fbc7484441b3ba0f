"""Cursor.advance() refuses what the database cannot store, in the handler.

Saved later, with the job's success, such a value was refused by the database: the
outcome was dropped and the job ran again until it failed as "lease expired".
"""

from __future__ import annotations

import pytest

from scheduler_app.bounds import LARGEST_INTEGER
from scheduler_app.cursors import Cursor


@pytest.mark.parametrize(
    ("value", "processed", "message"),
    [
        (
            "2026-06-01\x00",
            None,
            "The value of cursor 'feed' contains a NUL character (\\x00), "
            "which the database cannot store.",
        ),
        (
            {"after": ["\ud800"]},
            None,
            "The value of cursor 'feed' contains text that is not valid Unicode "
            "(a surrogate code point), which the database cannot store.",
        ),
        (
            float("nan"),
            None,
            "The value of cursor 'feed' contains NaN or Infinity, which JSON cannot represent.",
        ),
        ("ok", -1, "Cursor 'feed': processed must be an integer from 0 to 2147483647."),
        (
            "ok",
            LARGEST_INTEGER + 1,
            "Cursor 'feed': processed must be an integer from 0 to 2147483647.",
        ),
    ],
    ids=["nul", "lone-surrogate", "nan", "negative", "past-the-column"],
)
def test_an_unstorable_proposal_is_refused_in_the_handler(value, processed, message):
    cursor = Cursor("feed", None)

    with pytest.raises(ValueError) as refused:
        cursor.advance(value, processed=processed)

    assert str(refused.value) == message
    assert cursor.proposal is None


def test_the_largest_storable_count_and_json_values_are_proposed():
    cursor = Cursor("feed", None)

    cursor.advance({"after": "2026-06-01T00:00:00+00:00", "ids": [1, 2]}, processed=LARGEST_INTEGER)

    assert cursor.proposal.value == {"after": "2026-06-01T00:00:00+00:00", "ids": [1, 2]}
    assert cursor.proposal.processed == LARGEST_INTEGER
