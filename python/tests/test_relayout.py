"""kvferry.CacheSpec and kvferry.relayout_tokens: the C++ re-layout from Python.

Buffers are array('f') (their address from buffer_info()), values are distinct per (layer,
part, token, head, dim), and every copied element is checked at the place the layout's own
element formula puts it; untouched slots stay as they were. No torch needed."""

from array import array

import pytest

import kvferry
from kvferry import CacheSpec, KernelBlockId, relayout_tokens

LAYERS, HEADS, DIM = 2, 2, 4


def value(layer, part, token, head, dim):
    return float(((layer * 2 + part) * 1000 + token) * 100 + head * 10 + dim)


def element(spec, layer, part, block, t, head, dim):
    """(region, element index) of one value, from the layout's definition."""
    n, h, d = spec.block_size_kernel, spec.num_kv_heads, spec.head_dim
    if spec.layout == "NHD":
        return 2 * layer + part, ((block * n + t) * h + head) * d + dim
    if spec.layout == "HND":
        return 2 * layer + part, ((block * h + head) * n + t) * d + dim
    page = (block * h + head) * 2 * n * d      # VLLM_CPU: K tile [dim][token], then V [token][dim]
    return layer, page + (dim * n + t if part == 0 else n * d + t * d + dim)


def cache(spec):
    regions = [array("f", [-1.0]) * (spec.region_bytes // 4) for _ in range(spec.num_regions)]
    return regions, [r.buffer_info()[0] for r in regions]


def fill(spec, regions, blocks, num_tokens):
    for layer in range(LAYERS):
        for part in (0, 1):
            for t in range(num_tokens):
                b, o = blocks[t // spec.block_size_kernel], t % spec.block_size_kernel
                for head in range(HEADS):
                    for dim in range(DIM):
                        r, i = element(spec, layer, part, b.value, o, head, dim)
                        regions[r][i] = value(layer, part, t, head, dim)


@pytest.mark.parametrize("src_layout,src_bs,dst_layout,dst_bs", [
    ("NHD", 4, "HND", 8), ("HND", 8, "NHD", 4), ("VLLM_CPU", 16, "VLLM_CPU", 4),
    ("NHD", 4, "VLLM_CPU", 16), ("VLLM_CPU", 8, "HND", 8)])
def test_relayout_puts_every_value_where_the_destination_layout_says(src_layout, src_bs,
                                                                     dst_layout, dst_bs):
    num_tokens, begin, end = 29, 3, 27
    src = CacheSpec(LAYERS, HEADS, DIM, "f32", src_layout, src_bs, 10)
    dst = CacheSpec(LAYERS, HEADS, DIM, "f32", dst_layout, dst_bs, 10)
    src_blocks = [KernelBlockId(b) for b in (7, 2, 9, 4, 0, 5, 1, 8)][:-(-num_tokens // src_bs)]
    dst_blocks = [KernelBlockId(b) for b in (3, 8, 6, 1, 9, 2, 0, 5)][:-(-num_tokens // dst_bs)]
    src_mem, src_addr = cache(src)
    dst_mem, dst_addr = cache(dst)
    fill(src, src_mem, src_blocks, num_tokens)
    relayout_tokens(src, src_addr, src_blocks, dst, dst_addr, dst_blocks, begin, end)
    for layer in range(LAYERS):
        for part in (0, 1):
            for t in range(num_tokens):
                b, o = dst_blocks[t // dst_bs].value, t % dst_bs
                for head in range(HEADS):
                    for dim in range(DIM):
                        r, i = element(dst, layer, part, b, o, head, dim)
                        want = value(layer, part, t, head, dim) if begin <= t < end else -1.0
                        assert dst_mem[r][i] == want, (layer, part, t, head, dim)


def amx_element(spec, layer, part, block, t, head, dim):
    """(region, element index) in a VLLM_CPU_AMX page: K [t / 16][dim / 2][t % 16][dim % 2],
    V [dim / 16][t / 2][dim % 16][t % 2] (vLLM's AMX attention; docs/kv_layout.md)."""
    n, h, d = spec.block_size_kernel, spec.num_kv_heads, spec.head_dim
    page = (block * h + head) * 2 * n * d
    if part == 0:
        return layer, page + (t // 16) * 16 * d + (dim // 2) * 32 + (t % 16) * 2 + dim % 2
    return layer, page + n * d + (dim // 16) * 16 * n + (t // 2) * 32 + (dim % 16) * 2 + t % 2


def test_relayout_into_and_out_of_vllm_cpu_amx():
    """NHD (bf16, 16 dims) -> VLLM_CPU_AMX of another block size -> VLLM_CPU: every 16-bit value
    where each layout's formula puts it."""
    dim, num_tokens = 16, 70
    specs = [CacheSpec(LAYERS, HEADS, dim, "bf16", layout, bs, 8)
             for layout, bs in (("NHD", 16), ("VLLM_CPU_AMX", 32), ("VLLM_CPU", 64))]
    tables = [[KernelBlockId(b) for b in order][:-(-num_tokens // spec.block_size_kernel)]
              for spec, order in zip(specs, ((5, 1, 7, 3, 0), (6, 2, 4), (1, 7)))]
    mems = [[array("H", [0xFFFF]) * (s.region_bytes // 2) for _ in range(s.num_regions)]
            for s in specs]

    def at(i, layer, part, t, head, d):
        spec, blocks = specs[i], tables[i]
        b, o = blocks[t // spec.block_size_kernel].value, t % spec.block_size_kernel
        if spec.layout == "VLLM_CPU_AMX":
            return amx_element(spec, layer, part, b, o, head, d)
        if spec.layout == "NHD":
            return 2 * layer + part, ((b * spec.block_size_kernel + o) * HEADS + head) * dim + d
        page = (b * HEADS + head) * 2 * spec.block_size_kernel * dim
        n = spec.block_size_kernel
        return layer, page + (d * n + o if part == 0 else n * dim + o * dim + d)

    keys = [(layer, part, t, head, d) for layer in range(LAYERS) for part in (0, 1)
            for t in range(num_tokens) for head in range(HEADS) for d in range(dim)]
    for k, key in enumerate(keys):
        r, i = at(0, *key)
        mems[0][r][i] = k
    for i in (0, 1):
        relayout_tokens(specs[i], [m.buffer_info()[0] for m in mems[i]], tables[i],
                        specs[i + 1], [m.buffer_info()[0] for m in mems[i + 1]], tables[i + 1],
                        0, num_tokens)
    for side in (1, 2):
        for k, key in enumerate(keys):
            r, i = at(side, *key)
            assert mems[side][r][i] == k, (specs[side].layout, key)
    with pytest.raises(kvferry.InvalidArgumentError, match="16-bit"):
        CacheSpec(LAYERS, HEADS, dim, "f32", "VLLM_CPU_AMX", 32, 3)


def test_spec_geometry_and_refusals():
    spec = CacheSpec(LAYERS, HEADS, DIM, "bf16", "VLLM_CPU", 16, 3)
    assert (spec.num_regions, spec.bytes_per_kernel_block) == (LAYERS, 16 * HEADS * 2 * DIM * 2)
    assert spec.region_bytes == 3 * spec.bytes_per_kernel_block
    assert "layout='VLLM_CPU'" in repr(spec)
    with pytest.raises(kvferry.InvalidArgumentError, match="dtype"):
        CacheSpec(LAYERS, HEADS, DIM, "f8", "NHD", 16, 3)
    with pytest.raises(kvferry.InvalidArgumentError, match="layout"):
        CacheSpec(LAYERS, HEADS, DIM, "f32", "LBHNC", 16, 3)
    with pytest.raises(ValueError):
        CacheSpec(LAYERS, HEADS, DIM, "f32", "NHD", 0, 3)


def test_bad_views_are_refused_before_a_byte_is_written():
    src = CacheSpec(LAYERS, HEADS, DIM, "f32", "NHD", 4, 2)
    dst = CacheSpec(LAYERS, HEADS, DIM, "f32", "HND", 4, 2)
    src_mem, src_addr = cache(src)
    dst_mem, dst_addr = cache(dst)
    blocks = [KernelBlockId(0), KernelBlockId(1)]
    before = [r.tobytes() for r in dst_mem]
    with pytest.raises(kvferry.InvalidArgumentError):        # one region short
        relayout_tokens(src, src_addr[:-1], blocks, dst, dst_addr, blocks, 0, 8)
    with pytest.raises(kvferry.InvalidArgumentError, match="address is 0"):
        relayout_tokens(src, [0] * len(src_addr), blocks, dst, dst_addr, blocks, 0, 8)
    with pytest.raises(kvferry.OutOfRangeError):             # block 2 outside a 2-block cache
        relayout_tokens(src, src_addr, [KernelBlockId(0), KernelBlockId(2)], dst, dst_addr,
                        blocks, 0, 8)
    with pytest.raises(kvferry.OutOfRangeError):             # table shorter than the tokens
        relayout_tokens(src, src_addr, blocks[:1], dst, dst_addr, blocks, 0, 8)
    other = CacheSpec(LAYERS, HEADS, DIM + 4, "f32", "HND", 4, 2)
    with pytest.raises(kvferry.InvalidArgumentError, match="head_dim"):
        relayout_tokens(src, src_addr, blocks, other, cache(other)[1], blocks, 0, 8)
    with pytest.raises(TypeError):                           # logical ids are not kernel ids
        relayout_tokens(src, src_addr, [kvferry.LogicalBlockId(0)], dst, dst_addr, blocks, 0, 4)
    assert [r.tobytes() for r in dst_mem] == before
