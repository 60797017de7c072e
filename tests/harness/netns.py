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
