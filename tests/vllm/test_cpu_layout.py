"""kvferry's VLLM_CPU layout is the one vLLM's CPU attention writes.

vLLM's own op, cpu_attn_reshape_and_cache (the op CPU_ATTN's forward calls), scatters random K
and V rows of a sequence into a per-layer cache tensor [num_blocks, num_kv_heads, block_size,
2 * head_size], through a shuffled slot mapping. Every element must sit where docs/kv_layout.md's
VLLM_CPU formula puts it (K transposed in the first half of each (block, head) page, V plain in
the second); src/kv/relayout_test.cc checks kvferry's re-layout against the same formula. Run
with build/venv's Python, which has vLLM (make test-vllm; CTest vllm_cpu_layout).
"""
import sys

import torch
from vllm import _custom_ops as ops
from vllm.v1.attention.backends.cpu_attn import _get_attn_isa


def formula_offsets(block, head, token, dim, heads, block_size, head_size, part):
    page = (block * heads + head) * 2 * block_size * head_size
    if part == "K":
        return page + dim * block_size + token
    return page + block_size * head_size + token * head_size + dim


def check_reshape_and_cache_writes_the_vllm_cpu_layout(dtype, block_size, head_size):
    torch.manual_seed(block_size + head_size)
    heads, num_blocks, tokens = 2, 6, 3 * block_size - 5
    isa = _get_attn_isa(dtype, block_size, head_size)
    if isa == "amx":
        print(f"skip {dtype} {block_size}/{head_size}: AMX packs differently, not checked here")
        return
    key = torch.randn(tokens, heads, head_size).to(dtype)
    value = torch.randn(tokens, heads, head_size).to(dtype)
    blocks = torch.randperm(num_blocks)[:3]  # a scattered block table
    slots = torch.tensor([int(blocks[t // block_size]) * block_size + t % block_size
                          for t in range(tokens)], dtype=torch.int64)
    cache = torch.zeros(num_blocks, heads, block_size, 2 * head_size, dtype=dtype)
    kv = cache.view(num_blocks, heads, block_size * 2, head_size)
    key_cache, value_cache = kv.chunk(2, dim=2)  # exactly what CPU_ATTN's forward does
    ops.cpu_attn_reshape_and_cache(key, value, key_cache, value_cache, slots, isa)

    flat = cache.reshape(-1)
    t = torch.arange(tokens)
    blk = blocks[t // block_size]
    tok = t % block_size
    for part, src in (("K", key), ("V", value)):
        for h in range(heads):
            for d in range(head_size):
                at = formula_offsets(blk, h, tok, d, heads, block_size, head_size, part)
                assert torch.equal(flat[at], src[:, h, d]), f"{part} head {h} dim {d} ({isa})"
    # Nothing else was written: the slots no token maps to are still zero.
    written = torch.zeros_like(flat, dtype=torch.bool)
    for part in ("K", "V"):
        for h in range(heads):
            for d in range(head_size):
                written[formula_offsets(blk, h, tok, d, heads, block_size, head_size, part)] = True
    assert not flat[~written].any()


def main():
    for dtype in (torch.float32, torch.bfloat16):
        for block_size, head_size in ((128, 64), (32, 128), (16, 64)):
            check_reshape_and_cache_writes_the_vllm_cpu_layout(dtype, block_size, head_size)
            print(f"ok {dtype} block {block_size} head {head_size}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
