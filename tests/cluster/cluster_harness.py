"""Processes for the cluster tests (docs/reliability.md, "Cluster"): etcd, `kvferry serve` and
`kvferry proxy` with --registry, optionally inside a network namespace, talked to over HTTP with
the standard library only. Builds on tests/fault/kvf_harness.py (checks, waits, measures, cases).

Every process logs to a file in the test's work directory (kept when a case fails); every wait
has a deadline; processes left running at exit are killed.
"""
import atexit
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fault"))
from kvf_harness import (check, measure, run_cases, wait_until)  # noqa: E402,F401

WORK = tempfile.mkdtemp(prefix="kvferry-cluster-test-")
CASE = {"dir": WORK}  # the running case's folder under WORK (logs, etcd data)
_PROCS = []


def _cleanup():
    for p in _PROCS:
        p.kill()
    del _PROCS[:]


atexit.register(_cleanup)


def free_port(host="127.0.0.1"):
    s = socket.socket()
    s.bind((host, 0))
    port = s.getsockname()[1]
    s.close()
    return port


def in_netns(netns, cmd):
    return ["ip", "netns", "exec", netns] + cmd if netns else cmd


class Proc:
    """A background process logging to <case folder>/<name>.log."""

    def __init__(self, name, cmd, env=None, netns=None):
        self.name = name
        self.log_path = os.path.join(CASE["dir"], f"{name}.log")
        self.log = open(self.log_path, "a")
        full_env = dict(os.environ)
        full_env.update(env or {})
        self.proc = subprocess.Popen(in_netns(netns, cmd), stdout=self.log,
                                     stderr=subprocess.STDOUT, env=full_env)
        _PROCS.append(self)

    def alive(self):
        return self.proc.poll() is None

    def signal(self, sig):
        if self.alive():
            os.kill(self.proc.pid, sig)

    def kill(self):
        # SIGKILL alone ends a stopped process too; a SIGCONT first would let it run a moment.
        if self.alive():
            self.signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self, timeout=20):
        """SIGTERM; the exit code, or an AssertionError if it does not exit in time."""
        if self.alive():
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError(f"{self.name}: did not stop within {timeout} s of SIGTERM")
        return self.proc.returncode

    def log_text(self):
        self.log.flush()
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def wait_log(self, pattern, timeout):
        """The first match of `pattern` in the log within `timeout` s (None otherwise)."""
        found = [None]

        def seen():
            found[0] = re.search(pattern, self.log_text())
            return found[0] is not None or not self.alive()

        wait_until(seen, timeout, interval=0.05)
        return found[0]


class Etcd(Proc):
    """A single-member etcd; stop() then start() keeps its data (keys and leases)."""

    def __init__(self, name="etcd", host="127.0.0.1", netns=None):
        self.host, self.netns, self.etcd_name = host, netns, name
        self.client_port, self.peer_port = 2379, 2380
        if not netns:
            self.client_port, self.peer_port = free_port(), free_port()
        self.data = os.path.join(CASE["dir"], f"{name}.data")
        self.start()

    def start(self):
        client = f"http://{self.host}:{self.client_port}"
        peer = f"http://{self.host}:{self.peer_port}"
        super().__init__(self.etcd_name, [
            "etcd", "--name", self.etcd_name, "--data-dir", self.data,
            "--listen-client-urls", client, "--advertise-client-urls", client,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"{self.etcd_name}={peer}"], netns=self.netns)
        check(wait_until(self.healthy, 30) is not None, "etcd did not become healthy")

    def healthy(self):
        status, body = http_get(self.host, self.client_port, "/health", timeout=1)
        return status == 200 and '"true"' in body

    @property
    def endpoint(self):
        return f"{self.host}:{self.client_port}"

    def registry(self, ns="test"):
        return f"etcd://{self.endpoint}/{ns}"

    def ctl(self, *args):
        cmd = ["etcdctl", "--endpoints", self.endpoint] + list(args)
        r = subprocess.run(in_netns(self.netns, cmd), capture_output=True, text=True,
                           env=dict(os.environ, ETCDCTL_API="3"), timeout=20)
        check(r.returncode == 0, f"etcdctl {' '.join(args)}: {r.stderr.strip()}")
        return r.stdout


def http_get(host, port, path, timeout=5):
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read().decode("utf-8", "replace")
    except (OSError, http.client.HTTPException) as e:
        return None, str(e)
    finally:
        conn.close()


def kv_config(role, engine_id, host="127.0.0.1", **extra):
    cfg = {"side_channel_host": host, "side_channel_port": 0}
    cfg.update(extra)
    return json.dumps({"kv_connector": "FerryConnector", "kv_role": role,
                       "engine_id": engine_id, "kv_connector_extra_config": cfg})


