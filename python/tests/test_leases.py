"""kvferry.LeaseTable: grants return generations, an end bumps what no other lease holds, expiry,
typed block ids, and the generations read by a peer through the agent (as a D does)."""
import struct
import time

import pytest

import kvferry
from kvferry import LeaseTable, LogicalBlockId, XferOp


def ids(*values):
    return [LogicalBlockId(v) for v in values]


def test_grant_returns_generations_and_end_bumps_blocks_no_other_lease_holds():
    t = LeaseTable(8)
    assert t.num_blocks == 8 and t.generations_nbytes == 64
    assert t.grant("a", ids(1, 2)) == [1, 1]  # a table starts at 1: zeroed memory never matches
    assert t.grant("b", ids(2, 3)) == [1, 1]
    assert (t.leases, t.blocks_held) == (2, 3)
    assert t.end("a") is True
    # Block 2 is still b's: only block 1 moved.
    assert [t.generation(b) for b in ids(1, 2, 3)] == [2, 1, 1]
    assert t.end("b") is True
    assert [t.generation(b) for b in ids(1, 2, 3)] == [2, 2, 2]
    assert t.end("b") is False  # no lease any more
    assert (t.leases, t.blocks_held) == (0, 0)
    assert t.grant("a", ids(1)) == [2]  # the same request id again, after its lease ended


def test_refuses_a_second_lease_of_a_request_blocks_outside_and_untyped_ids():
    t = LeaseTable(4)
    t.grant("a", ids(0))
    with pytest.raises(kvferry.AlreadyExistsError, match="already holds a lease"):
        t.grant("a", ids(1))
    with pytest.raises(kvferry.OutOfRangeError, match=r"outside \[0, 4\)"):
        t.grant("b", ids(1, 4))
    assert not t.has("b") and t.generation(LogicalBlockId(1)) == 1  # nothing recorded
    with pytest.raises(TypeError):
        t.grant("c", [1, 2])
    with pytest.raises(TypeError):
        t.grant("c", [kvferry.KernelBlockId(1)])
    with pytest.raises(kvferry.OutOfRangeError):
        t.generation(LogicalBlockId(9))
    with pytest.raises(kvferry.InvalidArgumentError):
        LeaseTable(0)
    with pytest.raises(kvferry.InvalidArgumentError):
        t.grant("d", ids(2), lease_s=-1.0)


def test_leases_run_out_and_leases_without_expiry_do_not():
    t = LeaseTable(4)
    t.grant("short", ids(0), lease_s=0.05)
    t.grant("forever", ids(1))
    assert t.end_expired() == []
    time.sleep(0.1)
    assert t.end_expired() == ["short"]
    assert [t.generation(b) for b in ids(0, 1)] == [2, 1]
    assert t.has("forever") and not t.has("short")
    t.grant("very-long", ids(2), lease_s=1e300)   # capped, not an overflow
    assert t.end_expired() == [] and t.has("very-long")


@pytest.mark.parametrize("backend", ["loopback", "socket", "ucx"])
def test_a_peer_reads_the_generations_the_table_publishes(backend):
    t = LeaseTable(16)
    p = kvferry.Agent(f"p-{backend}", backend)
    d = kvferry.Agent(f"d-{backend}", backend)
    with p, d:
        region = p.register_memory(ptr=t.generations_address, size=t.generations_nbytes)
        peer = d.load_remote_metadata(p.get_local_metadata())
        mine = bytearray(16)
        r_mine = d.register_memory(mine)

        def read_generations_of(a, b):
            x = d.prepare_transfer(XferOp.READ, peer, [(r_mine, 0, 8), (r_mine, 8, 8)],
                                   [(region.id, a * 8, 8), (region.id, b * 8, 8)])
            x.post()
            x.wait(10_000)
            x.release()
            return list(struct.unpack("<QQ", mine))

        assert t.grant("r", ids(3, 7)) == read_generations_of(3, 7) == [1, 1]
        t.end("r")
        assert read_generations_of(3, 7) == [2, 2]
