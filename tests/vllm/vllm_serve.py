"""`vllm serve` processes for the tests labelled `vllm` (tests/vllm/CMakeLists.txt), and the
requests they send. Runs under build/venv's python (scripts/install-vllm.sh), standard library
plus what that venv holds.

A `vllm serve` is three processes (API server, EngineCore, Worker), so each one is started in a
session of its own and killed as a process group: a SIGKILL to the API server alone would leave
the engine running. Every server is registered with harness.procs, so run_cases kills it when its
case ends and at exit.

A test killed from outside (CTest's SIGKILL at its TIMEOUT) runs no exit handler, so its servers
would live on and compete for the cores with every later test (a vLLM worker spins on
sched_yield while it waits). Each server's process group is therefore written to a ledger
(SERVER_LEDGER, with the pid of the test that started it); the first server a test starts
first kills the groups whose test is gone (reap_strays).
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from harness import procs, runner, web

VENV_BIN = os.path.dirname(sys.executable)
MODEL_NAME = "qwen3"
# The prompts the P/D tests send: a short one, and one of several 128-token blocks (so a pull
# has more than one block per layer to merge).
PROMPTS = [
    "The quick brown fox jumps over the lazy dog because",
    " ".join(f"item {i} is {'red' if i % 3 else 'blue'}," for i in range(90)) + " so item 91 is",
]

# vLLM on 2 shared cores: no inductor compile, no CPU pinning, a small KV cache, no downloads.
VLLM_ENV = {
    "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "VLLM_LOGGING_LEVEL": "INFO", "TOKENIZERS_PARALLELISM": "false", "UCX_TLS": "tcp,shm,self",
}
STARTUP_TIMEOUT_S = float(os.environ.get("KVF_VLLM_STARTUP_TIMEOUT_S", "420"))
# Lines "PGID TEST_PID": the servers' process groups, and the test process that started each.
SERVER_LEDGER = os.path.join(tempfile.gettempdir(), f"kvferry-vllm-servers-{os.getuid()}")
_reaped = False


def _alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _group_members(pgid):
    """Pids whose process group is pgid and whose command line names vLLM (`vllm serve`, the
    `VLLM::` titles of its engine and workers), from /proc: a group id reused by another program
    after our servers ended is never touched."""
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        if int(stat[stat.rindex(")") + 2:].split()[2]) != pgid:  # field 5: pgrp
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                if b"vllm" in f.read().lower():
                    pids.append(int(d))
        except OSError:
            continue
    return pids


def _ledger_lines():
    try:
        with open(SERVER_LEDGER) as f:
            return [tuple(int(v) for v in line.split()) for line in f if len(line.split()) == 2]
    except (OSError, ValueError):
        return []


def reap_strays():
    """Kills the server process groups in the ledger whose test process is gone; returns how
    many processes it killed (printed: a stray is why a later test would be starved)."""
    keep, killed = [], 0
    for pgid, test_pid in _ledger_lines():
        members = _group_members(pgid)
        if not members:
            continue
        if _alive(test_pid):
            keep.append((pgid, test_pid))
            continue
        print(f"killing {len(members)} stray vLLM processes (group {pgid}) of a test that died "
              f"(pid {test_pid})", flush=True)
        try:
            os.killpg(pgid, signal.SIGKILL)
            killed += len(members)
        except ProcessLookupError:
            pass
    with open(SERVER_LEDGER, "w") as f:
        f.writelines(f"{pgid} {pid}\n" for pgid, pid in keep)
    return killed


def _record_server(pgid):
    with open(SERVER_LEDGER, "a") as f:
        f.write(f"{pgid} {os.getpid()}\n")


def kvferry_kv_config(side_channel_port, **extra):
    cfg = {"side_channel_port": side_channel_port, "load_timeout_ms": 5000,
           "lease_timeout_s": 30}
    cfg.update(extra)
    return json.dumps({
        "kv_connector": "KvferryConnector", "kv_connector_module_path": "kvferry.vllm",
        "kv_role": "kv_both", "kv_load_failure_policy": "recompute",
        "kv_connector_extra_config": cfg})


class VllmServer:
    """One `vllm serve MODEL_DIR` on 127.0.0.1:port, its output in log_path."""

    def __init__(self, name, model_dir, port, log_path, kv_config=None, extra_args=()):
        global _reaped
        if not _reaped:
            reap_strays()
            _reaped = True
        self.name, self.port, self.log_path = name, port, log_path
        cmd = ["nice", "-n", "10", os.path.join(VENV_BIN, "vllm"), "serve", model_dir,
               "--host", "127.0.0.1", "--port", str(port), "--dtype", "bfloat16",
               "--max-model-len", "1024", "--enforce-eager", "--served-model-name", MODEL_NAME,
               "--no-enable-prefix-caching", "--max-num-seqs", "8", *extra_args]
        if kv_config is not None:
            cmd += ["--kv-transfer-config", kv_config]
        env = dict(os.environ)
        env.update(VLLM_ENV)
        env["PATH"] = VENV_BIN + os.pathsep + env.get("PATH", "")
        self._log = open(log_path, "w")
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)
        _record_server(self.proc.pid)
        self.started = time.monotonic()
        procs._STARTED.append(self)

    def alive(self):
        return self.proc.poll() is None

    def log_text(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def wait_ready(self, timeout=STARTUP_TIMEOUT_S):
        """Seconds until /v1/models answers; a CheckFailed (with the log's tail) if the server
        exited or did not come up in time."""
        def up():
            if not self.alive():
                return True
            return web.request("127.0.0.1", self.port, "GET", "/v1/models", timeout=2).status == 200
        took = runner.wait_until(up, timeout, interval=1.0)
        runner.check(took is not None and self.alive(),
                     f"{self.name} did not come up in {timeout} s (rc {self.proc.poll()}); log "
                     f"tail:\n{self.log_text()[-3000:]}")
        return time.monotonic() - self.started

    def wait_exit(self, timeout):
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self):
        """SIGKILL to the whole process group (API server, EngineCore, Worker)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    # ---- requests -------------------------------------------------------------------------

    def post(self, path, body, timeout=120):
        r = web.request("127.0.0.1", self.port, "POST", path, body, timeout=timeout)
        runner.check(r.status == 200, f"{self.name} {path}: HTTP {r.status}: {r.raw[:500]}")
        return r.body

    def metrics(self, prefix):
        """Samples of GET /metrics whose name starts with prefix, summed over their labels:
        {name: value}. Histogram buckets and `_created` timestamps are left out."""
        from prometheus_client.parser import text_string_to_metric_families
        r = web.request("127.0.0.1", self.port, "GET", "/metrics", timeout=10)
        runner.check(r.status == 200, f"{self.name} /metrics: HTTP {r.status}")
        out = {}
        for family in text_string_to_metric_families(r.raw):
            for sample in family.samples:
                if (sample.name.startswith(prefix) and
                        not sample.name.endswith(("_bucket", "_created"))):
                    out[sample.name] = out.get(sample.name, 0.0) + sample.value
        return out

    def post_stream(self, path, body, timeout=120):
        """A streamed request's chunks (the parsed `data:` lines, [DONE] dropped)."""
        r = web.request("127.0.0.1", self.port, "POST", path, dict(body, stream=True),
                        timeout=timeout)
        runner.check(r.status == 200, f"{self.name} {path} (stream): HTTP {r.status}: "
                                      f"{r.raw[:500]}")
        chunks = []
        for line in r.raw.splitlines():
            if line.startswith("data: ") and line[6:].strip() != "[DONE]":
                chunks.append(json.loads(line[6:]))
        return chunks


# ---- what an answer holds, comparable across servers --------------------------------------

# vLLM's CPU attention computes a one-token query (D's first step after its pull: vLLM
# recomputes the last prompt token) with other kernels than a prefill (the colocated answer).
# With the vec ISAs the two give the same bits; with the AMX ISA (bf16 at block sizes that are
# multiples of 32, on CPUs with AMX tiles) the last digits of a few logprobs differ (up to
# 0.003 seen, on answers whose token ids are equal). There P/D is compared with colocated by
# token ids, and logprobs within this bound; the P/D paths are compared with each other exactly
# (test_pd.py: same-size, re-laid-out and host-buffer pulls give the same bits).
AMX_LOGPROB_TOLERANCE = 0.02


def attention_isa(model_dir, block_size):
    """The ISA vLLM's CPU attention picks for a bfloat16 `vllm serve` of model_dir with
    `block_size`-token blocks on this CPU (kvferry.vllm.layout.attention_isa)."""
    import torch
    from kvferry.vllm.layout import attention_isa as isa_of
    with open(os.path.join(model_dir, "config.json")) as f:
        head_dim = json.load(f)["head_dim"]
    return isa_of(torch.bfloat16, block_size, head_dim)


def same_answer(what, got, want, isa):
    """D's (token ids, logprobs) against a colocated answer: equal, bit for bit, unless vLLM's
    attention ISA is amx (then token ids equal, logprobs within AMX_LOGPROB_TOLERANCE)."""
    runner.check(len(got[0]) > 0, f"{what}: no tokens")
    runner.check(got[0] == want[0], f"{what}: token ids differ\n  D: {got[0]}\n  C: {want[0]}")
    if isa != "amx":
        runner.check(got[1] == want[1], f"{what}: logprobs differ\n  D: {got[1]}\n  C: {want[1]}")
        return
    worst = max((abs(a - b) for a, b in zip(got[1], want[1])), default=0.0)
    runner.check(len(got[1]) == len(want[1]) and worst <= AMX_LOGPROB_TOLERANCE,
                 f"{what}: logprobs differ by {worst} (AMX bound {AMX_LOGPROB_TOLERANCE})\n"
                 f"  D: {got[1]}\n  C: {want[1]}")
    if worst:
        print(f"  {what}: logprobs within {worst:.2g} of colocated (vLLM's AMX attention)",
              flush=True)


def completion_tokens(resp):
    """(token strings "token_id:N", logprobs) of a non-streamed completion's first choice."""
    lp = resp["choices"][0]["logprobs"]
    return list(lp["tokens"]), list(lp["token_logprobs"])


def completion_stream_tokens(chunks):
    tokens, logprobs = [], []
    for c in chunks:
        for ch in c.get("choices", []):
            lp = ch.get("logprobs")
            if lp:
                tokens += lp["tokens"]
                logprobs += lp["token_logprobs"]
    return tokens, logprobs


def chat_tokens(resp):
    content = resp["choices"][0]["logprobs"]["content"]
    return [c["token"] for c in content], [c["logprob"] for c in content]


def chat_stream_tokens(chunks):
    tokens, logprobs = [], []
    for c in chunks:
        for ch in c.get("choices", []):
            lp = ch.get("logprobs")
            if lp and lp.get("content"):
                tokens += [x["token"] for x in lp["content"]]
                logprobs += [x["logprob"] for x in lp["content"]]
    return tokens, logprobs
