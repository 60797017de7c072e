"""kvferry.Agent in one process: registration, transfers, errors mapped to exceptions."""
import ctypes
import mmap
import socket

import pytest

import kvferry
from kvferry import XferOp, XferState

BACKENDS = ["ucx", "loopback", "socket"]


def pair(backend):
    return kvferry.Agent(f"init-{backend}", backend), kvferry.Agent(f"target-{backend}", backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_read_and_write_move_exact_bytes(backend):
    init, target = pair(backend)
    with init, target:
        theirs = bytearray(bytes(range(256)) * 64)  # 16 KiB
        mine = bytearray(len(theirs))
        r_theirs = target.register_memory(theirs)
        r_mine = init.register_memory(mine)
        peer = init.load_remote_metadata(target.get_local_metadata())
        assert peer.name == target.name
        # Two adjacent runs merge into one descriptor.
        x = init.prepare_transfer(XferOp.READ, peer, local=[(r_mine, 0, 8192), (r_mine, 8192, 8192)],
                                  remote=[(r_theirs.id, 0, 8192), (r_theirs.id, 8192, 8192)],
                                  notification=b"read-done")
        assert x.info.total_bytes == 16384 and x.info.num_descriptors_merged == 1
        x.post()
        x.wait(timeout_ms=10_000)
        assert x.poll() == XferState.DONE
        assert mine == theirs
        got = target.wait_notifications(timeout_ms=10_000)
        assert [(n.peer_name, n.message) for n in got] == [(init.name, b"read-done")]
        x.release()

        mine[:] = b"\x5a" * len(mine)
        w = init.prepare_transfer(XferOp.WRITE, peer, local=[(r_mine.id, 100, 900)],
                                  remote=[(r_theirs, 1000, 900)])
        w.post()
        w.wait(10_000)
        assert theirs[1000:1900] == b"\x5a" * 900 and theirs[999] == 999 % 256
        w.release()


def test_registers_buffers_pointers_and_refuses_what_it_cannot_hold():
    with kvferry.Agent("reg", "loopback") as a:
        assert a.register_memory(bytearray(64)).length == 64
        assert a.register_memory(memoryview(bytearray(128))[32:96]).length == 64
        with mmap.mmap(-1, 4096) as m:
            region = a.register_memory(m)
            assert region.length == 4096
            a.deregister_memory(region)
        raw = (ctypes.c_char * 64)()
        assert a.register_memory(ptr=ctypes.addressof(raw), size=64).length == 64
        with pytest.raises(kvferry.InvalidArgumentError, match="writable"):
            a.register_memory(b"read-only bytes")
        with pytest.raises(kvferry.InvalidArgumentError, match="buffer protocol"):
            a.register_memory(object())
        with pytest.raises(kvferry.InvalidArgumentError, match="writable"):
            a.register_memory(memoryview(bytearray(64))[::2])  # not contiguous
        with pytest.raises(TypeError):
            a.register_memory(ptr=0)


def test_memory_given_as_pointer_and_size_receives_a_read():
    init, target = pair("loopback")
    with init, target:
        raw = (ctypes.c_char * 256)()
        r_raw = init.register_memory(ptr=ctypes.addressof(raw), size=256)
        theirs = bytearray(b"\x17" * 256)
        r_theirs = target.register_memory(theirs)
        peer = init.load_remote_metadata(target.get_local_metadata())
        x = init.prepare_transfer(XferOp.READ, peer, [(r_raw, 0, 256)], [(r_theirs.id, 0, 256)])
        x.post()
        x.wait(10_000)
        assert raw.raw == bytes(theirs)


def test_registered_bytearray_cannot_be_resized_until_deregistered():
    with kvferry.Agent("pin", "loopback") as a:
        buf = bytearray(64)
        region = a.register_memory(buf)
        with pytest.raises(BufferError):
            buf.extend(b"x")
        a.deregister_memory(region)
        buf.extend(b"x")
        assert len(buf) == 65


def test_a_released_region_is_refused():
    init, target = pair("loopback")
    with init, target:
        theirs, mine = bytearray(1024), bytearray(1024)
        r_theirs = target.register_memory(theirs)
        r_mine = init.register_memory(mine)
        peer = init.load_remote_metadata(target.get_local_metadata())
        x = init.prepare_transfer(XferOp.READ, peer, [(r_mine, 0, 1024)], [(r_theirs.id, 0, 1024)])
        init.deregister_memory(r_mine)
        with pytest.raises(kvferry.NotFoundError) as e:
            x.post()
        assert e.value.code == kvferry.StatusCode.NOT_FOUND
        with pytest.raises(kvferry.NotFoundError):
            init.prepare_transfer(XferOp.READ, peer, [(r_mine, 0, 1024)], [(r_theirs.id, 0, 1024)])
        with pytest.raises(kvferry.NotFoundError):
            init.deregister_memory(r_mine)


def test_errors_carry_their_status_code():
    init, target = pair("ucx")
    with init, target:
        mine = bytearray(1024)
        r_mine = init.register_memory(mine)
        r_theirs = target.register_memory(bytearray(1024))
        with pytest.raises(kvferry.InvalidArgumentError):
            init.load_remote_metadata(b"not metadata")
        peer = init.load_remote_metadata(target.get_local_metadata())
        with pytest.raises(kvferry.InvalidArgumentError):  # past the peer's region
            init.prepare_transfer(XferOp.READ, peer, [(r_mine, 0, 1024)], [(r_theirs.id, 512, 1024)])
        with pytest.raises(kvferry.InvalidArgumentError):  # lengths differ
            init.prepare_transfer(XferOp.READ, peer, [(r_mine, 0, 16)], [(r_theirs.id, 0, 32)])
        with pytest.raises(kvferry.InvalidArgumentError):  # empty lists
            init.prepare_transfer(XferOp.READ, peer, [], [])
        with pytest.raises(kvferry.NotFoundError):  # the peer never registered region 99
            init.prepare_transfer(XferOp.READ, peer, [(r_mine, 0, 16)], [(99, 0, 16)])
        x = init.prepare_transfer(XferOp.READ, peer, [(r_mine, 0, 16)], [(r_theirs.id, 0, 16)])
        x.release()
        with pytest.raises(kvferry.NotFoundError):
            x.post()
        with pytest.raises(kvferry.InvalidArgumentError, match="carrier-pigeon"):
            kvferry.Agent("x", "carrier-pigeon")
        with pytest.raises(kvferry.InvalidArgumentError):
            kvferry.Agent("", "loopback")
    with pytest.raises(kvferry.FailedPreconditionError, match="closed"):
        init.get_local_metadata()


def test_wait_notifications_has_a_deadline():
    with kvferry.Agent("quiet", "loopback") as a:
        assert a.wait_notifications(timeout_ms=50) == []


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_stats_count_what_a_socket_backend_refused():
    port = _free_port()
    with kvferry.Agent("refusing", "socket", listen_host="127.0.0.1", listen_port=port) as a:
        assert set(a.stats()["refused_inbound"]) >= {"no_hello", "bad_secret", "out_of_region"}
        assert sum(a.stats()["refused_inbound"].values()) == 0
        with socket.create_connection(("127.0.0.1", port)) as c:
            c.sendall(b"\x02" + b"\x00" * 47)  # a read request before any hello
            c.settimeout(5)
            assert c.recv(64) == b""  # dropped
        assert a.stats()["refused_inbound"]["no_hello"] == 1
    with kvferry.Agent("counts-nothing", "loopback") as a:
        assert a.stats() == {"refused_inbound": {}}
