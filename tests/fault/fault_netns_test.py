"""P and D in different network namespaces joined by a veth pair; the link is cut during a pull
(docs/reliability.md).

P runs in a fresh namespace, D (and this script) in the current one; the veth's two ends get
10.77.N.1 (P) and 10.77.N.2 (D), N from the process id, and UCX is pinned to the veth. P's egress
is shaped (tbf) so a long prompt's pull lasts seconds: a control pull of the same size succeeds,
then the link is cut (P's end set down) during the next pull. D must answer (recomputed, exact)
within its transfer deadline plus slack; after the link comes back new hand-offs pull again.
Needs root and iproute2; exits 77 (skipped) otherwise.
"""
import atexit
import os
import time

from harness.kvferry_api import decode_body, kv_config, text_of
from harness.netns import set_up_or_skip, sh
from harness.runner import Background, check, measure, run_cases, wait_until
from harness.fault_node import Node, parse_args, prefill

args = None
TRANSFER_S = 8.0
SLACK_S = 10.0  # recomputing the 1,500-token prompt on a loaded machine
PID = os.getpid()
NS = f"kvfP{PID}"
VETH_P, VETH_D = f"kvfp{PID % 100000}", f"kvfd{PID % 100000}"
NET = f"10.77.{PID % 250}"
P_IP, D_IP = f"{NET}.1", f"{NET}.2"


def long_body(step):
    """A 1,500-token prompt; a different `step` shares no prefix block with another."""
    return {"prompt": "".join(chr(ord('a') + (i * step) % 26) for i in range(1500)),
            "max_tokens": 4, "temperature": 0}


LONG, LONG2 = long_body(7), long_body(11)  # control pull, cut pull (D caches prefixes)


def teardown():
    sh("ip", "link", "del", VETH_D, check_rc=False)
    sh("ip", "netns", "del", NS, check_rc=False)


def setup():
    teardown()
    atexit.register(teardown)
    sh("ip", "netns", "add", NS)
    sh("ip", "-n", NS, "link", "set", "lo", "up")
    sh("ip", "link", "add", VETH_D, "type", "veth", "peer", "name", VETH_P)
    sh("ip", "link", "set", VETH_P, "netns", NS)
    sh("ip", "-n", NS, "addr", "add", f"{P_IP}/24", "dev", VETH_P)
    sh("ip", "addr", "add", f"{D_IP}/24", "dev", VETH_D)
    sh("ip", "-n", NS, "link", "set", VETH_P, "up")
    sh("ip", "link", "set", VETH_D, "up")


def shape(on):
    if on:  # ~1 MB/s from P: a 1,500-token pull (~3.8 MB) takes seconds
        sh("ip", "netns", "exec", NS, "tc", "qdisc", "replace", "dev", VETH_P, "root", "tbf",
           "rate", "8mbit", "burst", "64kbit", "latency", "2s")
    else:
        sh("ip", "netns", "exec", NS, "tc", "qdisc", "del", "dev", VETH_P, "root", check_rc=False)


def case_link_cut_during_pull():
    ref = Node(args.node, "serve", name="ref")
    want = {}
    for b in (LONG, LONG2):
        status, resp, _ = ref.post(b)
        check(status == 200, f"reference: {status}")
        want[b["prompt"]] = text_of(resp)
    ref.stop()

    p = Node(args.node, "serve",
             ["--host", P_IP, "--kv-transfer-config",
              kv_config("p0", side_channel_host=P_IP, lease_ms=60000)],
             env={"UCX_TLS": "tcp", "UCX_NET_DEVICES": VETH_P}, netns=NS, host=P_IP, name="P")
    d = Node(args.node, "serve",
             ["--kv-transfer-config",
              kv_config("d0", handshake_timeout_ms=3000,
                        transfer_timeout_ms=int(TRANSFER_S * 1000))],
             env={"UCX_TLS": "tcp", "UCX_NET_DEVICES": VETH_D}, name="D")
    small = {"prompt": "across namespaces " * 3, "max_tokens": 3, "temperature": 0}
    status, resp, _ = d.post(decode_body(small, prefill(p, small)))
    check(status == 200, f"warm-up: {status} {resp}")
    check(wait_until(lambda: d.metric("kvferry:kv_transfers_total") == 1, 3) is not None,
          "warm-up did not pull across the veth")

    shape(True)
    status, resp, secs = d.post(decode_body(LONG, prefill(p, LONG)), timeout=60)
    check(status == 200 and text_of(resp) == want[LONG["prompt"]], f"control pull: {status}")
    check(wait_until(lambda: d.metric("kvferry:kv_transfers_total") == 2, 3) is not None,
          "the shaped control request did not pull")
    print(f"  shaped control pull answered in {secs:.2f} s")
    check(secs > 1.5, f"shaping ineffective (pull answered in {secs:.2f} s); cannot cut mid-pull")

    params = prefill(p, LONG2)
    pull = Background(lambda: d.post(decode_body(LONG2, params), timeout=60))
    time.sleep(min(1.0, secs / 3))
    cut_at = time.monotonic()
    sh("ip", "-n", NS, "link", "set", VETH_P, "down")
    status, resp, _ = pull.result(TRANSFER_S + 30, "D after the cut")
    check(status == 200 and text_of(resp) == want[LONG2["prompt"]],
          f"after the cut D answered {status}")
    measure("netns_link_cut.answer_after_cut", pull.finished_at - cut_at, TRANSFER_S + SLACK_S)
    failed = sum(d.metric(f'kvferry:kv_transfer_failures_total{{kind="{k}"}}')
                 for k in ("transfer", "deadline"))
    check(failed == 1, "the cut pull was not counted as a transfer/deadline failure")

    shape(False)
    sh("ip", "-n", NS, "link", "set", VETH_P, "up")
    restored_at = time.monotonic()

    def new_handoff_pulls():
        before = d.metric("kvferry:kv_transfers_total")
        try:
            params = prefill(p, small)
        except AssertionError:  # the route is not back yet
            return False
        st, rs, _ = d.post(decode_body(small, params), timeout=20)
        return (st == 200 and wait_until(
            lambda: d.metric("kvferry:kv_transfers_total") == before + 1, 3) is not None)

    took = wait_until(new_handoff_pulls, 30, interval=0.5)
    check(took is not None, "no successful pull after the link came back")
    measure("netns_link_restored.first_pull", time.monotonic() - restored_at, 30)


if __name__ == "__main__":
    args = parse_args()
    set_up_or_skip(setup)
    run_cases([("link_cut_during_pull", case_link_cut_during_pull)])
