"""Slow and idle clients (docs/reliability.md, "Slow and idle clients"): hundreds of connections
that sent half a request and trickle the rest (one header line a second, so no read timeout
closes them) must not keep a normal request from its answer, at `serve` and at the proxy; past
--max-connections a connection waits for one to close and is counted; every connection thread
ends once its client goes (kvferry:http_connections from /metrics); SIGTERM stops both while
slow clients still hold connections. With --request-read-timeout, clients that trickle their
headers or their body are answered 408 and cut once it passes (the other cases set it long, so
that their slow clients stay).
"""
import socket
import threading
import time

from harness.kvferry_api import kv_config, text_of
from harness.runner import Background, check, measure, run_cases, wait_until
from harness.fault_node import Node, colocated_text, parse_args

args = None
IDLE = 300
BODY = {"prompt": "A normal client among slow ones. " * 2, "max_tokens": 6, "temperature": 0}
OPEN = 'kvferry:http_connections{state="open"}'
WAITING = 'kvferry:http_connections{state="waiting"}'
WAITED = "kvferry:http_connections_waited_total"
TIMED_OUT = "kvferry:http_request_read_timeouts_total"
KEEP = ["--request-read-timeout", 300]  # slow clients stay for the length of a case


class SlowClients:
    """`n` connections to `node`, each with half a request sent, one more header line a second."""

    HEAD = b"POST /v1/completions HTTP/1.1\r\nHost: slow\r\nContent-Length: 100\r\n"

    def __init__(self, node, n, head=HEAD, drip=b"X-Slow: 1\r\n"):
        self.socks = []
        self.drip = drip
        for _ in range(n):
            s = socket.create_connection((node.host, node.port), timeout=10)
            s.sendall(head)
            self.socks.append(s)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._trickle, daemon=True)
        self._thread.start()

    def _trickle(self):
        while not self._stop.wait(1.0):
            for s in self.socks:
                try:
                    s.sendall(self.drip)
                except OSError:
                    pass

    def still_open(self):
        """How many the server has not closed (a closed one reads EOF, or fails)."""
        n = 0
        for s in self.socks:
            s.setblocking(False)
            try:
                n += s.recv(1, socket.MSG_PEEK) != b""
            except BlockingIOError:
                n += 1
            except OSError:
                pass
            s.setblocking(True)
        return n

    def answers(self):
        """What each connection read before the server closed it (b"" if still open)."""
        out = []
        for s in self.socks:
            s.settimeout(0.2)
            got = b""
            try:
                while chunk := s.recv(65536):
                    got += chunk
            except OSError:
                pass
            out.append(got)
        return out

    def close_trickle(self):
        self._stop.set()
        self._thread.join()

    def close(self, count=None):
        self.close_trickle()
        for s in self.socks[:count]:
            s.close()
        del self.socks[:count]


def open_connections(node):
    return node.metric(OPEN) - 1  # less the /metrics request's own


def check_normal_request_answered(node, want, what, pulled=False):
    """`pulled`: `node` is a proxy in front of P and D; the answer must also say D pulled the
    prompt's KV from P (an exact answer is also what a silent recompute gives)."""
    slow = SlowClients(node, IDLE)
    check(wait_until(lambda: open_connections(node) >= IDLE, 20) is not None,
          f"{what}: {IDLE} slow connections not all served at once: {node.metrics().get(OPEN)}")
    status, resp, _ = node.post(BODY, timeout=60)
    check(status == 200 and text_of(resp) == want, f"{what}: normal request: {status} {resp}")
    if pulled:
        load = resp.get("kv_load") or {}
        check(load.get("outcome") == "pulled" and load.get("pulled_bytes", 0) > 0,
              f"{what}: D did not pull the KV: {load}")
    check(slow.still_open() == IDLE, f"{what}: only {slow.still_open()} of {IDLE} slow "
          "clients still connected: the normal request was answered because they were dropped")
    check(node.metric(WAITED) == 0, f"{what}: connections waited under the cap")
    slow.close()
    check(wait_until(lambda: open_connections(node) == 0, 20) is not None,
          f"{what}: connection threads left after the clients went: {node.metrics().get(OPEN)}")


def case_serve():
    want = colocated_text(args.node, BODY)
    node = Node(args.node, "serve", KEEP, name="serve")
    check_normal_request_answered(node, want, "serve")


def case_proxy():
    want = colocated_text(args.node, BODY)
    p = Node(args.node, "serve", ["--kv-transfer-config", kv_config("p0")], name="P")
    d = Node(args.node, "serve", ["--kv-transfer-config", kv_config("d0")], name="D")
    proxy = Node(args.node, "proxy", ["--prefill", p.url, "--decode", d.url] + KEEP, name="proxy")
    check_normal_request_answered(proxy, want, "proxy", pulled=True)


