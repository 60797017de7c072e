"""Load through the proxy with random client disconnects (docs/reliability.md).

2,000 requests at concurrency 64 through proxy -> P -> D (UCX), a mix of plain and streamed
requests; about one in eight clients disconnects early (right after sending, or after the first
streamed chunk). Checks: no 5xx (nor any other non-200) for a client that stayed, no request
over its deadline, every finished text equals the colocated reference for its prompt, and both
pools back to baseline (used + held_for_transfer blocks from /metrics) within the lease bound.
"""
import http.client
import json
import os
import random
import threading
import time

from harness.fault_node import Node, parse_args
from harness.kvferry_api import kv_config, sse_text, text_of
from harness.runner import check, measure, wait_until

REQUESTS = int(os.environ.get("KVF_LOAD_REQUESTS", "2000"))
CONCURRENCY = int(os.environ.get("KVF_LOAD_CONCURRENCY", "64"))
LEASE_S = 3.0
REQUEST_DEADLINE_S = 60.0
SLACK_S = 10.0
PROMPTS = [f"Request family {i}: " + "lorem ipsum dolor sit amet " * (1 + i % 5) for i in range(16)]


def body_for(i):
    return {"prompt": PROMPTS[i % len(PROMPTS)], "max_tokens": 4 + i % 5, "temperature": 0,
            "stream": i % 3 == 0}


def main():
    args = parse_args()
    ref = Node(args.node, "serve", name="ref")
    want = {}
    for i in range(len(PROMPTS) * 5):
        b = dict(body_for(i), stream=False)
        key = (b["prompt"], b["max_tokens"])
        if key not in want:
            status, resp, _ = ref.post(b)
            check(status == 200, f"reference: {status} {resp}")
            want[key] = text_of(resp)
    ref.stop()

    env = {"UCX_TLS": "tcp"}
    p = Node(args.node, "serve", ["--kv-transfer-config", kv_config("p0", lease_ms=int(LEASE_S * 1000))],
             env=env, name="P")
    d = Node(args.node, "serve", ["--kv-transfer-config", kv_config("d0")], env=env, name="D")
    proxy = Node(args.node, "proxy", ["--prefill", p.url, "--decode", d.url], name="proxy")
    p_base, d_base = p.blocks_in_use(), d.blocks_in_use()

    rng = random.Random(1234)
    plan = [(i, rng.random()) for i in range(REQUESTS)]
    lock = threading.Lock()
    stats = {"ok": 0, "disconnected": 0, "bad": [], "slowest": 0.0}
    next_i = [0]

    def one(i, dice):
        body = body_for(i)
        disconnect = dice < 0.125
        t0 = time.monotonic()
        conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=REQUEST_DEADLINE_S)
        try:
            conn.request("POST", "/v1/completions", json.dumps(body),
                         {"Content-Type": "application/json"})
            if disconnect and (dice < 0.06 or not body["stream"]):
                conn.sock.close()  # gone right after sending
                return "disconnected", None
            resp = conn.getresponse()
            if disconnect:
                resp.read(1)  # the first bytes of the stream, then gone
                conn.sock.close()
                return "disconnected", None
            raw = resp.read().decode("utf-8", "replace")
            dt = time.monotonic() - t0
            if resp.status != 200:
                return "bad", f"#{i}: {resp.status} {raw[:200]}"
            text = sse_text(raw)[0] if body["stream"] else text_of(json.loads(raw))
            if text != want[(body["prompt"], body["max_tokens"])]:
                return "bad", f"#{i}: text {text!r} != {want[(body['prompt'], body['max_tokens'])]!r}"
            return "ok", dt
        except (OSError, http.client.HTTPException, ValueError) as e:
            return "bad", f"#{i}: {type(e).__name__}: {e} after {time.monotonic() - t0:.1f} s"
        finally:
            conn.close()

    def worker():
        while True:
            with lock:
                if next_i[0] >= len(plan):
                    return
                i, dice = plan[next_i[0]]
                next_i[0] += 1
            kind, info = one(i, dice)
            with lock:
                if kind == "ok":
                    stats["ok"] += 1
                    stats["slowest"] = max(stats["slowest"], info)
                elif kind == "disconnected":
                    stats["disconnected"] += 1
                else:
                    stats["bad"].append(info)

    t0 = time.monotonic()
    threads = [threading.Thread(target=worker) for _ in range(CONCURRENCY)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(REQUEST_DEADLINE_S * 4 + REQUESTS)
    elapsed = time.monotonic() - t0
    check(not any(t.is_alive() for t in threads), "hung client threads")
    print(f"LOAD {REQUESTS} requests at concurrency {CONCURRENCY} in {elapsed:.1f} s: "
          f"{stats['ok']} ok, {stats['disconnected']} disconnected, {len(stats['bad'])} bad, "
          f"slowest ok {stats['slowest']:.2f} s", flush=True)
    for b in stats["bad"][:20]:
        print("  " + b)
    check(not stats["bad"], f"{len(stats['bad'])} failed requests")
    measure("load.slowest_request", stats["slowest"], REQUEST_DEADLINE_S)
    t1 = time.monotonic()
    back = wait_until(lambda: p.blocks_in_use() == p_base and d.blocks_in_use() == d_base,
                      LEASE_S + SLACK_S, interval=0.2)
    check(back is not None,
          f"pools not back to baseline: P {p.blocks_in_use()} (base {p_base}), "
          f"D {d.blocks_in_use()} (base {d_base})")
    measure("load.pools_back_to_baseline", time.monotonic() - t1, LEASE_S + SLACK_S)
    pm, dm = p.metrics(), d.metrics()
    print("P leases: " + ", ".join(f"{k}={v:g}" for k, v in pm.items() if "leases" in k))
    print("D transfers: " + ", ".join(f"{k}={v:g}" for k, v in dm.items()
                                      if "kv_transfers_total" in k or "failures" in k))
    for n in (p, d, proxy):
        check(n.alive(), f"{n.name} died")
        n.stop()
    print("PASS load")


if __name__ == "__main__":
    main()
