"""vLLM P/D through KvferryConnector equals colocated vLLM (docs/vllm.md).

Three `vllm serve` of one random-weight Qwen3 directory (written by `kvferry synth-model` with
the real Qwen3 tokenizer): C colocated (no connector), P and D with KvferryConnector. Each case
sends P the request with max_tokens=1 and {"do_remote_decode": true}, then D the same request
with the kv_transfer_params P returned (as `kvferry proxy` does), and checks that D's token ids
and logprobs equal C's exactly, one request at a time (where vLLM's attention ISA is amx:
token ids exactly, logprobs within vllm_serve.AMX_LOGPROB_TOLERANCE, as vLLM computes D's
one-token query with other kernels than C's prefill there), and that D pulled the prompt: its
response's kv_transfer_params.kvferry_load (non-streamed) or its log's pull line (streamed)
says outcome "pulled" with bytes > 0. A fourth server, D64, has 64-token blocks (P: 128): it
pulls through a relayout and must equal its own colocated answer, and D's plain pull from P bit
for bit (on every ISA: a wrong byte in the re-layout shows there); a fifth, D32, keeps float32
KV and must refuse P's bfloat16 at the handshake, then recompute exactly, as D must when
remote_port names something that is not kvferry. A sixth, PHB, is a P with the host buffer: D
pulls the copy PHB staged and equals C and the plain pull. P's lease frees blocks no D reads,
and a D that reads them afterwards sees their generations changed and recomputes. The last
case kills P after its prefill: D must recompute and still answer exactly, within a bound.

A seventh, CPC, started once PHB and D32 are done with, is colocated with vLLM's prefix cache:
asked a prompt of k * 128 + 1 tokens twice, it computes the last token as a one-token query
over cached KV, as D does over pulled KV, and D's answer equals that one bit for bit on every
ISA.

The proxy cases put `kvferry proxy` (given as KVFERRY_BIN) in front of P and D unchanged: it
copies P's kv_transfer_params to D as it does for kvferry's own engine.

Usage: build/venv/bin/python tests/vllm/test_pd.py MODEL_DIR LOG_DIR [KVFERRY_BIN]
       (PYTHONPATH=tests; without KVFERRY_BIN the proxy cases are skipped, and say so)
"""

import json
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import kvferry_api, procs, runner, web  # noqa: E402
from harness.runner import check  # noqa: E402
import vllm_serve as vs  # noqa: E402

MODEL_DIR, LOG_DIR = sys.argv[1], sys.argv[2]
KVFERRY_BIN = sys.argv[3] if len(sys.argv) > 3 else None
P_HTTP, D_HTTP, C_HTTP, PROXY_HTTP, D64_HTTP, D32_HTTP = 18301, 18302, 18303, 18304, 18305, 18306
KP_HTTP, KD_HTTP, MIXED_PROXY_HTTP = 18307, 18308, 18310  # 18309: test_bad_config
PHB_HTTP, CPC_HTTP = 18311, 18312
P_SIDE, D_SIDE, D64_SIDE, D32_SIDE, KP_SIDE, KD_SIDE = 15601, 15611, 15621, 15631, 15641, 15651
PHB_SIDE = 15681
P_LEASE_S = 10
RECOMPUTE_BOUND_S = 30.0

PROMPTS = vs.PROMPTS

servers = {}


