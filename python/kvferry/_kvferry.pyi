"""kvferry's C++ core: the transfer agent and the KV block geometry."""

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
