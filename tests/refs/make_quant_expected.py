"""Writes what llama.cpp's `gguf` Python package (PyPI, pinned in python/requirements-dev.txt; its
dequantizers are ggml's, written in NumPy) decodes random GGUF quantized blocks to, for
tests/refs/quant_refs_test.cc: for each type the engine computes, 64 blocks of random bytes with
finite random F16 scales, and the f32 bits of every value they hold.

    usage: python make_quant_expected.py OUT.json

JSON: {"Q4_K": {"blocks": "<hex>", "values": ["<8 hex digits: f32 bits>", ...]}, ...}
"""
import json
import sys

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf.quants import dequantize

# The byte offsets of each type's F16 scales in its block (ggml's layouts).
SCALES = {
    "Q8_0": [0],
    "Q4_0": [0],
    "Q5_0": [0],
    "Q4_1": [0, 2],
    "Q5_1": [0, 2],
    "Q4_K": [0, 2],
    "Q5_K": [0, 2],
    "Q6_K": [208],
}
BLOCKS = 64


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: python make_quant_expected.py OUT.json")
    rng = np.random.default_rng(22)
    out = {}
    for name, offsets in SCALES.items():
        qtype = GGMLQuantizationType[name]
        _, block_bytes = GGML_QUANT_SIZES[qtype]
        raw = rng.integers(0, 256, (BLOCKS, block_bytes), dtype=np.uint8)
        for block in raw:
            for o in offsets:
                scale = np.float16(rng.uniform(-2.0, 2.0))
                block[o : o + 2] = np.frombuffer(scale.tobytes(), dtype=np.uint8)
        values = dequantize(raw, qtype).astype(np.float32).reshape(-1)
        out[name] = {
            "blocks": raw.tobytes().hex(),
            "values": [format(int(v), "08x") for v in values.view(np.uint32)],
        }
    with open(sys.argv[1], "w", encoding="utf-8") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