def start_all():
    os.makedirs(LOG_DIR, exist_ok=True)
    t0 = time.monotonic()
    servers["C"] = vs.VllmServer("C", MODEL_DIR, C_HTTP, f"{LOG_DIR}/vllm_C.log")
    servers["P"] = vs.VllmServer("P", MODEL_DIR, P_HTTP, f"{LOG_DIR}/vllm_P.log",
                                 kv_config=vs.kvferry_kv_config(P_SIDE,
                                                                lease_timeout_s=P_LEASE_S))
    servers["D"] = vs.VllmServer("D", MODEL_DIR, D_HTTP, f"{LOG_DIR}/vllm_D.log",
                                 kv_config=vs.kvferry_kv_config(D_SIDE))
    # A D whose blocks are 64 tokens (P's: vLLM's CPU default, 128).
    servers["D64"] = vs.VllmServer("D64", MODEL_DIR, D64_HTTP, f"{LOG_DIR}/vllm_D64.log",
                                   kv_config=vs.kvferry_kv_config(D64_SIDE),
                                   extra_args=("--block-size", "64"))
    # A D whose KV is float32 (P's: bfloat16): no relayout bridges that.
    servers["D32"] = vs.VllmServer("D32", MODEL_DIR, D32_HTTP, f"{LOG_DIR}/vllm_D32.log",
                                   kv_config=vs.kvferry_kv_config(D32_SIDE),
                                   extra_args=("--dtype", "float32"))
    # A P that stages every computed chunk into its host buffer; D reads the staged copy.
    servers["PHB"] = vs.VllmServer("PHB", MODEL_DIR, PHB_HTTP, f"{LOG_DIR}/vllm_PHB.log",
                                   kv_config=vs.kvferry_kv_config(PHB_SIDE, host_buffer=True))
    for name in servers:
        took = servers[name].wait_ready()
        print(f"MEASURE startup_{name}: {took:.1f} s ({len(servers)} started together)",
              flush=True)
    print(f"MEASURE startup_all: {time.monotonic() - t0:.1f} s", flush=True)


def via_pd(path, body, p="P"):
    """P (max_tokens=1, do_remote_decode), then the body D sends, with P's
    kv_transfer_params."""
    p_body = dict(body, max_tokens=1, stream=False, kv_transfer_params={"do_remote_decode": True})
    p_body.pop("max_completion_tokens", None)
    p = servers[p].post(path, p_body)
    params = p.get("kv_transfer_params")
    check(params and params.get("do_remote_prefill") is True,
          f"P returned no kvferry kv_transfer_params: {params}")
    check(all(isinstance(b, int) for b in params["remote_block_ids"]),
          f"remote_block_ids not a flat list of logical ids: {params['remote_block_ids']}")
    return dict(body, kv_transfer_params=params)


def check_pulled_response(resp):
    rec = (resp.get("kv_transfer_params") or {}).get("kvferry_load")
    check(rec is not None, f"D's response has no kvferry_load: {resp.get('kv_transfer_params')}")
    check(rec["outcome"] == "pulled", f"D did not pull: {rec}")
    check(rec["pulled_bytes"] > 0 and rec["descriptors"] > 0, f"D pulled nothing: {rec}")
    print(f"  pulled {rec['pulled_bytes']} B in {rec['descriptors']} descriptors, {rec['ms']} ms",
          flush=True)
    return rec


def pulls_logged():
    return re.findall(r"KvferryConnector: pulled (\S+): (\d+) bytes",
                      servers["D"].log_text())


def check_stream_pulled(before):
    def more():
        return len(pulls_logged()) > before
    check(runner.wait_until(more, 10) is not None, "D logged no pull for the streamed request")
    rid, nbytes = pulls_logged()[-1]
    check(int(nbytes) > 0, f"D's pull of {rid} moved {nbytes} bytes")


# The attention ISA of the bfloat16 servers (P: 128-token blocks, D64: 64): amx or not for
# both, since both sizes are multiples of 32 (vllm_serve.AMX_LOGPROB_TOLERANCE says why it
# matters).
ISA = vs.attention_isa(MODEL_DIR, 128)
pd_answers = {}  # (prompt, max_tokens) -> D's answer pulled from P, same block size


def same(what, got, want):
    vs.same_answer(what, got, want, ISA)


