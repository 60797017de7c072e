"""vLLM is optional: `import kvferry` never needs it, and kvferry.vllm without vLLM (this suite's
venv has none) fails at import with an ImportError that says what it needs."""
import importlib.util

import pytest

import kvferry


def test_kvferry_imports_without_vllm():
    assert kvferry.Agent is not None
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here")


def test_kvferry_vllm_without_vllm_names_what_it_needs():
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here")
    with pytest.raises(ImportError, match=r"kvferry.vllm needs vLLM 0\.32\.0"):
        import kvferry.vllm  # noqa: F401
