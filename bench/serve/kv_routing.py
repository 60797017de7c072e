#!/usr/bin/env python3
"""The proxy's routing modes on a 2P2D cluster found through etcd (docs/benchmarks.md,
"## Cluster: routing by KV events"): for each mode, a fresh cluster (empty caches), then two
workloads, one after the other:

  chat   SESSIONS conversations sharing one system prompt, each turn appending the user's
         question and the model's answer to its history (a session's next turn has its whole
         history cached somewhere);
  docs   DOCS shared documents, QUESTIONS questions about each, in a shuffled order.

Every request is streamed through the proxy (greedy, `max_tokens` 16) by CONCURRENCY clients
(chat: one client per session). Reported per mode and workload: requests/s, TTFT p50/p99 (ms),
the prefill instances' prefix-cache hit rate (their `kvferry:prefix_cache_hit_tokens_total` over
`kvferry:prompt_tokens_total`), prompt tokens the P computed, KV bytes the D pulled, and the
oracle's hit rate: each prompt's longest whole-block prefix sent by an earlier request, over
all prompt tokens — what a router that knew every cache (and never evicted) would get. Every
answer is also checked against the same prompt's answer in the first mode (greedy, batch
invariant: equal texts).

Modes: the proxy's `--routing` modes, and `kv-pull`: `--routing kv` with prefill instances that
can also pull a prefix from each other (kv_role kv_both, `--cluster-role prefill`; prefix pulls,
docs/deploy.md). `--kv-offload-mb N` gives every instance a disk tier of N MiB
(docs/kv_offload.md); `--kv-cache-mb` sets their RAM cache.

Sweep (`--sweep 2,4,8,16`): the chat workload again at each number of sessions in flight
(closed loop: a session sends its next turn when the last one ended; other sessions' texts at
each level, so earlier levels do not warm later ones beyond the shared system prompt), giving
requests/s against p99 TTFT per mode; each mode's requests/s at the p99 TTFT bound
(`--ttft-bound-ms`, linear between the two levels around it) is compared with affinity's.
`--plot FILE.svg` draws requests/s against p99 TTFT (gnuplot).

Machine: P0, P1 on core 0, D0, D1 on core 1 (`--pinning split`, the default), or P0 and D0 on
core 0, P1 and D1 on core 1 (`--pinning pairs`: two hosts of a P and a D each); `--threads 1`;
etcd, proxy and clients unpinned.

usage: bench/serve/kv_routing.py [--kvferry build/bin/kvferry] [--modes kv affinity ...]
       [--model small] [--sweep 2,4,8] [--ttft-bound-ms 3000] [--plot out.svg]
       [--kv-offload-mb 64] [--pinning split|pairs] [--json]      (stdout: the tables, or with --json only JSON)
"""
import argparse
import http.client
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from serve_http import free_port, metrics, request, words

BLOCK = 16
PULLED = 'kvferry:proxy_prefix_pulls_total{outcome="pulled"}'


