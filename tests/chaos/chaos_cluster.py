"""The chaos soak's cluster (docs/reliability.md, "Chaos soak"): a 3-member etcd, 2 P, 2 D and
2 proxies, each in its own network namespace, joined by veth pairs on a bridge in the test's
namespace (which runs the load). UCX over TCP on eth0, as in tests/cluster/cluster_netns_test.py.

Members are restarted under their old names (a P or D under its engine id, a proxy on its old
address and port); `incarnation` counts the starts.

Each P and D runs with a disk tier (`--kv-offload-dir`) on its own small tmpfs, mounted here
before it starts and kept across its restarts, so a restarted member finds its blocks on disk and
the disk_full fault can fill it (chaos_faults). Without the right to mount one (no
CAP_SYS_ADMIN) the members run without a disk tier and the report says so.
"""
import errno
import os
import subprocess
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
DISK_MB = 16        # each member's tmpfs
OFFLOAD_MB = 12     # its --kv-offload-gb: room left for the filler only when disk_full fills it
FILLER = ".chaos-filler"


HOSTS_NET = BridgedHosts(f"kvs{TAG}", "kx", TAG, BRIDGE, NET, HOSTS)
ns, ip, veth = HOSTS_NET.ns, HOSTS_NET.ip, HOSTS_NET.veth
setup, teardown = HOSTS_NET.setup, HOSTS_NET.teardown


def role_of(name):
    return {"p": "prefill", "d": "decode", "x": "proxy", "e": "etcd"}[name[0]]


def mount_disks(root):
    """A tmpfs of DISK_MB per P and D under root: ({name: folder}, None), or ({}, why not)."""
    disks = {}
    for name in PREFILL + DECODE:
        path = os.path.join(root, f"disk-{name}")
        os.makedirs(path, exist_ok=True)
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_MB}m", "tmpfs", path],
                           capture_output=True, text=True)
        if r.returncode != 0:
            unmount_disks(disks)
            return {}, f"left out: mount -t tmpfs failed: {r.stderr.strip()}"
        disks[name] = path
    return disks, None


def unmount_disks(disks):
    for path in disks.values():
        subprocess.run(["umount", "-l", path], capture_output=True)


def fill_disk(path):
    """Writes a filler file until the tmpfs is full (ENOSPC); returns the bytes written."""
    written, chunk = 0, b"\0" * (256 << 10)
    with open(os.path.join(path, FILLER), "wb", buffering=0) as f:
        while True:
            try:
                written += f.write(chunk)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                return written


def free_disk(path):
    try:
        os.unlink(os.path.join(path, FILLER))
    except FileNotFoundError:
        pass


class Cluster:
    """Every process of the soak by name (`procs`), started and restarted here; `disks` maps a P
    or D to its disk tier's folder (empty: no disk tier)."""

    def __init__(self, binary, disks=None):
        self.binary = binary
        self.disks = disks or {}
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
        disk = ["--kv-offload-dir", self.disks[name], "--kv-offload-gb",
                str(OFFLOAD_MB / 1024)] if name in self.disks else []
        m = serve(self.binary, name, kv_role, self.registry, host=ip(name), netns=ns(name),
                  ttl=TTL_S, extra_kv={"lease_ms": LEASE_MS, "handshake_timeout_ms": 2000,
                                       "transfer_timeout_ms": 5000}, env=UCX, args=disk)
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
