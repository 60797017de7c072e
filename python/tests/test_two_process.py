"""kvferry.Agent across two processes, over UCX and over the socket backend: a READ of the
peer's bytes, a WRITE into the peer with a notification it checks, and a peer that dies."""
import os
import subprocess
import sys

import pytest

import kvferry
from kvferry import XferOp

PEER = os.path.join(os.path.dirname(__file__), "transfer_peer.py")
SIZE = 1 << 20


def start_peer(backend):
    proc = subprocess.Popen([sys.executable, PEER, backend], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=dict(os.environ))
    region, blob = proc.stdout.readline().split()
    return proc, int(region), bytes.fromhex(blob)


@pytest.mark.parametrize("backend", ["ucx", "socket"])
def test_read_write_and_notify_across_processes(backend):
    proc, region, blob = start_peer(backend)
    try:
        with kvferry.Agent(f"init-{backend}", backend) as agent:
            mine = bytearray(SIZE)
            r_mine = agent.register_memory(mine)
            peer = agent.load_remote_metadata(blob)
            read = agent.prepare_transfer(XferOp.READ, peer, [(r_mine, 0, SIZE)],
                                          [(region, 0, SIZE)])
            read.post()
            read.wait(timeout_ms=20_000)
            assert mine == bytearray((i * 7 + 3) % 251 for i in range(SIZE))

            mine[:] = b"\xa5" * SIZE
            write = agent.prepare_transfer(XferOp.WRITE, peer, [(r_mine, 0, SIZE // 2)],
                                           [(region, SIZE // 2, SIZE // 2)],
                                           notification=b"written")
            proc.stdin.write(f"{0xa5}\n")
            proc.stdin.flush()
            write.post()
            write.wait(timeout_ms=20_000)
            assert proc.stdout.readline().strip() == "ok"
            proc.stdin.write("bye\n")
            proc.stdin.flush()
            assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
        proc.wait(timeout=30)


@pytest.mark.parametrize("backend", ["ucx", "socket"])
def test_a_dead_peer_fails_the_transfer_within_its_deadline(backend):
    proc, region, blob = start_peer(backend)
    with kvferry.Agent(f"orphan-{backend}", backend) as agent:
        mine = bytearray(SIZE)
        r_mine = agent.register_memory(mine)
        peer = agent.load_remote_metadata(blob)
        proc.kill()
        proc.wait(timeout=30)
        read = agent.prepare_transfer(XferOp.READ, peer, [(r_mine, 0, SIZE)],
                                      [(region, 0, SIZE)], timeout_ms=3_000)
        with pytest.raises((kvferry.UnavailableError, kvferry.DeadlineExceededError)) as e:
            read.post()
            read.wait(timeout_ms=20_000)
        assert e.value.code in (kvferry.StatusCode.UNAVAILABLE,
                                kvferry.StatusCode.DEADLINE_EXCEEDED)
