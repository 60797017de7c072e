"""Bad input at startup: an unknown kv_connector_extra_config key makes `vllm serve` exit with an
error naming the key, instead of running with a default the user did not mean.

Usage: build/venv/bin/python tests/vllm/test_bad_config.py MODEL_DIR LOG_DIR   (PYTHONPATH=tests)
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import runner  # noqa: E402
from harness.runner import check  # noqa: E402
import vllm_serve as vs  # noqa: E402

MODEL_DIR, LOG_DIR = sys.argv[1], sys.argv[2]
EXIT_BOUND_S = 300


def case_unknown_extra_config_key():
    os.makedirs(LOG_DIR, exist_ok=True)
    s = vs.VllmServer("bad-config", MODEL_DIR, 18309, f"{LOG_DIR}/vllm_bad_config.log",
                      kv_config=vs.kvferry_kv_config(15621, lease_timout_s=5))
    rc = s.wait_exit(EXIT_BOUND_S)
    check(rc is not None, f"vllm serve still running {EXIT_BOUND_S} s after a bad config")
    check(rc != 0, "vllm serve exited 0 with a bad config")
    log = s.log_text()
    check("unknown kv_connector_extra_config key 'lease_timout_s'" in log,
          f"the error does not name the key; log tail:\n{log[-2000:]}")


runner.run_cases([("unknown_extra_config_key", case_unknown_extra_config_key)])
