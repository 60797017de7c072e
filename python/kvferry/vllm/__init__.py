"""kvferry.vllm: KvferryConnector, vLLM's KV connector over kvferry (docs/vllm.md).

Importing this subpackage imports vLLM and refuses any version but the supported one
(kvferry.vllm.version); ``import kvferry`` alone never needs vLLM.
"""

from kvferry.vllm.version import SUPPORTED_VLLM, UnsupportedVllmError, check_vllm_version

check_vllm_version()

from kvferry.vllm.connector import KvferryConnector  # noqa: E402  (after the version check)

__all__ = ["KvferryConnector", "SUPPORTED_VLLM", "UnsupportedVllmError"]
