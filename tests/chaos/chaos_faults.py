"""The chaos soak's faults (docs/reliability.md, "Chaos soak"): a seeded schedule, and one
injector per kind. One fault at a time: inject, hold, heal, then wait for the cluster to be back
at full strength (chaos_cluster.Cluster.full_strength); the time from the heal to that is the
fault's recovery time.

Kinds: kill -9 of a P, D or proxy (restarted after the hold), SIGSTOP/SIGCONT of one, a proxy
restart (SIGTERM, started again on its address), a follower etcd member killed, the etcd leader
killed, a link cut (the member's veth down), and a degraded P-D link: delay 50 ms, 5 % loss and
reordering both ways between one D and one P (chaos_netem.py on an NFQUEUE, iptables in the D's
namespace; this kernel has no sch_netem), and the offload disk full: a P's or D's disk tier
(its own tmpfs) filled to ENOSPC while it serves; a request of its own (new blocks to write) must
still be answered, and the tier must pause offloading.
"""
import os
import random
import signal
import time

import chaos_cluster as cc
from cluster.cluster_harness import Proc
from harness.netns import sh

KINDS = ("kill9", "sigstop", "proxy_restart", "etcd_member_kill", "etcd_leader_kill", "link_cut",
         "pd_link_netem", "disk_full")
# Target groups per kind: each use takes the next group of a seeded order (every group once per
# len(groups) uses: a 3-minute run kills a P, a D and a proxy), then a seeded member of it.
TARGETS = {"kill9": (cc.PREFILL, cc.DECODE, cc.PROXIES),
           "sigstop": (cc.PREFILL, cc.DECODE, cc.PROXIES),
           "proxy_restart": (cc.PROXIES,), "link_cut": (cc.PREFILL, cc.DECODE),
           "disk_full": (cc.PREFILL, cc.DECODE)}
HOLD_S = {"kill9": 2.0, "sigstop": 4.0, "proxy_restart": 0.0, "etcd_member_kill": 3.0,
          "etcd_leader_kill": 3.0, "link_cut": 4.0, "pd_link_netem": 10.0, "disk_full": 5.0}
NETEM = {"delay_ms": 50, "loss": 0.05, "reorder": 0.1}
QUEUE = 7


class Fault:
    """One injected fault and its timeline (monotonic seconds)."""

    def __init__(self, kind, target):
        self.kind, self.target = kind, target
        self.t_inject = self.t_heal = self.t_recovered = None
        self.detail = ""
        self.violation = None  # what the injector found wrong while it held the fault

    @property
    def recovery_s(self):
        return None if self.t_recovered is None else self.t_recovered - self.t_heal

    def active(self, t0, t1):
        """Whether [t0, t1] overlaps the fault, from injection to recovery (or still running)."""
        end = self.t_recovered if self.t_recovered is not None else float("inf")
        return self.t_inject is not None and t0 <= end and t1 >= self.t_inject

    def as_json(self, origin):
        def rel(t):
            return None if t is None else round(t - origin, 3)
        return {"kind": self.kind, "target": self.target, "inject_s": rel(self.t_inject),
                "heal_s": rel(self.t_heal), "recovered_s": rel(self.t_recovered),
                "recovery_s": None if self.recovery_s is None else round(self.recovery_s, 3),
                "detail": self.detail}


def schedule(seed):
    """Endless (kind, target, gap before it): rounds of every kind in a seeded order."""
    rng = random.Random(seed)
    groups = {kind: [] for kind in TARGETS}
    while True:
        kinds = list(KINDS)
        rng.shuffle(kinds)
        for kind in kinds:
            if kind == "pd_link_netem":
                target = f"{rng.choice(cc.PREFILL)}-{rng.choice(cc.DECODE)}"
            elif kind == "etcd_member_kill":
                target = rng.randrange(2)  # which follower, chosen when it runs
            elif kind in TARGETS:
                if not groups[kind]:
                    groups[kind] = rng.sample(TARGETS[kind], len(TARGETS[kind]))
                target = rng.choice(groups[kind].pop())
            else:
                target = None  # the etcd leader, found when it runs
            yield kind, target, rng.uniform(2.0, 4.0)