class Cluster:
    """etcd, 2 P and 2 D publishing KV events, a proxy with `--routing mode`."""

    def __init__(self, binary, mode, model, work, args):
        self.procs = []
        self.work = work
        client, peer = free_port(), free_port()
        self.start("etcd", ["etcd", "--name", "e", "--data-dir", f"{work}/etcd.data",
                            "--listen-client-urls", f"http://127.0.0.1:{client}",
                            "--advertise-client-urls", f"http://127.0.0.1:{client}",
                            "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                            "--initial-cluster", f"e=http://127.0.0.1:{peer}"])
        reg = f"etcd://127.0.0.1:{client}/{mode}"
        pull = mode == "kv-pull"
        routing = "kv" if pull else mode
        events = json.dumps({"enable_kv_cache_events": True, "endpoint": "tcp://127.0.0.1:0",
                             "replay_endpoint": "tcp://127.0.0.1:0"})
        self.members = {}
        p_role = "kv_both" if pull else "kv_producer"
        cores = {"p0": 0, "p1": 0, "d0": 1, "d1": 1}  # --pinning split: P on 0, D on 1
        if args.pinning == "pairs":  # a P and a D per core, as two hosts would have
            cores = {"p0": 0, "d0": 0, "p1": 1, "d1": 1}
        for name, role in (("p0", p_role), ("p1", p_role), ("d0", "kv_consumer"),
                           ("d1", "kv_consumer")):
            core = cores[name]
            kv = json.dumps({"kv_connector": "FerryConnector", "kv_role": role, "engine_id": name,
                             "kv_connector_extra_config": {"side_channel_host": "127.0.0.1",
                                                           "side_channel_port": 0}})
            port = free_port()
            pin = ["taskset", "-c", str(core)] if os.cpu_count() >= 2 else []
            extra = ["--cluster-role", "prefill"] if pull and name.startswith("p") else []
            if args.kv_offload_mb > 0:
                extra += ["--kv-offload-dir", f"{work}/{name}.disk",
                          "--kv-offload-gb", str(args.kv_offload_mb / 1024)]
            self.start(name, pin + [binary, "serve", "--model", model, "--port", str(port),
                                    "--threads", "1", "--block-size", str(BLOCK),
                                    "--kv-cache-memory-mb", str(args.kv_cache_mb),
                                    "--registry", reg, "--kv-transfer-config", kv,
                                    "--kv-events-config", events] + extra)
            self.members[name] = port
        self.proxy = free_port()
        self.start("proxy", [binary, "proxy", "--port", str(self.proxy), "--registry", reg,
                             "--routing", routing, "--poll-interval-ms", "100"])
        self.wait_ready(routing)

    def start(self, name, cmd):
        log = open(f"{self.work}/{name}.log", "w")
        self.procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT))

    def wait_ready(self, mode):
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                status, text = request(self.proxy, "GET", "/cluster", timeout=2)
                healthy = status == 200 and text.count('"state":"healthy"') == 4
                following = mode != "kv" or all(
                    f'kvferry:proxy_kv_index_blocks{{member="{m}"}}' in metrics(self.proxy)
                    for m in self.members)
                if healthy and following:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise SystemExit(f"cluster not ready; logs in {self.work}")

    def stop(self):
        for p in reversed(self.procs):
            p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()


def stream(port, prompt, max_tokens):
    """(text, ttft_s, e2e_s) of one streamed completion through the proxy."""
    t0 = time.monotonic()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    c.request("POST", "/v1/completions",
              json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                          "stream": True}), {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise SystemExit(f"HTTP {r.status}: {r.read()[:300]}")
    text, ttft = [], None
    for raw in r:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        if "error" in chunk:
            raise SystemExit(f"stream error: {chunk['error']}")
        for ch in chunk.get("choices", []):
            if ch.get("text"):
                if ttft is None:
                    ttft = time.monotonic() - t0
                text.append(ch["text"])
    c.close()
    return "".join(text), ttft if ttft is not None else time.monotonic() - t0, time.monotonic() - t0


def run_clients(fns):
    """Runs each function on its own thread; the seconds until all returned."""
    threads = [threading.Thread(target=fn) for fn in fns]
    t0 = time.monotonic()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return time.monotonic() - t0


def run_chat(port, args, sessions=None, seed=0):
    """One thread per session; each turn appends to the session's history."""
    rng = random.Random(1)
    system = "System: you are a careful assistant. " + words(rng, 90) + "\n"
    sessions = sessions or args.sessions
    questions = [[words(random.Random(seed * 100000 + s * 100 + t), 12) for t in range(args.turns)]
                 for s in range(sessions)]
    sent, lock = [], threading.Lock()

    def session(s):
        history = system
        for t in range(args.turns):
            prompt = history + f"User {s}: {questions[s][t]}?\nAssistant:"
            text, ttft, e2e = stream(port, prompt, 16)
            with lock:
                sent.append((prompt, text, ttft, e2e, time.monotonic()))
            history = prompt + text + "\n"
    return sent, run_clients([lambda s=s: session(s) for s in range(sessions)])


def run_docs(port, args):
    rng = random.Random(2)
    docs = [f"Document {d}: " + words(rng, 160) + "\n" for d in range(args.docs)]
    prompts = [docs[d] + f"Question {q}: what does it say about {words(rng, 3)}?\nAnswer:"
               for d in range(args.docs) for q in range(args.questions)]
    random.Random(3).shuffle(prompts)
    sent, lock, it = [], threading.Lock(), iter(prompts)

    def client():
        while True:
            with lock:
                prompt = next(it, None)
            if prompt is None:
                return
            text, ttft, e2e = stream(port, prompt, 16)
            with lock:
                sent.append((prompt, text, ttft, e2e, time.monotonic()))
    return sent, run_clients([client] * args.concurrency)


def oracle_hit_rate(port, sent):
    """Each prompt's longest whole-block prefix that an earlier-finished request sent, over all
    prompt tokens (token ids from a member's /tokenize)."""
    seen, hit, total = set(), 0, 0
    for prompt, text, _ttft, _e2e, _done in sorted(sent, key=lambda x: x[4] - x[3]):  # by start
        status, body = request(port, "POST", "/tokenize", {"prompt": prompt})
        ids = json.loads(body)["tokens"]
        blocks = [tuple(ids[: (i + 1) * BLOCK]) for i in range(len(ids) // BLOCK)]
        held = 0
        while held < len(blocks) and hash(blocks[held]) in seen:
            held += 1
        hit += held * BLOCK
        total += len(ids)
        seen.update(hash(b) for b in blocks)
    return hit / total if total else 0.0


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * (len(xs) - 1) + 0.5))] if xs else 0.0


