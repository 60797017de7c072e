"""P's leases: which finished requests' blocks P still holds for a D, and how each hold ended.

A hold begins when the scheduler's metadata reaches the worker (`add`) and ends exactly once:
"read" when a D's READ notification arrives (the notification follows the READ's last byte,
so the blocks were held for all of it), or "expired" when its lease runs out first (`expire`);
either way vLLM then frees the blocks and may reuse them. Until the hold reaches the worker,
vLLM's scheduler keeps the blocks (delay-free), so a hold not yet added is as good as held.

As it posts its READ, D asks P over the side channel (handshake.py) to `pin` the hold for
`pin_s`: the answer is about the hold at the moment P answers, and every answer D keeps proves
the blocks stay held until its read has finished:

    held     alive now, and P will not expire it before now + pin_s (D's read has a deadline
             shorter than pin_s, counted from before it asked)                        -> keep
    read     it ended with THIS D's notification (`reader`), so this D's read is done -> keep
    taken    it ended with another D's notification: the blocks may be reused   -> recompute
    expired  the lease ran out first: the blocks may have been reused            -> recompute
    unknown  no such hold under that lease yet (or long gone, or never)          -> ask again
             until D's load deadline, then recompute

Asking while the READ is in flight, not after it, keeps the answer off the pull's critical
path. Ended holds are remembered for `remember_s`, longer than any D waits.

Thread-safety: every method takes the table's lock; the worker calls add/read/expire from the
model runner's thread, the side channel calls pin from its own.
"""

import threading
import time

HELD, READ, TAKEN, EXPIRED, UNKNOWN = "held", "read", "taken", "expired", "unknown"


class LeaseTable:
    def __init__(self, remember_s: float = 600.0):
        self._lock = threading.Lock()
        self._remember_s = remember_s
        self._holds: dict[str, list] = {}                   # rid -> [lease, deadline]
        self._ended: dict[str, tuple[str, str, str, float]] = {}  # rid -> (lease, how, reader, t)
        self._early: dict[str, tuple[str, float]] = {}      # rid -> (reader, notified at)

    def add(self, rid: str, lease: str, lease_s: float, now: float | None = None) -> bool:
        """Starts a hold; True when a D's notification already came (the hold ends "read"
        now, and the caller frees the blocks)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            early = self._early.pop(rid, None)
            if early is not None:
                self._ended[rid] = (lease, READ, early[0], now)
                return True
            self._holds[rid] = [lease, now + lease_s]
            return False

    def read(self, rid: str, reader: str, now: float | None = None) -> bool:
        """`reader`'s notification for rid; True when it ended a hold (the caller frees the
        blocks). A notification for a hold that already ended changes nothing."""
        now = time.monotonic() if now is None else now
        with self._lock:
            hold = self._holds.pop(rid, None)
            if hold is not None:
                self._ended[rid] = (hold[0], READ, reader, now)
                return True
            if rid not in self._ended and rid not in self._early:
                self._early[rid] = (reader, now)
            return False

    def expire(self, now: float | None = None) -> list[str]:
        """Ends every hold whose lease ran out; their request ids (the caller frees them)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            out = [rid for rid, (_, deadline) in self._holds.items() if now > deadline]
            for rid in out:
                lease, _ = self._holds.pop(rid)
                self._ended[rid] = (lease, EXPIRED, "", now)
            self._forget(now)
            return out

    def pin(self, rid: str, lease: str, reader: str, pin_s: float,
            now: float | None = None) -> str:
        """D's question about (rid, lease): one of HELD (and the hold kept until at least
        now + pin_s), READ, TAKEN, EXPIRED, UNKNOWN."""
        now = time.monotonic() if now is None else now
        with self._lock:
            hold = self._holds.get(rid)
            if hold is not None:
                if hold[0] != lease:
                    return UNKNOWN
                hold[1] = max(hold[1], now + pin_s)
                return HELD
            ended = self._ended.get(rid)
            if ended is not None:
                if ended[0] != lease:
                    return UNKNOWN
                if ended[1] == READ:
                    return READ if ended[2] == reader else TAKEN
                return EXPIRED
            early = self._early.get(rid)
            if early is not None:
                return READ if early[0] == reader else TAKEN
            return UNKNOWN

    def held(self) -> int:
        with self._lock:
            return len(self._holds)

    def _forget(self, now: float) -> None:
        for rid in [r for r, v in self._ended.items() if now - v[3] > self._remember_s]:
            del self._ended[rid]
        for rid in [r for r, v in self._early.items() if now - v[1] > self._remember_s]:
            del self._early[rid]