class Kvferry(Proc):
    """`kvferry serve` or `kvferry proxy`; the HTTP port is read from its first log line."""

    def __init__(self, binary, name, mode, args, host="127.0.0.1", netns=None, env=None):
        self.host = host
        full_env = {"KVFERRY_LOG": "info"}
        full_env.update(env or {})
        super().__init__(name, [binary, mode, "--host", host, "--port", "0"] + list(args),
                         env=full_env, netns=netns)
        m = self.wait_log(rf"kvferry {mode}: http://{re.escape(host)}:(\d+)", 60)
        check(m is not None, f"{name}: no listening line within 60 s:\n{self.log_text()[-2000:]}")
        self.port = int(m.group(1))

    @property
    def url(self):
        return f"http://{self.host}:{self.port}"

    def request(self, method, path, body=None, timeout=60):
        """(status, parsed JSON or text, headers); status None when the connection failed."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            data = json.dumps(body) if body is not None else None
            conn.request(method, path, body=data,
                         headers={"Content-Type": "application/json"} if data else {})
            resp = conn.getresponse()
            raw = resp.read().decode("utf-8", "replace")
            try:
                parsed = json.loads(raw)
            except ValueError:
                parsed = raw
            return resp.status, parsed, dict(resp.getheaders())
        except (OSError, http.client.HTTPException) as e:
            return None, str(e), {}
        finally:
            conn.close()

    def complete(self, body, timeout=60):
        return self.request("POST", "/v1/completions", body, timeout)

    def metrics(self):
        status, text = http_get(self.host, self.port, "/metrics", timeout=10)
        check(status == 200, f"{self.name}: /metrics answered {status}: {text}")
        out = {}
        for line in text.splitlines():
            m = re.match(r"^(\S+?)(\{[^}]*\})?\s+(\S+)$", line)
            if m and not line.startswith("#"):
                out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
        return out

    def metric(self, name):
        return self.metrics().get(name, 0.0)

    def blocks_in_use(self):
        m = self.metrics()
        return (m.get('kvferry:kv_blocks{state="used"}', 0.0) +
                m.get('kvferry:kv_blocks{state="held_for_transfer"}', 0.0))

    def table(self):
        status, text = http_get(self.host, self.port, "/cluster", timeout=5)
        check(status == 200, f"{self.name}: /cluster answered {status}")
        return json.loads(text)

    def members(self, state=None):
        return sorted(m["id"] for m in self.table()["members"] if state in (None, m["state"]))


def serve(binary, name, role, registry, host="127.0.0.1", netns=None, ttl=3, extra_kv=None,
          args=(), env=None):
    kv = kv_config(role, name, host, **(extra_kv or {}))
    return Kvferry(binary, name, "serve",
                   ["--threads", "1", "--registry", registry, "--registry-ttl", str(ttl),
                    "--kv-transfer-config", kv] + list(args), host=host, netns=netns, env=env)


def proxy(binary, name, registry, host="127.0.0.1", netns=None, args=()):
    return Kvferry(binary, name, "proxy",
                   ["--registry", registry, "--poll-interval-ms", "100",
                    "--connect-timeout-ms", "1000"] + list(args), host=host, netns=netns)


def colocated_reference(binary, bodies):
    """Each body's text from a colocated instance (the outputs P/D must equal)."""
    ref = Kvferry(binary, "colocated", "serve", ["--threads", "1"])
    want = {}
    for b in bodies:
        key = (b["prompt"], b["max_tokens"])
        if key in want:
            continue
        status, resp, _ = ref.complete(dict(b, stream=False))
        check(status == 200, f"colocated reference: {status} {resp}")
        want[key] = resp["choices"][0]["text"]
    ref.stop()
    return want


def sse_text(raw):
    """(text, error or None) of a completions stream."""
    text, error = "", None
    for line in raw.splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        ev = json.loads(line[6:])
        if "error" in ev:
            error = ev["error"]
        elif ev.get("choices"):
            text += ev["choices"][0].get("text", "")
    return text, error


def run(cases):
    """kvf_harness.run_cases, stopping every process a case started after it; the logs in WORK
    are kept (and named) when a case failed, removed otherwise."""
    def stopping(name, fn):
        def case():
            CASE["dir"] = os.path.join(WORK, name)
            os.makedirs(CASE["dir"], exist_ok=True)
            try:
                fn()
            finally:
                _cleanup()
        return case

    try:
        run_cases([(name, stopping(name, fn)) for name, fn in cases])
    except SystemExit:
        print(f"logs kept in {WORK}", flush=True)
        raise
    shutil.rmtree(WORK, ignore_errors=True)


def parse_args():
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvferry", required=True)
    return ap.parse_args()
