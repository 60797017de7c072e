"""Deployment security with real `kvferry serve`, `kvferry proxy` and `kvferry keygen` processes on
loopback (docs/deploy.md, docs/reliability.md "Security"):

- API keys: a missing, wrong, prefix or extended key is 401 with an OpenAI error body and moves
  no engine counter; the right key (from --api-key or KVFERRY_API_KEY) is 200; /health and
  /metrics are open in scope v1 and closed in scope all. Through the proxy too, which presents its
  own upstream key to P and D.
- TLS: a client with the CA gets plain and streamed answers, directly and through a TLS proxy
  whose upstreams are https; a plain-HTTP client and a client without the CA are refused.
- CURVE: a D with the right keys pulls; a D without P's public key, with the wrong one, with an
  unknown client key, or talking plaintext is refused before any metadata is sent (the probe gets
  no reply body; D counts a handshake failure, reports failed_handshake) and recomputes exactly.

Certificates come from make_test_pki.sh into a temp dir per run; keys from `kvferry keygen`.
One case: KVF_CASE=<name> PYTHONPATH=tests python3 tests/deploy/deploy_security_test.py
--kvferry build/bin/kvferry --probe build/bin/kvf_side_probe --pki-script
tests/deploy/make_test_pki.sh
"""
import argparse
import json
import os
import re
import ssl
import subprocess
import tempfile
import time

from harness import web
from harness.kvferry_api import is_openai_error, kv_config, prefill_body
from harness.procs import LoggedProcess
from harness.runner import check, run_cases

args = None
WORK = None
BODY = {"prompt": "the ferry crosses at dawn " * 3, "max_tokens": 6, "temperature": 0,
        "logprobs": 1, "return_token_ids": True}
LISTEN_RE = re.compile(r"kvferry (?:serve|proxy): (https?)://127\.0\.0\.1:(\d+)")
ENGINE_COUNTERS = ("kvferry:prompt_tokens_total", "kvferry:generation_tokens_total",
                   "kvferry:engine_steps_total")


class Kvferry(LoggedProcess, web.Endpoint):
    """One `kvferry serve|proxy` process; ready once it logged where it listens. It does not see
    the API keys of this environment, only those a case gives it."""

    STOP_TIMEOUT_S = 30

    def __init__(self, sub_args, name, env=None):
        self.host = "127.0.0.1"
        super().__init__(name, [args.kvferry] + list(sub_args), os.path.join(WORK, f"{name}.log"),
                         env=env, unset=("KVFERRY_API_KEY", "KVFERRY_UPSTREAM_API_KEY"))
        m = self.wait_log(LISTEN_RE, 60)
        if m is None:
            raise RuntimeError(f"{name}: not listening within 60 s (rc={self.proc.poll()}): "
                               f"{self.log()}")
        self.scheme, self.port = m.group(1), int(m.group(2))

    def log(self):
        return self.log_text()[-2000:]

    def tls_context(self):
        return ca_context()

    def stop(self):
        if self.alive():
            check(super().stop() == 0, f"{self.name} did not exit 0 on SIGTERM")

    def request(self, method, path, body=None, key=None, ctx=None, plain=False, timeout=30):
        """(status, parsed JSON or text). Status None: the connection failed (the error text).
        `ctx`: an ssl context for https (default: one trusting the test CA); `plain`: speak
        plain HTTP whatever the scheme."""
        r = self.fetch(method, path, body, headers=auth(key), timeout=timeout, context=ctx,
                       plain=plain)
        return r.status, r.body

    def post(self, body, key=None, **kw):
        return self.request("POST", "/v1/completions", body, key=key, **kw)

    def engine_counters(self, key=None):
        m = self.metrics(auth(key))
        out = {k: m.get(k, 0.0) for k in ENGINE_COUNTERS}
        out["requests"] = sum(v for k, v in m.items()
                              if k.startswith("kvferry:request_success_total"))
        return out


