"""Process harness for the fault, bad-input and load tests (docs/reliability.md).

Starts kvf_fault_node processes (a serving instance or the proxy), talks HTTP to them with the
standard library only, reads Prometheus gauges from /metrics, and records measured bounds.
Every wait has a deadline; a node left running at exit is killed.
"""
import atexit
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

_NODES = []


def _cleanup():
    for n in _NODES:
        n.kill()


atexit.register(_cleanup)


class Node:
    """One kvf_fault_node process. `netns`: run inside that network namespace."""

    def __init__(self, binary, mode, args=(), env=None, netns=None, host="127.0.0.1",
                 name=None):
        cmd = [binary, mode] + [str(a) for a in args]
        if netns:
            cmd = ["ip", "netns", "exec", netns] + cmd
        self.name = name or mode
        self.host = host
        full_env = dict(os.environ)
        full_env.setdefault("KVFERRY_LOG", "warn")
        if env:
            full_env.update(env)
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=sys.stderr, env=full_env,
                                     text=True)
        _NODES.append(self)
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

    @property
    def url(self):
        return f"http://{self.host}:{self.port}"

    def signal(self, sig):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def kill(self):
        # SIGKILL alone: it ends a stopped process too, and a SIGCONT first would let a
        # SIGSTOPped one run (and answer what it holds) before it dies.
        if self.proc.poll() is None:
            self.signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self):
        if self.proc.poll() is None:
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError(f"{self.name}: did not stop within 15 s of SIGTERM")

    def alive(self):
        return self.proc.poll() is None

    def request(self, method, path, body=None, timeout=30.0):
        """Returns (status, parsed JSON or text, seconds). Status None: connection failed."""
        t0 = time.monotonic()
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            data = body if isinstance(body, (str, bytes)) or body is None else json.dumps(body)
            conn.request(method, path, body=data,
                         headers={"Content-Type": "application/json"} if data else {})
            resp = conn.getresponse()
            raw = resp.read().decode("utf-8", "replace")
            try:
                parsed = json.loads(raw)
            except ValueError:
                parsed = raw
            return resp.status, parsed, time.monotonic() - t0
        except (OSError, http.client.HTTPException) as e:
            return None, str(e), time.monotonic() - t0
        finally:
            conn.close()

    def post(self, body, path="/v1/completions", timeout=30.0):
        return self.request("POST", path, body, timeout)

    def metrics(self):
        status, text, _ = self.request("GET", "/metrics", timeout=10)
        if status != 200:
            raise AssertionError(f"{self.name}: /metrics answered {status}: {text}")
        out = {}
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            m = re.match(r"^(\S+?)(\{[^}]*\})?\s+(\S+)$", line)
            if m:
                out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
        return out

    def gauge(self, name):
        return self.metrics().get(name, 0.0)

    def blocks_in_use(self):
        """Blocks not free and not merely cached: used + held_for_transfer."""
        m = self.metrics()
        return (m.get('kvferry:kv_blocks{state="used"}', 0.0) +
                m.get('kvferry:kv_blocks{state="held_for_transfer"}', 0.0))


class Background:
    """Runs fn() on a thread (a request that must stay in flight while the test breaks something).
    result(timeout, what) joins within `timeout` (a CheckFailed naming `what` otherwise) and
    returns fn's value; finished_at is the monotonic time fn returned."""

    def __init__(self, fn):
        self._value = None
        self.finished_at = None
        self._thread = threading.Thread(target=self._run, args=(fn,))
        self._thread.start()

    def _run(self, fn):
        self._value = fn()
        self.finished_at = time.monotonic()

    def result(self, timeout, what):
        self._thread.join(timeout)
        check(not self._thread.is_alive(), f"{what} never answered")
        return self._value


def wait_until(pred, timeout, interval=0.05):
    """Polls pred() until true; returns the seconds it took, or None on timeout."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if pred():
            return time.monotonic() - t0
        time.sleep(interval)
    return None


def kv_config(engine_id, **extra):
    """A --kv-transfer-config JSON string; extra keys go to kv_connector_extra_config,
    except kv_load_failure_policy and kv_buffer_device."""
    top = {"kv_connector": "FerryConnector", "kv_role": "kv_both", "engine_id": engine_id}
    for k in ("kv_load_failure_policy", "kv_buffer_device"):
        if k in extra:
            top[k] = extra.pop(k)
    top["kv_connector_extra_config"] = extra
    return json.dumps(top)


def prefill_body(body):
    """What the proxy sends P (proxy/handoff.h)."""
    b = dict(body)
    b["max_tokens"] = 1
    b["stream"] = False
    b["kv_transfer_params"] = {"do_remote_decode": True, "do_remote_prefill": False,
                               "remote_engine_id": None, "remote_block_ids": None,
                               "remote_host": None, "remote_port": None}
    return b


def prefill(p, body):
    """Runs the prefill leg on P; returns P's kv_transfer_params."""
    status, resp, _ = p.post(prefill_body(body))
    check(status == 200, f"prefill on P answered {status}: {resp}")
    params = resp.get("kv_transfer_params")
    check(isinstance(params, dict) and params.get("do_remote_prefill"),
          f"P answered without kv_transfer_params: {resp}")
    return params


def decode_body(body, params):
    b = dict(body)
    b["kv_transfer_params"] = params
    return b


def text_of(resp):
    return resp["choices"][0]["text"] if isinstance(resp, dict) and "choices" in resp else None


def is_openai_error(resp, code=None):
    if not isinstance(resp, dict) or not isinstance(resp.get("error"), dict):
        return False
    e = resp["error"]
    ok = isinstance(e.get("message"), str) and e["message"] != "" and "type" in e
    return ok and (code is None or e.get("code") == code)


class CheckFailed(AssertionError):
    pass


def check(cond, what):
    if not cond:
        raise CheckFailed(what)


MEASURED = []


def measure(name, seconds, bound):
    """Records a measured duration against its stated bound, and checks it."""
    MEASURED.append((name, seconds, bound))
    print(f"MEASURE {name}: {seconds:.3f} s (bound {bound} s)", flush=True)
    check(seconds is not None and seconds <= bound, f"{name}: {seconds} s exceeds {bound} s")


def run_cases(cases):
    """Runs (name, fn) pairs; prints PASS/FAIL per case; exits 1 if any failed."""
    failed = []
    only = os.environ.get("KVF_CASE")
    for name, fn in cases:
        if only and only != name:
            continue
        t0 = time.monotonic()
        try:
            fn()
            print(f"PASS {name} ({time.monotonic() - t0:.1f} s)", flush=True)
        except Exception as e:  # noqa: BLE001 - report every case
            print(f"FAIL {name}: {type(e).__name__}: {e}", flush=True)
            failed.append(name)
        finally:
            _cleanup()
            del _NODES[:]
    if failed:
        print("failed cases: " + ", ".join(failed))
        sys.exit(1)


def parse_args():
    """--node kvf_fault_node [--probe kvf_side_probe] (CMake passes both to every script)."""
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--node", required=True)
    ap.add_argument("--probe")
    return ap.parse_args()
