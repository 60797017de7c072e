"""A cluster across network namespaces, each instance its own "host" (docs/reliability.md,
"Cluster"): etcd, 2 P, 2 D (and a third D started mid-run) and a proxy, one namespace each,
joined by veth pairs on a bridge in the test's namespace, which drives the load. UCX over TCP.

1. 500 requests at concurrency 32 (a third of them streamed); P p0 and D d0 are killed (-9)
   mid-run and D d2 starts. Every request that had not started streaming succeeds; a stream cut
   after its first token ends with an error event and its text is a prefix of the reference;
   every finished text equals the colocated reference; requests served before the kill and
   after the dead left the routing pulled their KV; the dead leave the routing within the lease
   TTL; d2 receives requests; no block is left held or used on the survivors.
2. A partitioned P (its link cut) is ejected while requests keep succeeding, and rejoins when
   the link comes back.
Needs root and iproute2; exits 77 (skipped) otherwise.
"""
import http.client
import json
import os
import threading
import time

from cluster_harness import Etcd, colocated_reference, parse_args, proxy, run, serve
from harness.kvferry_api import sse_text
from harness.netns import BridgedHosts, set_up_or_skip, sh
from harness.runner import check, measure, wait_until

args = None
PID = os.getpid()
TAG = f"{PID % 100000}"
NET = f"10.79.{PID % 250}"
BRIDGE = f"kvb{TAG}"
HOSTS = {"etcd": 1, "p0": 10, "p1": 11, "d0": 20, "d1": 21, "d2": 22, "proxy": 30}
TTL_S = 3
LEASE_MS = 5000
SLACK_S = 6.0
REQUESTS = int(os.environ.get("KVF_CLUSTER_REQUESTS", "500"))
CONCURRENCY = 32
RATE = 40.0  # requests started per second at most: the run lasts long enough for d2 to join
KILL_AFTER = REQUESTS * 3 // 10  # completed requests before p0 and d0 are killed
UCX = {"UCX_TLS": "tcp", "UCX_NET_DEVICES": "eth0"}


HOSTS_NET = BridgedHosts(f"kvc{TAG}", "kv", TAG, BRIDGE, NET, HOSTS)
ns, ip, veth = HOSTS_NET.ns, HOSTS_NET.ip, HOSTS_NET.veth
setup, teardown = HOSTS_NET.setup, HOSTS_NET.teardown


def start(name, role, registry):
    return serve(args.kvferry, name, role, registry, host=ip(name), netns=ns(name), ttl=TTL_S,
                 extra_kv={"lease_ms": LEASE_MS, "handshake_timeout_ms": 2000,
                           "transfer_timeout_ms": 5000}, env=UCX)


