"""The all-to-all operators: they run once their whole input is made, as tasks over its
pieces (a block reference and a row range)."""

import random
from typing import List, Optional

import numpy as np

import oxray
from oxray.data import _block
from oxray.data._plan import Piece, row_ranges


def _meta(block):
    return {"rows": _block.num_rows(block), "bytes": _block.size_bytes(block),
            "schema": _block.Schema.of(block) if _block.column_names(block) else None}


def _concat_task(bounds, *blocks):
    block = _block.concat([_block.slice_block(b, s, e) for b, (s, e) in zip(blocks, bounds)])
    return block, _meta(block)


def _shuffle_map(seed, parts: int, start: int, stop: int, block):
    """Rows of one input block, shuffled and cut into `parts` parts (one per output)."""
    block = _block.slice_block(block, start, stop)
    rows = _block.num_rows(block)
    shuffled = _block.take_rows(block, np.random.default_rng(seed).permutation(rows))
    cuts = np.linspace(0, rows, parts + 1).astype(int)
    out = [_block.slice_block(shuffled, int(cuts[i]), int(cuts[i + 1])) for i in range(parts)]
    return out[0] if parts == 1 else tuple(out)


def _shuffle_reduce(seed, *parts):
    block = _block.concat(list(parts))
    block = _block.take_rows(block, np.random.default_rng(seed).permutation(_block.num_rows(block)))
    return block, _meta(block)


def _strategy():
    from oxray.data.context import DataContext

    return DataContext.get_current().scheduling_strategy


def _collect(launched) -> List[Piece]:
    pieces = []
    for block_ref, meta_ref in launched:
        meta = oxray.get(meta_ref)
        pieces.append(Piece(block_ref, 0, meta["rows"], meta["bytes"], meta["schema"]))
    return pieces


def randomize_block_order(pieces: List[Piece], seed: Optional[int]) -> List[Piece]:
    out = list(pieces)
    random.Random(seed).shuffle(out)
    return out


def cut(pieces: List[Piece], start: int, stop: int) -> List[Piece]:
    """The pieces covering rows `start:stop` of the concatenation of `pieces`."""
    out, at = [], 0
    for piece in pieces:
        lo, hi = max(start, at), min(stop, at + piece.rows)
        if lo < hi:
            out.append(piece.cut(lo - at, hi - at))
        at += piece.rows
        if at >= stop:
            break
    return out


def repartition(pieces: List[Piece], num_blocks: int) -> List[Piece]:
    total = sum(p.rows for p in pieces)
    task = oxray.remote(_concat_task).options(num_returns=2, scheduling_strategy=_strategy())
    launched = []
    for start, stop in row_ranges(total, num_blocks):
        part = cut(pieces, start, stop)
        launched.append(task.remote([(p.start, p.stop) for p in part], *[p.ref for p in part]))
    return _collect(launched)


def random_shuffle(pieces: List[Piece], seed: Optional[int], num_blocks: Optional[int] = None) -> List[Piece]:
    pieces = [p for p in pieces if p.rows]
    if not pieces:
        return []
    outputs = num_blocks or len(pieces)
    base = random.Random(seed).randrange(2**31) if seed is not None else random.randrange(2**31)
    mapper = oxray.remote(_shuffle_map).options(num_returns=outputs, scheduling_strategy=_strategy())
    parts = []
    for j, p in enumerate(pieces):
        made = mapper.remote(base + j, outputs, p.start, p.stop, p.ref)
        parts.append([made] if outputs == 1 else made)
    reducer = oxray.remote(_shuffle_reduce).options(num_returns=2, scheduling_strategy=_strategy())
    launched = [reducer.remote(base + 7919 * (i + 1), *[parts[j][i] for j in range(len(pieces))])
                for i in range(outputs)]
    return _collect(launched)