def measure(cluster, workload, args, answers, sessions=None, seed=0):
    before = {m: metrics(port) for m, port in cluster.members.items()}
    proxy_before = metrics(cluster.proxy)
    if workload == "chat":
        sent, wall = run_chat(cluster.proxy, args, sessions, seed)
    else:
        sent, wall = run_docs(cluster.proxy, args)
    proxy_after = metrics(cluster.proxy)
    after = {m: metrics(port) for m, port in cluster.members.items()}

    def delta(members, name):
        return sum(after[m].get(name, 0) - before[m].get(name, 0) for m in members)
    ps, ds = ("p0", "p1"), ("d0", "d1")
    prompt = delta(ps, "kvferry:prompt_tokens_total")
    hits = delta(ps, "kvferry:prefix_cache_hit_tokens_total")
    differ = 0
    for prompt_text, text, *_ in sent:
        if answers.setdefault(prompt_text, text) != text:
            differ += 1
    ttfts = [s[2] * 1000 for s in sent]
    return {
        "requests": len(sent), "req_per_s": len(sent) / wall,
        "ttft_p50_ms": pct(ttfts, 0.5), "ttft_p99_ms": pct(ttfts, 0.99),
        "p_hit_rate": hits / prompt if prompt else 0.0,
        "p_tokens_computed": prompt - hits,
        "d_pulled_bytes": delta(ds, "kvferry:kv_transfer_bytes_total"),
        "p_pulled_bytes": delta(ps, "kvferry:kv_transfer_bytes_total"),
        "disk_hit_tokens": delta(ps + ds, "kvferry:kv_offload_hit_tokens_total"),
        "prefix_pulls": proxy_after.get(PULLED, 0) - proxy_before.get(PULLED, 0),
        "oracle_hit_rate": oracle_hit_rate(cluster.members["p0"], sent),
        "answers_differing_from_first_mode": differ,
    }


def at_bound(levels, bound_ms):
    """Requests/s at a p99 TTFT of `bound_ms`: linear between the two sweep levels around it;
    the last level's when all are under it; 0 when none is."""
    pts = sorted((x["ttft_p99_ms"], x["req_per_s"]) for x in levels)
    under = [p for p in pts if p[0] <= bound_ms]
    if not under:
        return 0.0
    lo = max(under, key=lambda p: p[1])
    over = [p for p in pts if p[0] > bound_ms and p[1] > lo[1]]
    if not over:
        return lo[1]
    hi = min(over, key=lambda p: p[0])
    return lo[1] + (hi[1] - lo[1]) * (bound_ms - lo[0]) / (hi[0] - lo[0])


def plot(path, sweeps, bound_ms, model):
    """requests/s against p99 TTFT per mode, as SVG (gnuplot)."""
    data = {}
    for mode, levels in sweeps.items():
        data[mode] = "\n".join(f"{x['ttft_p99_ms']:.1f} {x['req_per_s']:.3f}"
                               for x in sorted(levels, key=lambda x: x["sessions"]))
    script = [f"set terminal svg size 720,480 dynamic font 'sans,12'", f"set output '{path}'",
              f"set title 'Multi-turn chat, 2P2D, model {model}: requests/s against p99 TTFT'",
              "set xlabel 'p99 TTFT (ms)'", "set ylabel 'requests/s'", "set key bottom right",
              "set grid", f"set arrow from {bound_ms},graph 0 to {bound_ms},graph 1 nohead dt 2"]
    plots = ", ".join(f"'-' using 1:2 with linespoints title '{m}'" for m in data)
    script.append("plot " + plots)
    for m in data:
        script += [data[m], "e"]
    subprocess.run(["gnuplot"], input="\n".join(script) + "\n", text=True, check=True)


