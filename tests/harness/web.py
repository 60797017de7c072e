"""HTTP requests to a kvferry process (standard library only) and its /metrics (Prometheus text).

Endpoint is the part every process class the tests talk to shares: a host, a port, a scheme,
fetch(), metrics().
"""
import collections
import http.client
import json
import re
import ssl
import time

from harness.runner import check

# status None: the connection failed, and body and raw are the error's text ("Type: message").
Response = collections.namedtuple("Response", "status body raw headers seconds")


def request(host, port, method, path, body=None, headers=None, timeout=30.0, context=None):
    """One request. `body`: str or bytes sent as they are, anything else (but None) as JSON;
    a non-empty body is sent as application/json. `context`: an ssl context, for https."""
    t0 = time.monotonic()
    if context is not None:
        conn = http.client.HTTPSConnection(host, port, timeout=timeout, context=context)
    else:
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
    data = body if isinstance(body, (str, bytes)) or body is None else json.dumps(body)
    all_headers = {"Content-Type": "application/json"} if data else {}
    all_headers.update(headers or {})
    try:
        conn.request(method, path, body=data, headers=all_headers)
        resp = conn.getresponse()
        raw = resp.read().decode("utf-8", "replace")
        try:
            parsed = json.loads(raw)
        except ValueError:
            parsed = raw
        return Response(resp.status, parsed, raw, dict(resp.getheaders()),
                        time.monotonic() - t0)
    except (OSError, http.client.HTTPException) as e:
        error = f"{type(e).__name__}: {e}"
        return Response(None, error, error, {}, time.monotonic() - t0)
    finally:
        conn.close()


_SAMPLE = re.compile(r"^(\S+?)(\{[^}]*\})?\s+(\S+)$")


def parse_prometheus(text):
    """{'name{labels}': value} of every sample line of a Prometheus text exposition."""
    out = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m and not line.startswith("#"):
            out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return out


class Endpoint:
    """A process answering HTTP on self.host:self.port (set by the subclass); self.name names it
    in failures. scheme "https": fetch() speaks TLS with tls_context() unless told `plain`."""

    scheme = "http"

    @property
    def url(self):
        return f"{self.scheme}://{self.host}:{self.port}"

    def tls_context(self):
        return ssl.create_default_context()

    def fetch(self, method, path, body=None, headers=None, timeout=30.0, context=None,
              plain=False):
        if self.scheme == "https" and not plain:
            context = context or self.tls_context()
        else:
            context = None
        return request(self.host, self.port, method, path, body, headers, timeout, context)

    def metrics(self, headers=None):
        r = self.fetch("GET", "/metrics", headers=headers, timeout=10)
        check(r.status == 200, f"{self.name}: /metrics answered {r.status}: {r.raw}")
        return parse_prometheus(r.raw)

    def metric(self, name):
        return self.metrics().get(name, 0.0)

    def blocks_in_use(self):
        """Blocks not free and not merely cached: used + held_for_transfer."""
        m = self.metrics()
        return (m.get('kvferry:kv_blocks{state="used"}', 0.0) +
                m.get('kvferry:kv_blocks{state="held_for_transfer"}', 0.0))
