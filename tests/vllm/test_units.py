"""kvferry.vllm's pure parts without a vLLM server: the extra-config checks, the KV layout read
from vLLM-shaped tensors, the read plan (logical -> kernel blocks, runs merged) checked against
a per-page reference copy, and the handshake's refusals.

Usage: build/venv/bin/python tests/vllm/test_units.py   (PYTHONPATH=tests)
"""

import time
from types import SimpleNamespace

import torch

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
    info = PeerInfo("p", 0, 1, b"meta", theirs)
    check(decode(encode(info)) == info, "handshake round trip")
    expect_error(lambda: check_compatible(mine, info), HandshakeError, "block_size_logical")
    expect_error(lambda: decode(b"HTTP/1.1 400 Bad Request\r\n"), HandshakeError,
                 "not a kvferry side channel")
    expect_error(lambda: decode(b'{"protocol": "kvferry-vllm-handshake", "version": 9}'),
                 HandshakeError, "version 9")
    expect_error(lambda: decode(encode(info)[:40]), HandshakeError, "not JSON")


def case_leases():
    """P's lease table: every way a hold ends, pins, and what D is told about it."""
    from kvferry.vllm import leases
    t = leases.LeaseTable(remember_s=100)
    check(t.add("r1", "L1", 10, now=0) is False and t.pin("r1", "L1", "d1", 5, now=0) == "held",
          "held")
    check(t.pin("r1", "other", "d1", 5, now=0) == "unknown", "another lease of r1 answered")
    check(t.read("r1", "d1", now=1) is True, "read")
    check(t.pin("r1", "L1", "d1", 5, now=2) == "read", "this D's read")
    check(t.pin("r1", "L1", "d2", 5, now=2) == "taken", "another D's read")
    t.add("r2", "L2", 10, now=0)
    check(t.expire(now=5) == [] and t.expire(now=11) == ["r2"], "expiry")
    check(t.pin("r2", "L2", "d1", 5, now=12) == "expired", "expired")
    check(t.read("r2", "d1", now=12) is False and t.pin("r2", "L2", "d1", 5) == "expired",
          "a notification after expiry made the hold read")
    # A pin keeps a hold past its lease: asked at 8 for 30 s, it is still held at 20.
    t.add("r4", "L4", 10, now=0)
    check(t.pin("r4", "L4", "d1", 30, now=8) == "held", "pin")
    check(t.expire(now=20) == [] and t.expire(now=39) == ["r4"], "the pin did not hold")
    # D's notification before P's worker knew the hold: this D is told "read", another
    # "taken", and the hold ends read the moment it arrives.
    check(t.read("r3", "d1", now=0) is False and t.pin("r3", "L3", "d1", 5) == "read", "early")
    check(t.pin("r3", "L3", "d2", 5) == "taken", "early, another D")
    check(t.add("r3", "L3", 10, now=1) is True and t.pin("r3", "L3", "d1", 5) == "read",
          "early read")
    check(t.pin("r9", "L9", "d1", 5) == "unknown", "a hold never added")
    check(t.held() == 0, "holds left")
    t.expire(now=200)
    check(t.pin("r1", "L1", "d1", 5) == "unknown", "an ended hold not forgotten after remember_s")


def case_done_message():
    from kvferry.vllm.worker import done_message, parse_done_message
    check(parse_done_message(done_message("ab12", "cmpl-x/y-0")) == ("ab12", "cmpl-x/y-0"),
          "round trip")
    check(parse_done_message(b"kvferry-vllm/done/noslash") is None and
          parse_done_message(b"other") is None, "a foreign notification parsed")


def case_side_channel():
    """The side channel answers a handshake and a lease question, and closes on anything
    else (an old, version-1 D that sends nothing gets nothing)."""
    import socket
    from kvferry.vllm.handshake import SideChannelServer, fetch_handshake, query_lease
    _, caches = kv_caches(2, 8, 1, 32, 64)
    info = PeerInfo("p", 0, 1, b"meta", layout_of(caches, 32))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    asked = []

    def state(rid, lease, reader, pin_s):
        asked.append((rid, lease, reader, pin_s))
        return "held"
    server = SideChannelServer("127.0.0.1", port, info, state)
    try:
        check(fetch_handshake("127.0.0.1", port, 2000) == info, "handshake")
        check(query_lease("127.0.0.1", port, "r1", "L1", "d1", 15000, 2000) == "held" and
              asked == [("r1", "L1", "d1", 15.0)], f"lease: {asked}")
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
    p = KvferryScheduler(fake_config(128), cfg, "engine-p")
    req = SimpleNamespace(request_id="r1", kv_transfer_params={"do_remote_decode": True},
                          status=RequestStatus.FINISHED_LENGTH_CAPPED, num_computed_tokens=300)
    delay, params = p.request_finished(req, [[5, 6, 7]])
    check(delay is True, "P did not hold the blocks")
    check(params["remote_block_ids"] == [5, 6, 7] and params["remote_block_size"] == 128 and
          params["remote_port"] == 5600 and params["remote_num_tokens"] == 300, f"{params}")
    lease = params["kvferry_lease"]
    check(isinstance(lease, str) and len(lease) >= 16, f"no lease id in P's params: {params}")
    check(p.build_connector_meta(None).holds == {"r1": Hold(cfg.lease_timeout_s, lease)},
          "hold not shipped")
    # D (64-token blocks) with its first block a local hit: tokens 64..300 come from P.
    d = KvferryScheduler(fake_config(64), cfg, "engine-d")
    dreq = SimpleNamespace(request_id="d1", kv_transfer_params=dict(params),
                           num_prompt_tokens=300)
    check(d.get_num_new_matched_tokens(dreq, 64) == (236, True), "matched tokens")
    blocks = SimpleNamespace(get_block_ids=lambda: ([11, 12, 13, 14, 15],))
    d.update_state_after_alloc(dreq, blocks, 236)
    (spec,) = d.build_connector_meta(None).loads
    check(spec.local_block_ids == [12, 13, 14, 15] and spec.remote_block_ids == [5, 6, 7] and
          spec.first_token == 64 and spec.num_tokens == 236 and spec.remote_block_size == 128
          and spec.remote_lease == lease, f"{spec}")
    # A second finished request gets a lease of its own.
    req2 = SimpleNamespace(request_id="r2", kv_transfer_params={"do_remote_decode": True},
                           status=RequestStatus.FINISHED_STOPPED, num_computed_tokens=10)
    check(p.request_finished(req2, [[8]])[1]["kvferry_lease"] != lease, "lease reused")
    check(dreq.kv_transfer_params["do_remote_prefill"] is False, "a second load possible")
    # Params without a field D needs: computed locally, no load.
    bad = SimpleNamespace(request_id="d2", num_prompt_tokens=10,
                          kv_transfer_params={"do_remote_prefill": True, "remote_host": "x"})
    check(d.get_num_new_matched_tokens(bad, 0) == (0, False), "incomplete params accepted")


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
                  ("leases", case_leases),
                  ("done_message", case_done_message),
                  ("side_channel", case_side_channel),
                  ("scheduler_spans", case_scheduler_spans),
                  ("relayout_matches_per_token_copy", case_relayout_matches_per_token_copy),
                  ("other_vllm_version_refused", case_other_vllm_version_refused),
                  ("plan_matches_per_page_copy", case_plan_matches_per_page_copy),
                  ("handshake_refusals", case_handshake_refusals)])
