"""kvferry.vllm without a vLLM server: the extra-config checks, the KV layout read from
vLLM-shaped tensors, the read plan (logical -> kernel blocks, runs merged) checked against a
per-page reference copy, the handshake's refusals, and P's and D's connector halves driven as
vLLM drives them, in one process over a real transport (pulls, generation checks, leases).

Usage: build/venv/bin/python tests/vllm/test_units.py   (PYTHONPATH=tests)
"""

import time
from types import SimpleNamespace

import torch

import kvferry
from harness import runner
from harness.runner import check
from kvferry.vllm.config import ConfigError, parse_config
from kvferry.vllm.handshake import HandshakeError, PeerInfo, check_compatible, decode, encode
from kvferry.vllm.layout import layout_of_kv_caches, mismatches, plan_read, plan_staged_read
from kvferry.vllm.metadata import Hold
from kvferry.vllm.relayout import relayout_into


def expect_error(fn, exc, text):
    try:
        fn()
    except exc as e:
        check(text in str(e), f"error {e!r} does not say {text!r}")
        return
    raise runner.CheckFailed(f"no {exc.__name__} ({text})")


def case_config():
    cfg = parse_config({"lease_timeout_s": 5, "side_channel_port": 7000}, kv_port=14579)
    check(cfg.lease_timeout_s == 5.0 and cfg.side_channel_port == 7000, f"{cfg}")
    check(parse_config(None, kv_port=14579).side_channel_port == 14579, "kv_port default")
    expect_error(lambda: parse_config({"lease_timout_s": 5}, 1), ConfigError,
                 "unknown kv_connector_extra_config key 'lease_timout_s'")
    expect_error(lambda: parse_config({"load_timeout_ms": "9"}, 1), ConfigError,
                 "'load_timeout_ms' must be int")
    expect_error(lambda: parse_config({"backend": "rdma"}, 1), ConfigError, "'backend'")


def kv_caches(num_layers, num_blocks, heads, block_size, head_size, dtype=torch.bfloat16):
    """Per-layer views of one storage, as vLLM 0.32.0's CPU backend hands them (LBHNC)."""
    per_layer = num_blocks * heads * block_size * 2 * head_size
    flat = torch.zeros(num_layers * per_layer, dtype=dtype)
    return flat, {f"model.layers.{i}.self_attn.attn":
                  flat[i * per_layer:(i + 1) * per_layer].view(num_blocks, heads, block_size,
                                                               2 * head_size)
                  for i in range(num_layers)}


def layout_of(caches, block_size_logical):
    return layout_of_kv_caches(caches, model="m", kv_cache_layout="LBHNC",
                               block_size_logical=block_size_logical)[0]


def apply(plan, src, dst):
    s, d = src.view(torch.uint8), dst.view(torch.uint8)
    for (lo, n), (ro, m) in zip(plan.local, plan.remote):
        check(n == m, "descriptor lengths differ")
        d[lo:lo + n] = s[ro:ro + n]


