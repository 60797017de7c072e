"""kvferry: prefill/decode-disaggregated LLM serving (https://github.com/kvferry).

The Python package exposes kvferry's C++ core:

* :class:`Agent` — the transfer agent (register memory, exchange metadata, prepare and post
  READ/WRITE descriptor lists, poll, notifications), the role ``nixl_agent`` plays for NIXL;
* :class:`LogicalBlockId`, :class:`KernelBlockId`, :class:`BlockGeometry` — the KV cache's two
  block-id spaces as distinct types, and the one mapping between them;
* :class:`CacheSpec` and :func:`relayout_tokens` — a KV cache's byte geometry (NHD, HND, or
  vLLM's CPU page) and the bit-exact copy of a token range between two caches of different
  layouts or kernel block sizes;
* :class:`LeaseTable` — P's leases on logical blocks and the generation array a D re-reads
  after its data, to know no block it read was reused meanwhile;
* :class:`ConnectorWorker` — one tensor-parallel rank's worker half of kvferry's C++ connector
  (side channel, handshakes, leases, pulls, generation checks, re-layout, host buffer) over an
  engine's own KV memory, for an engine whose scheduler is not kvferry's (vLLM's:
  :mod:`kvferry.vllm`);
* the exceptions in :mod:`kvferry._errors`, one per status code (all :class:`KvferryError`).

Importing kvferry needs nothing but this package; vLLM is not required.
"""

from kvferry._errors import (
    AbortedError, AlreadyExistsError, DataLossError, DeadlineExceededError,
    FailedPreconditionError, InternalError, InvalidArgumentError, KvferryError, NotFoundError,
    OutOfRangeError, ResourceExhaustedError, UnauthenticatedError, UnavailableError,
    UnimplementedError,
)
from kvferry._kvferry import (
    BlockGeometry, CacheSpec, ConnectorWorker, HeadSharding, KernelBlockId, LeaseTable,
    LogicalBlockId, StatusCode, XferInfo, XferOp, XferState, relayout_tokens,
)
from kvferry.agent import Agent, Notification, Peer, Region, Transfer

__version__ = "0.1.0"

__all__ = [
    "Agent", "Notification", "Peer", "Region", "Transfer",
    "BlockGeometry", "KernelBlockId", "LogicalBlockId", "HeadSharding", "CacheSpec",
    "relayout_tokens",
    "LeaseTable", "ConnectorWorker",
    "StatusCode", "XferInfo", "XferOp", "XferState",
    "KvferryError", "AbortedError", "AlreadyExistsError", "DataLossError",
    "DeadlineExceededError", "FailedPreconditionError", "InternalError", "InvalidArgumentError",
    "NotFoundError", "OutOfRangeError", "ResourceExhaustedError", "UnauthenticatedError",
    "UnavailableError", "UnimplementedError",
]