def print_tables(results, sweeps, args):
    base = results.get("affinity")
    for w in ("chat", "docs"):
        print(f"### {w} (model {args.model})")
        print("%-13s %7s %7s %9s %9s %7s %7s %11s %12s %9s" % (
            "mode", "req/s", "vs aff", "TTFT p50", "TTFT p99", "P hit", "oracle",
            "P computed", "D pulled MB", "P pulls"))
        for mode, r in results.items():
            x = r[w]
            ratio = x["req_per_s"] / base[w]["req_per_s"] if base else float("nan")
            print("%-13s %7.2f %7.2f %9.1f %9.1f %7.3f %7.3f %11d %12.1f %9d" % (
                mode, x["req_per_s"], ratio, x["ttft_p50_ms"], x["ttft_p99_ms"],
                x["p_hit_rate"], x["oracle_hit_rate"], x["p_tokens_computed"],
                x["d_pulled_bytes"] / 1e6, x["prefix_pulls"]))
        bad = sum(r[w]["answers_differing_from_first_mode"] for r in results.values())
        print(f"answers differing across modes: {bad}\n")
    if not sweeps:
        return
    print(f"### chat sweep: sessions in flight -> req/s, TTFT p99 ms (bound {args.ttft_bound_ms} ms)")
    for mode, levels in sweeps.items():
        cells = "  ".join(f"{x['sessions']}: {x['req_per_s']:.2f} / {x['ttft_p99_ms']:.0f}"
                          for x in levels)
        print(f"{mode:<13} {cells}")
    base_rate = at_bound(sweeps["affinity"], args.ttft_bound_ms) if "affinity" in sweeps else 0
    for mode, levels in sweeps.items():
        rate = at_bound(levels, args.ttft_bound_ms)
        ratio = rate / base_rate if base_rate else float("nan")
        print(f"{mode:<13} req/s at p99 TTFT <= {args.ttft_bound_ms} ms: {rate:.2f} "
              f"({ratio:.2f} x affinity)")


def run_mode(mode, args, answers):
    work = tempfile.mkdtemp(prefix=f"kvferry-kv-routing-{mode}-")
    cluster = Cluster(args.kvferry, mode, args.model, work, args)
    try:
        result = {w: measure(cluster, w, args, answers) for w in ("chat", "docs")}
        levels = []
        for n, sessions in enumerate(args.sweep):
            x = measure(cluster, "chat", args, answers, sessions, seed=n + 1)
            x["sessions"] = sessions
            levels.append(x)
    finally:
        cluster.stop()
    shutil.rmtree(work, ignore_errors=True)
    return result, levels


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvferry", default="build/bin/kvferry")
    ap.add_argument("--modes", nargs="+", default=["kv", "affinity", "least-loaded", "round-robin"])
    ap.add_argument("--model", default="small")
    ap.add_argument("--sessions", type=int, default=8)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--docs", type=int, default=4)
    ap.add_argument("--questions", type=int, default=6)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--sweep", type=lambda v: [int(x) for x in v.split(",") if x], default=[])
    ap.add_argument("--ttft-bound-ms", type=float, default=3000)
    ap.add_argument("--plot", default="")
    ap.add_argument("--kv-cache-mb", type=int, default=256)
    ap.add_argument("--kv-offload-mb", type=int, default=0)
    ap.add_argument("--pinning", choices=["split", "pairs"], default="split")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    answers, results, sweeps = {}, {}, {}
    for mode in args.modes:
        results[mode], levels = run_mode(mode, args, answers)
        if levels:
            sweeps[mode] = levels
    if args.plot and sweeps:
        plot(args.plot, sweeps, args.ttft_bound_ms, args.model)
    if args.json:
        at = {m: at_bound(v, args.ttft_bound_ms) for m, v in sweeps.items()}
        print(json.dumps({"model": args.model, "results": results, "sweeps": sweeps,
                          "ttft_bound_ms": args.ttft_bound_ms, "req_per_s_at_bound": at},
                         indent=1))
        return
    print_tables(results, sweeps, args)


if __name__ == "__main__":
    sys.exit(main())
