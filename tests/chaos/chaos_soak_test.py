"""A chaos soak (docs/reliability.md, "Chaos soak"): a 3-member etcd, 2 P, 2 D and 2 proxies,
each in its own network namespace (chaos_cluster), under mixed load at concurrency 32
(chaos_load) while seeded faults hit it one at a time (chaos_faults), for --minutes (3 in CI;
`make chaos CHAOS_MINUTES=N`). The invariants (chaos_invariants) are checked while it runs and
at the end; the report (chaos_report) is printed and written as JSON (--report, and the case's
log folder). Needs root and iproute2 (exits 77, skipped, otherwise); the degraded P-D link needs
iptables (left out, and said so, without it).
"""
import argparse
import json
import os
import shutil
import time

import chaos_cluster as cc
import chaos_faults as cf
import chaos_invariants as ci
import chaos_report
from chaos_load import Load, references
from cluster import cluster_harness as ch
from harness.netns import set_up_or_skip
from harness.runner import check, measure, wait_until

CONCURRENCY = 32
WARMUP_S = 10.0
RECOVERY_BOUND_S = 40.0  # restart + the old key's TTL + the proxies' re-probe backoff, loaded
QUIET_POOLS_BOUND_S = cc.LEASE_MS / 1000 + 6.0
opts = None


def parse_args():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvferry", required=True)
    ap.add_argument("--minutes", type=float,
                    default=float(os.environ.get("KVF_CHAOS_MINUTES", "3")))
    ap.add_argument("--seed", type=int, default=int(os.environ.get("KVF_CHAOS_SEED", "1")))
    ap.add_argument("--report", default=os.environ.get("KVF_CHAOS_REPORT", "chaos_report.json"))
    return ap.parse_args()


def inject_until(cluster, injector, judge, faults, end):
    for kind, target, gap in cf.schedule(opts.seed):
        if kind == "pd_link_netem" and not shutil.which("iptables"):
            continue
        if kind == "disk_full" and not cluster.disks:
            continue
        if time.monotonic() + gap + cf.HOLD_S[kind] + 15 > end:
            return
        time.sleep(gap)
        fault = cf.Fault(kind, target)
        faults.append(fault)
        print(f"FAULT {kind} {target}", flush=True)
        injector.run(fault)
        if fault.violation:
            judge.violation(f"{kind} {fault.target}: {fault.violation}")
        took = cluster.wait_full_strength(RECOVERY_BOUND_S)
        if took is None:
            judge.violation(f"{kind} {fault.target}: not back to full strength "
                            f"{RECOVERY_BOUND_S} s after the heal")
            return
        fault.t_recovered = time.monotonic()
        print(f"  {fault.target} recovered in {fault.recovery_s:.2f} s {fault.detail}", flush=True)


def pools_clean(cluster):
    for m in cluster.instances:
        if m.blocks_in_use() != 0 or m.metric("kvferry:kv_connector_blocks_held") != 0:
            return False
    return True


def counters(cluster, results, want, judge):
    """Proxies: per running proxy, its successful prefill legs lie between its 200 answers and all
    its answers (a request that failed after P answered counts one too), its successful decode
    legs = the clean answers a D gave; P: leases granted = released + expired."""
    out = {}
    for px in cluster.proxies:
        mine = [r for r in results if r.proxies and r.proxies[-1] == (px.name, px.incarnation)]
        answered = [r for r in mine if r.status == 200]
        failed = [r for r in mine if r.status not in (None, 200)]
        p_only = [r for r in answered if len(want[r.k][1]) == 1]
        clean = [r for r in answered if r.error is None and r.done and r not in p_only]
        m = px.metrics()
        legs = {leg: sum(v for k, v in m.items()
                         if k.startswith("kvferry:proxy_member_requests_total")
                         and f'leg="{leg}"' in k and 'outcome="ok"' in k)
                for leg in ("prefill", "decode")}
        c = {"answered_200": len(answered), "answered_error": len(failed),
             "prefill_ok": legs["prefill"], "clean_from_d": len(clean), "decode_ok": legs["decode"]}
        out[f"{px.name} (start {px.incarnation})"] = c
        if not len(answered) <= c["prefill_ok"] <= len(answered) + len(failed) or \
                c["decode_ok"] != c["clean_from_d"]:
            judge.violation(f"proxy {px.name} counters do not balance: {c}")
    for n in cc.PREFILL:
        m = cluster.procs[n].metrics()
        lease = {e: m.get(f'kvferry:kv_leases_total{{event="{e}"}}', 0)
                 for e in ("granted", "released_by_notification", "expired")}
        out[f"{n} (start {cluster.procs[n].incarnation})"] = lease
        if lease["granted"] != lease["released_by_notification"] + lease["expired"]:
            judge.violation(f"{n} leases do not balance: {lease}")
    unjudged = [r.i for r in results if r.kind in (None, "pending_cut")]
    if unjudged:
        judge.violation(f"requests without an outcome: {unjudged[:10]}")
    return out


def case_soak():
    ref = cc.colocated(opts.kvferry)
    want = references(ref)
    ref.stop()
    disks, no_disks = cc.mount_disks(ch.CASE["dir"])
    try:
        soak(want, disks, no_disks)
    finally:
        cc.unmount_disks(disks)


