"""Tests that build network namespaces (root and iproute2): shell commands, and the skip (exit 77,
which CTest's SKIP_RETURN_CODE counts as skipped) where namespaces cannot be made."""
import os
import subprocess
import sys

SKIP_RC = 77


def sh(*cmd, check_rc=True):
    r = subprocess.run(list(cmd), capture_output=True, text=True)
    if check_rc and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.strip()}")
    return r


def skip(reason):
    print(f"SKIP: {reason}")
    sys.exit(SKIP_RC)


def set_up_or_skip(setup, teardown=None):
    """Skips unless root with iproute2; runs setup(), skipping (after teardown()) if it raises
    RuntimeError (sh() failed)."""
    if os.geteuid() != 0 or subprocess.run(["ip", "netns", "list"],
                                           capture_output=True).returncode != 0:
        skip("needs root and iproute2 network namespaces")
    try:
        setup()
    except RuntimeError as e:
        if teardown:
            teardown()
        skip(f"cannot create namespaces: {e}")


class BridgedHosts:
    """One network namespace per host, each a "host" with an eth0 on a bridge in the test's own
    namespace: host h is namespace `ns_prefix + h`, at `net.N` (N = hosts[h]), its link
    `link_prefix + tag + N` on the bridge; the bridge has `net.254`."""

    def __init__(self, ns_prefix, link_prefix, tag, bridge, net, hosts):
        self.ns_prefix, self.link_prefix, self.tag = ns_prefix, link_prefix, tag
        self.bridge, self.net, self.hosts = bridge, net, hosts

    def ns(self, host):
        return f"{self.ns_prefix}{host}"

    def ip(self, host):
        return f"{self.net}.{self.hosts[host]}"

    def veth(self, host):
        return f"{self.link_prefix}{self.tag}{self.hosts[host]}"

    def teardown(self):
        for h in self.hosts:
            sh("ip", "link", "del", self.veth(h), check_rc=False)
            sh("ip", "netns", "del", self.ns(h), check_rc=False)
        sh("ip", "link", "del", self.bridge, check_rc=False)

    def setup(self):
        self.teardown()
        sh("ip", "link", "add", self.bridge, "type", "bridge")
        sh("ip", "addr", "add", f"{self.net}.254/24", "dev", self.bridge)
        sh("ip", "link", "set", self.bridge, "up")
        peer = f"{self.link_prefix}p{self.tag}"
        for h in self.hosts:
            sh("ip", "netns", "add", self.ns(h))
            sh("ip", "-n", self.ns(h), "link", "set", "lo", "up")
            sh("ip", "link", "add", self.veth(h), "type", "veth", "peer", "name", peer)
            sh("ip", "link", "set", peer, "netns", self.ns(h))
            sh("ip", "-n", self.ns(h), "link", "set", peer, "name", "eth0")
            sh("ip", "-n", self.ns(h), "addr", "add", f"{self.ip(h)}/24", "dev", "eth0")
            sh("ip", "-n", self.ns(h), "link", "set", "eth0", "up")
            sh("ip", "link", "set", self.veth(h), "master", self.bridge)
            sh("ip", "link", "set", self.veth(h), "up")
