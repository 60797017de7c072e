"""kvf_fault_node processes for the fault, bad-input and load tests (docs/reliability.md), on the
shared harness (tests/harness: cases, checks, waits, processes, HTTP, /metrics).

A Node is one kvf_fault_node (a serving instance or the proxy) that prints PORT, SIDE_CHANNEL
and ENGINE_ID lines on stdout once it listens.
"""
import argparse
import os
import subprocess
import sys
import time

from harness import kvferry_api, web
from harness.procs import Process
from harness.runner import check


class Node(Process, web.Endpoint):
    """One kvf_fault_node process. `netns`: run inside that network namespace."""

    STOP_TIMEOUT_S = 15

    def __init__(self, binary, mode, args=(), env=None, netns=None, host="127.0.0.1",
                 name=None):
        cmd = [binary, mode] + [str(a) for a in args]
        self.host = host
        full_env = {"KVFERRY_LOG": os.environ.get("KVFERRY_LOG", "warn")}
        full_env.update(env or {})
        super().__init__(name or mode, cmd, env=full_env, netns=netns, stdout=subprocess.PIPE,
                         stderr=sys.stderr, text=True)
        self.port = None
        self.side_channel_port = None
        self.engine_id = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"{self.name}: exited before listening (rc={self.proc.wait()})")
            key, _, value = line.strip().partition(" ")
            if key == "PORT":
                self.port = int(value)
            elif key == "SIDE_CHANNEL":
                self.side_channel_port = int(value)
            elif key == "ENGINE_ID":
                self.engine_id = value
                break
            if key == "PORT" and mode == "proxy":
                break
            if key == "PORT" and "--kv-transfer-config" not in cmd:
                break
        if self.port is None:
            raise RuntimeError(f"{self.name}: no PORT line within 60 s")

    def request(self, method, path, body=None, timeout=30.0):
        """Returns (status, parsed JSON or text, seconds). Status None: connection failed."""
        r = self.fetch(method, path, body, timeout=timeout)
        return r.status, r.body, r.seconds

    def post(self, body, path="/v1/completions", timeout=30.0):
        return self.request("POST", path, body, timeout)


def prefill(p, body):
    """Runs the prefill leg on P; returns P's kv_transfer_params."""
    status, resp, _ = p.post(kvferry_api.prefill_body(body))
    check(status == 200, f"prefill on P answered {status}: {resp}")
    params = resp.get("kv_transfer_params")
    check(isinstance(params, dict) and params.get("do_remote_prefill"),
          f"P answered without kv_transfer_params: {resp}")
    return params


def colocated_text(binary, body):
    """The text a colocated instance answers `body` with (what P/D must equal)."""
    ref = Node(binary, "serve", name="ref")
    status, resp, _ = ref.post(body)
    check(status == 200, f"reference answered {status}: {resp}")
    ref.stop()
    return kvferry_api.text_of(resp)


def parse_args(*required):
    """--node kvf_fault_node [--probe kvf_side_probe] (CMake passes both to every script), and
    the flags a script also requires (`required`, e.g. "--schemathesis")."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--node", required=True)
    ap.add_argument("--probe")
    for flag in required:
        ap.add_argument(flag, required=True)
    return ap.parse_args()