def auth(key):
    return {"Authorization": f"Bearer {key}"} if key is not None else {}


def ca_context():
    return ssl.create_default_context(cafile=os.path.join(WORK, "pki", "ca.pem"))


def pki(name):
    return os.path.join(WORK, "pki", name)


def serve(name, *extra, env=None):
    return Kvferry(["serve", "--model", "tiny", "--port", 0, "--threads", 1] + list(extra), name,
                   env=env)


def kv(engine_id, role, **extra):
    """A --kv-transfer-config JSON string; `extra` goes to kv_connector_extra_config."""
    return kv_config(engine_id, role, side_channel_host="127.0.0.1", **extra)


def settled(counters_of):
    # Engine figures are snapshots published every 50 ms: let one pass so a moved counter shows.
    time.sleep(0.3)
    return counters_of()


def check_refused_keys(node, label, counters_of):
    """Missing, wrong, prefix, extended and upstream keys: 401, OpenAI body, counters still."""
    before = settled(counters_of)
    for key in (None, "wrong", "right-ke", "right-key!", "upstream-key"):
        status, resp = node.post(BODY, key=key)
        check(status == 401, f"{label}: key {key!r} answered {status}: {resp}")
        check(is_openai_error(resp, 401), f"{label}: key {key!r}: not an OpenAI error: {resp}")
    after = settled(counters_of)
    check(after == before, f"{label}: refused requests moved engine counters: {before} -> {after}")
    return before


def case_api_keys():
    s = serve("serve", "--api-key", "right-key", env={"KVFERRY_API_KEY": "env-key, second"})
    check("right-key" not in s.log() and "env-key" not in s.log(), "a key was logged")
    before = check_refused_keys(s, "serve", s.engine_counters)
    for key in ("right-key", "env-key", "second"):
        status, resp = s.post(BODY, key=key)
        check(status == 200, f"key {key!r} answered {status}: {resp}")
    after = settled(s.engine_counters)
    check(after["requests"] == before["requests"] + 3 and
          after["kvferry:prompt_tokens_total"] > before["kvferry:prompt_tokens_total"],
          f"accepted requests did not show in the counters: {before} -> {after}")
    check(s.request("GET", "/health")[0] == 200, "/health needs a key in scope v1")
    check(s.request("GET", "/v1/models")[0] == 401, "/v1/models is open")
    s.stop()

    a = serve("serve-all", "--api-key-scope", "all", env={"KVFERRY_API_KEY": "right-key"})
    for path in ("/health", "/metrics"):
        check(a.request("GET", path)[0] == 401, f"{path} open in scope all")
        check(a.request("GET", path, key="right-key")[0] == 200, f"{path} refused the key")
    a.stop()


def start_pd(p_extra=(), d_extra=(), proxy_extra=(), scheme="http"):
    p = serve("P", "--kv-transfer-config", kv("p0", "kv_producer"), *p_extra)
    d = serve("D", "--kv-transfer-config", kv("d0", "kv_consumer"), *d_extra)
    proxy = Kvferry(["proxy", "--port", 0, "--prefill", f"{scheme}://127.0.0.1:{p.port}",
                     "--decode", f"{scheme}://127.0.0.1:{d.port}"] + list(proxy_extra), "proxy")
    return p, d, proxy


def case_api_keys_through_proxy():
    p, d, proxy = start_pd(("--api-key", "upstream-key"), ("--api-key", "upstream-key"),
                           ("--api-key", "right-key", "--upstream-api-key", "upstream-key"))
    both = lambda: (p.engine_counters(), d.engine_counters())  # noqa: E731
    before = check_refused_keys(proxy, "proxy", both)
    status, resp = proxy.post(BODY, key="right-key")
    check(status == 200, f"proxy answered {status}: {resp}")
    check(resp.get("kv_load", {}).get("outcome") == "pulled", f"D did not pull: {resp}")
    after = settled(both)
    check(after[0]["requests"] == before[0]["requests"] + 1 and
          after[1]["requests"] == before[1]["requests"] + 1,
          f"P and D did not each answer once: {before} -> {after}")
    for node in (proxy, d, p):
        node.stop()


