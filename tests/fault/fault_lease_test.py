"""Leases: D never reads, D dies, or reads after P reused the blocks (docs/reliability.md).

P's pool must come back to its baseline (used + held_for_transfer blocks, from /metrics) once
the lease runs out; a D that reads blocks P already gave back must detect it (generation
check) and still answer exactly what a colocated instance answers.
"""
import signal
import time

from harness.kvferry_api import decode_body, kv_config, text_of
from harness.runner import Background, check, measure, run_cases, wait_until
from harness.fault_node import Node, colocated_text, parse_args, prefill

LEASE_S = 1.5
SLACK_S = 5.0
ENV = {"UCX_TLS": "tcp"}
BODY = {"prompt": "Lease me a block or two, " * 4, "max_tokens": 10, "temperature": 0}

args = None


def reference(body):
    return colocated_text(args.node, body)


def start_p(lease_s=LEASE_S, blocks=0):
    extra = ["--num-kv-blocks", str(blocks)] if blocks else []
    return Node(args.node, "serve",
                ["--kv-transfer-config", kv_config("p0", lease_ms=int(lease_s * 1000))] + extra,
                env=ENV, name="P")


def start_d():
    cfg = kv_config("d0", handshake_timeout_ms=2000, transfer_timeout_ms=3000)
    return Node(args.node, "serve", ["--kv-transfer-config", cfg], env=ENV, name="D")


def held(p):
    return p.metric('kvferry:kv_blocks{state="held_for_transfer"}')


def expired(p):
    return p.metric('kvferry:kv_leases_total{event="expired"}')


def lease_counters(node):
    """The lease, block and notification figures of NODE's /metrics, for failure messages."""
    return {k: v for k, v in node.metrics().items()
            if "lease" in k or "kv_blocks" in k or "notif" in k or "failures" in k}


def case_d_never_reads():
    p = start_p()
    baseline = p.blocks_in_use()
    prefill(p, BODY)
    t_granted = time.monotonic()
    check(wait_until(lambda: held(p) > 0, 2) is not None, "P holds no blocks after the prefill")
    took = wait_until(lambda: p.blocks_in_use() == baseline, LEASE_S + SLACK_S)
    check(took is not None, f"P's pool not back to baseline {baseline}: {p.metrics()}")
    measure("d_never_reads.pool_baseline", time.monotonic() - t_granted, LEASE_S + SLACK_S)
    check(wait_until(lambda: expired(p) == 1, 2) is not None, "lease expiry not counted")


def case_d_killed_mid_request():
    p = start_p()
    d = start_d()
    baseline = p.blocks_in_use()
    params = prefill(p, BODY)
    t_granted = time.monotonic()
    check(wait_until(lambda: held(p) > 0, 2) is not None, "P holds no blocks after the prefill")
    p.signal(signal.SIGSTOP)  # D's handshake/pull is now in flight and stuck
    client = Background(lambda: d.post(decode_body(BODY, params), timeout=20))
    time.sleep(0.3)
    d.kill()
    p.signal(signal.SIGCONT)
    client.result(30, "the client of the killed D")  # any answer: D is gone
    took = wait_until(lambda: p.blocks_in_use() == baseline, LEASE_S + SLACK_S)
    check(took is not None, f"P's pool not back to baseline {baseline}: {p.metrics()}")
    measure("d_killed.pool_baseline", time.monotonic() - t_granted, LEASE_S + SLACK_S)
    check(expired(p) == 1, "P did not free by lease expiry")
    # P still serves.
    status, resp, _ = p.post({"prompt": "still alive?", "max_tokens": 2})
    check(status == 200, f"P after D's death: {status} {resp}")


def case_lease_expired_blocks_reused():
    want = reference(BODY)
    # A small pool (16 logical blocks) so other prompts must reuse the granted blocks.
    p = start_p(lease_s=0.3, blocks=16)
    d = start_d()
    params = prefill(p, BODY)
    check(wait_until(lambda: expired(p) == 1, 0.3 + SLACK_S) is not None, "lease never expired")
    for i in range(6):  # overwrite the freed blocks with other prompts' KV
        status, resp, _ = p.post({"prompt": f"{i} other text to evict the blocks " * 4,
                                  "max_tokens": 2})
        check(status == 200, f"filler request {i}: {status} {resp}")
    status, resp, secs = d.post(decode_body(BODY, params))
    check(status == 200, f"D answered {status}: {resp}")
    check(text_of(resp) == want, f"late reader's text {text_of(resp)!r} != {want!r}")
    gen = 'kvferry:kv_transfer_failures_total{kind="generation"}'
    check(wait_until(lambda: d.metric(gen) == 1, 3) is not None,
          f"reuse not detected as a generation failure: {d.metrics()}")
    measure("lease_expired_reuse.answer", secs, SLACK_S)


def case_slow_reader_lease_expires_during_read():
    """D's READ is in flight (P stopped), then D freezes (SIGSTOP) while P resumes: P's lease runs
    out and P reuses the blocks during D's read; when D resumes its generation check fails."""
    want = reference(BODY)
    p = start_p(lease_s=0.5, blocks=16)
    cfg = kv_config("d0", handshake_timeout_ms=2000, transfer_timeout_ms=15000)
    d = Node(args.node, "serve", ["--kv-transfer-config", cfg], env=ENV, name="D")
    body = {"prompt": "warm up " * 4, "max_tokens": 2, "temperature": 0}
    status, resp, _ = d.post(decode_body(body, prefill(p, body)))  # D learns P's metadata
    check(status == 200, f"warm-up: {status} {resp}")
    params = prefill(p, BODY)
    p.signal(signal.SIGSTOP)
    pull = Background(lambda: d.post(decode_body(BODY, params)))
    time.sleep(0.3)  # D's READ is posted and waits for P
    d.signal(signal.SIGSTOP)
    p.signal(signal.SIGCONT)
    # Process.signal(SIGSTOP) returns once every thread of D has stopped: CI once saw D's
    # transport, still running for a moment after kill(), finish the read and its generation
    # check before P's lease ran out, so no reuse was there to detect.
    check(wait_until(lambda: expired(p) >= 1, 0.5 + SLACK_S) is not None,
          f"lease never expired: P {lease_counters(p)}")
    for i in range(6):
        status, resp, _ = p.post({"prompt": f"{i} filler while D sleeps " * 4, "max_tokens": 2})
        check(status == 200, f"filler {i}: {status} {resp}")
    d.signal(signal.SIGCONT)
    status, resp, _ = pull.result(30, "D")
    check(status == 200 and text_of(resp) == want, f"D answered {status}: {resp}")
    gen = 'kvferry:kv_transfer_failures_total{kind="generation"}'
    check(wait_until(lambda: d.metric(gen) == 1, 3) is not None,
          f"reuse during the read not detected: {d.metrics()}")


if __name__ == "__main__":
    args = parse_args()
    run_cases([
        ("d_never_reads", case_d_never_reads),
        ("d_killed_mid_request", case_d_killed_mid_request),
        ("lease_expired_blocks_reused", case_lease_expired_blocks_reused),
        ("slow_reader_lease_expires_during_read", case_slow_reader_lease_expires_during_read),
    ])