def same_as_plain_pull(what, got, prompt, max_tokens):
    """A pull through another path (a re-layout, P's host buffer) gives the bits D's plain pull
    from P gives (same block size, read in place): exact on every ISA."""
    key = (prompt, max_tokens)
    if key not in pd_answers:
        body = completion_body(prompt, max_tokens=max_tokens)
        d = servers["D"].post("/v1/completions", via_pd("/v1/completions", body))
        check_pulled_response(d)
        pd_answers[key] = vs.completion_tokens(d)
    want = pd_answers[key]
    check(got == want, f"{what}: not the plain pull's answer\n  D: {got}\n  plain: {want}")


def completion_body(prompt, **kw):
    body = {"model": vs.MODEL_NAME, "prompt": prompt, "max_tokens": 12, "temperature": 0,
            "logprobs": 1, "return_tokens_as_token_ids": True}
    body.update(kw)
    return body


def chat_body(text, **kw):
    body = {"model": vs.MODEL_NAME, "messages": [{"role": "user", "content": text}],
            "max_tokens": 12, "temperature": 0, "logprobs": True, "top_logprobs": 1,
            "return_tokens_as_token_ids": True}
    body.update(kw)
    return body


def case_completion_greedy():
    for prompt in PROMPTS:
        body = completion_body(prompt)
        want = vs.completion_tokens(servers["C"].post("/v1/completions", body))
        d = servers["D"].post("/v1/completions", via_pd("/v1/completions", body))
        same("completion", vs.completion_tokens(d), want)
        check_pulled_response(d)


def case_completion_seeded():
    body = completion_body(PROMPTS[0], temperature=0.8, top_p=0.95, seed=1234)
    want = vs.completion_tokens(servers["C"].post("/v1/completions", body))
    d = servers["D"].post("/v1/completions", via_pd("/v1/completions", body))
    same("seeded completion", vs.completion_tokens(d), want)
    check_pulled_response(d)


def case_completion_streamed():
    body = completion_body(PROMPTS[1])
    want = vs.completion_stream_tokens(servers["C"].post_stream("/v1/completions", body))
    before = len(pulls_logged())
    got = vs.completion_stream_tokens(
        servers["D"].post_stream("/v1/completions", via_pd("/v1/completions", body)))
    same("streamed completion", got, want)
    check_stream_pulled(before)


def case_chat():
    body = chat_body("Write one sentence about ferries.")
    want = vs.chat_tokens(servers["C"].post("/v1/chat/completions", body))
    d = servers["D"].post("/v1/chat/completions", via_pd("/v1/chat/completions", body))
    same("chat", vs.chat_tokens(d), want)
    check_pulled_response(d)


def case_chat_streamed():
    body = chat_body("Name three rivers.")
    want = vs.chat_stream_tokens(servers["C"].post_stream("/v1/chat/completions", body))
    before = len(pulls_logged())
    got = vs.chat_stream_tokens(
        servers["D"].post_stream("/v1/chat/completions", via_pd("/v1/chat/completions", body)))
    same("streamed chat", got, want)
    check_stream_pulled(before)


class Proxy:
    """`kvferry proxy` in front of P and D (docs/serving.md), or of the given members."""

    def __init__(self, port=PROXY_HTTP, prefill=None, decode=None, name="proxy"):
        self.port = port
        self.log_path = f"{LOG_DIR}/{name}.log"
        prefill = prefill or [f"http://127.0.0.1:{P_HTTP}"]
        decode = decode or [f"http://127.0.0.1:{D_HTTP}"]
        self.proc = procs.LoggedProcess(
            name, [KVFERRY_BIN, "proxy", "--host", "127.0.0.1", "--port", port,
                   "--prefill", *prefill, "--decode", *decode], self.log_path)
        up = runner.wait_until(lambda: web.request("127.0.0.1", port, "GET", "/health",
                                                   timeout=1).status is not None, 30)
        check(up is not None, f"proxy did not come up: {self.proc.log_text()[-2000:]}")

    def post(self, path, body, with_headers=False):
        r = web.request("127.0.0.1", self.port, "POST", path, body, timeout=120)
        check(r.status == 200, f"proxy {path}: HTTP {r.status}: {r.raw[:500]}")
        return (r.body, r.headers) if with_headers else r.body

    def post_stream(self, path, body):
        r = web.request("127.0.0.1", self.port, "POST", path, dict(body, stream=True),
                        timeout=120)
        check(r.status == 200, f"proxy {path} (stream): HTTP {r.status}: {r.raw[:500]}")
        return [json.loads(line[6:]) for line in r.raw.splitlines()
                if line.startswith("data: ") and line[6:].strip() != "[DONE]"]