def read_stream(node, body, key=None):
    """Streams `body` over TLS; returns (status, list of parsed events, saw [DONE])."""
    r = node.fetch("POST", "/v1/completions", dict(body, stream=True), headers=auth(key))
    events, done = [], False
    for raw in r.raw.split("\n\n"):
        if raw.startswith("data: [DONE]"):
            done = True
        elif raw.startswith("data: "):
            events.append(json.loads(raw[len("data: "):]))
    return r.status, events, done


def case_tls():
    tls = ("--ssl-certfile", pki("server.pem"), "--ssl-keyfile", pki("server.key"))
    s = serve("serve-tls", *tls)
    check(s.scheme == "https", f"first log line does not say https: {s.log()}")
    status, resp = s.post(BODY)
    check(status == 200, f"client with the CA: {status} {resp}")
    reference = resp["choices"][0]["text"]
    status, events, done = read_stream(s, BODY)
    text = "".join(e["choices"][0]["text"] for e in events if e.get("choices"))
    check(status == 200 and done and text == reference,
          f"streamed over TLS: status {status}, done {done}, {text!r} != {reference!r}")
    status, err = s.post(BODY, plain=True)
    check(status is None, f"a plain-HTTP client got an answer: {status} {err}")
    status, err = s.post(BODY, ctx=ssl.create_default_context())
    check(status is None and "CERTIFICATE_VERIFY_FAILED" in err,
          f"a client without the CA was not refused by its own check: {status} {err}")
    check(s.post(BODY)[0] == 200, "serving stopped after the refused clients")
    s.stop()

    p, d, proxy = start_pd(tls, tls, tls + ("--ssl-ca-certs", pki("ca.pem")), scheme="https")
    status, resp = proxy.post(BODY)
    check(status == 200 and resp["choices"][0]["text"] == reference,
          f"TLS proxy: {status} {resp}")
    check(resp.get("kv_load", {}).get("outcome") == "pulled", f"D did not pull: {resp}")
    status, events, done = read_stream(proxy, BODY)
    text = "".join(e["choices"][0]["text"] for e in events if e.get("choices"))
    check(status == 200 and done and text == reference, f"TLS proxy stream: {text!r}")
    check(proxy.post(BODY, plain=True)[0] is None, "the TLS proxy answered plain HTTP")
    for node in (proxy, d, p):
        node.stop()


def keygen(name):
    out = subprocess.run([args.kvferry, "keygen", "--dir", os.path.join(WORK, "keys"), "--name",
                          name], capture_output=True, text=True, timeout=30)
    check(out.returncode == 0, f"keygen {name}: {out.stderr}")
    check("public key:" in out.stdout, f"keygen printed no public key: {out.stdout}")
    return os.path.join(WORK, "keys", name)


def write(name, text):
    path = os.path.join(WORK, "keys", name)
    with open(path, "w") as f:
        f.write(text)
    return path


def public_key(base):
    return open(base + ".pub").read().strip()


def probe(p, keys=None):
    cmd = [args.probe, "127.0.0.1", str(p.side_channel_port), "get-meta", ""] + list(keys or [])
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    line = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")]
    check(out.returncode == 0 and line, f"probe: rc={out.returncode} {out.stderr}")
    return line[0][len("RESULT "):]


def exact(resp, ref):
    c, r = resp["choices"][0], ref["choices"][0]
    return (c["text"], c["token_ids"], c["logprobs"]) == (r["text"], r["token_ids"], r["logprobs"])


