"""The pure parts of oxray.data: blocks, batching, dealing a split, fusing operators."""

import collections

import numpy as np
import pytest

from oxray.data import _block, _plan, _shuffle, _split, _transforms
from oxray.data._batcher import batch_blocks
from oxray.data._plan import ActorPoolStrategy, LimitOp, MapOp, Piece, ReadSource


def ids(blocks):
    return [b["id"].tolist() for b in blocks]


def test_batches_cross_block_boundaries_and_keep_the_remainder():
    blocks = [{"id": np.arange(0, 3)}, {"id": np.arange(3, 8)}, {"id": np.arange(8, 10)}]
    assert ids(batch_blocks(blocks, 4)) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert ids(batch_blocks(blocks, 4, drop_last=True)) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert ids(batch_blocks(blocks, None)) == [[0, 1, 2], [3, 4, 5, 6, 7], [8, 9]]


def test_a_local_shuffle_keeps_every_row_once_and_is_seeded():
    blocks = [{"id": np.arange(i * 10, i * 10 + 10)} for i in range(10)]
    first = ids(batch_blocks(blocks, 8, shuffle_buffer=20, seed=1))
    again = ids(batch_blocks(blocks, 8, shuffle_buffer=20, seed=1))
    assert first == again
    rows = [r for batch in first for r in batch]
    assert sorted(rows) == list(range(100)) and rows != list(range(100))
    assert all(len(b) == 8 for b in first[:-1])
    assert all(_block.num_rows(b) == 8 for b in batch_blocks(blocks, 8, drop_last=True, shuffle_buffer=20, seed=1))


def test_an_equal_split_never_lets_a_consumer_take_more_than_its_share():
    buffer = collections.deque([Piece("a", 0, 11, 88)])
    given = [0, 0]
    got, rows = _split.deal(buffer, _split.equal_allowance(11, given[0], 2))
    assert rows == 5 and got == [Piece("a", 0, 5, 40)]
    given[0] += rows
    assert _split.equal_allowance(11, given[0], 2) == 0
    got, rows = _split.deal(buffer, _split.equal_allowance(11, given[1], 2))
    assert rows == 5 and got == [Piece("a", 5, 10, 40)]
    assert [p.rows for p in buffer] == [1]  # the remainder: dropped at the end of the epoch


def test_pieces_cut_across_blocks():
    pieces = [Piece("a", 0, 4, 40), Piece("b", 2, 8, 60)]
    assert _shuffle.cut(pieces, 3, 7) == [Piece("a", 3, 4, 10), Piece("b", 2, 5, 30)]
    assert _plan.row_ranges(10, 3) == [(0, 4), (4, 7), (7, 10)]
    kept, left = _plan.apply_limit(pieces, 5)
    assert [p.rows for p in kept] == [4, 1] and left == 0


def test_bundles_reach_a_batch_size_or_wait():
    queue = [Piece("a", 0, 3, 0), Piece("b", 0, 3, 0), Piece("c", 0, 3, 0)]
    assert _plan.bundle(queue, None, False) == 1
    assert _plan.bundle(queue, 5, False) == 2
    assert _plan.bundle(queue, 100, False) is None
    assert _plan.bundle(queue, 100, True) == 3


def test_task_maps_fuse_with_the_read_and_actor_maps_do_not():
    read = ReadSource("ReadRange", ())
    a = MapOp(_transforms.MapRows(lambda r: r))
    b = MapOp(_transforms.MapBatches(lambda b: b, 64, "numpy"), min_rows=64)
    gpu = MapOp(_transforms.MapRows(lambda r: r), remote_args={"num_gpus": 1})

    class Model:
        def __call__(self, batch):
            return batch

    actor = MapOp(_transforms.MapBatches(Model, 8, "numpy"), ActorPoolStrategy(size=2), {}, 8)
    ops = _plan.physical(read, (a, b, gpu, actor, LimitOp(5)))
    kinds = [type(op).__name__ for op in ops]
    assert kinds == ["TaskStage", "TaskStage", "TaskStage", "ActorStage", "Limit"]
    assert ops[0].stage.name == "ReadRange->Map(<lambda>)"
    fused = _plan.physical(read, (b, a))
    assert len(fused) == 1 and fused[0].stage.name == "ReadRange->MapBatches(<lambda>)->Map(<lambda>)"


def test_blocks_convert_between_formats():
    pa = pytest.importorskip("pyarrow")
    pytest.importorskip("pandas")
    block = {"id": np.arange(3), "image": np.zeros((3, 2, 2), dtype=np.uint8),
             "name": np.array(["a", "b", "c"], dtype=object)}
    table = _block.to_arrow(block)
    back = _block.to_numpy(table)
    assert back["image"].shape == (3, 2, 2) and back["name"].tolist() == ["a", "b", "c"]
    frame = _block.to_pandas(block)
    assert list(frame.columns) == ["id", "image", "name"]
    assert _block.num_rows(_block.from_batch(frame, "t")) == 3
    assert _block.concat([block, table]).num_rows == 6
    assert isinstance(_block.from_batch(pa.table({"x": [1]}), "t"), pa.Table)


def test_batch_functions_that_return_the_wrong_thing_are_named():
    with pytest.raises(TypeError, match="MapBatches\\(f\\) must return a dict of numpy arrays"):
        _block.from_batch([1, 2], "MapBatches(f)")
    with pytest.raises(ValueError, match="columns of different lengths"):
        _block.from_batch({"a": [1, 2], "b": [1]}, "MapBatches(f)")
    with pytest.raises(KeyError, match="no column 'nope'; the data has \\['id'\\]"):
        _block.select({"id": np.arange(2)}, ["nope"], "SelectColumns")


def test_rows_become_typed_columns():
    block = _block.from_rows([{"a": 1, "s": "x", "t": np.ones(2)}, {"a": 2, "s": "y", "t": np.ones(2)}], "t")
    assert block["a"].dtype == np.int64 and block["s"].dtype == object and block["t"].shape == (2, 2)
    assert list(_block.iter_rows({"id": np.arange(2)})) == [{"id": 0}, {"id": 1}]
    assert type(next(_block.iter_rows({"id": np.arange(2)}))["id"]) is int


def test_user_errors_name_the_operator():
    def boom(row):
        raise ValueError("bad row")

    t = _transforms.MapRows(boom)
    with pytest.raises(Exception, match=r"Map\(.*boom\) failed on a block of 2 rows: ValueError: bad row"):
        t.apply({"id": np.arange(2)})


def test_actor_pool_bounds():
    assert ActorPoolStrategy(size=3).bounds(8) == (3, 3)
    assert ActorPoolStrategy(min_size=2).bounds(8) == (2, 8)
    assert ActorPoolStrategy(min_size=2, max_size=4).bounds(8) == (2, 4)
    with pytest.raises(ValueError):
        ActorPoolStrategy(min_size=3, max_size=2)
    with pytest.raises(ValueError):
        ActorPoolStrategy(size=0)
