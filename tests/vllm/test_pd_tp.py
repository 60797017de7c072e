"""vLLM P/D at tensor_parallel_size 2, and across TP sizes, through KvferryConnector
(docs/vllm.md, "Tensor parallelism").

P and D are `vllm serve --tensor-parallel-size 2` of the random-weight Qwen3 directory (vLLM's
CPU path: gloo and its shared-memory all-reduce; the model's one KV head is replicated on both
ranks), X a `vllm serve` at TP 1. Each vLLM TP worker runs its own kvferry connector, one rank
of a split engine: D's ranks read their heads from the P ranks holding them.

- P (TP 2) -> D (TP 2): the reference is P answering the same request on its own, without
  kv_transfer_params: a colocated TP 2 answer (TP 2 and TP 1 compute different numerics, so a
  TP 1 server cannot be the reference). D's token ids and logprobs must equal it exactly
  (with vLLM's AMX attention: token ids exactly, logprobs within
  vllm_serve.AMX_LOGPROB_TOLERANCE), its
  kvferry_load must say "pulled" by both ranks, and P must have given back every hold on D's
  notifications (no lease ran out).
- X (TP 1) -> D (TP 2) and P (TP 2) -> X (TP 1): D must pull with every rank, and no P rank's
  lease may run out (P's rank 1 holds a replica nobody reads from a TP-1 D: D's release ends
  it). No colocated answer is a reference across TP sizes; whether D's answer equals D's own is
  printed, not asserted.

A machine freeze is told from a bug (harness/stall_watch.py): on 2 cores, five vLLM processes
at TP 2 were seen to stall the whole box for 9-60 s at a time (every server's socket I/O thread
and an independent sleeper late by as much, the kernel's "workqueue lockup"; docs/vllm.md). A
pull that missed a deadline during such a freeze recomputes (its answer is still checked
exactly) and the request is sent again, up to TRIES times; a pull that fails without a freeze
of STALL_S or more fails the test, and so does a lease that ran out for a request not excused.

CTest runs it with the socket backend (vllm_pd_tp). With UCX (KVF_TP_BACKEND=ucx), a D rank's
data READ from its P rank timed out in each run so far (three, on 2 cores), so that prompt
recomputed (cause not found; docs/vllm.md, "What does not work yet").

Usage: build/venv/bin/python tests/vllm/test_pd_tp.py MODEL_DIR LOG_DIR   (PYTHONPATH=tests;
       MODEL_DIR: make test-vllm's build/tests/vllm/qwen3-synth; the make test-vllm environment;
       KVF_TP_BACKEND: socket or ucx, default ucx; KVF_TP_UCX_TRANSPORT: UCX's transport)
"""

import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import runner  # noqa: E402
from harness.runner import check  # noqa: E402
from harness import stall_watch  # noqa: E402
import vllm_serve as vs  # noqa: E402

MODEL_DIR, LOG_DIR = sys.argv[1], sys.argv[2]
P_HTTP, D_HTTP, P_SIDE, D_SIDE = 18321, 18322, 15661, 15671   # side channels: port + rank
X_HTTP, X_SIDE = 18323, 15691
# The transfer backend all three use (KVF_TP_BACKEND: ucx, the default, or socket). Two TP-2
# servers on 2 cores keep both busy while a pull is in flight (vLLM's engines step without
# pause while a request waits for KV or holds blocks for a D): one pull took 4 s here, and a
# handshake with P's rank 1 got no reply for 5 s, so loads and handshakes get 20 s and the lease
# 60 s (vllm_pd keeps 5 s).
BACKEND = {"backend": os.environ.get("KVF_TP_BACKEND", "ucx"), "load_timeout_ms": 20000,
           "handshake_timeout_ms": 20000, "lease_timeout_s": 60}
if os.environ.get("KVF_TP_UCX_TRANSPORT"):  # ucx_transport, for UCX (auto, shm, tcp)
    BACKEND["ucx_transport"] = os.environ["KVF_TP_UCX_TRANSPORT"]
PROMPTS = vs.PROMPTS
ISA = vs.attention_isa(MODEL_DIR, 128)   # vllm_serve.AMX_LOGPROB_TOLERANCE: why it matters
servers = {}
WATCH = stall_watch.StallWatch()
STALL_S = 5.0   # a freeze this long during an attempt excuses its failed pull
TRIES = 3
excused = set()   # P's request ids of the attempts a freeze excused (their leases may run out)


def case_tp2_and_across_tp_sizes():
    os.makedirs(LOG_DIR, exist_ok=True)
    tp = ("--tensor-parallel-size", "2")
    servers["P"] = vs.VllmServer("P", MODEL_DIR, P_HTTP, f"{LOG_DIR}/vllm_P_tp2.log",
                                 kv_config=vs.kvferry_kv_config(P_SIDE, **BACKEND), extra_args=tp)
    servers["D"] = vs.VllmServer("D", MODEL_DIR, D_HTTP, f"{LOG_DIR}/vllm_D_tp2.log",
                                 kv_config=vs.kvferry_kv_config(D_SIDE, **BACKEND), extra_args=tp)
    servers["X"] = vs.VllmServer("X", MODEL_DIR, X_HTTP, f"{LOG_DIR}/vllm_X_tp1.log",
                                 kv_config=vs.kvferry_kv_config(X_SIDE, **BACKEND))
    for name, s in servers.items():
        print(f"MEASURE startup_{name}: {s.wait_ready():.1f} s", flush=True)
    for prompt in PROMPTS:
        body = {"model": vs.MODEL_NAME, "prompt": prompt, "max_tokens": 12, "temperature": 0,
                "logprobs": 1, "return_tokens_as_token_ids": True}
        want = vs.completion_tokens(servers["P"].post("/v1/completions", body))

        def exact(got, params):
            check(params.get("tp_size") == 2, f"P's params do not say TP 2: {params}")
            vs.same_answer("D (TP 2) from P (TP 2) against P alone", got, want, ISA)
        rec = pull_until_pulled("P", "D", prompt, 2, exact)
        print(f"  pulled {rec['pulled_bytes']} B by {rec['ranks']} ranks, {rec['ms']} ms", flush=True)
    # P gives the holds back on D's notifications (vLLM frees a request's blocks once every
    # rank did), not at the lease's end.
    def sends_read():
        return max([int(m) for m in re.findall(r"sends_read=(\d+)", servers["P"].log_text())],
                   default=0)
    took = runner.wait_until(lambda: sends_read() >= len(PROMPTS), 30, interval=0.5)
    check(took is not None, f"P counted {sends_read()} reads of {len(PROMPTS)} holds")
    check_no_lease_ran_out("P")
    heterogeneous_tp()


