"""P dies or hangs around a pull; the proxy faces a dead or hung P (docs/reliability.md).

Both instances use UCX over tcp (UCX_TLS=tcp), where P's worker must progress for D's READ to
complete, so a stopped P really stalls the pull. Every case checks the answer's exactness
against a colocated reference instance and a stated time bound.
"""
import os
import signal
import tempfile
import time

from harness.kvferry_api import decode_body, is_openai_error, kv_config, text_of
from harness.runner import Background, check, measure, run_cases, wait_until
from harness.fault_node import Node, colocated_text, parse_args, prefill

HANDSHAKE_S = 2.0
TRANSFER_S = 3.0
SLACK_S = 5.0  # process scheduling on a loaded 2-core CI machine
ENV = {"UCX_TLS": "tcp"}
PROMPT = "The quick brown fox jumps over the lazy dog; " * 3
BODY = {"prompt": PROMPT, "max_tokens": 12, "temperature": 0}

args = None
_reference = {}


def reference(body):
    key = body["prompt"]
    if key not in _reference:
        _reference[key] = colocated_text(args.node, body)
    return _reference[key]


def start_p(**extra):
    cfg = dict(lease_ms=30000)
    cfg.update(extra)
    return Node(args.node, "serve", ["--kv-transfer-config", kv_config("p0", **cfg)], env=ENV,
                name="P")


def start_d(policy="recompute", env=None):
    cfg = kv_config("d0", handshake_timeout_ms=int(HANDSHAKE_S * 1000),
                    transfer_timeout_ms=int(TRANSFER_S * 1000), kv_load_failure_policy=policy)
    return Node(args.node, "serve", ["--kv-transfer-config", cfg], env={**ENV, **(env or {})},
                name="D")


def failures(d, kind):
    return d.metric(f'kvferry:kv_transfer_failures_total{{kind="{kind}"}}')


def eventually(pred, what, timeout=5):
    """Metrics are published by the engine thread after its step: poll briefly."""
    check(wait_until(pred, timeout) is not None, what)


def warm_up(p, d):
    """One good P->D hand-off, so D has P's metadata (the next pull skips the handshake)."""
    body = {"prompt": "warm up " * 4, "max_tokens": 2, "temperature": 0}
    status, resp, _ = d.post(decode_body(body, prefill(p, body)))
    check(status == 200, f"warm-up answered {status}: {resp}")
    eventually(lambda: d.metric("kvferry:kv_transfers_total") == 1, "warm-up did not pull")


def check_d_recovered(d):
    check(wait_until(lambda: d.blocks_in_use() == 0, 5) is not None, "D's blocks not released")
    status, resp, _ = d.post(BODY)
    check(status == 200 and text_of(resp) == reference(BODY), f"D unusable after fault: {resp}")


def case_p_killed_before_handshake():
    want = reference(BODY)
    p, d = start_p(), start_d()
    params = prefill(p, BODY)
    p.kill()
    status, resp, secs = d.post(decode_body(BODY, params))
    check(status == 200, f"D answered {status}: {resp}")
    check(text_of(resp) == want, f"recomputed text {text_of(resp)!r} != {want!r}")
    eventually(lambda: failures(d, "handshake") == 1, "no handshake failure counted")
    measure("p_killed_before_handshake.recompute", secs, HANDSHAKE_S + SLACK_S)
    check_d_recovered(d)


def case_p_killed_before_handshake_policy_fail():
    p, d = start_p(), start_d(policy="fail")
    params = prefill(p, BODY)
    p.kill()
    status, resp, secs = d.post(decode_body(BODY, params))
    check(status is not None and status >= 400, f"policy fail answered {status}: {resp}")
    print(f"  policy fail: HTTP {status}: {resp['error']['message'][:120]}")
    check(is_openai_error(resp), f"not an OpenAI error body: {resp}")
    measure("p_killed_before_handshake.fail_policy", secs, HANDSHAKE_S + SLACK_S)
    check_d_recovered(d)


def case_p_hung_during_pull():
    want = reference(BODY)
    p, d = start_p(), start_d()
    warm_up(p, d)
    params = prefill(p, BODY)
    p.signal(signal.SIGSTOP)
    status, resp, secs = d.post(decode_body(BODY, params))
    p.signal(signal.SIGCONT)
    check(status == 200 and text_of(resp) == want, f"D answered {status}: {resp}")
    eventually(lambda: failures(d, "deadline") == 1, "no deadline failure counted")
    measure("p_hung_during_pull.deadline", secs, TRANSFER_S + HANDSHAKE_S + SLACK_S)
    check_d_recovered(d)
    # P is back: a new hand-off pulls again.
    before = d.metric("kvferry:kv_transfers_total")
    body = {"prompt": "after the stall " * 3, "max_tokens": 4, "temperature": 0}
    status, resp, _ = d.post(decode_body(body, prefill(p, body)))
    check(status == 200 and text_of(resp) == reference(body), f"after SIGCONT: {resp}")
    eventually(lambda: d.metric("kvferry:kv_transfers_total") == before + 1,
               "no pull after recovery")


