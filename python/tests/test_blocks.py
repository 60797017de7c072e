"""The KV geometry in Python: two block-id types that do not mix, and the one mapping."""
import pytest

import kvferry
from kvferry import BlockGeometry, KernelBlockId, LogicalBlockId


def test_logical_maps_to_its_kernel_blocks():
    g = BlockGeometry(block_size_logical=128, block_size_kernel=32)
    assert g.kernel_blocks_per_logical == 4
    assert g.kernel_blocks_of(LogicalBlockId(2)) == [KernelBlockId(v) for v in (8, 9, 10, 11)]
    assert g.expand_block_table([LogicalBlockId(1), LogicalBlockId(0)]) == [
        KernelBlockId(v) for v in (4, 5, 6, 7, 0, 1, 2, 3)]
    assert g.logical_block_owning(KernelBlockId(7)) == LogicalBlockId(1)
    assert g.logical_blocks_for(129) == 2 and g.kernel_blocks_for(129) == 5


def test_a_kernel_id_is_not_a_logical_id():
    g = BlockGeometry(128, 16)
    with pytest.raises(TypeError):
        g.kernel_blocks_of(KernelBlockId(1))
    with pytest.raises(TypeError):
        g.logical_block_owning(LogicalBlockId(1))
    with pytest.raises(TypeError):
        g.kernel_blocks_of(1)  # a bare int is neither
    with pytest.raises(TypeError):
        g.expand_block_table([LogicalBlockId(0), KernelBlockId(1)])
    assert LogicalBlockId(3) != KernelBlockId(3)
    assert LogicalBlockId(3) == LogicalBlockId(3)
    assert len({LogicalBlockId(3), LogicalBlockId(3), LogicalBlockId(4)}) == 2
    assert repr(KernelBlockId(5)) == "KernelBlockId(5)" and int(KernelBlockId(5)) == 5


def test_bad_geometry_and_ids_raise_with_the_code():
    with pytest.raises(kvferry.InvalidArgumentError) as e:
        BlockGeometry(100, 32)
    assert e.value.code == kvferry.StatusCode.INVALID_ARGUMENT
    assert "100" in e.value.message and "32" in e.value.message
    assert isinstance(e.value, ValueError) and isinstance(e.value, kvferry.KvferryError)
    with pytest.raises(kvferry.InvalidArgumentError):
        BlockGeometry(0, 16)
    with pytest.raises(kvferry.InvalidArgumentError, match="negative"):
        BlockGeometry(32, 16).kernel_blocks_of(LogicalBlockId(-1))


def test_head_sharding_is_the_cpp_rule():
    shares = kvferry.HeadSharding(num_kv_heads=8, tp_size=4)
    assert shares.heads_per_rank == 2 and shares.num_copies == 1
    assert [shares.first_head(r) for r in range(4)] == [0, 2, 4, 6]
    copies = kvferry.HeadSharding(2, 4)  # fewer heads than ranks: each head on two ranks
    assert copies.heads_per_rank == 1 and copies.num_copies == 2
    assert [copies.first_head(r) for r in range(4)] == [0, 0, 1, 1]
    with pytest.raises(kvferry.InvalidArgumentError) as e:
        kvferry.HeadSharding(8, 3)
    assert "8 KV heads" in e.value.message and "3" in e.value.message
    with pytest.raises(kvferry.OutOfRangeError):
        shares.first_head(4)
    assert kvferry.HeadSharding(8, 4) == shares
