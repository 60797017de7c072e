"""Rewrites P's KV pages, staged in D's memory, into D's blocks when P and D block sizes differ.

vLLM 0.32.0's CPU page (layout LBHNC, ISAs vec/vec16; docs/notes/vllm_cpu_install.md §5) holds,
per (block, head), the K tile TRANSPOSED, [head_size, block_size], then the V tile,
[block_size, head_size]. A token's K is therefore a column spread over head_size rows, and
re-blocking is not a byte-range copy: the staged pages are turned into token-major K and V
([heads, tokens, head_size]) and cut again into D's tiles. Checked against a per-token reference
for several block-size pairs (tests/vllm/test_units.py).

Thread-safety: pure functions over tensors the caller owns.
"""

import torch

from kvferry import LogicalBlockId
from kvferry.vllm.layout import KvLayout


def _token_major(pages: torch.Tensor, num_heads: int, block_size: int, head_size: int):
    """pages: [blocks, heads, 2 * block_size * head_size] -> K, V as [heads, tokens, head_size]."""
    n = pages.shape[0]
    tiles = pages.view(n, num_heads, 2, block_size * head_size)
    k = tiles[:, :, 0].view(n, num_heads, head_size, block_size).transpose(-1, -2)
    v = tiles[:, :, 1].view(n, num_heads, block_size, head_size)
    return (k.permute(1, 0, 2, 3).reshape(num_heads, n * block_size, head_size),
            v.permute(1, 0, 2, 3).reshape(num_heads, n * block_size, head_size))


def relayout_into(kv_caches: dict, local: KvLayout, remote: KvLayout, staging: torch.Tensor,
                  num_staged_blocks: int, staged_first_token: int, local_blocks: list[int],
                  local_first_token: int, num_tokens: int) -> None:
    """Writes tokens [local_first_token, local_first_token + num_tokens) into D's
    ``local_blocks`` (logical = kernel ids; local_blocks[0] starts at local_first_token) from
    ``staging``: P's pages, [layer][block][page], its first block starting at token
    staged_first_token. Tokens of D's last block past num_tokens are left as they were."""
    dtype = kv_caches[local.layer_names[0]].dtype
    heads, head_size = local.num_kv_heads, local.head_size
    bl, br = local.block_size_logical, remote.block_size_logical
    per_layer = num_staged_blocks * remote.bytes_per_kernel_block
    skip = local_first_token - staged_first_token
    if skip < 0 or skip + num_tokens > num_staged_blocks * br:
        raise ValueError(f"relayout: tokens {local_first_token}..+{num_tokens} not inside the "
                         f"staged {staged_first_token}..+{num_staged_blocks * br}")
    if num_tokens > len(local_blocks) * bl:
        raise ValueError(f"relayout: {num_tokens} tokens do not fit {len(local_blocks)} blocks")
    geo = local.geometry
    if geo.kernel_blocks_per_logical != 1:
        raise ValueError("relayout: needs D's kernel block == its logical block")
    kernel = [geo.kernel_blocks_of(LogicalBlockId(int(b)))[0].value for b in local_blocks]
    for li, name in enumerate(local.layer_names):
        pages = staging[li * per_layer:(li + 1) * per_layer].view(dtype).view(
            num_staged_blocks, heads, 2 * br * head_size)
        k_tok, v_tok = _token_major(pages, heads, br, head_size)
        layer = kv_caches[name]
        for i, block in enumerate(kernel):
            n = min(bl, num_tokens - i * bl)
            if n <= 0:
                break
            src = skip + i * bl
            tiles = layer[block].view(heads, 2, bl * head_size)
            k_t = tiles[:, 0].view(heads, head_size, bl)
            v = tiles[:, 1].view(heads, bl, head_size)
            k_t[:, :, :n] = k_tok[:, src:src + n, :].transpose(-1, -2)
            v[:, :n, :] = v_tok[:, src:src + n, :]
