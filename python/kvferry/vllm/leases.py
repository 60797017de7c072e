"""P's leases: which finished requests' blocks P still holds for a D, and how each hold ended.

A hold begins when the scheduler's metadata reaches the worker (`add`) and ends exactly once:
"read" when D's READ notification arrives (the notification follows the READ's last byte, so
the blocks were held for all of it), or "expired" when its lease runs out first (`expire`);
either way vLLM then frees the blocks and may reuse them. After its READ, D asks over the side
channel (handshake.py) for `state(request_id, lease)`:

    held     the hold has not ended: the blocks were not freed during D's read   -> keep
    read     it ended with D's notification                                      -> keep
    expired  the lease ran out first: the blocks may have been reused            -> recompute
    unknown  no such hold under that lease (not yet arrived, long gone, or never) -> ask again
             until D's load deadline, then recompute

Both answers D keeps prove the blocks were held until after its read finished, so a read can
never be used with bytes of a reused block. A notification can arrive before its hold (D read
while P's scheduler still held the blocks, delay-free): it is kept, and the hold ends "read"
as it arrives. Ended holds are remembered for `remember_s`, longer than any D waits.

Thread-safety: every method takes the table's lock; the worker calls add/read/expire from the
model runner's thread, the side channel calls state from its own.
"""

import threading
import time

HELD, READ, EXPIRED, UNKNOWN = "held", "read", "expired", "unknown"


class LeaseTable:
    def __init__(self, remember_s: float = 600.0):
        self._lock = threading.Lock()
        self._remember_s = remember_s
        self._holds: dict[str, tuple[str, float]] = {}          # rid -> (lease, deadline)
        self._ended: dict[str, tuple[str, str, float]] = {}     # rid -> (lease, how, when)
        self._early: dict[str, float] = {}                      # rid -> notified at

    def add(self, rid: str, lease: str, lease_s: float, now: float | None = None) -> bool:
        """Starts a hold; True when D's notification already came (the hold ends "read" now,
        and the caller frees the blocks)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            if self._early.pop(rid, None) is not None:
                self._ended[rid] = (lease, READ, now)
                return True
            self._holds[rid] = (lease, now + lease_s)
            return False

    def read(self, rid: str, now: float | None = None) -> bool:
        """D's notification for rid; True when it ended a hold (the caller frees the blocks).
        A notification for a hold that already expired changes nothing."""
        now = time.monotonic() if now is None else now
        with self._lock:
            hold = self._holds.pop(rid, None)
            if hold is not None:
                self._ended[rid] = (hold[0], READ, now)
                return True
            if rid not in self._ended:
                self._early[rid] = now
            return False

    def expire(self, now: float | None = None) -> list[str]:
        """Ends every hold whose lease ran out; their request ids (the caller frees them)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            out = [rid for rid, (_, deadline) in self._holds.items() if now > deadline]
            for rid in out:
                lease, _ = self._holds.pop(rid)
                self._ended[rid] = (lease, EXPIRED, now)
            self._forget(now)
            return out

    def state(self, rid: str, lease: str) -> str:
        """One of HELD, READ, EXPIRED, UNKNOWN for D's question about (rid, lease)."""
        with self._lock:
            hold = self._holds.get(rid)
            if hold is not None:
                return HELD if hold[0] == lease else UNKNOWN
            ended = self._ended.get(rid)
            if ended is not None:
                return ended[1] if ended[0] == lease else UNKNOWN
            return UNKNOWN

    def held(self) -> int:
        with self._lock:
            return len(self._holds)

    def _forget(self, now: float) -> None:
        for table in (self._ended, self._early):
            old = [rid for rid, v in table.items()
                   if now - (v if isinstance(v, float) else v[2]) > self._remember_s]
            for rid in old:
                del table[rid]
