"""Where vLLM's CPU KV cache keeps each block, and the read plan between two such caches.

vLLM 0.32.0's CPU attention (CPU_ATTN, layout LBHNC) hands a connector one tensor per layer,
shaped ``[num_blocks_kernel, num_kv_heads, block_size_kernel, 2 * head_size]``, all layers views
of one storage (layer-outermost). A kernel block of one layer is one dense page: per head, the K
tile (stored transposed, [head_size, block_size_kernel]) then the V tile. So between two engines
of the same geometry a block moves as whole pages, never token by token.

The scheduler's block ids (kv_transfer_params' remote_block_ids, request_finished's block_ids)
are LOGICAL: ``cache_config.block_size`` tokens each. The tensors' first dimension counts KERNEL
blocks of ``shape[2]`` tokens. kvferry.BlockGeometry is the one mapping between them; every
offset below is computed from a KernelBlockId it returned, so a logical id cannot index the
tensor by mistake.

Thread-safety: values and pure functions.
"""

from dataclasses import asdict, dataclass

from kvferry import BlockGeometry, KernelBlockId, LogicalBlockId


@dataclass(frozen=True)
class KvLayout:
    """One engine's (one TP rank's) KV cache: what a peer must know to read its blocks, and what
    must match for the bytes to mean the same thing on both sides."""

    model: str
    dtype: str                     # torch dtype name, e.g. "torch.bfloat16"
    kv_cache_layout: str           # vLLM's cache_config.kv_cache_layout ("LBHNC")
    num_kv_heads: int
    head_size: int
    block_size_logical: int        # cache_config.block_size
    block_size_kernel: int         # the tensors' shape[2]
    bytes_per_kernel_block: int    # one layer's page of one kernel block
    kernel_block_stride_bytes: int  # distance between kernel blocks of one layer
    num_blocks_kernel: int
    layer_names: tuple[str, ...]   # sorted
    layer_offsets: tuple[int, ...]  # byte offset of each layer's block 0 in the region
    region_size: int

    @property
    def geometry(self) -> BlockGeometry:
        return BlockGeometry(self.block_size_logical, self.block_size_kernel)

    @property
    def num_blocks_logical(self) -> int:
        return self.num_blocks_kernel // self.geometry.kernel_blocks_per_logical

    def to_dict(self) -> dict:
        d = asdict(self)
        d["layer_names"] = list(self.layer_names)
        d["layer_offsets"] = list(self.layer_offsets)
        return d

    @staticmethod
    def from_dict(d: dict) -> "KvLayout":
        d = dict(d)
        d["layer_names"] = tuple(d["layer_names"])
        d["layer_offsets"] = tuple(int(x) for x in d["layer_offsets"])
        return KvLayout(**d)


# Fields that must be equal on P and D for their bytes to mean the same thing at all.
MUST_MATCH = ("model", "dtype", "kv_cache_layout", "num_kv_heads", "head_size", "layer_names")
# Fields that decide whether pages copy as they are (equal) or through a relayout (relayout.py).
GEOMETRY = ("block_size_logical", "block_size_kernel", "bytes_per_kernel_block")


def mismatches(local: KvLayout, remote: KvLayout) -> list[str]:
    """The MUST_MATCH fields that differ, and the GEOMETRY fields unless a relayout can bridge
    them, as "field: local X, remote Y" (empty: compatible)."""
    names = MUST_MATCH if can_relayout(local, remote) else MUST_MATCH + GEOMETRY
    return [f"{name}: local {getattr(local, name)!r}, remote {getattr(remote, name)!r}"
            for name in names if getattr(local, name) != getattr(remote, name)]


def same_geometry(local: KvLayout, remote: KvLayout) -> bool:
    return all(getattr(local, n) == getattr(remote, n) for n in GEOMETRY)


def can_relayout(local: KvLayout, remote: KvLayout) -> bool:
    """Different block sizes are bridged when each side's kernel block is its logical block
    (vLLM's CPU backend today) and the layout is the CPU page relayout.py knows."""
    return (local.kv_cache_layout == remote.kv_cache_layout == "LBHNC"
            and local.block_size_kernel == local.block_size_logical
            and remote.block_size_kernel == remote.block_size_logical)


