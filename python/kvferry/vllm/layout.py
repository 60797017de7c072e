"""Where vLLM's CPU KV cache keeps each block: checked at registration, and handed to kvferry's
C++ connector as a cache spec.

vLLM 0.32.0's CPU attention (CPU_ATTN, layout LBHNC) hands a connector one tensor per layer,
shaped ``[num_blocks_kernel, num_kv_heads, block_size_kernel, 2 * head_size]``, all layers views
of one storage (layer-outermost). A kernel block of one layer is one dense page: per head, the K
tile then the V tile. How the tiles are packed depends on the ISA vLLM's CPU attention picked
for this cache (``_get_attn_isa``: dtype, block size, head size, KV dtype, and the CPU):

* ``vec`` / ``vec16``: K transposed ([head_size, block_size_kernel]), V plain: kvferry's layout
  ``VLLM_CPU``;
* ``amx`` (bf16, block sizes a multiple of 32, a CPU with AMX tiles): K in 16-token tiles of dim
  pairs, V in 16-dim tiles of token pairs: kvferry's ``VLLM_CPU_AMX``;
* any other (ARM, POWER, s390x, RISC-V): not known, refused at startup.

The tensor's shape is the same for every ISA, so the ISA, not the shape, names the layout
(include/kvferry/kv/cache_spec.h). Each layer is one region of that cache.

The scheduler's block ids are LOGICAL (``cache_config.block_size`` tokens); the tensors' first
dimension counts KERNEL blocks of ``shape[2]`` tokens. The mapping between them is the C++
connector's (kv::BlockGeometry), so a logical id never indexes a tensor.

Thread-safety: pure functions.
"""

from kvferry import CacheSpec

# torch dtype names as kvferry dtype names.
_DTYPES = {"torch.float32": "f32", "torch.float16": "f16", "torch.bfloat16": "bf16"}
# vLLM's cache_config.kv_cache_layout of the page above; another could mean other bytes in the
# same tensor shape, so it is refused rather than guessed.
KNOWN_KV_CACHE_LAYOUT = "LBHNC"
# vLLM's CPU attention ISA -> kvferry's layout of the pages it writes.
LAYOUT_OF_ISA = {"vec": "VLLM_CPU", "vec16": "VLLM_CPU", "amx": "VLLM_CPU_AMX"}


def attention_isa(dtype, block_size_kernel: int, head_size: int,
                  kv_cache_dtype: str = "auto") -> str:
    """The ISA vLLM's CPU attention picks for a cache of this model dtype, kernel block size,
    head size and KV dtype on this CPU: vLLM's own choice (``cpu_attn._get_attn_isa``, called
    with the arguments its metadata builder passes), so kvferry never restates the rule."""
    from vllm.v1.attention.backends.cpu_attn import _get_attn_isa

    return str(_get_attn_isa(dtype, int(block_size_kernel), int(head_size), kv_cache_dtype))


def cache_of_kv_caches(kv_caches: dict, *, kv_cache_layout: str,
                       attn_isa: str) -> tuple[CacheSpec, list[int]]:
    """The cache spec of vLLM's per-layer tensors (one region per layer, in sorted layer-name
    order: P and D of one model name the same layers; VLLM_CPU or VLLM_CPU_AMX by the attention
    ISA) and each region's address. Raises ValueError if they are not a layout this module knows
    (a vLLM whose layout changed must fail at startup, not move wrong bytes)."""
    if kv_cache_layout != KNOWN_KV_CACHE_LAYOUT:
        raise ValueError(f"KvferryConnector: kv_cache_layout {kv_cache_layout!r}; only "
                         f"{KNOWN_KV_CACHE_LAYOUT!r} (vLLM 0.32.0's CPU page) is known")
    layout = LAYOUT_OF_ISA.get(attn_isa)
    if layout is None:
        raise ValueError(f"KvferryConnector: vLLM's CPU attention packs this KV cache for ISA "
                         f"{attn_isa!r}; only {sorted(LAYOUT_OF_ISA)} are known")
    if not kv_caches:
        raise ValueError("KvferryConnector: register_kv_caches got no layers")
    names = sorted(kv_caches)
    first = kv_caches[names[0]]
    for name in names:
        _check_layer(name, kv_caches[name], first)
    num_blocks, num_heads, block_size_kernel, two_d = (int(x) for x in first.shape)
    if two_d % 2:
        raise ValueError(f"KvferryConnector: last dimension {two_d} is not 2 * head_size")
    dtype = _DTYPES.get(str(first.dtype))
    if dtype is None:
        raise ValueError(f"KvferryConnector: KV dtype {first.dtype} is not one of "
                         f"{sorted(_DTYPES)}")
    spec = CacheSpec(num_layers=len(names), num_kv_heads=num_heads, head_dim=two_d // 2,
                     dtype=dtype, layout=layout, block_size_kernel=block_size_kernel,
                     num_blocks_kernel=num_blocks)
    return spec, [kv_caches[name].data_ptr() for name in names]


def _check_layer(name: str, t, first) -> None:
    """ValueError unless layer `name` is a dense CPU tensor like the first, in its storage."""
    if t.device.type != "cpu":
        raise ValueError(f"KvferryConnector: layer {name} is on {t.device}; only CPU KV caches "
                         "are supported")
    if t.dim() != 4 or t.shape != first.shape or t.dtype != first.dtype:
        raise ValueError(f"KvferryConnector: layer {name} has shape {tuple(t.shape)} {t.dtype}; "
                         f"expected [blocks, kv_heads, block_size, 2*head_size] like "
                         f"{tuple(first.shape)} {first.dtype}")
    if t.untyped_storage().data_ptr() != first.untyped_storage().data_ptr():
        raise ValueError(f"KvferryConnector: layer {name} is not in the first layer's storage")
    if not t.is_contiguous():
        raise ValueError(f"KvferryConnector: layer {name} is not dense kernel pages one after "
                         f"another (strides {t.stride()})")
