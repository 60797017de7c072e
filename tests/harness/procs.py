"""Processes a test starts. Each one is killed (SIGKILL) when its case ends (runner.run_cases)
and at exit, so no case leaves one running; stop() gives SIGTERM a deadline. A process may run
inside a network namespace (`netns`); free_port() for a program that must be given its port.
"""
import atexit
import os
import re
import signal
import socket
import subprocess

from harness import runner  # runner imports procs too: use runner.<name> at call time

_STARTED = []


def kill_all():
    """Kills every process started since the last call (the end of a case, and exit)."""
    for p in _STARTED:
        p.kill()
    del _STARTED[:]


atexit.register(kill_all)


def free_port(host="127.0.0.1"):
    s = socket.socket()
    s.bind((host, 0))
    port = s.getsockname()[1]
    s.close()
    return port


def in_netns(netns, cmd):
    return ["ip", "netns", "exec", netns] + cmd if netns else cmd


class Process:
    """One child process. `env` is added to this process's environment, `unset` removed from it;
    `stdout`/`stderr` as for subprocess.Popen."""

    STOP_TIMEOUT_S = 20

    def __init__(self, name, cmd, env=None, netns=None, unset=(), stdout=None, stderr=None,
                 text=False):
        self.name = name
        full_env = dict(os.environ)
        for key in unset:
            full_env.pop(key, None)
        full_env.update(env or {})
        self.proc = subprocess.Popen(in_netns(netns, [str(c) for c in cmd]), stdout=stdout,
                                     stderr=stderr, env=full_env, text=text)
        _STARTED.append(self)

    def alive(self):
        return self.proc.poll() is None

    def signal(self, sig):
        """Sends `sig`. For SIGSTOP, returns only once every thread of the process has stopped:
        kill() returns before a busy multi-threaded process has finished its group stop, and a
        thread still running then can answer what the test meant to freeze."""
        if self.alive():
            os.kill(self.proc.pid, sig)
            if sig == signal.SIGSTOP:
                self._wait_stopped()

    def _thread_states(self):
        states = []
        for tid in os.listdir(f"/proc/{self.proc.pid}/task"):
            try:
                with open(f"/proc/{self.proc.pid}/task/{tid}/stat") as f:
                    states.append(f.read().rsplit(")", 1)[1].split()[0])
            except FileNotFoundError:  # the thread ended meanwhile
                pass
        return states

    def _wait_stopped(self, timeout_s=10):
        if runner.wait_until(lambda: all(s in "tT" for s in self._thread_states()),
                             timeout_s, interval=0.002) is None:
            raise AssertionError(f"{self.name}: not stopped {timeout_s} s after SIGSTOP: "
                                 f"thread states {self._thread_states()}")

    def kill(self):
        # SIGKILL alone: it ends a stopped process too, and a SIGCONT first would let a
        # SIGSTOPped one run (and answer what it holds) before it dies.
        if self.alive():
            self.signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self, timeout=None):
        """SIGCONT (a stopped process must run to exit), then SIGTERM; returns the exit code.
        Not exited within `timeout` s (STOP_TIMEOUT_S): killed, and an AssertionError."""
        timeout = timeout or self.STOP_TIMEOUT_S
        if self.alive():
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError(f"{self.name}: did not stop within {timeout} s of SIGTERM")
        return self.proc.returncode


class LoggedProcess(Process):
    """A process whose stdout and stderr go to the file `log_path`, appended (a process started
    again under the same name keeps its earlier log); log_text() and wait_log() read only what
    this start wrote."""

    def __init__(self, name, cmd, log_path, **kw):
        self.log_path = log_path
        self._log_file = open(log_path, "a")
        self._log_start = self._log_file.tell()
        super().__init__(name, cmd, stdout=self._log_file, stderr=subprocess.STDOUT, **kw)

    def log_text(self):
        with open(self.log_path, "rb") as f:
            f.seek(self._log_start)
            return f.read().decode("utf-8", "replace")

    def wait_log(self, pattern, timeout):
        """The first match of `pattern` in the log within `timeout` s; None otherwise, or as soon
        as the process has exited without writing it."""
        found = [None]

        def seen():
            found[0] = re.search(pattern, self.log_text())
            return found[0] is not None or not self.alive()

        runner.wait_until(seen, timeout, interval=0.05)
        return found[0]
