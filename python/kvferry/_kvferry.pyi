"""
kvferry's C++ core: the transfer agent, the KV block geometry and re-layout, P's lease table, and one TP rank's worker half of the connector.
"""

from collections.abc import Sequence
import enum


class StatusCode(enum.Enum):
    """What a failed kvferry call's caller should do next."""

    OK = 0

    INVALID_ARGUMENT = 1

    OUT_OF_RANGE = 2

    NOT_FOUND = 3

    ALREADY_EXISTS = 4

    FAILED_PRECONDITION = 5

    RESOURCE_EXHAUSTED = 6

    UNAVAILABLE = 7

    DEADLINE_EXCEEDED = 8

    ABORTED = 9

    DATA_LOSS = 10

    UNIMPLEMENTED = 11

    INTERNAL = 12

    UNAUTHENTICATED = 13

class LogicalBlockId:
    """
    A block of block_size_logical tokens: the scheduler's unit, the unit of kv_transfer_params and of failure reports.
    """

    def __init__(self, value: int) -> None: ...

    @property
    def value(self) -> int: ...

    def __eq__(self, arg: LogicalBlockId, /) -> bool: ...

    def __ne__(self, arg: LogicalBlockId, /) -> bool: ...

    def __lt__(self, arg: LogicalBlockId, /) -> bool: ...

    def __le__(self, arg: LogicalBlockId, /) -> bool: ...

    def __gt__(self, arg: LogicalBlockId, /) -> bool: ...

    def __ge__(self, arg: LogicalBlockId, /) -> bool: ...

    def __hash__(self) -> int: ...

    def __int__(self) -> int: ...

    def __repr__(self) -> str: ...

class KernelBlockId:
    """
    A block of block_size_kernel tokens: a page of the KV tensor, the unit of descriptors and copies.
    """

    def __init__(self, value: int) -> None: ...

    @property
    def value(self) -> int: ...

    def __eq__(self, arg: KernelBlockId, /) -> bool: ...

    def __ne__(self, arg: KernelBlockId, /) -> bool: ...

    def __lt__(self, arg: KernelBlockId, /) -> bool: ...

    def __le__(self, arg: KernelBlockId, /) -> bool: ...

    def __gt__(self, arg: KernelBlockId, /) -> bool: ...

    def __ge__(self, arg: KernelBlockId, /) -> bool: ...

    def __hash__(self) -> int: ...

    def __int__(self) -> int: ...

    def __repr__(self) -> str: ...

class BlockGeometry:
    """
    The one mapping from logical to kernel block ids: logical block l owns kernel blocks l*R .. l*R+R-1, R = logical / kernel size.
    """

    def __init__(self, block_size_logical: int, block_size_kernel: int) -> None: ...

    @property
    def block_size_logical(self) -> int: ...

    @property
    def block_size_kernel(self) -> int: ...

    @property
    def kernel_blocks_per_logical(self) -> int: ...

    def kernel_blocks_of(self, logical: LogicalBlockId) -> list[KernelBlockId]:
        """The kernel blocks of one logical block, in order."""

    def expand_block_table(self, logical: Sequence[LogicalBlockId]) -> list[KernelBlockId]:
        """
        A logical block table as kernel blocks (R per logical block, order kept).
        """

    def logical_block_owning(self, kernel: KernelBlockId) -> LogicalBlockId:
        """The logical block a kernel block belongs to."""

    def logical_blocks_for(self, num_tokens: int) -> int: ...

    def kernel_blocks_for(self, num_tokens: int) -> int: ...

    def __eq__(self, arg: BlockGeometry, /) -> bool: ...

    def __repr__(self) -> str: ...

class HeadSharding:
    """
    The KV heads of each tensor-parallel rank: contiguous shares when tp_size divides num_kv_heads, whole heads replicated when num_kv_heads divides tp_size; any other pair raises InvalidArgumentError naming both.
    """

    def __init__(self, num_kv_heads: int, tp_size: int) -> None: ...

    @property
    def num_kv_heads(self) -> int: ...

    @property
    def tp_size(self) -> int: ...

    @property
    def heads_per_rank(self) -> int: ...

    @property
    def num_copies(self) -> int:
        """How many ranks hold each head (1 unless replicated)."""

    def first_head(self, rank: int) -> int:
        """The first KV head `rank` holds."""

    def __eq__(self, arg: HeadSharding, /) -> bool: ...

    def __repr__(self) -> str: ...

class CacheSpec:
    """
    The byte geometry of a KV cache (standard attention): one region per layer and part (NHD, HND) or per layer (VLLM_CPU, VLLM_CPU_AMX: per block and head, the K tile, then the V tile, as vLLM's vec or AMX attention packs them).
    """

    def __init__(self, num_layers: int, num_kv_heads: int, head_dim: int, dtype: str, layout: str, block_size_kernel: int, num_blocks_kernel: int) -> None:
        """
        dtype: 'f32' | 'f16' | 'bf16'; layout: 'NHD' | 'HND' | 'VLLM_CPU' | 'VLLM_CPU_AMX'. ValueError naming the field when one is unknown, zero or negative.
        """

    @property
    def num_layers(self) -> int: ...

    @property
    def num_kv_heads(self) -> int: ...

    @property
    def head_dim(self) -> int: ...

    @property
    def block_size_kernel(self) -> int: ...

    @property
    def num_blocks_kernel(self) -> int: ...

    @property
    def dtype(self) -> str: ...

    @property
    def layout(self) -> str: ...

    @property
    def num_regions(self) -> int: ...

    @property
    def bytes_per_kernel_block(self) -> int: ...

    @property
    def region_bytes(self) -> int:
        """Bytes of each region."""

    def __repr__(self) -> str: ...

