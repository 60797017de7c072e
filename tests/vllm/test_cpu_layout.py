"""kvferry's VLLM_CPU and VLLM_CPU_AMX layouts are the ones vLLM's CPU attention writes.

vLLM's own op, cpu_attn_reshape_and_cache (the op CPU_ATTN's forward calls), scatters random K
and V rows of a sequence into a per-layer cache tensor [num_blocks, num_kv_heads, block_size,
2 * head_size], through a shuffled slot mapping, packed for the ISA vLLM picks. Every element
must sit where docs/kv_layout.md's formula for that ISA puts it: vec/vec16 (VLLM_CPU), K
transposed in the first half of each (block, head) page and V plain in the second; amx
(VLLM_CPU_AMX), K in 16-token tiles of dim pairs and V in 16-dim tiles of token pairs.
src/kv/relayout_test.cc checks kvferry's re-layout against the same formulas. The amx packing
is checked wherever vLLM's op runs it: on a CPU with AMX tiles, where vLLM picks it for bf16 at
block sizes that are multiples of 32 (a CPU without AMX prints that it was not checked there).
Run with build/venv's Python, which has vLLM (make test-vllm; CTest vllm_cpu_layout).
"""
import sys

import torch
from vllm import _custom_ops as ops
from vllm.v1.attention.backends.cpu_attn import _get_attn_isa


def formula_offsets(isa, block, head, token, dim, heads, block_size, head_size, part):
    page = (block * heads + head) * 2 * block_size * head_size
    if isa == "amx":
        if part == "K":
            return page + (token // 16) * 16 * head_size + (dim // 2) * 32 + (token % 16) * 2 + \
                dim % 2
        return page + block_size * head_size + (dim // 16) * 16 * block_size + \
            (token // 2) * 32 + (dim % 16) * 2 + token % 2
    if part == "K":
        return page + dim * block_size + token
    return page + block_size * head_size + token * head_size + dim


def check_reshape_and_cache_writes_the_layout(dtype, block_size, head_size, isa):
    torch.manual_seed(block_size + head_size)
    heads, num_blocks, tokens = 2, 6, 3 * block_size - 5
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
                at = formula_offsets(isa, blk, h, tok, d, heads, block_size, head_size, part)
                assert torch.equal(flat[at], src[:, h, d]), f"{part} head {h} dim {d} ({isa})"
    # Nothing else was written: the slots no token maps to are still zero.
    written = torch.zeros_like(flat, dtype=torch.bool)
    for part in ("K", "V"):
        for h in range(heads):
            for d in range(head_size):
                written[formula_offsets(isa, blk, h, tok, d, heads, block_size, head_size,
                                        part)] = True
    assert not flat[~written].any()


def main():
    for dtype in (torch.float32, torch.bfloat16):
        for block_size, head_size in ((128, 64), (32, 128), (16, 64), (64, 32)):
            isa = _get_attn_isa(dtype, block_size, head_size)
            check_reshape_and_cache_writes_the_layout(dtype, block_size, head_size, isa)
            print(f"ok {dtype} block {block_size} head {head_size}: {isa}")
    if not torch.cpu._is_amx_tile_supported():
        print("amx not checked: this CPU has no AMX tiles (vLLM never picks amx here)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