def case_proxy():
    if KVFERRY_BIN is None:
        print("  SKIP: no KVFERRY_BIN given", flush=True)
        return
    proxy = Proxy()
    for prompt in PROMPTS:
        body = completion_body(prompt)
        want = vs.completion_tokens(servers["C"].post("/v1/completions", body))
        before = len(pulls_logged())
        got = proxy.post("/v1/completions", body)
        same("completion via proxy", vs.completion_tokens(got), want)
        check_stream_pulled(before)
    body = chat_body("Say hello to the ferry.")
    want = vs.chat_stream_tokens(servers["C"].post_stream("/v1/chat/completions", body))
    before = len(pulls_logged())
    got = vs.chat_stream_tokens(proxy.post_stream("/v1/chat/completions", body))
    same("streamed chat via proxy", got, want)
    check_stream_pulled(before)
    proxy.proc.kill()


class KvferryServe(procs.LoggedProcess):
    """`kvferry serve` of the same model directory, with kvferry's own FerryConnector."""

    def __init__(self, name, port, side_port):
        kv = kvferry_api.kv_config(name, side_channel_host="127.0.0.1",
                                   side_channel_port=side_port)
        super().__init__(name, [KVFERRY_BIN, "serve", "--model", MODEL_DIR, "--host", "127.0.0.1",
                                "--port", port, "--served-model-name", vs.MODEL_NAME,
                                "--max-model-len", "1024", "--threads", "1",
                                "--kv-transfer-config", kv], f"{LOG_DIR}/kvferry_{name}.log")
        self.port = port
        up = runner.wait_until(lambda: web.request("127.0.0.1", port, "GET", "/health",
                                                   timeout=1).status == 200, 120)
        check(up is not None, f"kvferry serve {name} did not come up: {self.log_text()[-2000:]}")

    def post(self, path, body):
        r = web.request("127.0.0.1", self.port, "POST", path, body, timeout=120)
        check(r.status == 200, f"{self.name} {path}: HTTP {r.status}: {r.raw[:500]}")
        return r.body


