"""Cutting a stream of blocks into batches of a fixed size, with an optional local shuffle
buffer. Pure generators over block values."""

from typing import Iterable, Iterator, List, Optional

import numpy as np

from oxray.data import _block


def batch_blocks(blocks: Iterable, batch_size: Optional[int], drop_last: bool = False,
                 shuffle_buffer: Optional[int] = None, seed: Optional[int] = None) -> Iterator:
    """Blocks of exactly `batch_size` rows (the last one smaller unless `drop_last`); with
    `batch_size` None, each block as it is."""
    if shuffle_buffer:
        yield from _shuffled(blocks, batch_size or 1, drop_last, shuffle_buffer, seed)
        return
    if batch_size is None:
        for block in blocks:
            if _block.num_rows(block):
                yield block
        return
    held: List = []  # blocks, the first one from `offset`
    offset = rows = 0
    for block, count in _non_empty(blocks):
        held.append(block)
        rows += count
        while rows >= batch_size:
            parts, need = [], batch_size
            while need:
                first = held[0]
                available = _block.num_rows(first) - offset
                take = min(need, available)
                parts.append(_block.slice_block(first, offset, offset + take))
                need -= take
                offset += take
                if offset == _block.num_rows(first):
                    held.pop(0)
                    offset = 0
            rows -= batch_size
            yield _block.concat(parts)
    if rows and not drop_last:
        yield _block.concat([_block.slice_block(held[0], offset, _block.num_rows(held[0]))] + held[1:])


def _non_empty(blocks: Iterable):
    """(block, rows) for each block that has rows."""
    for block in blocks:
        count = _block.num_rows(block)
        if count:
            yield block, count


def _shuffled(blocks: Iterable, batch_size: int, drop_last: bool, buffer_rows: int, seed: Optional[int]):
    """Rows shuffled within a rolling buffer of at least `buffer_rows` rows (Ray's local
    shuffle): each time the buffer holds a batch more than that, it is shuffled and batches
    are taken from it until it is back to its size."""
    rng = np.random.default_rng(seed)
    held: List = []
    rows = 0

    def shuffle_held():
        merged = _block.concat(held)
        return _block.take_rows(merged, rng.permutation(_block.num_rows(merged)))

    for block, count in _non_empty(blocks):
        held.append(block)
        rows += count
        if rows >= buffer_rows + batch_size:
            shuffled = shuffle_held()
            at = 0
            while rows - at >= buffer_rows + batch_size:
                yield _block.slice_block(shuffled, at, at + batch_size)
                at += batch_size
            held, rows = [_block.slice_block(shuffled, at, rows)], rows - at
    if rows:
        shuffled = shuffle_held()
        for at in range(0, rows, batch_size):
            if rows - at < batch_size and drop_last:
                break
            yield _block.slice_block(shuffled, at, min(rows, at + batch_size))
