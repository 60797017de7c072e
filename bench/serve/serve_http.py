"""What the serving benchmarks in bench/serve/ share (standard library only): a free loopback
port, one HTTP request to an instance or proxy, its /metrics as numbers, and the filler words
their prompts are made of."""
import http.client
import json
import socket


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def request(port, method, path, body=None, timeout=60):
    """(status, body text) of one request to 127.0.0.1:port; `body` is sent as JSON."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request(method, path, json.dumps(body) if body is not None else None,
              {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read().decode("utf-8", "replace")
    c.close()
    return r.status, data


def metrics(port):
    """{sample name with labels: value} of port's /metrics (a repeated sample summed)."""
    out = {}
    _, text = request(port, "GET", "/metrics")
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = out.get(name, 0.0) + float(value)
    return out


WORDS = ["alpha", "beta", "gamma", "delta", "kernel", "block", "cache", "route", "token",
         "prefill", "decode", "layer", "value", "query", "engine", "proxy", "member"]


def words(rng, n):
    """`n` filler words drawn with `rng` (a random.Random), space-separated."""
    return " ".join(rng.choice(WORDS) for _ in range(n))