def case_curve():
    os.makedirs(os.path.join(WORK, "keys"), exist_ok=True)
    p0, d0, stranger = keygen("p0"), keygen("d0"), keygen("stranger")
    check(oct(os.stat(p0 + ".key").st_mode & 0o777) == "0o600", "secret key is not 0600")
    clients = write("clients", f"# Ds that p0 admits\nd0 {public_key(d0)}\n")
    p = serve("P", "--kv-transfer-config",
              kv("p0", "kv_producer", lease_ms=5000, curve_secret_key_file=p0 + ".key",
                 curve_client_keys_file=clients))
    m = re.search(r"serving KV metadata on 127\.0\.0\.1:(\d+).*CURVE", p.log())
    check(m, f"P does not say it serves CURVE: {p.log()}")
    p.side_channel_port = int(m.group(1))

    # The side channel itself: only the listed key gets a body back.
    r = probe(p, [d0 + ".key", p0 + ".pub"])
    check(r.startswith("OK engine=p0"), f"the listed D was refused: {r}")
    for label, keys in (("unknown client key", [stranger + ".key", p0 + ".pub"]),
                        ("wrong key for P", [d0 + ".key", stranger + ".pub"]),
                        ("plaintext", [])):
        r = probe(p, keys)
        print(f"  probe, {label}: {r}")
        check(not r.startswith("OK") and "handshake" in r and "DEADLINE" not in r,
              f"{label}: not refused in the handshake: {r}")
    check("refused a CURVE client" in p.log(), "P did not log the refused key")

    ref = serve("colocated")
    status, reference = ref.post(BODY)
    check(status == 200, f"reference answered {status}")
    servers = {"right": write("servers", f"p0 {public_key(p0)}\n"),
               "other engine only": write("servers-p9", f"p9 {public_key(p0)}\n"),
               "wrong key for P": write("servers-wrong", f"p0 {public_key(stranger)}\n")}
    curve_d = lambda secret, servers_file: dict(  # noqa: E731
        curve_secret_key_file=secret + ".key", curve_server_keys_file=servers_file)
    cases = [("right keys", curve_d(d0, servers["right"]), "pulled"),
             ("without P's public key", curve_d(d0, servers["other engine only"]),
              "failed_handshake"),
             ("with the wrong key for P", curve_d(d0, servers["wrong key for P"]),
              "failed_handshake"),
             ("unknown client key", curve_d(stranger, servers["right"]), "failed_handshake"),
             ("plaintext", {}, "failed_handshake")]
    for label, extra, outcome in cases:
        d = serve("D", "--kv-transfer-config",
                  kv("d0", "kv_consumer", handshake_timeout_ms=20000, **extra))
        status, params = p.post(prefill_body(BODY))
        check(status == 200, f"prefill on P answered {status}: {params}")
        status, resp = d.post(dict(BODY, kv_transfer_params=params["kv_transfer_params"]))
        check(status == 200, f"D ({label}) answered {status}: {resp}")
        load = resp.get("kv_load", {})
        print(f"  D {label}: kv_load {load}")
        check(load.get("outcome") == outcome, f"D ({label}): kv_load {load}, want {outcome}")
        check(exact(resp, reference), f"D ({label}): output differs from colocated: {resp}")
        failures = d.metrics().get('kvferry:kv_transfer_failures_total{kind="handshake"}', 0)
        moved = d.metrics().get("kvferry:kv_transfer_bytes_total", 0)
        if outcome == "pulled":
            check(failures == 0 and moved > 0, f"D ({label}): {failures} failures, {moved} B")
        else:
            check(failures == 1 and moved == 0 and load.get("pulled_bytes", 0) == 0,
                  f"D ({label}): handshake failures {failures}, bytes {moved}")
        d.stop()
    for node in (ref, p):
        node.stop()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvferry", required=True)
    ap.add_argument("--probe", required=True)
    ap.add_argument("--pki-script", required=True)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kvferry-deploy-test-") as work:
        WORK = work
        subprocess.run(["bash", args.pki_script, os.path.join(work, "pki")], check=True,
                       timeout=60)
        run_cases([
            ("api_keys", case_api_keys),
            ("api_keys_through_proxy", case_api_keys_through_proxy),
            ("tls", case_tls),
            ("curve", case_curve),
        ])