def case_sigterm_with_slow_clients():
    """SIGTERM stops `serve` and the proxy while slow clients hold connections: they are cut
    after a 1 s grace instead of keeping the process alive for as long as they trickle."""
    p = Node(args.node, "serve", ["--kv-transfer-config", kv_config("p0")], name="P")
    d = Node(args.node, "serve", ["--kv-transfer-config", kv_config("d0")], name="D")
    proxy = Node(args.node, "proxy", ["--prefill", p.url, "--decode", d.url], name="proxy")
    for node in (proxy, d):
        slow = SlowClients(node, 50)
        check(wait_until(lambda: open_connections(node) >= 50, 20) is not None,
              f"{node.name}: slow clients not served")
        t0 = time.monotonic()
        rc = node.stop()  # SIGTERM; an AssertionError past Node.STOP_TIMEOUT_S
        measure(f"sigterm_with_slow_clients.{node.name}", time.monotonic() - t0,
                Node.STOP_TIMEOUT_S)
        check(rc == 0, f"{node.name} exited {rc} on SIGTERM")
        slow.close()


def case_over_the_cap_waits():
    want = colocated_text(args.node, BODY)
    cap = 8
    node = Node(args.node, "serve", ["--max-connections", cap] + KEEP, name="serve")
    slow = SlowClients(node, cap - 1)  # the /metrics requests below take the last thread
    check(wait_until(lambda: node.metric(OPEN) == cap, 20) is not None,
          f"slow clients not served: {node.metrics().get(OPEN)}")
    slow.socks.append(socket.create_connection((node.host, node.port), timeout=10))
    slow.socks[-1].sendall(b"POST /v1/completions HTTP/1.1\r\n")  # now every thread is held
    time.sleep(0.5)
    answer = Background(lambda: node.post(BODY, timeout=60))
    time.sleep(1.0)
    check(answer.finished_at is None, "a request past the cap was answered while every thread "
          "was held")
    slow.close(count=1)  # one slow client goes: the waiting connections get its thread
    status, resp, _ = answer.result(60, "the request that waited")
    check(status == 200 and text_of(resp) == want, f"after waiting: {status} {resp}")
    check(node.metric(WAITED) >= 1, f"the wait was not counted: {node.metrics().get(WAITED)}")
    slow.close()
    check(wait_until(lambda: node.metric(OPEN) == 1 and node.metric(WAITING) == 0, 20)
          is not None, f"connections left: {node.metrics()}")


def check_slow_clients_cut(node, want, what):
    """Slow headers and slow bodies at once, past a 2 s --request-read-timeout: each is answered
    408 with an OpenAI error body and closed, counted; a normal request meanwhile is exact."""
    t0 = time.monotonic()
    heads = SlowClients(node, IDLE)
    bodies = SlowClients(node, 20, SlowClients.HEAD + b"\r\n", drip=b"x")
    status, resp, _ = node.post(BODY, timeout=60)
    check(status == 200 and text_of(resp) == want, f"{what}: normal request: {status} {resp}")
    n = IDLE + 20
    check(wait_until(lambda: node.metric(TIMED_OUT) >= n, 2 + 15) is not None,
          f"{what}: {node.metric(TIMED_OUT)} of {n} slow clients cut")
    measure(f"slow_clients_cut.{what}", time.monotonic() - t0, 17)
    heads.close_trickle()
    bodies.close_trickle()
    answers = heads.answers() + bodies.answers()
    bad = [a[:60] for a in answers if not (a.startswith(b"HTTP/1.1 408 ") and b'"error"' in a)]
    check(not bad, f"{what}: {len(bad)} slow clients not answered 408: {bad[:3]}")
    check(node.metric(TIMED_OUT) == n, f"{what}: counted {node.metric(TIMED_OUT)}, cut {n}")
    heads.close()
    bodies.close()
    check(wait_until(lambda: open_connections(node) == 0, 20) is not None,
          f"{what}: connection threads left: {node.metrics().get(OPEN)}")


def case_slow_clients_cut():
    want = colocated_text(args.node, BODY)
    fast = ["--request-read-timeout", 2]
    check_slow_clients_cut(Node(args.node, "serve", fast, name="serve"), want, "serve")
    p = Node(args.node, "serve", ["--kv-transfer-config", kv_config("p0")], name="P")
    d = Node(args.node, "serve", ["--kv-transfer-config", kv_config("d0")], name="D")
    proxy = Node(args.node, "proxy", ["--prefill", p.url, "--decode", d.url] + fast,
                 name="proxy")
    check_slow_clients_cut(proxy, want, "proxy")


if __name__ == "__main__":
    args = parse_args()
    run_cases([
        ("serve", case_serve),
        ("proxy", case_proxy),
        ("over_the_cap_waits", case_over_the_cap_waits),
        ("sigterm_with_slow_clients", case_sigterm_with_slow_clients),
        ("slow_clients_cut", case_slow_clients_cut),
    ])