def relayout_tokens(src: CacheSpec, src_regions: Sequence[int], src_blocks: Sequence[KernelBlockId], dst: CacheSpec, dst_regions: Sequence[int], dst_blocks: Sequence[KernelBlockId], token_begin: int, token_end: int, heads: tuple[int, int, int] | None = None) -> None:
    """
    Copies tokens [token_begin, token_end) of one sequence from the cache `src` describes to the one `dst` describes, bit for bit, whatever their layouts and kernel block sizes. *_regions: the base address of each region (num_regions of them, region_bytes each; the caller keeps that memory alive and writable); *_blocks: the sequence's kernel blocks in that cache, in token order (token t is in blocks[t // block_size_kernel]). heads: (src_first, dst_first, count) to copy a range of heads. Everything is checked before a byte is written: incompatible specs are InvalidArgumentError, a short block table or a block outside its cache OutOfRangeError. The GIL is released while copying.
    """

class XferOp(enum.Enum):
    """READ: remote -> local. WRITE: local -> remote."""

    READ = 0

    WRITE = 1

class XferState(enum.Enum):
    """Progress of a posted transfer."""

    IN_PROGRESS = 0

    DONE = 1

class XferInfo:
    """Facts about a prepared transfer."""

    @property
    def total_bytes(self) -> int: ...

    @property
    def num_descriptors_requested(self) -> int: ...

    @property
    def num_descriptors_merged(self) -> int: ...

    @property
    def by_memcpy(self) -> bool: ...

class LeaseTable:
    """
    P's leases on logical blocks and their generations: grant() records a hold and returns the blocks' generations; end() bumps every block no other lease holds. A D that reads a block's generation after its data and finds it unchanged read blocks nobody reused.
    """

    def __init__(self, num_blocks: int) -> None: ...

    @property
    def num_blocks(self) -> int: ...

    @property
    def generations_address(self) -> int:
        """Address of the uint64 generation array (little endian, one per block)."""

    @property
    def generations_nbytes(self) -> int: ...

    def grant(self, request_id: str, block_ids: Sequence[LogicalBlockId], lease_s: float | None = None) -> list[int]:
        """
        Holds the blocks for request_id; their generations, in order. AlreadyExistsError while request_id holds a lease; OutOfRangeError for a block outside the table.
        """

    def end(self, request_id: str) -> bool:
        """
        Ends request_id's lease (bumping what no other lease holds); False if it had none.
        """

    def end_expired(self) -> list[str]:
        """Ends every lease whose lease_s ran out; their request ids."""

    def has(self, request_id: str) -> bool: ...

    def generation(self, block_id: LogicalBlockId) -> int: ...

    @property
    def blocks_held(self) -> int: ...

    @property
    def leases(self) -> int: ...

class ConnectorWorker:
    """
    One TP rank's worker half of kvferry's C++ connector, for an engine whose scheduler is not kvferry's (vLLM's). The config is kvferry's --kv-transfer-config JSON (kv_connector FerryConnector); model_name enters the handshake's compatibility hash.
    """

    def __init__(self, kv_transfer_config: str, model_name: str, tp_rank: int = 0, tp_size: int = 1) -> None:
        """
        tp_rank of tp_size: the engine's TP rank this worker is (one per process). P's rank r serves its side channel on the configured port + r.
        """

    def register_kv_cache(self, spec: CacheSpec, regions: Sequence[int], block_size_logical: int, model_kv_heads: int = 0) -> None:
        """
        Borrows this rank's cache (one base address per region of spec, each spec.region_bytes long, 64-byte aligned, alive as long as this object) and registers it; P then serves its side channel. model_kv_heads: the model's KV heads (0: spec.num_kv_heads, at TP 1), which tp_size ranks share. Once.
        """

    def load(self, request_id: str, kv_transfer_params: str, local_block_ids: Sequence[LogicalBlockId], num_local_computed_tokens: int, num_external_tokens: int) -> None:
        """
        D: pull tokens [num_local_computed_tokens, +num_external_tokens) of P's offer (its kv_transfer_params, JSON) into local_block_ids (all of the request's blocks).
        """

    def save(self, request_id: str, block_ids: Sequence[LogicalBlockId], token_begin: int, token_end: int) -> None:
        """P, host buffer: stage these computed tokens in after_forward()."""

    def hold(self, request_id: str, block_ids: Sequence[LogicalBlockId], generations: Sequence[int]) -> None:
        """
        P: lease a finished request's blocks until D's notification or the lease time; generations are the ones promised to D (ended at once if this table differs).
        """

    def release(self, kv_transfer_params: str) -> None:
        """D: P's offer is not needed: tell P to end the lease now."""

    def start_load_kv(self) -> None:
        """Binds what was queued and starts the pulls (non-blocking)."""

    def after_forward(self) -> None: ...

    def get_finished(self) -> dict:
        """
        {'finished_sending', 'finished_recving', 'invalid_block_ids', 'load_reports'} since the last call.
        """

    def stats(self) -> dict:
        """The connector's counters since creation."""

    @property
    def side_channel_port(self) -> int: ...

    @property
    def engine_id(self) -> str: ...

    def shutdown(self) -> None: ...