def soak(want, disks, no_disks):
    t_setup = time.monotonic()
    cluster = cc.Cluster(opts.kvferry, disks)
    check(cluster.wait_full_strength(60) is not None, "the cluster did not reach full strength")
    print(f"cluster up in {time.monotonic() - t_setup:.1f} s; etcd leader {cluster.etcd_leader()}",
          flush=True)
    judge, injector, faults = ci.Judge(want), cf.Injector(cluster), []
    load = Load(lambda: cluster.proxies, cluster.incarnation_at, judge, CONCURRENCY, opts.seed,
                ci.ANSWER_BOUND_S + 30)
    monitor = ci.Monitor(cluster, injector, load, judge)
    origin = time.monotonic()
    end = origin + opts.minutes * 60
    load.start()
    monitor.start()
    try:
        time.sleep(WARMUP_S)
        inject_until(cluster, injector, judge, faults, end)
        time.sleep(max(0.0, end - time.monotonic()))
    finally:
        injector.heal_all()
    soak_s = time.monotonic() - origin
    check(load.stop(ci.ANSWER_BOUND_S + 30), "client threads still waiting for answers")
    monitor.stop()
    quiesce(cluster, judge)
    report = finish(cluster, load, judge, faults, want, monitor, origin, soak_s,
                    no_disks or offload_stats(cluster))
    check(not judge.violations, f"{len(judge.violations)} invariant violations, first: "
          f"{judge.violations[0][1] if judge.violations else ''}")
    check(report["requests"]["outcomes"].get("ok", 0) > 0, "no request succeeded")


def quiesce(cluster, judge):
    if cluster.wait_full_strength(RECOVERY_BOUND_S) is None:
        judge.violation("not at full strength after the load stopped")
    t0 = time.monotonic()
    if wait_until(lambda: pools_clean(cluster), QUIET_POOLS_BOUND_S, interval=0.2) is None:
        judge.violation("blocks or leases held after quiesce: " + ", ".join(
            f"{m.name} used+held {m.blocks_in_use()}, connector "
            f"{m.metric('kvferry:kv_connector_blocks_held')}" for m in cluster.instances))
    else:
        measure("chaos.survivor_pools_clean", time.monotonic() - t0, QUIET_POOLS_BOUND_S)


def offload_stats(cluster):
    """Each P's and D's disk tier at the end (its current start): files, writes, reads, errors."""
    names = ("files", "stored_total", "loaded_total", "hit_tokens_total", "corrupt_total",
             "evicted_total", "write_errors_total", "dropped_total")
    return {f"{m.name} (start {m.incarnation})": {
        n: m.metric(f"kvferry:kv_offload_{n}") for n in names} for m in cluster.instances}


def finish(cluster, load, judge, faults, want, monitor, origin, soak_s, disk_tier):
    errors = judge.verdict(load.results, faults)
    extra = {"seed": opts.seed, "minutes": opts.minutes, "soak_s": round(soak_s, 1),
             "concurrency": CONCURRENCY, "answer_bound_s": ci.ANSWER_BOUND_S,
             "counters": counters(cluster, load.results, want, judge),
             "client_failovers": sum(len(r.failovers) for r in load.results),
             "usage": monitor.final_usage_check(),
             "netem": cf.NETEM if shutil.which("iptables") else "left out: no iptables",
             "disk_tier": disk_tier}
    extra["violations"] = [f"{t - origin:.1f} s: {v}" for t, v in judge.violations]
    report = chaos_report.build(load.results, faults, errors, origin, extra)
    chaos_report.emit(report, os.path.join(ch.CASE["dir"], "chaos_report.json"))
    shutil.copy(os.path.join(ch.CASE["dir"], "chaos_report.json"), opts.report)
    print(f"report copied to {os.path.abspath(opts.report)}", flush=True)
    dump_requests(load.results, origin)
    for r in [r for r in load.results if r.failovers][-10:]:
        print(f"  #{r.i} failed over: {r.failovers} -> {r.proxies[-1]} {r.status} {r.kind}")
    for r in [r for r in load.results if r.kind not in ("ok", "cut", "proxy_lost")][:20]:
        print(f"  #{r.i} entry {r.k} stream {r.stream} {r.kind}: {r.detail}", flush=True)
    return report


def dump_requests(results, origin):
    """Every request, one JSON line, in the case's log folder (requests.jsonl)."""
    with open(os.path.join(ch.CASE["dir"], "requests.jsonl"), "w") as f:
        for r in results:
            f.write(json.dumps({"i": r.i, "entry": r.k, "stream": r.stream, "kind": r.kind,
                                "t0": round(r.t0 - origin, 3),
                                "t1": None if r.t1 is None else round(r.t1 - origin, 3),
                                "proxies": r.proxies, "failovers": r.failovers,
                                "status": r.status, "prefill": r.prefill, "decode": r.decode,
                                "kv_load": (r.kv_load or {}).get("outcome"),
                                "detail": r.detail[:300]}) + "\n")


if __name__ == "__main__":
    opts = parse_args()
    set_up_or_skip(cc.setup, cc.teardown)
    try:
        ch.run([("soak", case_soak)])
    finally:
        cc.teardown()
