#!/usr/bin/env python3
"""The disk tier against computing and against RAM (docs/benchmarks.md, "Disk tier"): one
`kvferry serve --kv-offload-dir` instance whose RAM cache holds two documents, and for each of
ROUNDS documents of TOKENS token ids, the time of a one-token completion (prefill, then one token)
when its prompt is

  computed   the first time (nothing cached);
  RAM        asked again at once (a prefix-cache hit in RAM);
  disk       asked again after three other documents evicted it from RAM (read from disk);
  restart    asked again after the instance restarted (read from disk; a fresh process).

Each question's answer is compared with the first one's (equal texts), and the instance's
counters say where the tokens came from (`kvferry:kv_offload_hit_tokens_total`,
`kvferry:prefix_cache_hit_tokens_total`). Reported: the median seconds of each, and the
disk's time as a ratio of computing's and of RAM's (the same prompt, threads and instance).

usage: bench/serve/kv_offload.py [--kvferry build/bin/kvferry] [--model small] [--tokens 1024]
       [--rounds 3] [--threads 2] [--json]       (stdout: the table, or with --json only JSON)
"""
import argparse
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from serve_http import free_port, metrics, request, words

BLOCK = 16


class Server:
    def __init__(self, args, work, blocks):
        self.port = free_port()
        cmd = [args.kvferry, "serve", "--model", args.model, "--port", str(self.port),
               "--threads", str(args.threads), "--block-size", str(BLOCK),
               "--num-kv-blocks", str(blocks), "--kv-offload-dir", f"{work}/disk",
               "--kv-offload-gb", "4"]
        self.log = open(f"{work}/serve.log", "a")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if request(self.port, "GET", "/health", timeout=2)[0] == 200:
                    return
            except OSError:
                time.sleep(0.2)
        raise SystemExit(f"serve did not start; log in {work}/serve.log")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)
        self.log.close()


def document(port, rng, tokens):
    """A prompt of exactly `tokens` token ids: words, tokenized by the instance, cut."""
    text = words(rng, tokens)  # a word is at least one token
    status, body = request(port, "POST", "/tokenize", {"prompt": text})
    if status != 200:
        raise SystemExit(f"/tokenize: HTTP {status}: {body[:300]}")
    return json.loads(body)["tokens"][:tokens]


def ask(port, prompt):
    """(seconds, text) of a one-token completion."""
    t0 = time.monotonic()
    status, body = request(port, "POST", "/v1/completions",
                           {"prompt": prompt, "max_tokens": 1, "temperature": 0}, timeout=600)
    if status != 200:
        raise SystemExit(f"HTTP {status}: {body[:300]}")
    return time.monotonic() - t0, json.loads(body)["choices"][0]["text"]


def run_round(server, rng, args, times, answers):
    """One document through computed, RAM and disk; returns the prompt (for the restart)."""
    prompt = document(server.port, rng, args.tokens)
    for kind in ("computed", "ram"):
        seconds, text = ask(server.port, prompt)
        times[kind].append(seconds)
        answers.setdefault(tuple(prompt), text)
        if answers[tuple(prompt)] != text:
            raise SystemExit(f"{kind}: the answer differs from the computed one")
    for _ in range(3):  # evict it from RAM (the cache holds two documents)
        ask(server.port, document(server.port, rng, args.tokens))
    disk_before = metrics(server.port).get("kvferry:kv_offload_hit_tokens_total", 0.0)
    seconds, text = ask(server.port, prompt)
    if text != answers[tuple(prompt)]:
        raise SystemExit("disk: the answer differs from the computed one")
    if metrics(server.port).get("kvferry:kv_offload_hit_tokens_total", 0.0) - disk_before < args.tokens / 2:
        raise SystemExit("disk: the prompt was not read from disk (evicted from it, or not "
                         "evicted from RAM)")
    times["disk"].append(seconds)
    return prompt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvferry", default="build/bin/kvferry")
    ap.add_argument("--model", default="small")
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="kvferry-kv-offload-")
    blocks = (2 * args.tokens + 64) // BLOCK + 8  # two documents and their questions
    rng = random.Random(7)
    times = {"computed": [], "ram": [], "disk": [], "restart": []}
    answers, prompts = {}, []
    server = Server(args, work, blocks)
    try:
        for _ in range(args.rounds):
            prompts.append(run_round(server, rng, args, times, answers))
        server.stop()
        server = Server(args, work, blocks)
        for prompt in prompts:
            seconds, text = ask(server.port, prompt)
            if text != answers[tuple(prompt)]:
                raise SystemExit("restart: the answer differs from the computed one")
            times["restart"].append(seconds)
        restart_hits = metrics(server.port).get("kvferry:kv_offload_hit_tokens_total", 0.0)
        file_bytes = metrics(server.port).get("kvferry:kv_offload_bytes", 0.0)
        files = metrics(server.port).get("kvferry:kv_offload_files", 0.0)
    finally:
        server.stop()
    shutil.rmtree(work, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    out = {"model": args.model, "tokens": args.tokens, "rounds": args.rounds,
           "threads": args.threads, "median_s": med, "restart_disk_hit_tokens": restart_hits,
           "disk_vs_computed": med["disk"] / med["computed"],
           "disk_vs_ram": med["disk"] / med["ram"],
           "file_bytes_per_token": file_bytes / (files * BLOCK) if files else 0.0}
    out["disk_read_gb_per_s"] = (out["file_bytes_per_token"] * (args.tokens - 1) / med["disk"]
                                 / 1e9)
    if args.json:
        print(json.dumps(out, indent=1))
        return
    print(f"model {args.model}, {args.tokens}-token documents, {args.rounds} rounds, "
          f"{args.threads} threads: median seconds of a 1-token completion")
    for k in ("computed", "ram", "disk", "restart"):
        print(f"  {k:<9} {med[k]:8.3f} s   ({med[k] / med['computed']:.3f} x computed)")
    print(f"disk = {out['disk_vs_computed']:.3f} x computing the prompt, "
          f"{out['disk_vs_ram']:.2f} x a RAM hit; after the restart "
          f"{int(restart_hits)} prompt tokens came from disk")
    print(f"block files hold {out['file_bytes_per_token'] / 1024:.1f} KiB per token: the disk "
          f"hit read {out['disk_read_gb_per_s']:.2f} GB/s (files in the page cache: just written)")


if __name__ == "__main__":
    sys.exit(main())