def case_mixed_engines():
    """A vLLM pair (P, D: KvferryConnector) and a kvferry-engine pair (KP, KD: FerryConnector)
    of the same model behind one `kvferry proxy`. The proxy learns each member's engine from its
    /metrics and pairs a P only with a D of the same engine: the two engines keep their KV in
    different layouts behind different connectors and compute different numerics (vLLM's
    bfloat16 CPU attention, kvferry's batch-invariant kernels), so a cross pair could only
    recompute, and its first token would come from the other engine. Every answer equals its
    own engine's colocated answer exactly and was pulled, and both pairs served."""
    if KVFERRY_BIN is None:
        print("  SKIP: no KVFERRY_BIN given", flush=True)
        return
    kp = KvferryServe("kp", KP_HTTP, KP_SIDE)
    kd = KvferryServe("kd", KD_HTTP, KD_SIDE)
    vllm_p, vllm_d = f"http://127.0.0.1:{P_HTTP}", f"http://127.0.0.1:{D_HTTP}"
    proxy = Proxy(MIXED_PROXY_HTTP, [vllm_p, f"http://127.0.0.1:{KP_HTTP}"],
                  [vllm_d, f"http://127.0.0.1:{KD_HTTP}"], name="proxy_mixed")
    try:
        def engines():
            r = web.request("127.0.0.1", MIXED_PROXY_HTTP, "GET", "/cluster", timeout=5)
            members = r.body.get("members", []) if isinstance(r.body, dict) else []
            return {m["url"]: m.get("engine") for m in members}
        known = runner.wait_until(
            lambda: sorted(engines().values()) == ["kvferry", "kvferry", "vllm", "vllm"], 30)
        check(known is not None, f"the proxy never learnt the members' engines: {engines()}")
        family = {vllm_p: "vllm", vllm_d: "vllm", f"http://127.0.0.1:{KP_HTTP}": "kvferry",
                  f"http://127.0.0.1:{KD_HTTP}": "kvferry"}
        served = {"vllm": 0, "kvferry": 0}
        # Short prompts (no prefix affinity): the least-loaded P, in turns.
        for i, prompt in enumerate(["A ferry", "The river", "Boats and", "One day the"]):
            body = {"model": vs.MODEL_NAME, "prompt": prompt, "max_tokens": 8,
                    "temperature": 0, "logprobs": 1}
            got, headers = proxy.post("/v1/completions", body, with_headers=True)
            pair = (headers.get("X-Kvferry-Prefill"), headers.get("X-Kvferry-Decode"))
            check(family.get(pair[0]) is not None and family.get(pair[0]) == family.get(pair[1]),
                  f"request {i} crossed engines: P {pair[0]}, D {pair[1]}")
            engine = family[pair[0]]
            served[engine] += 1
            if engine == "vllm":
                want = servers["C"].post("/v1/completions", body)
                check_pulled_response(got)
            else:
                want = kp.post("/v1/completions", body)   # KP answering on its own: colocated
                load = got.get("kv_load") or {}
                check(load.get("outcome") == "pulled" and load.get("pulled_bytes", 0) > 0,
                      f"kvferry D did not pull: {load}")
            same(f"mixed {engine} pair, request {i}", vs.completion_tokens(got),
                 vs.completion_tokens(want))
        check(served["vllm"] > 0 and served["kvferry"] > 0, f"one pair never served: {served}")
        print(f"  served by pair: {served}", flush=True)
    finally:
        proxy.proc.kill()
        kp.kill()
        kd.kill()


def case_block_size_relayout():
    """P with 128-token blocks, D with 64: D pulls P's pages into a staging buffer and rewrites
    them into its own blocks (relayout.py); its answer equals D's own colocated answer (the
    same block size, so the same attention kernel)."""
    for prompt in PROMPTS:
        body = completion_body(prompt, max_tokens=8)
        want = vs.completion_tokens(servers["D64"].post("/v1/completions", body))
        d = servers["D64"].post("/v1/completions", via_pd("/v1/completions", body))
        same("D64 from P128", vs.completion_tokens(d), want)
        same_as_plain_pull("D64 from P128", vs.completion_tokens(d), prompt, 8)
        rec = check_pulled_response(d)
        check(rec.get("relayout") is True, f"D64 pulled without a relayout: {rec}")


def case_host_buffer():
    """PHB stages each computed chunk into its host buffer after the forward pass (the
    scheduler ships the chunks); D pulls the staged copy, and its answers equal C's."""
    for prompt in PROMPTS:
        body = completion_body(prompt, max_tokens=8)
        want = vs.completion_tokens(servers["C"].post("/v1/completions", body))
        d = servers["D"].post("/v1/completions", via_pd("/v1/completions", body, p="PHB"))
        same("D from PHB's host buffer", vs.completion_tokens(d), want)
        same_as_plain_pull("D from PHB's host buffer", vs.completion_tokens(d), prompt, 8)
        check_pulled_response(d)
    # The C++ connector's own lines, not the Python config's: PHB registered a host buffer,
    # and D's handshake found one in PHB's metadata.
    check(re.search(r"serving KV metadata on .*, host buffer", servers["PHB"].log_text()),
          "PHB's connector does not serve a host buffer")
    check(re.search(r"handshake with .* done \(.*, host buffer\)", servers["D"].log_text()),
          "D's handshake with PHB saw no host buffer")


