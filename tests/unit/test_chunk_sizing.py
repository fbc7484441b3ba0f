"""Chunk sizing: a lane claims about a second of work, within SEND_CHUNK_SIZE."""

from __future__ import annotations

from scheduler_app.sends.chunking import ChunkSizer


def test_the_first_chunk_is_the_starting_size_within_the_cap():
    assert ChunkSizer(cap=1000).next_size() == 100
    assert ChunkSizer(cap=2).next_size() == 2


def test_chunks_grow_to_about_a_second_of_the_observed_speed():
    sizer = ChunkSizer(cap=5000)
    sizer.observe(recipients=100, seconds=0.05)  # 2,000 recipients/s

    assert sizer.next_size() == 2000


def test_chunks_never_exceed_the_cap():
    sizer = ChunkSizer(cap=1000)
    sizer.observe(recipients=100, seconds=0.001)

    assert sizer.next_size() == 1000


def test_a_slow_provider_gets_small_chunks_but_never_empty_ones():
    sizer = ChunkSizer(cap=1000)
    sizer.observe(recipients=3, seconds=1.5)  # 2/s
    assert sizer.next_size() == 2
    sizer.observe(recipients=1, seconds=4.0)
    assert sizer.next_size() == 1


def test_a_chunk_with_nothing_done_leaves_the_size_as_it_was():
    sizer = ChunkSizer(cap=1000)
    sizer.observe(recipients=100, seconds=0.2)  # 500/s
    sizer.observe(recipients=0, seconds=0.3)  # halted at once: says nothing about speed

    assert sizer.next_size() == 500
