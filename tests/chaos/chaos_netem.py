"""netem's delay, loss and reordering in user space, for a kernel without sch_netem
(docs/reliability.md, "Chaos soak"): iptables sends the packets of one link to an NFQUEUE, and
this process (run inside that namespace: `ip netns exec NS python3 chaos_netem.py ...`) gives
each packet its verdict late. Standard library only: nfnetlink_queue spoken over an AF_NETLINK
socket.

Per packet, as `tc qdisc ... netem delay D loss L reorder R`: dropped with probability L;
otherwise accepted after D ms, except a fraction R accepted at once, ahead of the delayed ones
(reordered). Prints a `STATS queued=... dropped=... reordered=...` line on SIGTERM and exits.

    python3 chaos_netem.py --queue 7 --delay-ms 50 --loss 0.05 --reorder 0.1 --seed 1
"""
import argparse
import heapq
import random
import select
import signal
import socket
import struct
import sys
import time

NETLINK_NETFILTER = 12
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET, NFQNL_MSG_VERDICT, NFQNL_MSG_CONFIG = 0, 1, 2
NFQA_CFG_CMD, NFQA_CFG_PARAMS, NFQA_CFG_QUEUE_MAXLEN = 1, 2, 3
NFQNL_CFG_CMD_BIND = 1
NFQNL_COPY_META = 1
NFQA_PACKET_HDR, NFQA_VERDICT_HDR = 1, 2
NF_DROP, NF_ACCEPT = 0, 1
NLM_F_REQUEST = 1
NLMSG_ERROR = 2
QUEUE_MAXLEN = 16384


def attr(kind, payload):
    n = 4 + len(payload)
    return struct.pack("=HH", n, kind) + payload + b"\0" * ((4 - n % 4) % 4)


def message(msg_type, queue, attrs):
    body = struct.pack("=BBH", socket.AF_UNSPEC, 0, socket.htons(queue)) + b"".join(attrs)
    kind = (NFNL_SUBSYS_QUEUE << 8) | msg_type
    return struct.pack("=IHHII", 16 + len(body), kind, NLM_F_REQUEST, 0, 0) + body


def bind(sock, queue):
    sock.send(message(NFQNL_MSG_CONFIG, queue,
                      [attr(NFQA_CFG_CMD, struct.pack("!BxH", NFQNL_CFG_CMD_BIND, 0))]))
    sock.send(message(NFQNL_MSG_CONFIG, queue,
                      [attr(NFQA_CFG_PARAMS, struct.pack("!IB", 0, NFQNL_COPY_META)),
                       attr(NFQA_CFG_QUEUE_MAXLEN, struct.pack("!I", QUEUE_MAXLEN))]))


def verdict(sock, queue, packet_id, what):
    sock.send(message(NFQNL_MSG_VERDICT, queue,
                      [attr(NFQA_VERDICT_HDR, struct.pack("!II", what, packet_id))]))


def packet_ids(data):
    """The packet ids of the NFQNL_MSG_PACKET messages in one recv() (several may share it)."""
    ids, off = [], 0
    while off + 16 <= len(data):
        length, kind = struct.unpack_from("=IH", data, off)
        if length < 16:
            break
        if kind == NLMSG_ERROR:
            err = struct.unpack_from("=i", data, off + 16)[0]
            if err != 0:
                raise OSError(-err, f"nfnetlink_queue: error {err}")
        elif kind == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET:
            a = off + 20
            while a + 4 <= off + length:
                alen, akind = struct.unpack_from("=HH", data, a)
                if alen < 4:
                    break
                if akind & 0x7FFF == NFQA_PACKET_HDR:
                    ids.append(struct.unpack_from("!I", data, a + 4)[0])
                a += (alen + 3) & ~3
        off += (length + 3) & ~3
    return ids


def run(opts):
    rng = random.Random(opts.seed)
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    sock.bind((0, 0))
    bind(sock, opts.queue)
    stats = {"queued": 0, "dropped": 0, "reordered": 0}
    due = []  # (time, packet id)
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    print(f"READY queue {opts.queue}", flush=True)
    while not stopping:
        wait = max(0.0, due[0][0] - time.monotonic()) if due else 0.2
        try:
            ready, _, _ = select.select([sock], [], [], wait)
        except InterruptedError:
            continue
        if ready:
            for pid in packet_ids(sock.recv(1 << 20)):
                stats["queued"] += 1
                if rng.random() < opts.loss:
                    stats["dropped"] += 1
                    verdict(sock, opts.queue, pid, NF_DROP)
                elif rng.random() < opts.reorder:
                    stats["reordered"] += 1
                    verdict(sock, opts.queue, pid, NF_ACCEPT)
                else:
                    heapq.heappush(due, (time.monotonic() + opts.delay_ms / 1000, pid))
        now = time.monotonic()
        while due and due[0][0] <= now:
            verdict(sock, opts.queue, heapq.heappop(due)[1], NF_ACCEPT)
    for _, pid in due:
        verdict(sock, opts.queue, pid, NF_ACCEPT)
    print("STATS " + " ".join(f"{k}={v}" for k, v in stats.items()), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--queue", type=int, required=True)
    ap.add_argument("--delay-ms", type=float, default=50)
    ap.add_argument("--loss", type=float, default=0.05)
    ap.add_argument("--reorder", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=1)
    run(ap.parse_args())


if __name__ == "__main__":
    sys.exit(main())
