"""kvferry.ConnectorWorker: kvferry's C++ connector (one rank's worker half) over memory Python
owns, driven as an outside scheduler (vLLM's) drives it: P holds, D loads P's offer, the bytes
land exactly, D's notification gives P's blocks back; a changed generation, an incompatible
peer and untyped block ids are refused. Memory is anonymous mmap (page-aligned, as the
connector's borrowed regions must be 64-byte aligned). No vLLM, no torch."""

import ctypes
import json
import mmap
import os
import socket
import time

import pytest

import kvferry
from kvferry import CacheSpec, ConnectorWorker, KernelBlockId, LogicalBlockId


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def config(engine_id, backend):
    return json.dumps({
        "kv_connector": "FerryConnector", "kv_role": "kv_both", "engine_id": engine_id,
        "kv_connector_extra_config": {"side_channel_port": free_port(), "backend": backend,
                                      "handshake_timeout_ms": 3000,
                                      "transfer_timeout_ms": 5000}})


class Rank:
    """One engine's rank: a VLLM_CPU cache of 2 layers in mmap'd regions, and its connector."""

    def __init__(self, engine_id, backend, dtype="f32", block_size=16):
        self.spec = CacheSpec(num_layers=2, num_kv_heads=2, head_dim=4, dtype=dtype,
                              layout="VLLM_CPU", block_size_kernel=block_size,
                              num_blocks_kernel=8)
        self.regions = [mmap.mmap(-1, self.spec.region_bytes) for _ in range(2)]
        self.conn = ConnectorWorker(config(engine_id, backend), "test-model")
        self.conn.register_kv_cache(
            self.spec, [ctypes.addressof(ctypes.c_char.from_buffer(r)) for r in self.regions],
            block_size)
        self.page = self.spec.bytes_per_kernel_block

    def pages(self, blocks):
        return [bytes(r[b * self.page:(b + 1) * self.page]) for r in self.regions for b in blocks]

    def close(self):
        self.conn.shutdown()


def offer(p, rid, blocks, generations):
    return json.dumps({"do_remote_prefill": True, "remote_engine_id": "p",
                       "remote_request_id": rid, "remote_block_ids": blocks,
                       "remote_host": "127.0.0.1", "remote_port": p.conn.side_channel_port,
                       "remote_block_generations": generations})


def load(p, d, rid, params, local, num_tokens):
    """D loads `params` into `local`; its report. P steps too (it hears the notification)."""
    d.conn.load(rid, params, [LogicalBlockId(b) for b in local], 0, num_tokens)
    d.conn.start_load_kv()
    sent = set()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        out = d.conn.get_finished()
        sent |= set(p.conn.get_finished()["finished_sending"])
        if out["load_reports"]:
            (report,) = out["load_reports"]
            return report, out["invalid_block_ids"], sent
        time.sleep(0.002)
    raise AssertionError(f"D's load of {rid} never ended")


@pytest.mark.parametrize("backend", ["ucx", "socket"])
def test_a_held_offer_lands_exactly_and_the_notification_gives_the_blocks_back(backend):
    p, d = Rank("p", backend), Rank("d", backend)
    try:
        for r in p.regions:
            r[:] = os.urandom(len(r))
        p.conn.hold("r1", [LogicalBlockId(1), LogicalBlockId(3)], [1, 1])
        p.conn.start_load_kv()
        report, invalid, sent = load(p, d, "r1", offer(p, "r1", [1, 3], [1, 1]), [5, 6], 31)
        assert report["outcome"] == "pulled" and report["bytes"] > 0 and not invalid, report
        assert d.pages([5, 6]) == p.pages([1, 3])
        deadline = time.monotonic() + 5
        while "r1" not in sent and time.monotonic() < deadline:
            sent |= set(p.conn.get_finished()["finished_sending"])
        assert "r1" in sent
        stats = p.conn.stats()
        assert stats["leases_released_by_notification"] == 1 and stats["blocks_held"] == 0
        # The same offer again: P gave the blocks back, their generations moved on.
        report, invalid, _ = load(p, d, "r1-again", offer(p, "r1", [1, 3], [1, 1]), [2, 4], 31)
        assert report["outcome"] == "failed_generation", report
        assert [b.value for b in invalid] == [2, 4] and "generation" in report["error"]
    finally:
        d.close()
        p.close()


def test_an_incompatible_peer_is_refused_at_the_handshake():
    p, d = Rank("p", "ucx"), Rank("d", "ucx", dtype="f16")
    try:
        p.conn.hold("r1", [LogicalBlockId(0)], [1])
        p.conn.start_load_kv()
        report, invalid, _ = load(p, d, "r1", offer(p, "r1", [0], [1]), [1], 15)
        assert report["outcome"] == "failed_handshake" and "dtype=f32" in report["error"], report
        assert [b.value for b in invalid] == [1]
    finally:
        d.close()
        p.close()


def test_untyped_ids_and_bad_params_are_refused():
    p = Rank("p", "ucx")
    try:
        with pytest.raises(TypeError):
            p.conn.hold("r", [KernelBlockId(1)], [1])
        with pytest.raises(TypeError):
            p.conn.load("r", offer(p, "r", [1], [1]), [1], 0, 4)
        with pytest.raises(kvferry.InvalidArgumentError, match="not JSON"):
            p.conn.load("r", "{", [LogicalBlockId(1)], 0, 4)
        with pytest.raises(kvferry.InvalidArgumentError, match="remote_engine_id"):
            p.conn.load("r", json.dumps({"do_remote_prefill": True}), [LogicalBlockId(1)], 0, 4)
        with pytest.raises(kvferry.InvalidArgumentError, match="one generation per block"):
            p.conn.hold("r", [LogicalBlockId(1)], [1, 1])
        with pytest.raises(kvferry.FailedPreconditionError, match="twice"):
            p.conn.register_kv_cache(p.spec, [1, 2], 16)
        with pytest.raises(kvferry.InvalidArgumentError):
            ConnectorWorker(json.dumps({"kv_connector": "Other"}), "m")
    finally:
        p.close()


def test_a_rank_outside_its_engine_or_a_cache_of_other_heads_is_refused():
    with pytest.raises(kvferry.InvalidArgumentError, match="not within the engine's 2 TP ranks"):
        ConnectorWorker(config("p", "ucx"), "m", tp_rank=2, tp_size=2)
    # Rank 1 of 2 over a model of 2 KV heads holds 1 head; a cache of 2 does not fit.
    spec = CacheSpec(num_layers=2, num_kv_heads=2, head_dim=4, dtype="f32", layout="VLLM_CPU",
                     block_size_kernel=16, num_blocks_kernel=8)
    regions = [mmap.mmap(-1, spec.region_bytes) for _ in range(2)]
    conn = ConnectorWorker(config("p", "ucx"), "m", tp_rank=1, tp_size=2)
    try:
        with pytest.raises(kvferry.InvalidArgumentError, match="1 KV heads per rank"):
            conn.register_kv_cache(
                spec, [ctypes.addressof(ctypes.c_char.from_buffer(r)) for r in regions], 16,
                model_kv_heads=2)
    finally:
        conn.shutdown()