def pull(p_name, d_name, prompt):
    """P's prefill of prompt handed to D: (D's answer's token ids and logprobs, its record, the
    kv_transfer_params P gave)."""
    body = {"model": vs.MODEL_NAME, "prompt": prompt, "max_tokens": 12, "temperature": 0,
            "logprobs": 1, "return_tokens_as_token_ids": True}
    p = servers[p_name].post("/v1/completions", dict(
        body, max_tokens=1, kv_transfer_params={"do_remote_decode": True}))
    params = p.get("kv_transfer_params") or {}
    d = servers[d_name].post("/v1/completions", dict(body, kv_transfer_params=params))
    return (vs.completion_tokens(d), (d.get("kv_transfer_params") or {}).get("kvferry_load") or {},
            params)


def late_polls():
    return {n: stall_watch.socket_poll_stalls(s.log_text()) for n, s in servers.items()}


def stall_since(since, polls_before):
    """The longest freeze (s) seen since `since`: by this process's watcher, or in a server's
    socket I/O thread warnings logged after polls_before (late_polls())."""
    after = late_polls()
    logged = max((x for n, xs in after.items() for x in xs[len(polls_before[n]):]), default=0.0)
    return max(WATCH.worst_since(since), logged)


def pull_until_pulled(p_name, d_name, prompt, d_ranks, check_answer):
    """pull() until D says it pulled with each of its d_ranks ranks; every answer, pulled or
    recomputed, goes through check_answer(answer, params). A failed pull is retried only when
    the box froze for STALL_S or more meanwhile (TRIES attempts in all); D's record returned."""
    what = f"{p_name} -> {d_name}"
    for attempt in range(1, TRIES + 1):
        since, polls = time.monotonic(), late_polls()
        got, rec, params = pull(p_name, d_name, prompt)
        check_answer(got, params)
        if rec.get("outcome") == "pulled" and rec.get("ranks") == d_ranks and rec["pulled_bytes"] > 0:
            return rec
        stall = stall_since(since, polls)
        check(stall >= STALL_S and attempt < TRIES,
              f"{what}: D did not pull with every rank: {rec} (attempt {attempt} of {TRIES}; "
              f"longest freeze meanwhile {stall:.1f} s, {STALL_S} s would excuse it)")
        excused.add(params.get("remote_request_id"))
        print(f"  {what}: not pulled ({rec.get('outcome')}), recomputed exactly, during a "
              f"machine freeze of {stall:.1f} s: sent again", flush=True)


def check_no_lease_ran_out(*p_names):
    """No P rank's lease ran out, but for the requests a freeze excused."""
    text = "".join(servers[n].log_text() for n in p_names)
    ran_out = set(re.findall(r"lease of request (\S+) expired", text)) - excused
    check(not ran_out, f"a P rank's lease ran out: {sorted(ran_out)}")


def heterogeneous_tp():
    """Then P at TP 1 -> D at TP 2 and P at TP 2 -> D at TP 1 (X: a TP-1 server, kv_both): every
    D rank reads its heads from the P ranks that hold them. TP 1 and TP 2 compute different
    numerics (the all-reduce), so no colocated answer is the reference: the check is that D
    pulled with each of its ranks and P's every rank gave the hold back; how D's answer
    compares with its own colocated answer is printed, not asserted."""
    for p_name, d_name, d_ranks in (("X", "D", 2), ("P", "X", 1)):
        for prompt in PROMPTS:
            answers = []
            rec = pull_until_pulled(p_name, d_name, prompt, d_ranks,
                                    lambda got, _params: answers.append(got))
            got = answers[-1]
            alone = vs.completion_tokens(servers[d_name].post("/v1/completions", {
                "model": vs.MODEL_NAME, "prompt": prompt, "max_tokens": 12, "temperature": 0,
                "logprobs": 1, "return_tokens_as_token_ids": True}))
            print(f"  {p_name} -> {d_name}: pulled {rec['pulled_bytes']} B by {rec['ranks']} ranks; "
                  f"token ids {'equal' if got[0] == alone[0] else 'differ from'} D alone's, "
                  f"logprobs {'equal' if got[1] == alone[1] else 'differ'}", flush=True)
    check_no_lease_ran_out("P", "X")


def main():
    try:
        runner.run_cases([("tp2_and_across_tp_sizes", case_tp2_and_across_tp_sizes)])
    finally:
        for s in servers.values():
            s.kill()


if __name__ == "__main__":
    main()
