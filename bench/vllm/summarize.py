"""The table (or, with --json, only JSON on stdout) of bench/vllm/compare.sh: per workload,
KvferryConnector (K) beside NixlConnector (N) and the ratio K / N.

Input: runs.jsonl, one line per (round, workload, deployment) with `kvferry bench serve
--json`'s summary, D's scraped counters before and after (scrape.py) and the path of the saved
outputs; and idle.json, the cores each idle pair burned. TTFT and throughput are averaged over
rounds; the pull time per 1k prompt tokens is D's histogram sum over all rounds divided by D's
prompt tokens over all rounds (warm-up requests included on both sides of the division).
Outputs are compared prompt by prompt (token ids and logprobs) between K and N of one round.

Usage: python3 bench/vllm/summarize.py RUNS.jsonl IDLE.json [--json]
"""

import json
import sys


def delta(run, key):
    return run["after"][key] - run["before"][key]


def pull_figures(runs, who):
    key = "kvferry" if who == "K" else "nixl"
    secs = sum(delta(r, f"{key}_pull_s") for r in runs)
    tokens = sum(delta(r, "prompt_tokens") for r in runs)
    pulls = sum(delta(r, f"{key}_pulls") for r in runs)
    return {"pull_ms_per_1k_prompt_tokens": secs * 1e6 / tokens if tokens else 0.0,
            "descriptors_per_pull": (sum(delta(r, f"{key}_descriptors") for r in runs) / pulls
                                     if pulls else 0.0),
            "bytes_per_pull": sum(delta(r, f"{key}_bytes") for r in runs) / pulls if pulls else 0.0,
            "pulls": int(pulls),
            "pull_failures": int(sum(delta(r, f"{key}_failures") for r in runs)),
            "prompt_tokens": int(tokens)}


def outputs(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def identical(k_run, n_run):
    k, n = outputs(k_run["outputs"]), outputs(n_run["outputs"])
    same = sum(1 for a, b in zip(k, n) if a["ok"] and b["ok"] and
               a["token_ids"] == b["token_ids"] and a["logprobs"] == b["logprobs"])
    return same, max(len(k), len(n))


def mean(xs):
    return sum(xs) / len(xs) if xs else 0.0


def summarize(runs):
    out = {}
    for w in sorted({r["workload"] for r in runs}):
        mine = [r for r in runs if r["workload"] == w]
        row = {}
        for who in ("K", "N"):
            res = [r["bench"] for r in mine if r["who"] == who]
            row[who] = {"ttft_p50_ms": mean([x["ttft"]["p50_ms"] for x in res]),
                        "ttft_p99_ms": mean([x["ttft"]["p99_ms"] for x in res]),
                        "output_tok_per_s": mean([x["output_token_throughput"] for x in res]),
                        "failed_requests": sum(x["failed"] for x in res),
                        **pull_figures([r for r in mine if r["who"] == who], who)}
        row["ratio_K_over_N"] = {k: (row["K"][k] / row["N"][k] if row["N"][k] else None)
                                 for k in ("ttft_p50_ms", "ttft_p99_ms", "output_tok_per_s",
                                           "pull_ms_per_1k_prompt_tokens",
                                           "descriptors_per_pull", "bytes_per_pull")}
        same = total = 0
        for rnd in sorted({r["round"] for r in mine}):
            pair = {r["who"]: r for r in mine if r["round"] == rnd}
            a, b = identical(pair["K"], pair["N"])
            same, total = same + a, total + b
        row["identical"], row["prompts"] = same, total
        row["rounds"] = len({r["round"] for r in mine})
        out[w] = row
    return out


def print_table(out):
    names = [("TTFT p50 ms", "ttft_p50_ms"), ("TTFT p99 ms", "ttft_p99_ms"),
             ("output tok/s", "output_tok_per_s"),
             ("pull ms / 1k prompt tok", "pull_ms_per_1k_prompt_tokens"),
             ("descriptors / pull", "descriptors_per_pull"), ("bytes / pull", "bytes_per_pull")]
    for w, row in out.items():
        print(f"### {w} ({row['rounds']} rounds)")
        print("%-24s %12s %12s %8s" % ("metric", "kvferry", "NIXL", "K / N"))
        for label, k in names:
            ratio = row["ratio_K_over_N"][k]
            print("%-24s %12.3f %12.3f %8s" % (label, row["K"][k], row["N"][k],
                                              "-" if ratio is None else f"{ratio:.3f}"))
        print(f"identical outputs: {row['identical']}/{row['prompts']}; D pulls: kvferry "
              f"{row['K']['pulls']} ({row['K']['pull_failures']} failed), NIXL "
              f"{row['N']['pulls']} ({row['N']['pull_failures']} failed); failed requests: "
              f"kvferry {row['K']['failed_requests']}, NIXL {row['N']['failed_requests']}")
        print()


def main():
    with open(sys.argv[1]) as f:
        runs = [json.loads(line) for line in f if line.strip()]
    with open(sys.argv[2]) as f:
        idle = json.load(f)["idle_cores"]
    out = {"workloads": summarize(runs), "idle_cores": idle}
    if "--json" in sys.argv[3:]:
        print(json.dumps(out, indent=2))
    else:
        print_table(out["workloads"])
        print(f"idle (both pairs up, no requests, 10 s): kvferry pair {idle['K']:.2f} cores, "
              f"NIXL pair {idle['N']:.2f} cores")


if __name__ == "__main__":
    main()
