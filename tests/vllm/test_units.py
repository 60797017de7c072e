"""kvferry.vllm without a vLLM server: the extra-config checks, the KV layout read from
vLLM-shaped tensors, and P's and D's connector halves driven as vLLM drives them, in one
process over a real transport: kvferry's C++ connector (kvferry.ConnectorWorker) pulling,
checking generations, re-laying out pages of other block sizes, refusing an incompatible P,
staging P's host buffer.

Usage: build/venv/bin/python tests/vllm/test_units.py   (PYTHONPATH=tests)
"""

import os
import subprocess
import tempfile
import time
from types import SimpleNamespace

import torch

import kvferry
from harness import runner
from harness.runner import check
from kvferry.vllm.config import ConfigError, parse_config
from kvferry.vllm.layout import attention_isa, cache_of_kv_caches
from kvferry.vllm.metadata import Hold, Save
import vllm_serve
from test_cpu_layout import formula_offsets


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
    check(parse_config({"host_buffer": True}, 1).host_buffer is True, "host_buffer")
    expect_error(lambda: parse_config({"host_buffer": 1}, 1), ConfigError,
                 "'host_buffer' must be bool")
    expect_error(lambda: parse_config({"lease_timeout_s": True}, 1), ConfigError,
                 "'lease_timeout_s' must be float")


def kv_caches(num_layers, num_blocks, heads, block_size, head_size, dtype=torch.bfloat16):
    """Per-layer views of one storage, as vLLM 0.32.0's CPU backend hands them (LBHNC)."""
    per_layer = num_blocks * heads * block_size * 2 * head_size
    flat = torch.zeros(num_layers * per_layer, dtype=dtype)
    return flat, {f"model.layers.{i}.self_attn.attn":
                  flat[i * per_layer:(i + 1) * per_layer].view(num_blocks, heads, block_size,
                                                               2 * head_size)
                  for i in range(num_layers)}


