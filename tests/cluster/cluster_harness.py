"""Processes for the cluster tests (docs/reliability.md, "Cluster"): etcd, `kvferry serve` and
`kvferry proxy` with --registry, optionally inside a network namespace, talked to over HTTP with
the standard library only. Builds on tests/harness (cases, checks, waits, processes, HTTP).

Every process logs to a file in the test's work directory (kept when a case fails); every wait
has a deadline; processes left running when a case ends, or at exit, are killed.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import tempfile

from harness import kvferry_api, web
from harness.procs import LoggedProcess, free_port, in_netns
from harness.runner import check, run_cases, wait_until

WORK = tempfile.mkdtemp(prefix="kvferry-cluster-test-")
CASE = {"dir": WORK}  # the running case's folder under WORK (logs, etcd data)


class Proc(LoggedProcess):
    """A background process logging to <case folder>/<name>.log."""

    def __init__(self, name, cmd, env=None, netns=None):
        super().__init__(name, cmd, os.path.join(CASE["dir"], f"{name}.log"), env=env,
                         netns=netns)


class Etcd(Proc):
    """A single-member etcd, or one member of a cluster: `cluster` = {member name: host} of every
    member (each in its own network namespace, so every one uses the ports 2379 and 2380), and
    `wait=False` to start all members before waiting for any (a member is healthy only once a
    quorum runs). stop() then start() keeps its data (keys and leases; a cluster member rejoins)."""

    def __init__(self, name="etcd", host="127.0.0.1", netns=None, cluster=None, wait=True):
        self.host, self.netns, self.etcd_name = host, netns, name
        self.cluster = cluster
        self.client_port, self.peer_port = 2379, 2380
        if not netns:
            self.client_port, self.peer_port = free_port(), free_port()
        self.data = os.path.join(CASE["dir"], f"{name}.data")
        self.start(wait)

    def start(self, wait=True):
        client = f"http://{self.host}:{self.client_port}"
        peer = f"http://{self.host}:{self.peer_port}"
        members = self.cluster or {self.etcd_name: self.host}
        initial = ",".join(f"{n}=http://{h}:{self.peer_port}" for n, h in members.items())
        super().__init__(self.etcd_name, [
            "etcd", "--name", self.etcd_name, "--data-dir", self.data,
            "--listen-client-urls", client, "--advertise-client-urls", client,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", initial], netns=self.netns)
        if wait:
            self.wait_healthy()

    def wait_healthy(self, timeout=30):
        check(wait_until(self.healthy, timeout) is not None,
              f"{self.etcd_name} did not become healthy")

    def is_leader(self):
        """Whether this member is the cluster's leader now (False when it does not answer)."""
        r = web.request(self.host, self.client_port, "POST", "/v3/maintenance/status", body={},
                        timeout=2)
        return r.status == 200 and r.body.get("leader") == r.body.get("header", {}).get("member_id")

    def healthy(self):
        r = web.request(self.host, self.client_port, "GET", "/health", timeout=1)
        return r.status == 200 and '"true"' in r.raw

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


def kv_config(role, engine_id, host="127.0.0.1", **extra):
    return kvferry_api.kv_config(engine_id, role, side_channel_host=host, side_channel_port=0,
                                 **extra)


class Kvferry(Proc, web.Endpoint):
    """`kvferry serve` or `kvferry proxy`; the HTTP port is read from its first log line."""

    def __init__(self, binary, name, mode, args, host="127.0.0.1", netns=None, env=None, port=0):
        self.host = host
        full_env = {"KVFERRY_LOG": "info"}
        full_env.update(env or {})
        super().__init__(name, [binary, mode, "--host", host, "--port", str(port)] + list(args),
                         env=full_env, netns=netns)
        m = self.wait_log(rf"kvferry {mode}: http://{re.escape(host)}:(\d+)", 60)
        check(m is not None, f"{name}: no listening line within 60 s:\n{self.log_text()[-2000:]}")
        self.port = int(m.group(1))

    def request(self, method, path, body=None, timeout=60):
        """(status, parsed JSON or text, headers); status None when the connection failed."""
        r = self.fetch(method, path, body, timeout=timeout)
        return r.status, r.body, r.headers

    def complete(self, body, timeout=60):
        return self.request("POST", "/v1/completions", body, timeout)

    def table(self):
        r = self.fetch("GET", "/cluster", timeout=5)
        check(r.status == 200, f"{self.name}: /cluster answered {r.status}")
        return json.loads(r.raw)

    def members(self, state=None):
        return sorted(m["id"] for m in self.table()["members"] if state in (None, m["state"]))


def serve(binary, name, role, registry, host="127.0.0.1", netns=None, ttl=3, extra_kv=None,
          args=(), env=None):
    kv = kv_config(role, name, host, **(extra_kv or {}))
    return Kvferry(binary, name, "serve",
                   ["--threads", "1", "--registry", registry, "--registry-ttl", str(ttl),
                    "--kv-transfer-config", kv] + list(args), host=host, netns=netns, env=env)


def proxy(binary, name, registry, host="127.0.0.1", netns=None, args=(), port=0):
    return Kvferry(binary, name, "proxy",
                   ["--registry", registry, "--poll-interval-ms", "100",
                    "--connect-timeout-ms", "1000"] + list(args), host=host, netns=netns,
                   port=port)


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


def run(cases):
    """harness.runner.run_cases with a folder under WORK per case for its logs and data; the
    logs are kept (and named) when a case failed, removed otherwise."""
    def in_folder(name, fn):
        def case():
            CASE["dir"] = os.path.join(WORK, name)
            os.makedirs(CASE["dir"], exist_ok=True)
            fn()
        return case

    try:
        run_cases([(name, in_folder(name, fn)) for name, fn in cases])
    except SystemExit:
        print(f"logs kept in {WORK}", flush=True)
        raise
    shutil.rmtree(WORK, ignore_errors=True)


def parse_args():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvferry", required=True)
    return ap.parse_args()
