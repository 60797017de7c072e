"""Where vLLM's CPU KV cache keeps each block: checked at registration, and handed to kvferry's
C++ connector as a cache spec.

vLLM 0.32.0's CPU attention (CPU_ATTN, layout LBHNC) hands a connector one tensor per layer,
shaped ``[num_blocks_kernel, num_kv_heads, block_size_kernel, 2 * head_size]``, all layers views
of one storage (layer-outermost). A kernel block of one layer is one dense page: per head, the K
tile (stored transposed, [head_size, block_size_kernel]) then the V tile: kvferry's layout
``VLLM_CPU`` (include/kvferry/kv/cache_spec.h). Each layer is one region of that cache.

The scheduler's block ids are LOGICAL (``cache_config.block_size`` tokens); the tensors' first
dimension counts KERNEL blocks of ``shape[2]`` tokens. The mapping between them is the C++
connector's (kv::BlockGeometry), so a logical id never indexes a tensor.

Thread-safety: values and pure functions.
"""

from dataclasses import dataclass

from kvferry import CacheSpec


@dataclass(frozen=True)
class KvLayout:
    """One TP rank's KV cache as vLLM's tensors hold it (checked by layout_of_kv_caches)."""

    model: str
    dtype: str                     # torch dtype name, e.g. "torch.bfloat16"
    kv_cache_layout: str           # vLLM's cache_config.kv_cache_layout ("LBHNC")
    num_kv_heads: int
    head_size: int
    block_size_logical: int        # cache_config.block_size
    block_size_kernel: int         # the tensors' shape[2]
    bytes_per_kernel_block: int    # one layer's page of one kernel block
    num_blocks_kernel: int
    layer_names: tuple[str, ...]   # sorted
    layer_offsets: tuple[int, ...]  # byte offset of each layer's block 0 in the storage
    region_size: int               # the storage's bytes


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
        if not t.is_contiguous():
            raise ValueError(f"KvferryConnector: layer {name} is not dense kernel pages one "
                             f"after another (strides {t.stride()})")
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
        num_blocks_kernel=num_blocks,
        layer_names=names, layer_offsets=tuple(offsets), region_size=region_size)
    return layout, base


# torch dtype names (KvLayout.dtype) as kvferry dtype names.
_DTYPES = {"torch.float32": "f32", "torch.float16": "f16", "torch.bfloat16": "bf16"}


def cache_spec_of(layout: KvLayout) -> CacheSpec:
    """The cache spec kvferry's connector registers: one VLLM_CPU region per layer, in
    layer_names order (P and D of one model name the same layers). ValueError for a dtype
    kvferry does not know."""
    dtype = _DTYPES.get(layout.dtype)
    if dtype is None:
        raise ValueError(f"KvferryConnector: KV dtype {layout.dtype} is not one of "
                         f"{sorted(_DTYPES)}")
    return CacheSpec(num_layers=len(layout.layer_names), num_kv_heads=layout.num_kv_heads,
                     head_dim=layout.head_size, dtype=dtype, layout="VLLM_CPU",
                     block_size_kernel=layout.block_size_kernel,
                     num_blocks_kernel=layout.num_blocks_kernel)