def case_cache_spec_refusals():
    """vLLM's tensors become a VLLM_CPU or VLLM_CPU_AMX cache spec by the attention ISA, and
    anything else refuses to start."""
    _, caches = kv_caches(2, 8, 2, 32, 64)
    spec, regions = cache_of_kv_caches(caches, kv_cache_layout="LBHNC", attn_isa="vec")
    names = sorted(caches)
    check((spec.num_layers, spec.num_kv_heads, spec.head_dim, spec.block_size_kernel,
           spec.num_blocks_kernel, spec.layout, spec.dtype) ==
          (2, 2, 64, 32, 8, "VLLM_CPU", "bf16"), f"{spec}")
    amx, _ = cache_of_kv_caches(caches, kv_cache_layout="LBHNC", attn_isa="amx")
    check(amx.layout == "VLLM_CPU_AMX" and amx.region_bytes == spec.region_bytes, f"{amx}")
    expect_error(lambda: cache_of_kv_caches(caches, kv_cache_layout="LBHNC", attn_isa="neon"),
                 ValueError, "ISA 'neon'")
    # vLLM's own choice for these tensors on this CPU (amx only with AMX tiles).
    isa = attention_isa(torch.bfloat16, 32, 64)
    check(isa == ("amx" if torch.cpu._is_amx_tile_supported() else "vec"), f"attention ISA {isa}")
    check(regions == [caches[n].data_ptr() for n in names] and
          regions[1] - regions[0] == spec.region_bytes, f"regions {regions}")
    expect_error(lambda: cache_of_kv_caches(caches, kv_cache_layout="NHD", attn_isa="vec"),
                 ValueError, "kv_cache_layout 'NHD'")
    other = dict(caches, **{names[1]: torch.zeros_like(caches[names[1]])})
    expect_error(lambda: cache_of_kv_caches(other, kv_cache_layout="LBHNC", attn_isa="vec"),
                 ValueError,
                 "not in the first layer's storage")
    strided = {n: t.transpose(1, 2) for n, t in caches.items()}
    expect_error(lambda: cache_of_kv_caches(strided, kv_cache_layout="LBHNC", attn_isa="vec"),
                 ValueError,
                 "not dense")
    _, odd = kv_caches(1, 8, 1, 32, 64)
    odd = {n: t[..., :127] for n, t in odd.items()}
    expect_error(lambda: cache_of_kv_caches(odd, kv_cache_layout="LBHNC", attn_isa="vec"),
                 ValueError,
                 "not dense")
    _, f64 = kv_caches(1, 8, 1, 32, 64, dtype=torch.float64)
    expect_error(lambda: cache_of_kv_caches(f64, kv_cache_layout="LBHNC", attn_isa="vec"),
                 ValueError,
                 "torch.float64")


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class InProcessPD:
    """P's and D's scheduler and worker halves as vLLM drives them, in one process: 2 layers of
    `heads` KV heads, P's cache random, D's zero; each side's block size its own."""

    NUM_BLOCKS = 16

    def __init__(self, backend, p_block_size=32, d_block_size=32, heads=1, head_size=64,
                 p_extra=None, d_dtype=torch.bfloat16):
        from kvferry.vllm.scheduler import KvferryScheduler
        from kvferry.vllm.worker import KvferryWorker

        def worker_config(block_size):
            return fake_config(block_size, kv_heads=heads)
        self.p_block_size = p_block_size
        self.p_flat, p_caches = kv_caches(2, self.NUM_BLOCKS, heads, p_block_size, head_size)
        self.p_flat.copy_(torch.randn(self.p_flat.shape).to(torch.bfloat16))
        self.d_flat, d_caches = kv_caches(2, self.NUM_BLOCKS, heads, d_block_size, head_size,
                                          d_dtype)
        self.p_caches, self.d_caches = p_caches, d_caches
        cfg_p = parse_config(dict({"side_channel_port": free_port(), "backend": backend},
                                  **(p_extra or {})), 1)
        cfg_d = parse_config({"side_channel_port": free_port(), "backend": backend,
                              "load_timeout_ms": 5000, "handshake_timeout_ms": 2000}, 1)
        self.p_sched = KvferryScheduler(worker_config(p_block_size), cfg_p, "p", self.NUM_BLOCKS)
        self.d_sched = KvferryScheduler(worker_config(d_block_size), cfg_d, "d", self.NUM_BLOCKS)
        self.p_work = KvferryWorker(worker_config(p_block_size), cfg_p, "p")
        self.d_work = KvferryWorker(worker_config(d_block_size), cfg_d, "d")
        self.p_work.register_kv_caches(p_caches)
        self.d_work.register_kv_caches(d_caches)
        self.pending = None
        self.sent = set()   # P's requests given back so far (finished_sending)

    def close(self):
        self.p_work.shutdown()
        self.d_work.shutdown()

    def finish_on_p(self, rid, blocks, ship=True, num_tokens=None):
        """P's request rid finished on `blocks`: its kv_transfer_params; the hold reaches P's
        worker with the next step's metadata unless ship is False (then: ship_holds)."""
        from vllm.v1.request import RequestStatus
        n = self.p_block_size * len(blocks) if num_tokens is None else num_tokens
        req = SimpleNamespace(request_id=rid, kv_transfer_params={"do_remote_decode": True},
                              status=RequestStatus.FINISHED_LENGTH_CAPPED, num_computed_tokens=n)
        delay, params = self.p_sched.request_finished(req, [list(blocks)])
        check(delay is True and params is not None, f"P did not hold {rid}")
        self.pending = self.p_sched.build_connector_meta(None)
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
        self.sent |= sending
        return sending

    def pull_on_d(self, rid, params, local_blocks):
        """D's request rid loads P's blocks into local_blocks; (record, failed blocks)."""
        dreq = SimpleNamespace(request_id=rid, kv_transfer_params=dict(params),
                               num_prompt_tokens=params["remote_num_tokens"])
        n, _ = self.d_sched.get_num_new_matched_tokens(dreq, 0)
        check(n > 0, f"D's scheduler loads nothing of {params}")
        self.d_sched.update_state_after_alloc(
            dreq, SimpleNamespace(get_block_ids=lambda: (list(local_blocks),)), n)
        self.d_work.start_load_kv(self.d_sched.build_connector_meta(None))
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            _, recving = self.d_work.get_finished()
            self.p_step()
            if rid in recving:
                return self.d_work.take_records()[rid], self.d_work.take_failed_blocks()
            time.sleep(0.005)
        raise runner.CheckFailed(f"D's load of {rid} never finished")

    def p_until_sent(self, rid):
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            self.p_step()
            if rid in self.sent:
                return
            time.sleep(0.005)
        raise runner.CheckFailed(f"P never gave {rid}'s blocks back")

    def p_until_stats(self, done):
        """Steps P until done(P's connector stats) holds; fails after 10 s."""
        deadline = time.monotonic() + 10
        while not done(self.p_work._conn.stats()):
            if time.monotonic() >= deadline:
                raise runner.CheckFailed(f"P's stats never got there: {self.p_work._conn.stats()}")
            self.p_step()
            time.sleep(0.005)

    def same_pages(self, p_blocks, d_blocks):
        return all(torch.equal(self.p_caches[n][pb].view(torch.int16),
                               self.d_caches[n][db].view(torch.int16))
                   for n in self.p_caches for pb, db in zip(p_blocks, d_blocks))

    def same_tokens(self, p_blocks, d_blocks, num_tokens, d_block_size):
        """Every token's K and V where each side's page keeps it (the blocks' sizes differ)."""
        head_size = self.p_caches[next(iter(self.p_caches))].shape[3] // 2
        bp = self.p_block_size
        for name in self.p_caches:
            for t in range(num_tokens):
                kp, vp = token_kv(self.p_caches[name], p_blocks[t // bp], t % bp, head_size)
                kd, vd = token_kv(self.d_caches[name], d_blocks[t // d_block_size],
                                  t % d_block_size, head_size)
                if not (torch.equal(kp, kd) and torch.equal(vp, vd)):
                    return f"token {t} of {name}"
        return ""


def case_pull_through_relayout():
    """D of another block size than P's pulls P's pages into staging and the C++ connector
    re-lays them out into D's blocks, after the generation check: every token's K and V land
    where D's page keeps them, for several block-size pairs (a partial last block on both
    sides), and nothing is written past the last token."""
    for bs_p, bs_d in ((32, 64), (64, 32), (32, 96), (96, 32)):
        pd = InProcessPD("ucx", p_block_size=bs_p, d_block_size=bs_d, heads=2, head_size=32)
        try:
            num_tokens = 3 * max(bs_p, bs_d) - 5
            p_blocks = [7, 2, 9, 4, 11, 1, 3, 5, 8, 10][:-(-num_tokens // bs_p)]
            d_blocks = [3, 10, 6, 1, 2, 8, 4, 5, 9, 11][:-(-num_tokens // bs_d)]
            params = pd.finish_on_p(f"r{bs_p}", p_blocks, num_tokens=num_tokens)
            rec, failed = pd.pull_on_d(f"d{bs_d}", params, d_blocks)
            check(rec["outcome"] == "pulled" and rec["relayout"] is True and not failed,
                  f"{bs_p}->{bs_d}: {rec}")
            bad = pd.same_tokens(p_blocks, d_blocks, num_tokens, bs_d)
            check(not bad, f"{bs_p}->{bs_d}: {bad} differs")
            last = num_tokens % bs_d
            for name in pd.d_caches:
                for pos in range(last, bs_d if last else 0):
                    k, v = token_kv(pd.d_caches[name], d_blocks[-1], pos, 32)
                    check(not k.any() and not v.any(), f"{bs_p}->{bs_d}: wrote past the end")
            pd.p_until_sent(f"r{bs_p}")
        finally:
            pd.close()


def case_pull_with_generations():
    """P and D halves over UCX and the socket backend: a pull lands exactly and its
    notification frees P's hold; the same hold read again, after P gave the blocks back, fails
    the generation check (so vLLM recomputes); a read that reaches P before its hold does ends
    the hold as soon as it arrives; two holds sharing a block keep it for each other; and the
    scheduler's mirror ends where P's worker ends."""
    for backend in ("ucx", "socket"):
        pd = InProcessPD(backend)
        try:
            params = pd.finish_on_p("r1", [1, 2, 3])
            check(params["remote_block_generations"] == [1, 1, 1], f"{params}")
            rec, failed = pd.pull_on_d("d1", params, [9, 10, 11])
            check(rec["outcome"] == "pulled" and rec["pulled_bytes"] > 0 and not failed, f"{rec}")
            check(pd.same_pages([1, 2, 3], [9, 10, 11]), f"{backend}: pulled pages differ")
            pd.p_until_sent("r1")
            # The same params again (a retried request): P gave the blocks back, so the
            # generations moved on and D throws the bytes away. Its notification reaches P
            # after r1's lease ended: counted late, not kept for a hold.
            late = pd.p_work._conn.stats()["notifications_late"]
            rec, failed = pd.pull_on_d("d1-again", params, [12, 13, 14])
            check(rec["outcome"] == "failed_generation" and failed == {12, 13, 14} and
                  "block 1 changed generation 1 -> 2" in rec["error"], f"{rec}")
            pd.p_until_stats(lambda s: s["notifications_late"] > late)
            # D's read (and its notification) reach P before the hold does: P keeps the
            # notification and gives the blocks back when the hold comes, not at lease end.
            params = pd.finish_on_p("r3", [6, 7], ship=False)
            kept = pd.p_work._conn.stats()["notifications_before_hold"]
            rec, _ = pd.pull_on_d("d3", params, [1, 2])
            check(rec["outcome"] == "pulled" and pd.same_pages([6, 7], [1, 2]), f"{rec}")
            pd.p_until_stats(lambda s: s["notifications_before_hold"] > kept)
            stats = pd.p_work._conn.stats()
            check(stats["notifications_before_hold"] == kept + 1 and
                  stats["notifications_late"] == late + 1, f"notifications counted: {stats}")
            check("r3" not in pd.sent, "P gave r3 back before its hold arrived")
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
            stats = pd.p_work._conn.stats()
            check(pd.p_sched._mirror.leases == 0 and stats["blocks_held"] == 0,
                  f"holds left: mirror {pd.p_sched._mirror.leases}, P {stats}")
        finally:
            pd.close()


def case_lease_expires():
    """P's lease runs out unread: P gives the blocks back (generations bumped); a D that reads
    them afterwards recomputes."""
    pd = InProcessPD("ucx", p_extra={"lease_timeout_s": 0.2})
    try:
        params = pd.finish_on_p("r2", [4, 5])
        time.sleep(0.3)
        pd.p_until_sent("r2")
        rec, failed = pd.pull_on_d("d2", params, [6, 7])
        check(rec["outcome"] == "failed_generation" and failed == {6, 7}, f"{rec}")
        check(pd.p_work._conn.stats()["leases_expired"] == 1, "expiry not counted")
    finally:
        pd.close()


def case_incompatible_p_refused():
    """A D whose KV is float32 and a P whose KV is bfloat16: the handshake refuses (naming the
    dtype), D reports every block of the load failed, vLLM recomputes them."""
    pd = InProcessPD("ucx", d_dtype=torch.float32)
    try:
        params = pd.finish_on_p("r1", [1, 2])
        rec, failed = pd.pull_on_d("d1", params, [3, 4])
        check(rec["outcome"] == "failed_handshake" and "dtype=bf16" in rec["error"] and
              failed == {3, 4}, f"{rec} {failed}")
    finally:
        pd.close()


def case_host_buffer():
    """P with host_buffer: the scheduler ships each remote-decode request's computed chunks
    (from token 0 on its first step, then each chunk), the worker stages them after the
    forward pass, and D pulls the host buffer's copy, exact."""
    pd = InProcessPD("ucx", p_extra={"host_buffer": True})
    try:
        req = SimpleNamespace(request_id="h1", kv_transfer_params={"do_remote_decode": True})
        pd.p_sched.update_state_after_alloc(req, None, 0)
        # Two chunks of a 96-token prompt, as vLLM's scheduler output carries them.
        first = SimpleNamespace(
            scheduled_new_reqs=[SimpleNamespace(req_id="h1", block_ids=([5, 2],),
                                                num_computed_tokens=0)],
            scheduled_cached_reqs=SimpleNamespace(req_ids=[], new_block_ids=[],
                                                  num_computed_tokens=[], resumed_req_ids=set()),
            num_scheduled_tokens={"h1": 64})
        second = SimpleNamespace(
            scheduled_new_reqs=[],
            scheduled_cached_reqs=SimpleNamespace(req_ids=["h1"], new_block_ids=[([9],)],
                                                  num_computed_tokens=[64],
                                                  resumed_req_ids=set()),
            num_scheduled_tokens={"h1": 32})
        metas = [pd.p_sched.build_connector_meta(out) for out in (first, second)]
        check(metas[0].saves == [Save("h1", (5, 2), 0, 64)] and
              metas[1].saves == [Save("h1", (5, 2, 9), 64, 96)],
              f"saves: {[m.saves for m in metas]}")
        for meta in metas:
            pd.p_work.start_load_kv(meta)
            pd.p_work.wait_for_save()
        params = pd.finish_on_p("h1", [5, 2, 9])
        # P's cache changes after the staging: D must read the staged bytes, not these.
        staged = {n: pd.p_caches[n].clone() for n in pd.p_caches}
        pd.p_flat.zero_()
        rec, failed = pd.pull_on_d("dh1", params, [1, 3, 4])
        check(rec["outcome"] == "pulled" and not failed, f"{rec}")
        check(all(torch.equal(staged[n][[5, 2, 9]].view(torch.int16),
                              pd.d_caches[n][[1, 3, 4]].view(torch.int16)) for n in staged),
              "D's pages are not the staged ones")
        check(pd.p_work._conn.stats()["staged_kernel_blocks"] > 0, "nothing staged")
        pd.p_until_sent("h1")
    finally:
        pd.close()


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
    """Reference: token `pos` of kernel block `block`: K and V, per head, where vLLM's CPU page
    keeps them for the ISA vLLM picks for this tensor on this CPU (the formulas
    test_cpu_layout.py checks against vLLM's own op)."""
    heads, bs = layer.shape[1], layer.shape[2]
    isa = attention_isa(layer.dtype, bs, head_size)
    h, d = torch.arange(heads)[:, None], torch.arange(head_size)[None, :]
    flat = layer.reshape(-1)
    return tuple(flat[formula_offsets(isa, block, h, pos, d, heads, bs, head_size, part)]
                 for part in ("K", "V"))


def model_config(kv_heads=1):
    return SimpleNamespace(model="m", get_total_num_kv_heads=lambda: kv_heads)


def fake_config(block_size, tp_size=1, kv_heads=1):
    return SimpleNamespace(cache_config=SimpleNamespace(block_size=block_size,
                                                        kv_cache_layout="LBHNC"),
                           parallel_config=SimpleNamespace(tensor_parallel_size=tp_size),
                           model_config=model_config(kv_heads))


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
    check(params["remote_block_generations"] == [1, 1, 1], f"generations: {params}")
    check(p.build_connector_meta(None).holds == {"r1": Hold((5, 6, 7), (1, 1, 1))},
          "hold not shipped")
    # D (64-token blocks) with its first block a local hit: tokens 64..300 come from P.
    d = KvferryScheduler(fake_config(64), cfg, "engine-d", 64)
    dreq = SimpleNamespace(request_id="d1", kv_transfer_params=dict(params),
                           num_prompt_tokens=300)
    check(d.get_num_new_matched_tokens(dreq, 64) == (236, True), "matched tokens")
    blocks = SimpleNamespace(get_block_ids=lambda: ([11, 12, 13, 14, 15],))
    d.update_state_after_alloc(dreq, blocks, 236)
    (spec,) = d.build_connector_meta(None).loads
    check(spec.local_block_ids == [11, 12, 13, 14, 15] and spec.num_local_computed_tokens == 64
          and spec.num_external_tokens == 236 and spec.params["remote_block_ids"] == [5, 6, 7]
          and spec.params["remote_block_generations"] == [1, 1, 1] and
          spec.params["do_remote_prefill"] is True, f"{spec}")
    # D's prefix cache holds the whole prompt: no load, and P is told to end its hold.
    full = SimpleNamespace(request_id="d9", kv_transfer_params=dict(params),
                           num_prompt_tokens=300)
    check(d.get_num_new_matched_tokens(full, 300) == (0, False), "a full hit loads")
    d.update_state_after_alloc(full, blocks, 0)
    meta = d.build_connector_meta(None)
    check(not meta.loads and [r["remote_request_id"] for r in meta.releases] == ["r1"],
          f"full hit: {meta}")
    # D's request aborted while its pull runs (vLLM keeps its blocks until the pull is
    # reported): the record that comes afterwards is dropped, not kept for ever.
    from kvferry.vllm.metadata import KvferryWorkerMetadata
    aborted = SimpleNamespace(request_id="d1", kv_transfer_params=dreq.kv_transfer_params,
                              status=RequestStatus.FINISHED_ABORTED)
    check(d.request_finished(aborted, [[11, 12, 13, 14, 15]]) == (False, None), "aborted D")
    d.update_connector_output(SimpleNamespace(
        finished_sending=None, kv_connector_worker_meta=KvferryWorkerMetadata(
            {"d1": {"outcome": "pulled", "pulled_bytes": 1, "descriptors": 1}})))
    check(not d._records and not d._gone and not d._loading,
          f"an aborted pull's record kept: {d._records} {d._gone} {d._loading}")
    # D at TP 2: its ranks may report one pull in different steps; the records merge (bytes
    # summed, the slowest ms), and after an abort the late rank's record is dropped too.
    d2 = KvferryScheduler(fake_config(64, tp_size=2, kv_heads=2), cfg, "engine-d2", 64)

    def rank_reports(rid, ms):
        d2.update_connector_output(SimpleNamespace(
            finished_sending=None, kv_connector_worker_meta=KvferryWorkerMetadata(
                {rid: {"outcome": "pulled", "pulled_bytes": 100, "descriptors": 2, "ms": ms}})))
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
    check(rec == {"outcome": "pulled", "pulled_bytes": 200, "descriptors": 4, "ms": 9.0,
                  "ranks": 2},
          f"two ranks' records: {rec}")
    rank_reports("t2", 1.0)
    d2.request_finished(SimpleNamespace(request_id="t2", kv_transfer_params={"x": 1},
                                        status=RequestStatus.FINISHED_ABORTED), [[1]])
    rank_reports("t2", 2.0)
    check(not d2._records and not d2._gone and not d2._loading,
          f"TP 2: records kept: {d2._records} {d2._gone} {d2._loading}")
    req2 = SimpleNamespace(request_id="r2", kv_transfer_params={"do_remote_decode": True},
                           status=RequestStatus.FINISHED_STOPPED, num_computed_tokens=10)
    check(p.request_finished(req2, [[8]])[0] is True, "r2 not held")
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
    # P at another TP size: D's ranks read their heads from P's ranks (hetero_tp), unless
    # that size cannot shard the model's KV heads.
    other_tp = SimpleNamespace(request_id="d4", num_prompt_tokens=300,
                               kv_transfer_params=dict(params, tp_size=1))
    check(d2.get_num_new_matched_tokens(other_tp, 0)[0] > 0, "P at TP 1, D at 2 refused")
    odd_tp = SimpleNamespace(request_id="d5", num_prompt_tokens=300,
                             kv_transfer_params=dict(params, tp_size=3))
    check(d2.get_num_new_matched_tokens(odd_tp, 0) == (0, False), "P at TP 3 of 2 heads")
    short = dict(params, remote_block_generations=[1, 1])
    bad = SimpleNamespace(request_id="d3", num_prompt_tokens=300, kv_transfer_params=short)
    check(d.get_num_new_matched_tokens(bad, 0) == (0, False), "2 generations for 3 blocks")


def consecutive_free_ports(n):
    """A base port with n free TCP ports from it (P's TP ranks serve base + rank)."""
    import socket
    for _ in range(50):
        base = free_port()
        socks = []
        try:
            for i in range(n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", base + i))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise runner.CheckFailed("no consecutive free ports")


class TpSide:
    """One engine at TP `tp` as vLLM runs it: one scheduler, one worker per TP rank (each its
    own C++ connector, as each vLLM TP worker process has), each rank's cache its KV heads."""

    def __init__(self, engine_id, tp, heads, block_size, backend, random):
        import kvferry.vllm.worker as worker_mod
        from kvferry.vllm.scheduler import KvferryScheduler
        self.tp, self.heads, self.block_size = tp, heads, block_size
        cfg = parse_config({"side_channel_port": consecutive_free_ports(tp), "backend": backend,
                            "load_timeout_ms": 5000, "handshake_timeout_ms": 2000}, 1)
        vcfg = fake_config(block_size, tp_size=tp, kv_heads=heads)
        self.sched = KvferryScheduler(vcfg, cfg, engine_id, InProcessPD.NUM_BLOCKS)
        self.caches, self.workers = [], []
        saved = worker_mod._tp_rank
        try:
            for r in range(tp):
                flat, caches = kv_caches(2, InProcessPD.NUM_BLOCKS, heads // tp, block_size, 64)
                if random:
                    flat.copy_(torch.randn(flat.shape).to(torch.bfloat16))
                worker_mod._tp_rank = lambda r=r: r
                w = worker_mod.KvferryWorker(vcfg, cfg, engine_id)
                w.register_kv_caches(caches)
                self.caches.append((flat, caches))
                self.workers.append(w)
        finally:
            worker_mod._tp_rank = saved

    def head(self, g):
        """(rank, local head) holding global KV head g."""
        per = self.heads // self.tp
        return g // per, g % per

    def start(self, meta):
        for w in self.workers:
            w.start_load_kv(meta)

    def close(self):
        for w in self.workers:
            w.shutdown()


def case_hetero_tp():
    """P and D at different TP sizes (1 -> 2, 2 -> 1, 2 -> 2), each TP rank its own C++
    connector as in vLLM's worker processes: every D rank pulls exactly its KV heads from the
    P ranks that hold them, and every P rank gives the blocks back on its readers'
    notifications."""
    from vllm.v1.request import RequestStatus
    heads, bs, n = 2, 32, 80
    for p_tp, d_tp in ((1, 2), (2, 1), (2, 2)):
        p = TpSide("p", p_tp, heads, bs, "ucx", random=True)
        d = TpSide("d", d_tp, heads, bs, "ucx", random=False)
        try:
            req = SimpleNamespace(request_id="r", kv_transfer_params={"do_remote_decode": True},
                                  status=RequestStatus.FINISHED_LENGTH_CAPPED,
                                  num_computed_tokens=n)
            _, params = p.sched.request_finished(req, [[4, 7, 2]])
            check(params["tp_size"] == p_tp, f"{params}")
            p.start(p.sched.build_connector_meta(None))
            dreq = SimpleNamespace(request_id="q", kv_transfer_params=dict(params),
                                   num_prompt_tokens=n)
            count, _ = d.sched.get_num_new_matched_tokens(dreq, 0)
            check(count == n, f"D at TP {d_tp} loads {count} of P at TP {p_tp}")
            d_blocks = [9, 1, 5]
            d.sched.update_state_after_alloc(
                dreq, SimpleNamespace(get_block_ids=lambda: (d_blocks,)), count)
            d.start(d.sched.build_connector_meta(None))
            records, sent = {}, [set() for _ in range(p_tp)]
            deadline = time.monotonic() + 20
            while (len(records) < d_tp or not all("r" in x for x in sent)) and \
                    time.monotonic() < deadline:
                for r, w in enumerate(d.workers):
                    w.get_finished()
                    records.update({r: rec for rec in w.take_records().values()})
                for r, w in enumerate(p.workers):
                    sent[r] |= w.get_finished()[0]
                time.sleep(0.005)
            check(len(records) == d_tp and all(x["outcome"] == "pulled" and x["pulled_bytes"] > 0
                                               for x in records.values()),
                  f"P TP {p_tp} -> D TP {d_tp}: {records}")
            check(all("r" in x for x in sent), f"a P rank still holds r: {sent}")
            for g in range(heads):
                (pr, ph), (dr, dh) = p.head(g), d.head(g)
                for name in p.caches[0][1]:
                    for t in range(n):
                        kp, vp = token_kv(p.caches[pr][1][name][:, ph:ph + 1], [4, 7, 2][t // bs],
                                          t % bs, 64)
                        kd, vd = token_kv(d.caches[dr][1][name][:, dh:dh + 1], d_blocks[t // bs],
                                          t % bs, 64)
                        check(torch.equal(kp, kd) and torch.equal(vp, vd),
                              f"P TP {p_tp} -> D TP {d_tp}: head {g} token {t} of {name}")
        finally:
            p.close()
            d.close()


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


def case_stray_servers_reaped():
    """reap_strays kills a ledger's vLLM process group whose test is gone, and nothing else: not
    the group of a test still running, not a group that is not vLLM's (a reused id)."""
    saved = vllm_serve.SERVER_LEDGER
    procs = []
    try:
        vllm_serve.SERVER_LEDGER = os.path.join(tempfile.mkdtemp(), "ledger")

        def group(title):
            p = subprocess.Popen(["bash", "-c", f"exec -a {title} sleep 60"], start_new_session=True)
            procs.append(p)
            return p
        stray, live, other = group("VLLM::EngineCore"), group("VLLM::Worker"), group("sleeper")
        gone = subprocess.Popen(["true"])
        gone.wait()
        time.sleep(0.3)  # the exec -a titles in place
        with open(vllm_serve.SERVER_LEDGER, "w") as f:
            f.write(f"{stray.pid} {gone.pid}\n{live.pid} {os.getpid()}\n{other.pid} {gone.pid}\n")
        check(vllm_serve.reap_strays() == 1, "not exactly the one stray killed")
        check(stray.wait(timeout=5) == -9, "the stray group lives")
        check(live.poll() is None and other.poll() is None, "a group not stray was killed")
        with open(vllm_serve.SERVER_LEDGER) as f:
            check(f.read() == f"{live.pid} {os.getpid()}\n", "the ledger keeps only live tests'")
    finally:
        vllm_serve.SERVER_LEDGER = saved
        for p in procs:
            p.kill()
            p.wait()


runner.run_cases([("config", case_config),
                  ("cache_spec_refusals", case_cache_spec_refusals),
                  ("stats_and_prometheus", case_stats_and_prometheus),
                  ("pull_with_generations", case_pull_with_generations),
                  ("pull_through_relayout", case_pull_through_relayout),
                  ("lease_expires", case_lease_expires),
                  ("incompatible_p_refused", case_incompatible_p_refused),
                  ("host_buffer", case_host_buffer),
                  ("hetero_tp", case_hetero_tp),
                  ("scheduler_spans", case_scheduler_spans),
                  ("other_vllm_version_refused", case_other_vllm_version_refused),
                  ("stray_servers_reaped", case_stray_servers_reaped)])
