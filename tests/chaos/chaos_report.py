"""The chaos soak's report (docs/reliability.md, "Chaos soak"): requests, faults by kind,
errors by kind, latency (p50/p99/max) in steady state and while a fault is active (overall and
per kind), recovery time per fault kind, counter balances, files and RSS, and each P's and D's
disk tier (`disk_tier`, given by the caller). Printed, and written as JSON."""
import bisect
import json


def percentile(values, q):
    if not values:
        return None
    v = sorted(values)
    return round(v[min(len(v) - 1, int(q * len(v)))], 3)


def latency(values):
    return {"n": len(values), "p50_s": percentile(values, 0.5), "p99_s": percentile(values, 0.99),
            "max_s": round(max(values), 3) if values else None}


def _count(items):
    out = {}
    for i in items:
        out[i] = out.get(i, 0) + 1
    return dict(sorted(out.items()))


def active_faults(faults, t0, t1, starts):
    """The faults active during [t0, t1]: `faults` in injection order, `starts` their injection
    times. Faults run one at a time, each recovered before the next is injected, so their ends
    rise too: walk back from the last one injected before t1 while they end after t0."""
    out = []
    for f in reversed(faults[:bisect.bisect_right(starts, t1)]):
        if not f.active(t0, t1):
            break
        out.append(f)
    return out


def build(results, faults, errors, origin, extra):
    done = [r for r in results if r.t1 is not None]
    injected = [f for f in faults if f.t_inject is not None]
    starts = [f.t_inject for f in injected]
    during, steady, by_kind = [], [], {}
    for r in done:  # one pass: a 60-minute run has ~900,000 requests and ~400 faults
        active = active_faults(injected, r.t0, r.t1, starts)
        (during if active else steady).append(r)
        for f in active:
            by_kind.setdefault(f.kind, []).append(r.seconds)
    recovery = {}
    for f in faults:
        recovery.setdefault(f.kind, []).append(f.recovery_s)
    return dict({
        "requests": {"total": len(results), "outcomes": _count(r.kind for r in results),
                     "streamed": sum(r.stream for r in results),
                     "chat": sum(1 for r in results if r.k % 3 == 1),
                     "kv_load": _count((r.kv_load or {}).get("outcome", "none") for r in results)},
        "faults": {"total": len(faults), "by_kind": _count(f.kind for f in faults),
                   "by_kind_and_target": _count(f"{f.kind} {f.target}" for f in faults)},
        "errors_by_kind": errors,
        "latency": {"steady": latency([r.seconds for r in steady]),
                    "during_faults": latency([r.seconds for r in during]),
                    "during_fault_kind": {k: latency(v) for k, v in sorted(by_kind.items())}},
        "recovery_s": {k: {"n": len(v), "median": percentile([x for x in v if x is not None], 0.5),
                           "max": max((x for x in v if x is not None), default=None),
                           "not_recovered": sum(1 for x in v if x is None)}
                       for k, v in sorted(recovery.items())},
        "fault_log": [f.as_json(origin) for f in faults],
    }, **extra)


def emit(report, path):
    with open(path, "w") as f:
        json.dump(report, f, indent=1, sort_keys=False)
    req, lat = report["requests"], report["latency"]
    print(f"REPORT requests {req['total']} ({req['streamed']} streamed, {req['chat']} chat) in "
          f"{report.get('soak_s')} s: {req['outcomes']}", flush=True)
    print(f"REPORT faults {report['faults']['total']}: {report['faults']['by_kind']}")
    print(f"REPORT errors by kind: {report['errors_by_kind']}")
    print(f"REPORT latency steady {lat['steady']}; during faults {lat['during_faults']}")
    for k, v in lat["during_fault_kind"].items():
        print(f"REPORT   during {k}: {v}")
    for k, v in report["recovery_s"].items():
        print(f"REPORT recovery {k}: {v}")
    for k in ("counters", "usage", "disk_tier", "violations"):
        print(f"REPORT {k}: {json.dumps(report.get(k))}")
    print(f"REPORT written to {path}", flush=True)