def case_p_killed_during_pull():
    want = reference(BODY)
    p, d = start_p(), start_d()
    warm_up(p, d)
    params = prefill(p, BODY)
    p.signal(signal.SIGSTOP)  # the READ hangs on P's side
    pull = Background(lambda: d.post(decode_body(BODY, params)))
    time.sleep(0.5)
    killed_at = time.monotonic()
    p.kill()
    status, resp, _ = pull.result(60, "D")
    check(status == 200 and text_of(resp) == want, f"D answered {status}: {resp}")
    measure("p_killed_during_pull.after_kill", pull.finished_at - killed_at, TRANSFER_S + SLACK_S)
    check_d_recovered(d)


PAUSE_MS = 2000


def data_reads(marker):
    """Data READs D's fault hook has recorded in MARKER so far."""
    try:
        with open(marker) as f:
            return len(f.read().splitlines())
    except FileNotFoundError:
        return 0


def case_p_killed_after_pull_before_notification():
    """P dies after D's data READ completed but before the generation READ that carries the
    notification: D cannot prove the bytes were not reused, so it is a load failure; D
    recomputes and the answer is exact. D's fault hook widens the window to PAUSE_MS."""
    want = reference(BODY)
    p = start_p()
    marker = os.path.join(tempfile.mkdtemp(prefix="kvf-fault-"), "data-reads")
    d = start_d(env={"KVFERRY_FAULT_PAUSE_AFTER_DATA_READ_MS": str(PAUSE_MS),
                     "KVFERRY_FAULT_DATA_READ_MARKER": marker})
    warm_up(p, d)
    params = prefill(p, BODY)
    before = d.metric("kvferry:kv_transfers_total")
    reads_before = data_reads(marker)
    pull = Background(lambda: d.post(decode_body(BODY, params)))
    # D's hook appends a line to the marker when the data READ completed, then sleeps PAUSE_MS
    # before the generation READ: P is killed inside that window, however loaded the machine.
    check(wait_until(lambda: data_reads(marker) > reads_before, 10) is not None,
          "D's data READ never completed")
    killed_at = time.monotonic()
    p.kill()
    status, resp, _ = pull.result(60, "D")
    check(status == 200 and text_of(resp) == want, f"D answered {status}: {resp}")
    # The data READ moved the bytes, but a pull whose generation READ failed is not a completed
    # pull: kv_transfers_total counts only verified loads.
    check(d.metric("kvferry:kv_transfers_total") == before,
          "an unverified pull was counted as a completed transfer")
    check(sum(failures(d, k) for k in ("transfer", "deadline", "generation")) >= 1,
          "no load failure counted for the unverifiable pull")
    measure("p_killed_after_pull_before_notification.after_kill", pull.finished_at - killed_at,
            PAUSE_MS / 1000 + TRANSFER_S + SLACK_S)
    check_d_recovered(d)


def case_proxy_p_dead_or_hung():
    p, d = start_p(), start_d()
    proxy = Node(args.node, "proxy", ["--prefill", p.url, "--decode", d.url,
                                      "--prefill-timeout-ms", "3000"], name="proxy")
    status, resp, _ = proxy.post(BODY)
    check(status == 200 and text_of(resp) == reference(BODY), f"proxy baseline: {resp}")
    # P hung: the proxy's prefill timeout answers.
    p.signal(signal.SIGSTOP)
    status, resp, secs = proxy.post(BODY)
    check(status is not None and 500 <= status < 600 and is_openai_error(resp),
          f"hung P: proxy answered {status}: {resp}")
    measure("proxy_p_hung.error", secs, 3.0 + SLACK_S)
    # P dies while the proxy waits for it.
    answer = Background(lambda: proxy.post(BODY))
    time.sleep(0.3)
    killed_at = time.monotonic()
    p.kill()
    status, resp, _ = answer.result(30, "proxy")
    check(status is not None and 500 <= status < 600 and is_openai_error(resp),
          f"P died mid-request: proxy answered {status}: {resp}")
    measure("proxy_p_killed_mid_request.error", time.monotonic() - killed_at, 3.0 + SLACK_S)
    # P gone: connection refused.
    status, resp, secs = proxy.post(BODY)
    check(status is not None and 500 <= status < 600 and is_openai_error(resp),
          f"dead P: proxy answered {status}: {resp}")
    measure("proxy_p_dead.error", secs, 2.0 + SLACK_S)
    check(d.blocks_in_use() == 0, "D holds blocks")


if __name__ == "__main__":
    args = parse_args()
    run_cases([
        ("p_killed_before_handshake", case_p_killed_before_handshake),
        ("p_killed_before_handshake_policy_fail", case_p_killed_before_handshake_policy_fail),
        ("p_hung_during_pull", case_p_hung_during_pull),
        ("p_killed_during_pull", case_p_killed_during_pull),
        ("p_killed_after_pull_before_notification", case_p_killed_after_pull_before_notification),
        ("proxy_p_dead_or_hung", case_proxy_p_dead_or_hung),
    ])
