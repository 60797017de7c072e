"""The committed type stub python/kvferry/_kvferry.pyi is what nanobind.stubgen writes for the
extension as built: a binding change without a regenerated stub fails here."""
import os
import subprocess
import sys

import pytest

STUB = os.path.join(os.path.dirname(__file__), "..", "kvferry", "_kvferry.pyi")


def test_committed_stub_matches_the_extension(tmp_path):
    pytest.importorskip("nanobind.stubgen")  # only the build's pyenv has it, not an install
    out = tmp_path / "_kvferry.pyi"
    subprocess.run([sys.executable, "-m", "nanobind.stubgen", "-q", "-m", "kvferry._kvferry",
                    "-o", str(out)], check=True, timeout=120)
    with open(STUB) as committed:
        assert out.read_text() == committed.read(), (
            "python/kvferry/_kvferry.pyi is stale: regenerate it (docs/python.md)")