def prompt_for(k):
    """40 prompts of 40-400 bytes; families of 4 share their first 140 bytes (prefix affinity)."""
    family = "".join(chr(ord("a") + (k // 4 * 5 + i) % 26) for i in range(140))
    return family + f" variant {k}: " + "lorem ipsum " * (k % 10 * 2)


def body_for(i):
    k = i % 40
    return {"prompt": prompt_for(k) if k % 5 else f"short {k}", "max_tokens": 8 + k % 8 * 4,
            "temperature": 0, "stream": i % 3 == 0}


class Load:
    """REQUESTS requests from CONCURRENCY threads, request i not before RATE allows;
    results[i] = (kind, detail, decode member, kv_load, t_start, t_end)."""

    def __init__(self, px, want):
        self.px, self.want = px, want
        self.results = [None] * REQUESTS
        self.lock = threading.Lock()
        self.next = 0
        self.done = 0
        self.t0 = time.monotonic()

    def one(self, i):
        b = body_for(i)
        ref = self.want[(b["prompt"], b["max_tokens"])]
        conn = http.client.HTTPConnection(self.px.host, self.px.port, timeout=90)
        try:
            conn.request("POST", "/v1/completions", json.dumps(b),
                         {"Content-Type": "application/json"})
            resp = conn.getresponse()
            raw = resp.read().decode("utf-8", "replace")
            decoder = resp.getheader("X-Kvferry-Decode")
            if resp.status != 200:
                return "bad", f"#{i}: HTTP {resp.status} {raw[:300]}", decoder, None
            if b["stream"]:
                text, error = sse_text(raw)
                load = next((json.loads(l[6:]).get("kv_load") for l in raw.splitlines()
                             if l.startswith("data: {") and '"kv_load"' in l), None)
                if error is None:
                    return ("ok" if text == ref else "bad"), f"#{i}: {text!r} != {ref!r}", decoder, load
                ok = text != "" and ref.startswith(text)  # it had started; nothing repeated
                return ("cut" if ok else "bad"), f"#{i}: {error} after {text!r}", decoder, None
            resp_json = json.loads(raw)
            text = resp_json["choices"][0]["text"]
            return ("ok" if text == ref else "bad"), f"#{i}: {text!r} != {ref!r}", decoder, \
                resp_json.get("kv_load")
        except (OSError, http.client.HTTPException, ValueError) as e:
            return "bad", f"#{i}: {type(e).__name__}: {e}", None, None
        finally:
            conn.close()

    def worker(self):
        while True:
            with self.lock:
                if self.next >= REQUESTS:
                    return
                i = self.next
                self.next += 1
            time.sleep(max(0.0, self.t0 + i / RATE - time.monotonic()))
            t0 = time.monotonic()
            kind, detail, decoder, load = self.one(i)
            with self.lock:
                self.results[i] = (kind, detail, decoder, load, t0, time.monotonic())
                self.done += 1

    def completed(self):
        with self.lock:
            return self.done


def case_kill_and_join_under_load():
    etcd = Etcd(host=ip("etcd"), netns=ns("etcd"))
    reg = etcd.registry("netns")
    want = colocated_reference(args.kvferry, [body_for(i) for i in range(40)])
    members = {n: start(n, r, reg) for n, r in (("p0", "kv_producer"), ("p1", "kv_producer"),
                                                  ("d0", "kv_consumer"), ("d1", "kv_consumer"))}
    px = proxy(args.kvferry, "proxy", reg, host=ip("proxy"), netns=ns("proxy"))
    check(wait_until(lambda: len(px.members("healthy")) == 4, 30) is not None,
          f"proxy sees {px.table()}")

    load = Load(px, want)
    threads = [threading.Thread(target=load.worker) for _ in range(CONCURRENCY)]
    t_start = time.monotonic()
    for t in threads:
        t.start()
    check(wait_until(lambda: load.completed() >= KILL_AFTER, 120) is not None, "load stalled")
    t_kill = time.monotonic()
    members["p0"].kill()
    members["d0"].kill()
    joiner = threading.Thread(target=lambda: members.update(d2=start("d2", "kv_consumer", reg)))
    joiner.start()
    check(wait_until(lambda: not {"p0", "d0"} & set(px.members("healthy")), TTL_S + SLACK_S)
          is not None, "the killed members are still routed to")
    measure("cluster_netns.killed_not_routed", time.monotonic() - t_kill, TTL_S + SLACK_S)
    check(wait_until(lambda: not {"p0", "d0"} & set(px.members()), TTL_S + SLACK_S) is not None,
          f"the killed members are still registered: {px.members()}")
    t_gone = time.monotonic()
    measure("cluster_netns.killed_left_membership", t_gone - t_kill, TTL_S + SLACK_S)
    joiner.join(60)
    check("d2" in members, "d2 did not start")
    for t in threads:
        t.join(300)
    check(not any(t.is_alive() for t in threads), "hung client threads")
    elapsed = time.monotonic() - t_start

    kinds = {}
    for r in load.results:
        kinds[r[0]] = kinds.get(r[0], 0) + 1
    print(f"LOAD {REQUESTS} requests at concurrency {CONCURRENCY} in {elapsed:.1f} s: {kinds}",
          flush=True)
    bad = [r[1] for r in load.results if r[0] == "bad"]
    for b in bad[:20]:
        print("  " + b)
    check(not bad, f"{len(bad)} requests failed or differ from colocated")
    cut = [r for r in load.results if r[0] == "cut"]
    check(all(r[2] == "d0" for r in cut), "a stream was cut on a member that did not die")
    # The KV was pulled (not recomputed) for what ran before the kill or after the dead left.
    steady = [r for r in load.results if r[0] == "ok" and (r[5] < t_kill or r[4] > t_gone)]
    not_pulled = [r for r in steady if not r[3] or r[3].get("outcome") not in ("pulled", "notify_only")]
    print(f"  {len(steady)} requests outside the failure window, {len(not_pulled)} not pulled; "
          f"{len(cut)} streams cut mid-way", flush=True)
    check(len(steady) > REQUESTS // 3 and not not_pulled,
          f"requests not pulled outside the failure window: {[r[3] for r in not_pulled[:5]]}")
    on_d2 = sum(1 for r in load.results if r[2] == "d2")
    print(f"  decode legs on the new d2: {on_d2}", flush=True)
    check(on_d2 > 0, "the D started mid-run got no request")

    survivors = [members[n] for n in ("p1", "d1", "d2")]
    t1 = time.monotonic()
    back = wait_until(lambda: all(m.blocks_in_use() == 0 for m in survivors),
                      LEASE_MS / 1000 + SLACK_S, interval=0.2)
    check(back is not None,
          "blocks left on survivors: " + ", ".join(f"{m.name} {m.blocks_in_use()}" for m in survivors))
    measure("cluster_netns.survivor_pools_clean", time.monotonic() - t1, LEASE_MS / 1000 + SLACK_S)
    pm = px.metrics()
    print("  proxy: " + ", ".join(f"{k}={v:g}" for k, v in pm.items()
                                  if "retries" in k or "aborted" in k), flush=True)
    p1 = members["p1"].metrics()
    print("  p1 leases: " + ", ".join(f"{k}={v:g}" for k, v in p1.items() if "leases" in k))
    for m in survivors + [px]:
        check(m.alive(), f"{m.name} died")

    # 2. A partition: a new P where p0 was, then p1's link is cut.
    members["p2"] = serve(args.kvferry, "p2", "kv_producer", reg, host=ip("p0"), netns=ns("p0"),
                          ttl=TTL_S, extra_kv={"lease_ms": LEASE_MS}, env=UCX)
    check(wait_until(lambda: {"p1", "p2"} <= set(px.members("healthy")), 20) is not None,
          f"p2 did not join: {px.table()}")
    t_cut = time.monotonic()
    sh("ip", "link", "set", veth("p1"), "down")
    for k in range(6):
        b = dict(body_for(k + 1), stream=False)
        status, resp, hdr = px.complete(b)
        check(status == 200 and resp["choices"][0]["text"] == want[(b["prompt"], b["max_tokens"])],
              f"during the partition: {status} {resp}")
    check(wait_until(lambda: "p1" not in px.members("healthy"), SLACK_S) is not None,
          "the partitioned P was not ejected")
    measure("cluster_netns.partitioned_p_ejected", time.monotonic() - t_cut, SLACK_S)
    # Cut off from etcd too, its lease runs out: it leaves the membership ...
    check(wait_until(lambda: "p1" not in px.members(), TTL_S + SLACK_S) is not None,
          "the partitioned P stayed registered")
    measure("cluster_netns.partitioned_p_left", time.monotonic() - t_cut, TTL_S + SLACK_S)
    sh("ip", "link", "set", veth("p1"), "up")
    t_up = time.monotonic()
    # ... and registers again when the link is back, and gets traffic.
    check(wait_until(lambda: "p1" in px.members("healthy"), TTL_S + 20) is not None,
          "p1 did not come back after the link did")
    measure("cluster_netns.partitioned_p_back", time.monotonic() - t_up, TTL_S + 20)
    prefills = set()
    for k in range(8):
        b = dict(body_for(5 * k + 1), stream=False)
        status, resp, hdr = px.complete(b)
        check(status == 200, f"after the partition: {status} {resp}")
        prefills.add(hdr.get("X-Kvferry-Prefill"))
    check("p1" in prefills, f"p1 got no prefill after it came back: {prefills}")


if __name__ == "__main__":
    args = parse_args()
    set_up_or_skip(setup, teardown)
    try:
        run([("kill_and_join_under_load", case_kill_and_join_under_load)])
    finally:
        teardown()
