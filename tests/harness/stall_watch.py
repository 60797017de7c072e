"""Evidence that the machine froze: a test that runs several heavy servers on 2 shared cores
(the vLLM TP tests) must tell a deadline missed because nothing ran from one missed because of
a bug.

StallWatch is a daemon thread that sleeps TICK_S in a loop and records every wake that came more
than its threshold late (the process was not scheduled: the whole box stalled, or this process
starved). socket_poll_stalls reads the servers' logs for kvferry's socket I/O thread warnings
"socket I/O thread poll took N ms (expected T ms)" (src/transfer/backends/socket/socket_io.cc):
that thread's poll returned N - T ms late, so the kernel did not run it. A late wait for the
backend's own lock is not counted: that could be ours.

Used by tests/vllm/test_pd_tp.py; standard library only.
"""

import re
import threading
import time

TICK_S = 0.05
_POLL_LATE = re.compile(r"socket I/O thread poll took (\d+) ms \(expected (\d+) ms\)")


class StallWatch:
    """Records (start, end) in time.monotonic() seconds of every sleep of TICK_S that lasted
    more than threshold_s."""

    def __init__(self, threshold_s=1.0):
        self._threshold = threshold_s
        self._stalls = []
        self._mu = threading.Lock()
        threading.Thread(target=self._run, name="stall-watch", daemon=True).start()

    def _run(self):
        last = time.monotonic()
        while True:
            time.sleep(TICK_S)
            now = time.monotonic()
            if now - last - TICK_S > self._threshold:
                with self._mu:
                    self._stalls.append((last, now))
            last = now

    def worst_since(self, since):
        """The longest stall (seconds) that ended after `since` (a time.monotonic() value)."""
        with self._mu:
            return max((end - start for start, end in self._stalls if end > since), default=0.0)


def socket_poll_stalls(log_text):
    """How late (seconds) each socket I/O thread poll warning in log_text says it returned."""
    return [(int(took) - int(expected)) / 1000.0
            for took, expected in _POLL_LATE.findall(log_text)]