def case_plan_matches_per_page_copy():
    # Logical block 64 tokens over kernel blocks of 32: 2 kernel pages per logical block.
    for bs_logical, bs_kernel in ((32, 32), (64, 32), (128, 32)):
        nb_kernel = 48
        src_flat, src = kv_caches(3, nb_kernel, 2, bs_kernel, 32)
        dst_flat, dst = kv_caches(3, nb_kernel, 2, bs_kernel, 32)
        src_flat.copy_(torch.randn(src_flat.shape).to(torch.bfloat16))
        lay_s, lay_d = layout_of(src, bs_logical), layout_of(dst, bs_logical)
        r = bs_logical // bs_kernel
        nb_logical = nb_kernel // r
        remote = [1, 2, 3, nb_logical - 1]
        local = [4, 5, 6, 0]
        plan = plan_read(lay_d, lay_s, local, remote)
        apply(plan, src_flat, dst_flat)
        ref = torch.zeros_like(dst_flat)
        _, ref_layers = kv_caches(3, nb_kernel, 2, bs_kernel, 32)
        ref_layers = {n: ref[i * (dst_flat.numel() // 3):(i + 1) * (dst_flat.numel() // 3)].view(
            dst[n].shape) for i, n in enumerate(sorted(dst))}
        for name in src:
            for lb, rb in zip(local, remote):
                for k in range(r):
                    ref_layers[name][lb * r + k] = src[name][rb * r + k]
        check(torch.equal(ref.view(torch.int16), dst_flat.view(torch.int16)),
              f"plan differs from the per-page copy for {bs_logical}/{bs_kernel}")
        # 1,2,3 -> 4,5,6 are one run per layer, the last block another.
        check(len(plan.local) == 2 * 3, f"{len(plan.local)} descriptors for {bs_logical}/"
                                         f"{bs_kernel}, expected 6")
        check(plan.num_pages == 4 * r * 3, f"{plan.num_pages} pages")
    expect_error(lambda: plan_read(lay_d, lay_s, [0], [nb_logical]), ValueError,
                 "outside")


def case_handshake_refusals():
    _, caches = kv_caches(2, 8, 1, 32, 64)
    mine = layout_of(caches, 32)
    _, other = kv_caches(2, 8, 1, 32, 64)
    theirs = layout_of(other, 64)   # P with another block size
    info = PeerInfo("p", 0, 1, 2, b"meta", theirs)
    check(decode(encode(info)) == info, "handshake round trip")
    expect_error(lambda: check_compatible(mine, info), HandshakeError, "block_size_logical")
    expect_error(lambda: decode(b"HTTP/1.1 400 Bad Request\r\n"), HandshakeError,
                 "not a kvferry side channel")
    expect_error(lambda: decode(b'{"protocol": "kvferry-vllm-handshake", "version": 9}'),
                 HandshakeError, "version 9")
    expect_error(lambda: decode(encode(info)[:40]), HandshakeError, "not JSON")


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class InProcessPD:
    """P's and D's scheduler and worker halves as vLLM drives them, in one process: P with
    32-token blocks, D with d_block_size, 2 layers, P's cache random, D's zero."""

    NUM_BLOCKS = 16

    def __init__(self, backend, d_block_size=32):
        from kvferry.vllm.scheduler import KvferryScheduler
        from kvferry.vllm.worker import KvferryWorker

        def worker_config(block_size):
            return SimpleNamespace(
                model_config=SimpleNamespace(model="m"),
                cache_config=SimpleNamespace(block_size=block_size, kv_cache_layout="LBHNC"))
        self.p_flat, p_caches = kv_caches(2, self.NUM_BLOCKS, 1, 32, 64)
        self.p_flat.copy_(torch.randn(self.p_flat.shape).to(torch.bfloat16))
        self.d_flat, d_caches = kv_caches(2, self.NUM_BLOCKS, 1, d_block_size, 64)
        self.p_caches, self.d_caches = p_caches, d_caches
        cfg_p = parse_config({"side_channel_port": free_port(), "backend": backend}, 1)
        cfg_d = parse_config({"side_channel_port": free_port(), "backend": backend,
                              "load_timeout_ms": 5000}, 1)
        self.p_sched = KvferryScheduler(fake_config(32), cfg_p, "p", self.NUM_BLOCKS)
        self.d_sched = KvferryScheduler(fake_config(d_block_size), cfg_d, "d", self.NUM_BLOCKS)
        self.p_work = KvferryWorker(worker_config(32), cfg_p, "p")
        self.d_work = KvferryWorker(worker_config(d_block_size), cfg_d, "d")
        self.p_work.register_kv_caches(p_caches)
        self.d_work.register_kv_caches(d_caches)

    def close(self):
        self.p_work.shutdown()
        self.d_work.shutdown()

    def finish_on_p(self, rid, blocks, ship=True, lease_s=None):
        """P's request rid finished on `blocks`: its kv_transfer_params; the hold reaches P's
        worker with the next step's metadata unless ship is False (then: ship_holds)."""
        from vllm.v1.request import RequestStatus
        req = SimpleNamespace(request_id=rid, kv_transfer_params={"do_remote_decode": True},
                              status=RequestStatus.FINISHED_LENGTH_CAPPED,
                              num_computed_tokens=32 * len(blocks))
        delay, params = self.p_sched.request_finished(req, [list(blocks)])
        check(delay is True and params is not None, f"P did not hold {rid}")
        meta = self.p_sched.build_connector_meta(None)
        if lease_s is not None:
            import dataclasses
            meta.holds = {r: dataclasses.replace(h, lease_s=lease_s) for r, h in meta.holds.items()}
        self.pending = meta
        if ship:
            self.ship_holds()
        return params

    def ship_holds(self):
        self.p_work.start_load_kv(self.pending)

    def p_step(self):
        """One P engine step: what the worker gave back reaches the scheduler (its mirror)."""
        sending, _ = self.p_work.get_finished()
        self.p_sched.update_connector_output(
            SimpleNamespace(finished_sending=sending, kv_connector_worker_meta=None))
        return sending

    def pull_on_d(self, rid, params, local_blocks):
        """D's request rid loads P's blocks into local_blocks; (record, failed blocks)."""
        dreq = SimpleNamespace(request_id=rid, kv_transfer_params=dict(params),
                               num_prompt_tokens=params["remote_num_tokens"])
        n, _ = self.d_sched.get_num_new_matched_tokens(dreq, 0)
        self.d_sched.update_state_after_alloc(
            dreq, SimpleNamespace(get_block_ids=lambda: (list(local_blocks),)), n)
        self.d_work.start_load_kv(self.d_sched.build_connector_meta(None))
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            _, recving = self.d_work.get_finished()
            if rid in recving:
                return self.d_work.take_records()[rid], self.d_work.take_failed_blocks()
            time.sleep(0.005)
        raise runner.CheckFailed(f"D's load of {rid} never finished")

    def p_until_sent(self, rid):
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if rid in self.p_step():
                return
            time.sleep(0.005)
        raise runner.CheckFailed(f"P never gave {rid}'s blocks back")

    def same_pages(self, p_blocks, d_blocks):
        return all(torch.equal(self.p_caches[n][pb].view(torch.int16),
                               self.d_caches[n][db].view(torch.int16))
                   for n in self.p_caches for pb, db in zip(p_blocks, d_blocks))


def case_pull_through_relayout():
    """D with 64-token blocks pulls P's 32-token blocks through the staging buffer and the C++
    relayout, after the generation check: every token's K and V land where D's page keeps
    them."""
    pd = InProcessPD("ucx", d_block_size=64)
    try:
        params = pd.finish_on_p("r1", [5, 2, 9])          # 96 tokens
        rec, failed = pd.pull_on_d("d1", params, [7, 3])
        check(rec["outcome"] == "pulled" and rec["relayout"] is True and not failed, f"{rec}")
        for name in pd.p_caches:
            for t in range(96):
                kp, vp = token_kv(pd.p_caches[name], [5, 2, 9][t // 32], t % 32, 64)
                kd, vd = token_kv(pd.d_caches[name], [7, 3][t // 64], t % 64, 64)
                check(torch.equal(kp, kd) and torch.equal(vp, vd), f"token {t} of {name}")
        pd.p_until_sent("r1")
    finally:
        pd.close()


def case_pull_with_generations():
    """P and D halves over UCX and the socket backend: a pull lands exactly and its
    notification frees P's hold; the same hold read again, after P gave the blocks back, fails
    the generation check (so vLLM recomputes); an expired lease the same; a read that reaches
    P before its hold does ends the hold as soon as it arrives; two holds sharing a block keep
    it for each other; and the scheduler's mirror ends where P's worker ends."""
    for backend in ("ucx", "socket"):
        pd = InProcessPD(backend)
        try:
            params = pd.finish_on_p("r1", [1, 2, 3])
            check(params["remote_block_generations"] == [1, 1, 1], f"{params}")
            rec, failed = pd.pull_on_d("d1", params, [9, 10, 11])
            check(rec["outcome"] == "pulled" and rec["bytes"] > 0 and not failed, f"{rec}")
            check(pd.same_pages([1, 2, 3], [9, 10, 11]), f"{backend}: pulled pages differ")
            pd.p_until_sent("r1")
            # The same params again (a retried request): P gave the blocks back, so the
            # generations moved on and D throws the bytes away.
            rec, failed = pd.pull_on_d("d1-again", params, [12, 13, 14])
            check(rec["outcome"] == "generation_changed" and failed == {12, 13, 14} and
                  "block 1 is at generation 2, granted at 1" in rec["error"], f"{rec}")
            # An expired lease: P frees the blocks unread; a D that reads them later recomputes.
            params = pd.finish_on_p("r2", [4, 5], lease_s=0.05)
            time.sleep(0.1)
            pd.p_until_sent("r2")
            rec, failed = pd.pull_on_d("d2", params, [6, 7])
            check(rec["outcome"] == "generation_changed" and failed == {6, 7}, f"{rec}")
            # D's read (and its notification) reach P before the hold does.
            params = pd.finish_on_p("r3", [6, 7], ship=False)
            rec, _ = pd.pull_on_d("d3", params, [1, 2])
            check(rec["outcome"] == "pulled" and pd.same_pages([6, 7], [1, 2]), f"{rec}")
            for _ in range(500):
                if pd.p_step():
                    raise runner.CheckFailed("P gave r3 back before its hold arrived")
                if pd.p_work._early:
                    break
                time.sleep(0.01)
            check("r3" in pd.p_work._early, "D's notification never reached P before its hold")
            pd.ship_holds()
            pd.p_until_sent("r3")
            # Two holds sharing block 8 (a prefix both requests used): the first read frees
            # only the first hold's own block.
            a = pd.finish_on_p("r4", [8, 9])
            b = pd.finish_on_p("r5", [8, 10])
            rec, _ = pd.pull_on_d("d4", a, [3, 4])
            check(rec["outcome"] == "pulled", f"{rec}")
            pd.p_until_sent("r4")
            rec, _ = pd.pull_on_d("d5", b, [5, 11])
            check(rec["outcome"] == "pulled", f"block 8 moved while r5 held it: {rec}")
            pd.p_until_sent("r5")
            mirror, worker = pd.p_sched._mirror, pd.p_work._leases
            check(mirror.leases == worker.leases == 0, f"{mirror.leases} {worker.leases} left")
            gens = [(mirror.generation(kvferry.LogicalBlockId(i)),
                     worker.generation(kvferry.LogicalBlockId(i))) for i in range(16)]
            check(all(m == w for m, w in gens), f"mirror and worker disagree: {gens}")
        finally:
            pd.close()


def case_done_message():
    from kvferry.vllm.worker import done_message, parse_done_message
    check(parse_done_message(done_message("ab12", "cmpl-x/y-0")) == ("ab12", "cmpl-x/y-0"),
          "round trip")
    check(parse_done_message(b"kvferry-vllm/done/noslash") is None and
          parse_done_message(b"other") is None, "a foreign notification parsed")


def case_side_channel():
    """The side channel answers a handshake, and closes on anything else (an older D, of
    version 1 or 2, gets nothing)."""
    import socket
    from kvferry.vllm.handshake import SideChannelServer, fetch_handshake
    _, caches = kv_caches(2, 8, 1, 32, 64)
    info = PeerInfo("p", 0, 1, 2, b"meta", layout_of(caches, 32))
    port = free_port()
    server = SideChannelServer("127.0.0.1", port, info)
    try:
        check(fetch_handshake("127.0.0.1", port, 2000) == info, "handshake")
        with socket.create_connection(("127.0.0.1", port), timeout=2) as c:
            c.sendall(b'{"protocol": "kvferry-vllm-handshake", "version": 2, "op": "lease"}\n')
            check(c.recv(100) == b"", "a version-2 lease question got an answer")
        with socket.create_connection(("127.0.0.1", port), timeout=2) as c:
            c.sendall(b'{"protocol": "kvferry-vllm-handshake", "version": 1}\n')
            check(c.recv(100) == b"", "a version-1 request got an answer")
        with socket.create_connection(("127.0.0.1", port), timeout=2) as c:
            c.sendall(b"GET / HTTP/1.1\r\n\r\n")
            check(c.recv(100) == b"", "an HTTP request got an answer")
        # A client that sends nothing and one that trickles hold their own workers: a D's
        # handshake (2 s deadline, under P's 5 s per request) is answered meanwhile, and both
        # are dropped at P's deadline.
        silent = socket.create_connection(("127.0.0.1", port), timeout=10)
        trickle = socket.create_connection(("127.0.0.1", port), timeout=10)
        trickle.sendall(b'{"protocol"')
        check(fetch_handshake("127.0.0.1", port, 2000) == info, "handshake behind a silent client")
        for i in range(3):
            trickle.sendall(b" ")
            time.sleep(1)
        check(silent.recv(100) == b"" and trickle.recv(100) == b"",
              "a silent or trickling client got an answer")
        silent.close()
        trickle.close()
    finally:
        server.close()


def case_other_vllm_version_refused():
    import vllm
    from kvferry.vllm.version import UnsupportedVllmError, check_vllm_version
    real = vllm.__version__
    try:
        vllm.__version__ = "0.31.1"
        expect_error(check_vllm_version, UnsupportedVllmError,
                     "supports vLLM 0.32.0 only; the installed vLLM is 0.31.1")
    finally:
        vllm.__version__ = real
    check(check_vllm_version() == real, "the pinned version refused")


def token_kv(layer, block, pos, head_size):
    """Reference: token `pos` of kernel block `block`: K (read down the transposed tile) and V,
    per head, as vLLM's CPU page keeps them."""
    heads, bs = layer.shape[1], layer.shape[2]
    tiles = layer[block].reshape(heads, 2, bs * head_size)
    k = tiles[:, 0].reshape(heads, head_size, bs)[:, :, pos]
    v = tiles[:, 1].reshape(heads, bs, head_size)[:, pos, :]
    return k, v


def case_relayout_matches_per_token_copy():
    head_size, heads, layers = 32, 2, 2
    for bs_p, bs_d in ((128, 64), (64, 128), (32, 96), (96, 32)):
        p_flat, p = kv_caches(layers, 12, heads, bs_p, head_size)
        d_flat, d = kv_caches(layers, 12, heads, bs_d, head_size)
        p_flat.copy_(torch.randn(p_flat.shape).to(torch.bfloat16))
        lay_p, lay_d = layout_of(p, bs_p), layout_of(d, bs_d)
        check(mismatches(lay_d, lay_p) == [], f"{bs_p}->{bs_d} refused: "
                                              f"{mismatches(lay_d, lay_p)}")
        num_tokens = 3 * max(bs_p, bs_d) - 5          # a partial last block on both sides
        p_blocks = [7, 2, 9, 4, 11, 1, 3, 5, 8][:-(-num_tokens // bs_p)]
        d_blocks = [3, 10, 6, 1, 2, 8, 4, 5, 9][:-(-num_tokens // bs_d)]
        plan = plan_staged_read(lay_p, p_blocks)
        staging = torch.zeros(plan.total_bytes, dtype=torch.uint8)
        src = p_flat.view(torch.uint8)
        for (lo, n), (ro, _) in zip(plan.local, plan.remote):
            staging[lo:lo + n] = src[ro:ro + n]
        relayout_into(d, lay_d, lay_p, staging, len(p_blocks), 0, d_blocks, 0, num_tokens)
        for name in p:
            for t in range(num_tokens):
                kp, vp = token_kv(p[name], p_blocks[t // bs_p], t % bs_p, head_size)
                kd, vd = token_kv(d[name], d_blocks[t // bs_d], t % bs_d, head_size)
                check(torch.equal(kp, kd) and torch.equal(vp, vd),
                      f"{bs_p}->{bs_d}: token {t} of {name} differs")
            # D's last block past num_tokens is untouched (still zero).
            last = num_tokens % bs_d
            if last:
                tail = d[name][d_blocks[-1]].reshape(heads, 2, bs_d * head_size)
                k_tail = tail[:, 0].reshape(heads, head_size, bs_d)[:, :, last:]
                check(not k_tail.any(), f"{bs_p}->{bs_d}: wrote past the last token")


def fake_config(block_size):
    return SimpleNamespace(cache_config=SimpleNamespace(block_size=block_size),
                           parallel_config=SimpleNamespace(tensor_parallel_size=1))


def case_scheduler_spans():
    from vllm.v1.request import RequestStatus
    from kvferry.vllm.scheduler import KvferryScheduler
    cfg = parse_config({"side_channel_port": 5600}, kv_port=14579)
    # P (128-token blocks) finishes a 300-token prompt: flat ids, its block size, a hold.
    p = KvferryScheduler(fake_config(128), cfg, "engine-p", 64)
    req = SimpleNamespace(request_id="r1", kv_transfer_params={"do_remote_decode": True},
                          status=RequestStatus.FINISHED_LENGTH_CAPPED, num_computed_tokens=300)
    delay, params = p.request_finished(req, [[5, 6, 7]])
    check(delay is True, "P did not hold the blocks")
    check(params["remote_block_ids"] == [5, 6, 7] and params["remote_block_size"] == 128 and
          params["remote_port"] == 5600 and params["remote_num_tokens"] == 300, f"{params}")
    lease = params["kvferry_lease"]
    check(isinstance(lease, str) and len(lease) >= 16, f"no lease id in P's params: {params}")
    check(params["remote_block_generations"] == [1, 1, 1], f"generations: {params}")
    check(p.build_connector_meta(None).holds == {"r1": Hold(cfg.lease_timeout_s, lease,
                                                            (5, 6, 7))}, "hold not shipped")
    # D (64-token blocks) with its first block a local hit: tokens 64..300 come from P.
    d = KvferryScheduler(fake_config(64), cfg, "engine-d", 64)
    dreq = SimpleNamespace(request_id="d1", kv_transfer_params=dict(params),
                           num_prompt_tokens=300)
    check(d.get_num_new_matched_tokens(dreq, 64) == (236, True), "matched tokens")
    blocks = SimpleNamespace(get_block_ids=lambda: ([11, 12, 13, 14, 15],))
    d.update_state_after_alloc(dreq, blocks, 236)
    (spec,) = d.build_connector_meta(None).loads
    check(spec.local_block_ids == [12, 13, 14, 15] and spec.remote_block_ids == [5, 6, 7] and
          spec.first_token == 64 and spec.num_tokens == 236 and spec.remote_block_size == 128
          and spec.remote_lease == lease and spec.remote_block_generations == [1, 1, 1],
          f"{spec}")
    # D's request aborted while its pull runs (vLLM keeps its blocks until the pull is
    # reported): the record that comes afterwards is dropped, not kept for ever.
    from kvferry.vllm.metadata import KvferryWorkerMetadata
    aborted = SimpleNamespace(request_id="d1", kv_transfer_params=dreq.kv_transfer_params,
                              status=RequestStatus.FINISHED_ABORTED)
    check(d.request_finished(aborted, [[11, 12, 13, 14, 15]]) == (False, None), "aborted D")
    d.update_connector_output(SimpleNamespace(
        finished_sending=None, kv_connector_worker_meta=KvferryWorkerMetadata(
            {"d1": {"outcome": "pulled", "bytes": 1, "descriptors": 1}})))
    check(not d._records and not d._gone and not d._loading,
          f"an aborted pull's record kept: {d._records} {d._gone} {d._loading}")
    # D at TP 2: its ranks may report one pull in different steps; the records merge (bytes
    # summed, the slowest ms), and after an abort the late rank's record is dropped too.
    d2 = KvferryScheduler(SimpleNamespace(cache_config=SimpleNamespace(block_size=64),
                                          parallel_config=SimpleNamespace(
                                              tensor_parallel_size=2)), cfg, "engine-d2", 64)

    def rank_reports(rid, ms):
        d2.update_connector_output(SimpleNamespace(
            finished_sending=None, kv_connector_worker_meta=KvferryWorkerMetadata(
                {rid: {"outcome": "pulled", "bytes": 100, "descriptors": 2, "ms": ms}})))
    for rid in ("t1", "t2"):
        r = SimpleNamespace(request_id=rid, kv_transfer_params=dict(params, tp_size=2),
                            num_prompt_tokens=300)
        d2.get_num_new_matched_tokens(r, 0)
        d2.update_state_after_alloc(r, SimpleNamespace(get_block_ids=lambda: ([1, 2, 3, 4, 5],)),
                                    300)
    rank_reports("t1", 3.0)
    rank_reports("t1", 9.0)
    done = SimpleNamespace(request_id="t1", kv_transfer_params={"do_remote_decode": False},
                           status=RequestStatus.FINISHED_STOPPED)
    rec = d2.request_finished(done, [[1]])[1]["kvferry_load"]
    check(rec == {"outcome": "pulled", "bytes": 200, "descriptors": 4, "ms": 9.0, "ranks": 2},
          f"two ranks' records: {rec}")
    rank_reports("t2", 1.0)
    d2.request_finished(SimpleNamespace(request_id="t2", kv_transfer_params={"x": 1},
                                        status=RequestStatus.FINISHED_ABORTED), [[1]])
    rank_reports("t2", 2.0)
    check(not d2._records and not d2._gone and not d2._loading,
          f"TP 2: records kept: {d2._records} {d2._gone} {d2._loading}")
    # A second finished request gets a lease of its own.
    req2 = SimpleNamespace(request_id="r2", kv_transfer_params={"do_remote_decode": True},
                           status=RequestStatus.FINISHED_STOPPED, num_computed_tokens=10)
    check(p.request_finished(req2, [[8]])[1]["kvferry_lease"] != lease, "lease reused")
    # Once P's workers gave r1 back, its blocks' next holds carry the next generation; a
    # request id P still holds is not held twice.
    p.update_connector_output(SimpleNamespace(finished_sending={"r1"}))
    req3 = SimpleNamespace(request_id="r3", kv_transfer_params={"do_remote_decode": True},
                           status=RequestStatus.FINISHED_STOPPED, num_computed_tokens=10)
    check(p.request_finished(req3, [[6, 8]])[1]["remote_block_generations"] == [2, 1],
          "generations after r1 ended")
    check(p.request_finished(req2, [[9]]) == (False, None), "r2 held twice")
    check(dreq.kv_transfer_params["do_remote_prefill"] is False, "a second load possible")
    # Params without a field D needs: computed locally, no load.
    bad = SimpleNamespace(request_id="d2", num_prompt_tokens=10,
                          kv_transfer_params={"do_remote_prefill": True, "remote_host": "x"})
    check(d.get_num_new_matched_tokens(bad, 0) == (0, False), "incomplete params accepted")
    other_tp = SimpleNamespace(request_id="d4", num_prompt_tokens=300,
                               kv_transfer_params=dict(params, tp_size=2))
    check(d.get_num_new_matched_tokens(other_tp, 0) == (0, False), "P at TP 2, D at 1 accepted")
    short = dict(params, remote_block_generations=[1, 1])
    bad = SimpleNamespace(request_id="d3", num_prompt_tokens=300, kv_transfer_params=short)
    check(d.get_num_new_matched_tokens(bad, 0) == (0, False), "2 generations for 3 blocks")


def case_stats_and_prometheus():
    """Two workers' KvferryStats aggregate, reduce to the logged line, and land in the
    Prometheus counters and histogram vLLM's /metrics serves (a private registry here)."""
    import functools
    import prometheus_client as pc
    from kvferry.vllm.metadata import KvferryStats
    from kvferry.vllm.prom import KvferryPromMetrics
    a = KvferryStats(data={"pulls": 2, "bytes_pulled": 1000, "descriptors": 4,
                           "pull_ms": [1.5, 30.0]})
    b = KvferryStats(data={"pull_failures": 1, "leases_expired": 1, "sends_read": 3})
    both = KvferryStats(data=dict(a.data)).aggregate(b)
    red = both.reduce()
    check(red["pulls"] == 2 and red["pull_failures"] == 1 and red["bytes_pulled"] == 1000 and
          red["sends_read"] == 3 and red["avg_pull_ms"] == 15.75, f"{red}")
    check(KvferryStats().is_empty() and not b.is_empty(), "is_empty")
    reg = pc.CollectorRegistry()
    types = {cls: functools.partial(cls, registry=reg)
             for cls in (pc.Counter, pc.Gauge, pc.Histogram)}
    prom = KvferryPromMetrics(SimpleNamespace(kv_transfer_config=None), types,
                              ["model_name", "engine"], {0: ["m", "0"], 1: ["m", "1"]})
    prom.observe(both.to_dict(), engine_idx=1)
    prom.observe(KvferryStats(data={"pulls": 1, "pull_ms": [2.0]}).to_dict(), engine_idx=1)

    def value(name, **extra):
        return reg.get_sample_value(name, dict({"model_name": "m", "engine": "1"}, **extra))
    check(value("vllm:kvferry_pulls_total") == 3, "pulls counter")
    check(value("vllm:kvferry_bytes_pulled_total") == 1000, "bytes counter")
    check(value("vllm:kvferry_pull_failures_total") == 1, "failures counter")
    check(value("vllm:kvferry_leases_expired_total") == 1, "leases counter")
    check(value("vllm:kvferry_pull_seconds_count") == 3, "histogram count")
    check(value("vllm:kvferry_pull_seconds_bucket", le="0.0025") == 2, "histogram buckets")
    check(reg.get_sample_value("vllm:kvferry_pulls_total",
                               {"model_name": "m", "engine": "0"}) == 0, "engine 0 touched")


runner.run_cases([("config", case_config),
                  ("stats_and_prometheus", case_stats_and_prometheus),
                  ("pull_with_generations", case_pull_with_generations),
                  ("pull_through_relayout", case_pull_through_relayout),
                  ("done_message", case_done_message),
                  ("side_channel", case_side_channel),
                  ("scheduler_spans", case_scheduler_spans),
                  ("relayout_matches_per_token_copy", case_relayout_matches_per_token_copy),
                  ("other_vllm_version_refused", case_other_vllm_version_refused),
                  ("plan_matches_per_page_copy", case_plan_matches_per_page_copy),
                  ("handshake_refusals", case_handshake_refusals)])
