"""Rewrites P's KV pages, staged in D's memory, into D's blocks when P and D block sizes differ.

vLLM 0.32.0's CPU page holds, per (block, head), the K tile TRANSPOSED, [head_size, block_size],
then the V tile, [block_size, head_size] (kvferry's layout ``VLLM_CPU``, docs/kv_layout.md), so
re-blocking is not a byte-range copy. The copy is kvferry's C++ re-layout
(:func:`kvferry.relayout_tokens`), the code kvferry's own connector runs: both sides are
described as :class:`kvferry.CacheSpec` (the staging buffer as a cache of P's block size holding
the staged blocks; D's cache as its own tensors), and the tokens move bit for bit. Checked against
a per-token reference for several block-size pairs (tests/vllm/test_units.py).

Thread-safety: pure functions over tensors the caller owns.
"""

from kvferry import CacheSpec, KernelBlockId, LogicalBlockId, relayout_tokens
from kvferry.vllm.layout import KvLayout

# torch dtype names (KvLayout.dtype) as kvferry dtype names.
_DTYPES = {"torch.float32": "f32", "torch.float16": "f16", "torch.bfloat16": "bf16"}


def _spec(layout: KvLayout, block_size: int, num_blocks: int) -> CacheSpec:
    dtype = _DTYPES.get(layout.dtype)
    if dtype is None:
        raise ValueError(f"relayout: dtype {layout.dtype} is not one of {sorted(_DTYPES)}")
    return CacheSpec(num_layers=len(layout.layer_names), num_kv_heads=layout.num_kv_heads,
                     head_dim=layout.head_size, dtype=dtype, layout="VLLM_CPU",
                     block_size_kernel=block_size, num_blocks_kernel=num_blocks)


def _check(local: KvLayout, remote: KvLayout, staged_first_token: int,
           local_first_token: int) -> None:
    """What the C++ copy cannot see: the padding entries in front of both block tables (below)
    must never be read. Ranges past either table's end it refuses itself (OutOfRangeError)."""
    bl, br = local.block_size_logical, remote.block_size_logical
    if local_first_token < staged_first_token:
        raise ValueError(f"relayout: D's tokens from {local_first_token} start before the staged "
                         f"ones from {staged_first_token}")
    if staged_first_token % br or local_first_token % bl:
        raise ValueError(f"relayout: staged tokens from {staged_first_token} and D's from "
                         f"{local_first_token} must start blocks of {br} and {bl} tokens")
    if local.geometry.kernel_blocks_per_logical != 1:
        raise ValueError("relayout: needs D's kernel block == its logical block")
    if local.kernel_block_stride_bytes != local.bytes_per_kernel_block:
        raise ValueError("relayout: D's kernel blocks of one layer are not contiguous pages")


def relayout_into(kv_caches: dict, local: KvLayout, remote: KvLayout, staging,
                  num_staged_blocks: int, staged_first_token: int, local_blocks: list[int],
                  local_first_token: int, num_tokens: int) -> None:
    """Writes tokens [local_first_token, local_first_token + num_tokens) into D's
    ``local_blocks`` (logical ids; local_blocks[0] starts at local_first_token) from ``staging``:
    P's pages, [layer][block][page], its first block starting at token staged_first_token.
    Tokens of D's last block past num_tokens are left as they were."""
    _check(local, remote, staged_first_token, local_first_token)
    bl, br = local.block_size_logical, remote.block_size_logical
    src = _spec(remote, br, num_staged_blocks)
    dst = _spec(local, bl, local.num_blocks_kernel)
    base = staging.data_ptr()
    src_regions = [base + i * src.region_bytes for i in range(src.num_layers)]
    dst_regions = [kv_caches[name].data_ptr() for name in local.layer_names]
    # Token t is in blocks[t // block size]: the entries before the first copied block are
    # never read.
    src_blocks = ([KernelBlockId(0)] * (staged_first_token // br) +
                  [KernelBlockId(i) for i in range(num_staged_blocks)])
    dst_blocks = ([KernelBlockId(0)] * (local_first_token // bl) +
                  local.geometry.expand_block_table([LogicalBlockId(int(b))
                                                     for b in local_blocks]))
    relayout_tokens(src, src_regions, src_blocks, dst, dst_regions, dst_blocks,
                    local_first_token, local_first_token + num_tokens)
