"""The chaos soak's load (docs/reliability.md, "Chaos soak"): a catalog of mixed requests, their
colocated reference answers, and the clients that send them through the proxies.

The catalog mixes completions and chat, greedy and seeded sampling, short, family (a shared
preamble: prefix affinity) and long prompts, with logprobs on some; each request of the load is a
catalog entry, streamed or not. An answer is normalised to (text, token ids, logprobs, finish
reason) and compared with the colocated answer to the same entry: all four must be equal.
"""
import http.client
import json
import random
import threading
import time

CATALOG_SIZE = 48


def _preamble(family):
    return "".join(chr(ord("a") + (family * 7 + i * 3) % 26) for i in range(160))


def spec(k):
    """Catalog entry k: (path, body without `stream`)."""
    chat = k % 3 == 1
    if k % 6 == 5:
        system, user = "", f"short {k}"
    else:
        system = _preamble(k // 4)
        user = f" variant {k}: " + ("lorem ipsum dolor " * (60 if k % 8 == 3 else k % 5))
    body = {"max_tokens": 8 + (k * 7) % 33, "return_token_ids": True}
    if k % 2:
        body.update(temperature=0.8, top_p=0.9, seed=100 + k)
    else:
        body["temperature"] = 0
    with_logprobs = k % 4 in (0, 1)
    if chat:
        msgs = ([{"role": "system", "content": system}] if system else []) + \
            [{"role": "user", "content": user}]
        body["messages"] = msgs
        if with_logprobs:
            body.update(logprobs=True, top_logprobs=2)
        return "/v1/chat/completions", body
    body["prompt"] = system + user
    if with_logprobs:
        body["logprobs"] = 2
    return "/v1/completions", body


def _logprob_entries(choice, chat):
    lp = choice.get("logprobs")
    if not lp:
        return []
    if chat:
        return [(e["logprob"], sorted((a["token"], a["logprob"]) for a in e["top_logprobs"]))
                for e in lp.get("content") or []]
    tops = lp.get("top_logprobs") or [None] * len(lp.get("token_logprobs") or [])
    return [(v, sorted((t or {}).items())) for v, t in zip(lp.get("token_logprobs") or [], tops)]


def _choice_text(choice, chat, stream):
    if not chat:
        return choice.get("text") or ""
    return (choice.get("delta" if stream else "message") or {}).get("content") or ""


def normalise(resp, chat):
    """(text, token ids, logprobs, finish reason) of a non-streamed answer."""
    c = resp["choices"][0]
    return (_choice_text(c, chat, False), c.get("token_ids"), _logprob_entries(c, chat),
            c.get("finish_reason"))


def parse_stream(raw, chat):
    """(answer as normalise() gives it, error event or None, saw [DONE])."""
    text, ids, lps, finish, error, done = "", [], [], None, None, False
    for line in raw.splitlines():
        if line == "data: [DONE]":
            done = True
            continue
        if not line.startswith("data: "):
            continue
        try:
            ev = json.loads(line[6:])
        except ValueError:  # the last event of a stream cut mid-line
            continue
        if "error" in ev:
            error = ev["error"]
            continue
        for c in ev.get("choices") or []:
            text += _choice_text(c, chat, True)
            ids += c.get("token_ids") or []
            lps += _logprob_entries(c, chat)
            finish = c.get("finish_reason") or finish
    return (text, ids, lps, finish), error, done


def references(ref_node):
    """The colocated answer to every catalog entry (ref_node: a colocated Kvferry)."""
    want = {}
    for k in range(CATALOG_SIZE):
        path, body = spec(k)
        status, resp, _ = ref_node.request("POST", path, dict(body, stream=False))
        if status != 200:
            raise AssertionError(f"colocated reference for entry {k}: {status} {resp}")
        want[k] = normalise(resp, "messages" in body)
    return want


class Result:
    """One request of the load: what was sent, what came back, and when."""

    def __init__(self, i, k, stream):
        self.i, self.k, self.stream = i, k, stream
        self.t0 = self.t1 = None
        self.kind, self.detail = None, ""
        self.proxies = []  # (proxy name, incarnation) of every attempt
        self.failovers = []  # why an attempt before the last one failed
        self.decode = self.prefill = self.kv_load = self.status = None

    @property
    def seconds(self):
        return (self.t1 or time.monotonic()) - self.t0


class Load:
    """`concurrency` clients, each sending the next request as soon as its last one ended, until
    stop(). Request i is a seeded choice of catalog entry, streamed with probability 1/2, sent to
    proxy i % 2 of `proxies()` (the proxies running now); a client whose proxy refuses or drops
    the connection before any answer byte, or answers 503 while it drains, tries the other (as
    a load balancer in front of two proxies would). `incarnation_at(name, t)` says which start of
    a proxy a connection reached; `classify(result, answer, error, done)` (the invariants' judge)
    sets each result's kind."""

    def __init__(self, proxies, incarnation_at, classify, concurrency, seed, timeout_s):
        self.proxies, self.incarnation_at, self.classify = proxies, incarnation_at, classify
        self.concurrency, self.timeout_s = concurrency, timeout_s
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.results, self.inflight = [], {}
        self.sent_to = {}  # (proxy, incarnation) -> requests it received
        self.stopping = False
        self.threads = []

    def start(self):
        self.threads = [threading.Thread(target=self._client, daemon=True)
                        for _ in range(self.concurrency)]
        for t in self.threads:
            t.start()

    def stop(self, timeout):
        self.stopping = True
        deadline = time.monotonic() + timeout
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self.threads)

    def _next(self):
        with self.lock:
            if self.stopping:
                return None
            r = Result(len(self.results), self.rng.randrange(CATALOG_SIZE), self.rng.random() < 0.5)
            self.results.append(r)
            self.inflight[r.i] = r
            r.t0 = time.monotonic()
            return r

    def _client(self):
        while True:
            r = self._next()
            if r is None:
                return
            answer, error, done = self._send(r)
            r.t1 = time.monotonic()
            self.classify(r, answer, error, done)
            with self.lock:
                del self.inflight[r.i]

    def _send(self, r):
        path, body = spec(r.k)
        body = dict(body, stream=r.stream)
        chat = "messages" in body
        last = None
        for attempt in range(4):
            proxies = self.proxies()
            px = proxies[(r.i + attempt) % len(proxies)]
            out = self._attempt(r, px, path, body, chat)
            if out is not None:
                return out
            last = r.detail
            time.sleep(0.2)
        return None, f"no proxy answered: {last}", False

    def _attempt(self, r, px, path, body, chat):
        """(answer, error, done), or None when the connection failed before any answer byte."""
        incarnation = (px.name, self.incarnation_at(px.name, time.monotonic()))
        r.proxies.append(incarnation)
        conn = http.client.HTTPConnection(px.host, px.port, timeout=self.timeout_s)
        try:
            try:
                conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
                with self.lock:
                    self.sent_to[incarnation] = self.sent_to.get(incarnation, 0) + 1
                resp = conn.getresponse()
            except (ConnectionError, http.client.RemoteDisconnected) as e:
                r.detail = f"{px.name}: {type(e).__name__}: {e}"
                r.failovers.append(f"{px.name} (start {incarnation[1]}): {type(e).__name__}")
                return None
            r.status = resp.status
            r.decode = resp.getheader("X-Kvferry-Decode")
            r.prefill = resp.getheader("X-Kvferry-Prefill")
            raw = self._read(resp)
            if resp.status == 503 and "proxy is shutting down" in raw:  # draining: go elsewhere
                r.failovers.append(f"{px.name} (start {incarnation[1]}): draining")
                r.status = None
                return None
            if resp.status != 200:
                return None, f"HTTP {resp.status}: {raw[:300]}", False
            if not body["stream"]:
                j = json.loads(raw)
                r.kv_load = j.get("kv_load")
                return normalise(j, chat), None, True
            r.kv_load = next((json.loads(line[6:]).get("kv_load") for line in raw.splitlines()
                              if line.startswith("data: {") and '"kv_load"' in line
                              and line.endswith("}")), None)
            return parse_stream(raw, chat)
        except (OSError, http.client.HTTPException, ValueError) as e:
            return None, f"{type(e).__name__}: {e}", False
        finally:
            conn.close()

    @staticmethod
    def _read(resp):
        """The body; for a stream cut short (the proxy died), what arrived before the cut."""
        chunks = []
        try:
            while True:
                b = resp.read1(65536) if hasattr(resp, "read1") else resp.read(65536)
                if not b:
                    break
                chunks.append(b)
        except (OSError, http.client.HTTPException):
            pass
        return b"".join(chunks).decode("utf-8", "replace")

    def snapshot(self):
        with self.lock:
            return list(self.inflight.values())