class Injector:
    """Injects and heals faults on `cluster`; `down` holds the names not expected to run."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.down = set()
        self.netem = None
        self.probes = 0

    def run(self, fault):
        getattr(self, fault.kind)(fault)

    def _hold(self, fault):
        time.sleep(HOLD_S[fault.kind])

    def kill9(self, fault):
        self.down.add(fault.target)
        fault.t_inject = time.monotonic()
        self.cluster.procs[fault.target].kill()
        self._hold(fault)
        fault.t_heal = time.monotonic()
        self.cluster.start(fault.target)
        self.down.discard(fault.target)

    def sigstop(self, fault):
        proc = self.cluster.procs[fault.target]
        fault.t_inject = time.monotonic()
        proc.signal(signal.SIGSTOP)
        self._hold(fault)
        fault.t_heal = time.monotonic()
        proc.signal(signal.SIGCONT)

    def proxy_restart(self, fault):
        self.down.add(fault.target)
        fault.t_inject = time.monotonic()
        rc = self.cluster.procs[fault.target].stop()
        fault.detail = f"exit code {rc} after SIGTERM"
        fault.t_heal = time.monotonic()
        self.cluster.start(fault.target)
        self.down.discard(fault.target)

    def _kill_etcd(self, fault, name):
        fault.target = name
        self.down.add(name)
        fault.t_inject = time.monotonic()
        self.cluster.procs[name].kill()
        self._hold(fault)
        fault.t_heal = time.monotonic()
        self.cluster.start(name)
        self.down.discard(name)

    def etcd_member_kill(self, fault):
        leader = self.cluster.etcd_leader()
        followers = [e for e in cc.ETCD if e != leader]
        self._kill_etcd(fault, followers[fault.target % len(followers)])

    def etcd_leader_kill(self, fault):
        leader = self.cluster.etcd_leader()
        self._kill_etcd(fault, leader or cc.ETCD[0])
        fault.detail = "leader" if leader else "no leader found: killed e0"

    def link_cut(self, fault):
        fault.t_inject = time.monotonic()
        sh("ip", "link", "set", cc.veth(fault.target), "down")
        self._hold(fault)
        fault.t_heal = time.monotonic()
        sh("ip", "link", "set", cc.veth(fault.target), "up")

    def pd_link_netem(self, fault):
        p, d = fault.target.split("-")
        fault.t_inject = time.monotonic()
        self.netem = (d, p, Proc(f"netem-{d}-{p}", [
            "python3", os.path.join(os.path.dirname(__file__), "chaos_netem.py"),
            "--queue", QUEUE, "--delay-ms", NETEM["delay_ms"], "--loss", NETEM["loss"],
            "--reorder", NETEM["reorder"], "--seed", int(fault.t_inject)], netns=cc.ns(d)))
        if self.netem[2].wait_log(r"READY", 10) is None:
            raise RuntimeError(f"chaos_netem did not start: {self.netem[2].log_text()}")
        for rule in _netem_rules(p):
            sh("ip", "netns", "exec", cc.ns(d), "iptables", "-A", *rule)
        self._hold(fault)
        fault.t_heal = time.monotonic()
        fault.detail = self.heal_netem()

    def disk_full(self, fault):
        """Fills the member's tmpfs, then asks it directly for answers with new prompts (blocks
        it must try to write) until its tier reports offloading paused, within the hold. A
        refused request or a tier that never pauses is the fault's `violation`."""
        member, path = self.cluster.procs[fault.target], self.cluster.disks[fault.target]
        errors0 = member.metric("kvferry:kv_offload_write_errors_total") or 0
        fault.t_inject = time.monotonic()
        filled = cc.fill_disk(path)
        deadline, answers = fault.t_inject + HOLD_S[fault.kind], []
        while True:
            answers.append(self._probe(member))
            paused = member.metric("kvferry:kv_offload_paused") == 1
            if paused or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        time.sleep(max(0.0, deadline - time.monotonic()))
        fault.t_heal = time.monotonic()
        cc.free_disk(path)
        errors = (member.metric("kvferry:kv_offload_write_errors_total") or 0) - errors0
        fault.detail = (f"filled {filled >> 10} KiB; {len(answers)} own requests: {answers}; "
                        f"write errors +{errors:g}; paused {paused}")
        if any(a != 200 for a in answers):
            fault.violation = f"a request to {fault.target} on a full disk failed: {answers}"
        elif not paused:
            fault.violation = f"{fault.target}'s disk tier did not pause on a full disk"

    def _probe(self, member):
        """One greedy completion of a prompt no one sent before (its blocks are new)."""
        self.probes += 1
        words = " ".join(f"w{self.probes}x{i}" for i in range(60))
        status, _, _ = member.complete({"prompt": f"disk full probe {self.probes}: {words}",
                                        "max_tokens": 4, "temperature": 0}, timeout=20)
        return status

    def heal_netem(self):
        """Removes the rules, then stops the helper (it accepts what it still holds)."""
        if self.netem is None:
            return ""
        d, p, helper = self.netem
        for rule in _netem_rules(p):
            sh("ip", "netns", "exec", cc.ns(d), "iptables", "-D", *rule, check_rc=False)
        helper.stop()
        self.netem = None
        m = helper.wait_log(r"STATS (.*)", 1)
        return m.group(1) if m else helper.log_text()[-300:]

    def heal_all(self):
        """At the end or after a failure: every process continued, links up, netem off, disks
        emptied of the filler."""
        self.heal_netem()
        for path in self.cluster.disks.values():
            cc.free_disk(path)
        for name in cc.PREFILL + cc.DECODE + cc.PROXIES:
            sh("ip", "link", "set", cc.veth(name), "up", check_rc=False)
            proc = self.cluster.procs.get(name)
            if proc is not None and proc.alive():
                proc.signal(signal.SIGCONT)


def _netem_rules(p):
    q = ["-j", "NFQUEUE", "--queue-num", str(QUEUE), "--queue-bypass"]
    return [["OUTPUT", "-d", cc.ip(p)] + q, ["INPUT", "-s", cc.ip(p)] + q]
