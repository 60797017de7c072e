"""The one vLLM version KvferryConnector is written against, checked before vLLM is used.

vLLM's connector API changes between releases (hooks added, removed, renamed: see
docs/notes/vllm_cpu_install.md §4), so another version is refused with an error naming both,
not run on the hope that it fits.
"""

SUPPORTED_VLLM = "0.32.0"


class UnsupportedVllmError(ImportError):
    """The installed vLLM is not the one kvferry.vllm supports."""


def installed_vllm_version() -> str:
    try:
        import vllm
    except ImportError as e:
        raise UnsupportedVllmError(
            f"kvferry.vllm needs vLLM {SUPPORTED_VLLM} (vllm-cpu); vllm is not importable: "
            f"{e}") from None
    return str(getattr(vllm, "__version__", "unknown"))


def check_vllm_version() -> str:
    """Returns the installed version; raises UnsupportedVllmError unless it is
    SUPPORTED_VLLM (a local suffix such as "+cpu" is accepted)."""
    found = installed_vllm_version()
    if found.split("+", 1)[0] != SUPPORTED_VLLM:
        raise UnsupportedVllmError(
            f"kvferry.vllm supports vLLM {SUPPORTED_VLLM} only; the installed vLLM is {found}")
    return found
