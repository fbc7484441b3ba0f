"""How many recipients a lane claims at once: about a second of work, within a cap.

A chunk is the unit a lane claims, keeps claimed and (for an idempotent
provider) marks; its size trades claim statements against how much one
lane holds. A second of work keeps the claim and marker statements a small
share of the send at any provider speed, while kill switches, which are
checked inside a chunk, are unaffected.
"""

from __future__ import annotations

#: Seconds of work a chunk aims at.
CHUNK_SECONDS = 1.0
#: The first chunk's size (at most the cap), before the lane has seen its speed.
FIRST_CHUNK = 100


class ChunkSizer:
    """Size a lane's next chunk from the speed of its previous one, within [1, cap]."""

    def __init__(self, cap: int) -> None:
        self.cap = max(1, cap)
        self.size = min(self.cap, FIRST_CHUNK)

    def observe(self, *, recipients: int, seconds: float) -> None:
        """Record that the last chunk got through ``recipients`` in ``seconds``."""
        if recipients <= 0 or seconds <= 0:
            return  # halted before any work: nothing learnt about the speed
        wanted = int(recipients / seconds * CHUNK_SECONDS)
        self.size = max(1, min(self.cap, wanted))

    def next_size(self) -> int:
        """Return how many recipients to claim next."""
        return self.size