def case_exact_against_a_prefix_hit():
    """D computes the last prompt token as a one-token query over the KV it pulled (vLLM
    recomputes that token). A colocated server computes the same when its prefix cache holds
    every other token: a prompt of k * 128 + 1 tokens, asked twice, is a hit of k blocks the
    second time. D's answer equals that one bit for bit on every attention ISA, AMX included,
    where it may differ from a full prefill's in the last digits (vllm_serve.same_answer)."""
    # A seventh server does not fit beside the six (24 GiB): PHB's and D32's cases are done.
    for name in ("PHB", "D32"):
        servers.pop(name).kill()
    servers["CPC"] = vs.VllmServer("CPC", MODEL_DIR, CPC_HTTP, f"{LOG_DIR}/vllm_CPC.log",
                                   extra_args=("--enable-prefix-caching",
                                               "--enable-prompt-tokens-details"))
    print(f"MEASURE startup_CPC: {servers['CPC'].wait_ready():.1f} s", flush=True)
    ids = web.request("127.0.0.1", C_HTTP, "POST", "/tokenize",
                      {"model": vs.MODEL_NAME, "prompt": PROMPTS[1]}).body["tokens"]
    for blocks in (1, 2, 4):
        body = completion_body((ids * 2)[:blocks * 128 + 1])
        servers["CPC"].post("/v1/completions", body)   # fills CPC's prefix cache
        hit = servers["CPC"].post("/v1/completions", body)
        cached = ((hit.get("usage") or {}).get("prompt_tokens_details") or {}).get(
            "cached_tokens")
        check(cached == blocks * 128, f"CPC's second answer hit {cached} cached tokens, not "
              f"{blocks * 128}: {hit.get('usage')}")
        want = vs.completion_tokens(hit)
        d = servers["D"].post("/v1/completions", via_pd("/v1/completions", body))
        got = vs.completion_tokens(d)
        check(got == want, f"{blocks * 128 + 1} tokens: D's answer is not the prefix hit's\n"
              f"  D: {got}\n  CPC: {want}")
        check_pulled_response(d)


def check_recomputed(name, d_body, want, outcome):
    """Sends D `name` d_body: its answer must equal `want` and its kvferry_load say `outcome`
    (a load that failed on purpose, so vLLM recomputed). The record."""
    d = servers[name].post("/v1/completions", d_body)
    same(f"{name} after {outcome}", vs.completion_tokens(d), want)
    rec = (d.get("kv_transfer_params") or {}).get("kvferry_load")
    check(rec is not None and rec["outcome"] == outcome,
          f"{name}'s load is not {outcome}: {rec}")
    print(f"  {name} recomputed ({outcome}): {rec['error'][:160]}", flush=True)
    return rec


def case_dtype_mismatch_refused():
    """P's KV is bfloat16, D32's float32: the handshake refuses naming the field, D32
    recomputes, and its answer equals its own colocated answer."""
    body = completion_body(PROMPTS[1], max_tokens=8)
    want = vs.completion_tokens(servers["D32"].post("/v1/completions", body))
    rec = check_recomputed("D32", via_pd("/v1/completions", body), want, "failed_handshake")
    check("dtype" in rec["error"], f"the refusal does not name the field: {rec}")


def case_peer_not_kvferry():
    """The params name an engine D has not met at something that is not a kvferry side channel
    (C's HTTP port): the handshake fails within handshake_timeout_ms and D recomputes exactly.
    (D knows its Ps by engine id: P's own id at another port is still P, already met.)"""
    body = completion_body(PROMPTS[0], max_tokens=8)
    want = vs.completion_tokens(servers["C"].post("/v1/completions", body))
    d_body = via_pd("/v1/completions", body)
    d_body["kv_transfer_params"] = dict(d_body["kv_transfer_params"], remote_port=C_HTTP,
                                        remote_engine_id="not-kvferry")
    check_recomputed("D", d_body, want, "failed_handshake")


