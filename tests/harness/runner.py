"""Cases, checks, deadline-bounded waits and measured bounds.

run_cases runs (name, fn) pairs, prints PASS/FAIL per case, kills every process the case started
(procs) and exits 1 if any case failed; KVF_CASE=<name> runs one case.
"""
import os
import sys
import threading
import time

from harness import procs


class CheckFailed(AssertionError):
    pass


def check(cond, what):
    if not cond:
        raise CheckFailed(what)


def wait_until(pred, timeout, interval=0.05):
    """Polls pred() until true; returns the seconds it took, or None on timeout."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if pred():
            return time.monotonic() - t0
        time.sleep(interval)
    return None


MEASURED = []


def measure(name, seconds, bound):
    """Records a measured duration against its stated bound, and checks it."""
    MEASURED.append((name, seconds, bound))
    print(f"MEASURE {name}: {seconds:.3f} s (bound {bound} s)", flush=True)
    check(seconds is not None and seconds <= bound, f"{name}: {seconds} s exceeds {bound} s")


class Background:
    """Runs fn() on a thread (a request that must stay in flight while the test breaks something).
    result(timeout, what) joins within `timeout` (a CheckFailed naming `what` otherwise) and
    returns fn's value; finished_at is the monotonic time fn returned."""

    def __init__(self, fn):
        self._value = None
        self.finished_at = None
        self._thread = threading.Thread(target=self._run, args=(fn,))
        self._thread.start()

    def _run(self, fn):
        self._value = fn()
        self.finished_at = time.monotonic()

    def result(self, timeout, what):
        self._thread.join(timeout)
        check(not self._thread.is_alive(), f"{what} never answered")
        return self._value


def run_cases(cases):
    """Runs (name, fn) pairs; prints PASS/FAIL per case; exits 1 if any failed."""
    failed = []
    only = os.environ.get("KVF_CASE")
    for name, fn in cases:
        if only and only != name:
            continue
        t0 = time.monotonic()
        try:
            fn()
            print(f"PASS {name} ({time.monotonic() - t0:.1f} s)", flush=True)
        except Exception as e:  # noqa: BLE001 - report every case
            print(f"FAIL {name}: {type(e).__name__}: {e}", flush=True)
            failed.append(name)
        finally:
            procs.kill_all()
    if failed:
        print("failed cases: " + ", ".join(failed))
        sys.exit(1)
