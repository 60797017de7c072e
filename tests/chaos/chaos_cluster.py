"""The chaos soak's cluster (docs/reliability.md, "Chaos soak"): a 3-member etcd, 2 P, 2 D and
2 proxies, each in its own network namespace, joined by veth pairs on a bridge in the test's
namespace (which runs the load). UCX over TCP on eth0, as in tests/cluster/cluster_netns_test.py.

Members are restarted under their old names (a P or D under its engine id, a proxy on its old
address and port); `incarnation` counts the starts.
"""
import os
import time

from cluster.cluster_harness import Etcd, Kvferry, proxy, serve
from harness import web
from harness.netns import BridgedHosts, sh
from harness.runner import check, wait_until

TAG = f"{os.getpid() % 100000}"
NET = f"10.78.{os.getpid() % 250}"
BRIDGE = f"kvx{TAG}"
HOSTS = {"e0": 1, "e1": 2, "e2": 3, "p0": 10, "p1": 11, "d0": 20, "d1": 21, "x0": 30, "x1": 31}
ETCD = ("e0", "e1", "e2")
PREFILL, DECODE, PROXIES = ("p0", "p1"), ("d0", "d1"), ("x0", "x1")
PROXY_PORT = 8000
TTL_S = 3
LEASE_MS = 5000
UCX = {"UCX_TLS": "tcp", "UCX_NET_DEVICES": "eth0"}
PROXY_ARGS = ["--prefill-timeout-ms", "6000", "--decode-timeout-ms", "10000"]


HOSTS_NET = BridgedHosts(f"kvs{TAG}", "kx", TAG, BRIDGE, NET, HOSTS)
ns, ip, veth = HOSTS_NET.ns, HOSTS_NET.ip, HOSTS_NET.veth
setup, teardown = HOSTS_NET.setup, HOSTS_NET.teardown


def role_of(name):
    return {"p": "prefill", "d": "decode", "x": "proxy", "e": "etcd"}[name[0]]


class Cluster:
    """Every process of the soak by name (`procs`), started and restarted here."""

    def __init__(self, binary):
        self.binary = binary
        self.procs, self.incarnations = {}, {}
        self.launches = {}  # name -> monotonic time of each start, taken before it runs
        members = {e: ip(e) for e in ETCD}
        for e in ETCD:
            self._track(e, Etcd(e, host=ip(e), netns=ns(e), cluster=members, wait=False))
        for e in ETCD:
            self.procs[e].wait_healthy(60)
        self.registry = "etcd://" + ",".join(f"{ip(e)}:2379" for e in ETCD) + "/chaos"
        for n in PREFILL + DECODE:
            self.start(n)
        for n in PROXIES:
            self.start(n)

    def _track(self, name, proc):
        self.incarnations[name] = self.incarnations.get(name, 0) + 1
        proc.incarnation = self.incarnations[name]
        self.procs[name] = proc
        return proc

    def start(self, name):
        """Starts (or restarts) member `name`; returns once it listens."""
        self.launches.setdefault(name, []).append(time.monotonic())
        role = role_of(name)
        if role == "etcd":
            self.procs[name].start(wait=False)
            self.incarnations[name] += 1
            self.procs[name].incarnation = self.incarnations[name]
            return self.procs[name]
        if role == "proxy":
            p = proxy(self.binary, name, self.registry, host=ip(name), netns=ns(name),
                      args=PROXY_ARGS, port=PROXY_PORT)
            return self._track(name, p)
        kv_role = "kv_producer" if role == "prefill" else "kv_consumer"
        m = serve(self.binary, name, kv_role, self.registry, host=ip(name), netns=ns(name),
                  ttl=TTL_S, extra_kv={"lease_ms": LEASE_MS, "handshake_timeout_ms": 2000,
                                       "transfer_timeout_ms": 5000}, env=UCX)
        return self._track(name, m)

    def incarnation_at(self, name, t):
        """Which start of `name` a connection made at monotonic time t reached (the one before
        had exited when the next was launched)."""
        return sum(1 for launched in self.launches.get(name, []) if launched <= t)

    @property
    def proxies(self):
        return [self.procs[n] for n in PROXIES]

    @property
    def instances(self):
        return [self.procs[n] for n in PREFILL + DECODE]

    def etcd_leader(self):
        return next((e for e in ETCD if self.procs[e].alive() and self.procs[e].is_leader()), None)

    def full_strength(self):
        """Every process runs; etcd has 3 healthy members and a leader; each proxy answers, is
        connected to etcd and routes to all 4 instances as healthy."""
        if not all(p.alive() for p in self.procs.values()):
            return False
        if not all(self.procs[e].healthy() for e in ETCD) or self.etcd_leader() is None:
            return False
        for px in self.proxies:
            r = px.fetch("GET", "/cluster", timeout=2)
            if r.status != 200 or not isinstance(r.body, dict):
                return False
            healthy = {m["id"] for m in r.body.get("members", []) if m.get("state") == "healthy"}
            if healthy != set(PREFILL + DECODE):
                return False
            r = px.fetch("GET", "/metrics", timeout=2)
            if r.status != 200 or web.parse_prometheus(r.raw).get(
                    "kvferry:proxy_registry_connected") != 1:
                return False
        return True

    def wait_full_strength(self, timeout):
        return wait_until(self.full_strength, timeout, interval=0.2)


def colocated(binary):
    """A colocated instance on loopback (no connector): the answers P/D must equal."""
    ref = Kvferry(binary, "colocated", "serve", ["--threads", "1"])
    check(ref.alive(), "colocated reference did not start")
    return ref