def case_lease_expires():
    """P's blocks for a request no D read are freed after lease_timeout_s, their generations
    bumped first; a D that reads them afterwards finds the generations changed (P may have
    reused the blocks), throws the bytes away and recomputes, and still answers exactly."""
    body = completion_body(PROMPTS[0] + " and then", max_tokens=8)
    want = vs.completion_tokens(servers["C"].post("/v1/completions", body))
    d_body = via_pd("/v1/completions", body)
    rid = d_body["kv_transfer_params"]["remote_request_id"]
    pattern = rf"lease of request {re.escape(rid)} expired"
    took = runner.wait_until(lambda: re.search(pattern, servers["P"].log_text()),
                             P_LEASE_S + 20, interval=0.5)
    check(took is not None, f"P never freed {rid} ({P_LEASE_S} s lease)")
    print(f"  freed {took:.1f} s after the prefill (lease {P_LEASE_S} s)", flush=True)
    check_recomputed("D", d_body, want, "failed_generation")


def stats_totals(server):
    """Sums of the connector's stats over the intervals vLLM's stats logger printed."""
    totals = {}
    for line in re.findall(r"KV Transfer metrics: (.*)", server.log_text()):
        for key, value in re.findall(r"(\w+)=([\d.]+)", line):
            totals[key] = totals.get(key, 0) + float(value)
    return totals


def case_stats_count_every_pull():
    """The connector's own stats (KvferryStats, through vLLM's stats logger) show the pulls,
    their bytes, and no failure beyond those the refusal cases caused on purpose.

    vLLM's stats path was seen to lose one pull's counts in one run of four (8 counted of 9
    logged; cause not found), so the counts are checked as bounds; the exact per-request
    accounting is each response's kvferry_load, checked by every case above."""
    # D: the non-kvferry peer and the expired lease, both on purpose
    want_failures = {"D": 2, "D64": 0}
    for name in want_failures:
        s = servers[name]
        pulls = [int(b) for _, b in re.findall(r"KvferryConnector: pulled (\S+): (\d+) bytes",
                                                 s.log_text())]

        def logged():
            t = stats_totals(s)
            return (t.get("pulls", 0) >= len(pulls) and
                    t.get("pull_failures", 0) >= want_failures[name])
        # A worker's stats leave it with an engine step's output, and the API server prints
        # them every 10 s: one plain request makes sure a step follows the last pull.
        s.post("/v1/completions", completion_body("flush", max_tokens=1))
        runner.wait_until(logged, 30, interval=1.0)
        totals = stats_totals(s)
        got_pulls, got_bytes = int(totals.get("pulls", 0)), int(totals.get("bytes_pulled", 0))
        got_failures = int(totals.get("pull_failures", 0))
        print(f"  {name}: stats {got_pulls} pulls, {got_bytes} bytes, {got_failures} failures; "
              f"log {len(pulls)} pulls, {sum(pulls)} bytes", flush=True)
        check(len(pulls) > 0 and got_pulls > 0 and got_bytes > 0,
              f"{name}: no pull counted: {totals}")
        check(got_pulls <= len(pulls) and got_bytes <= sum(pulls),
              f"{name}: stats count more than was pulled: {totals}")
        check(got_failures <= want_failures[name],
              f"{name}: stats count {got_failures} failures, the refusal cases caused "
              f"{want_failures[name]}: {totals}")