def layout_of_kv_caches(kv_caches: dict, *, model: str, kv_cache_layout: str,
                        block_size_logical: int) -> tuple[KvLayout, int]:
    """The layout of vLLM's per-layer tensors, and the base address of their one storage.
    Raises ValueError if they are not the shape this module knows (a vLLM whose layout changed
    must fail at startup, not move wrong bytes)."""
    if not kv_caches:
        raise ValueError("KvferryConnector: register_kv_caches got no layers")
    names = tuple(sorted(kv_caches))
    first = kv_caches[names[0]]
    storage = first.untyped_storage()
    base, region_size = storage.data_ptr(), storage.nbytes()
    offsets = []
    for name in names:
        t = kv_caches[name]
        if t.device.type != "cpu":
            raise ValueError(f"KvferryConnector: layer {name} is on {t.device}; only CPU KV "
                             "caches are supported")
        if t.dim() != 4 or t.shape != first.shape or t.dtype != first.dtype:
            raise ValueError(f"KvferryConnector: layer {name} has shape {tuple(t.shape)} "
                             f"{t.dtype}; expected [blocks, kv_heads, block_size, 2*head_size] "
                             f"like {tuple(first.shape)} {first.dtype}")
        if t.untyped_storage().data_ptr() != base:
            raise ValueError(f"KvferryConnector: layer {name} is not in the first layer's storage")
        if not t[0].is_contiguous():
            raise ValueError(f"KvferryConnector: layer {name}'s kernel block is not one dense "
                             f"page (strides {t.stride()})")
        offsets.append(t.data_ptr() - base)
    num_blocks, num_heads, block_size_kernel, two_d = (int(x) for x in first.shape)
    elem = first.element_size()
    if two_d % 2:
        raise ValueError(f"KvferryConnector: last dimension {two_d} is not 2 * head_size")
    if block_size_logical % block_size_kernel:
        raise ValueError(f"KvferryConnector: block_size {block_size_logical} is not a multiple "
                         f"of the kernel block size {block_size_kernel}")
    layout = KvLayout(
        model=model, dtype=str(first.dtype), kv_cache_layout=kv_cache_layout,
        num_kv_heads=num_heads, head_size=two_d // 2, block_size_logical=block_size_logical,
        block_size_kernel=block_size_kernel,
        bytes_per_kernel_block=num_heads * block_size_kernel * two_d * elem,
        kernel_block_stride_bytes=int(first.stride(0)) * elem, num_blocks_kernel=num_blocks,
        layer_names=names, layer_offsets=tuple(offsets), region_size=region_size)
    return layout, base


@dataclass(frozen=True)
class ReadPlan:
    """Descriptors of one pull: ``local[i]`` <- ``remote[i]``, each (offset, length) in the
    region of its side, runs of consecutive pages already merged."""

    local: list[tuple[int, int]]
    remote: list[tuple[int, int]]
    num_pages: int          # layer pages before merging
    total_bytes: int


def plan_read(local: KvLayout, remote: KvLayout, local_blocks: list[int],
              remote_blocks: list[int]) -> ReadPlan:
    """Plans the read of P's logical blocks ``remote_blocks[i]`` into D's ``local_blocks[i]``,
    every layer. Needs ``mismatches(local, remote) == []`` (same geometry on both sides)."""
    if len(local_blocks) != len(remote_blocks):
        raise ValueError(f"plan_read: {len(local_blocks)} local blocks for "
                         f"{len(remote_blocks)} remote blocks")
    geo_l, geo_r = local.geometry, remote.geometry
    pages = []  # (layer, local kernel block, remote kernel block)
    for lb, rb in zip(local_blocks, remote_blocks):
        kl = geo_l.kernel_blocks_of(LogicalBlockId(int(lb)))
        kr = geo_r.kernel_blocks_of(LogicalBlockId(int(rb)))
        for a, b in zip(kl, kr):
            _check_in_range(local, a, "local")
            _check_in_range(remote, b, "remote")
            pages.append((a, b))
    page = local.bytes_per_kernel_block
    offsets = ((local.layer_offsets[li] + a.value * local.kernel_block_stride_bytes,
                remote.layer_offsets[li] + b.value * remote.kernel_block_stride_bytes)
               for li in range(len(local.layer_names)) for a, b in pages)
    return _coalesced_plan(offsets, page)


def _coalesced_plan(offsets, page: int) -> ReadPlan:
    """A ReadPlan of one page per (local, remote) offset pair, in order, with runs adjacent on
    both sides merged into one descriptor."""
    out_l, out_r = [], []
    n = 0
    for off_l, off_r in offsets:
        n += 1
        if out_l and out_l[-1][0] + out_l[-1][1] == off_l and \
                out_r[-1][0] + out_r[-1][1] == off_r:
            out_l[-1] = (out_l[-1][0], out_l[-1][1] + page)
            out_r[-1] = (out_r[-1][0], out_r[-1][1] + page)
        else:
            out_l.append((off_l, page))
            out_r.append((off_r, page))
    return ReadPlan(out_l, out_r, n, n * page)


def _check_in_range(layout: KvLayout, block: KernelBlockId, side: str) -> None:
    if not 0 <= block.value < layout.num_blocks_kernel:
        raise ValueError(f"plan_read: {side} kernel block {block.value} outside "
                         f"0..{layout.num_blocks_kernel - 1}")


def plan_staged_read(remote: KvLayout, remote_blocks: list[int]) -> ReadPlan:
    """Plans the read of P's logical blocks ``remote_blocks``, every layer, into a staging
    region laid out [layer][i-th block][P's page] (relayout.py rewrites it into D's blocks).
    Local offsets are into the staging region."""
    geo = remote.geometry
    page = remote.bytes_per_kernel_block
    kernel = [k for rb in remote_blocks for k in geo.kernel_blocks_of(LogicalBlockId(int(rb)))]
    for k in kernel:
        _check_in_range(remote, k, "remote")
    offsets = (((li * len(kernel) + j) * page,
                remote.layer_offsets[li] + k.value * remote.kernel_block_stride_bytes)
               for li in range(len(remote.layer_names)) for j, k in enumerate(kernel))
    return _coalesced_plan(offsets, page)