def case_prometheus_metrics():
    """vLLM's /metrics carries the connector's counters (prom.py): D's pulls, bytes and pull
    times equal what D logged pull by pull; P counts reads and expired leases.

    These are the stats the logger line above under-counted, but through vLLM's Prometheus
    logger, which records every interval's stats (the same run: logger 8 pulls, /metrics 9,
    log 9). So D's counters must equal its log once a step has followed the last pull."""
    for name in ("P", "D"):   # a step after the last pull, so its stats leave the worker
        servers[name].post("/v1/completions", completion_body("flush", max_tokens=1))
    logged = [int(b) for _, b in pulls_logged()]

    def complete():
        d = servers["D"].metrics("vllm:kvferry_")
        p = servers["P"].metrics("vllm:kvferry_")
        return (d.get("vllm:kvferry_pulls_total", 0) >= len(logged) and
                p.get("vllm:kvferry_leases_expired_total", 0) >= 1)
    runner.wait_until(complete, 30, interval=1.0)
    d, p = servers["D"].metrics("vllm:kvferry_"), servers["P"].metrics("vllm:kvferry_")
    print(f"  D: {d}\n  P: {p}\n  D's log: {len(logged)} pulls, {sum(logged)} bytes",
          flush=True)
    check(len(logged) > 0 and d.get("vllm:kvferry_pulls_total") == len(logged),
          f"D's pulls counter is not the {len(logged)} pulls D logged: {d}")
    check(d.get("vllm:kvferry_bytes_pulled_total") == sum(logged),
          f"D's bytes counter is not the {sum(logged)} bytes D logged: {d}")
    check(d.get("vllm:kvferry_pull_seconds_count") == len(logged) and
          d.get("vllm:kvferry_pull_seconds_sum", 0) > 0,
          f"D's pull-time histogram does not hold every pull: {d}")
    check(d.get("vllm:kvferry_pull_failures_total") == 2,
          f"D's failures are not the two on purpose (a non-kvferry peer, an expired lease): "
          f"{d}")
    check(p.get("vllm:kvferry_sends_read_total", 0) > 0, f"P counts no read: {p}")
    check(p.get("vllm:kvferry_leases_expired_total", 0) >= 1,
          f"P counts no expired lease after lease_expires: {p}")


def case_p_killed_after_prefill():
    body = completion_body(PROMPTS[1], max_tokens=8)
    want = vs.completion_tokens(servers["C"].post("/v1/completions", body))
    d_body = via_pd("/v1/completions", body)
    servers["P"].kill()
    t0 = time.monotonic()
    d = servers["D"].post("/v1/completions", d_body)
    took = time.monotonic() - t0
    same("after P died", vs.completion_tokens(d), want)
    rec = (d.get("kv_transfer_params") or {}).get("kvferry_load")
    check(rec is not None and rec["outcome"] != "pulled",
          f"D claims a pull from a dead P: {rec}")
    print(f"  D recomputed: {rec}", flush=True)
    runner.measure("recompute_after_p_died", took, RECOMPUTE_BOUND_S)


def main():
    start_all()
    cases = [("completion_greedy", case_completion_greedy),
             ("completion_seeded", case_completion_seeded),
             ("completion_streamed", case_completion_streamed),
             ("chat", case_chat),
             ("chat_streamed", case_chat_streamed),
             ("proxy", case_proxy),
             ("mixed_engines", case_mixed_engines),
             ("block_size_relayout", case_block_size_relayout),
             ("host_buffer", case_host_buffer),
             ("dtype_mismatch_refused", case_dtype_mismatch_refused),
             ("exact_against_a_prefix_hit", case_exact_against_a_prefix_hit),
             ("peer_not_kvferry", case_peer_not_kvferry),
             ("lease_expires", case_lease_expires),
             ("stats_count_every_pull", case_stats_count_every_pull),
             ("prometheus_metrics", case_prometheus_metrics),
             ("p_killed_after_prefill", case_p_killed_after_prefill)]
    failed = []
    for name, fn in cases:
        t0 = time.monotonic()
        try:
            fn()
            print(f"PASS {name} ({time.monotonic() - t0:.1f} s)", flush=True)
        except Exception as e:  # noqa: BLE001 - report every case
            print(f"FAIL {name}: {type(e).__name__}: {e}", flush=True)
            failed.append(name)
    d_log = servers["D"].log_text()
    for line in re.findall(r"KV Transfer metrics.*", d_log)[-3:]:
        print("D stats:", line, flush=True)
    for s in servers.values():
        s.kill()
    if failed:
        print("failed cases: " + ", ".join(failed))
        sys.exit(1)


if __name__ == "__main__":
    main()
