// libFuzzer target: tokenizer::Tokenizer::FromHuggingFaceJson (include/kvferry/tokenizer/
// tokenizer.h) over arbitrary text as a tokenizer.json, then Encode, Decode and streaming of a few
// texts, and the GGUF export and reload (gguf_metadata.h) of what loaded.
//
// Properties: no crash, hang or sanitizer report (bad JSON, bad regexes, unknown types, huge or
// dangling merges are statuses); encoded ids are in [0, vocab_size); Decode is valid UTF-8; the
// streamed chunks concatenate to Decode.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "kvferry/common/utf8.h"
#include "kvferry/tokenizer/gguf_metadata.h"
#include "kvferry/tokenizer/stream_decoder.h"
#include "kvferry/tokenizer/tokenizer.h"

namespace {

using kvferry::tokenizer::StreamDecoder;
using kvferry::tokenizer::Tokenizer;

void Check(const Tokenizer& tok, std::string_view text) {
  auto ids = tok.Encode(text, true);
  if (!ids.ok()) return;
  for (int32_t id : *ids) {
    if (id < 0 || id >= tok.vocab_size()) std::abort();
  }
  const std::string decoded = tok.Decode(*ids, false);
  if (!kvferry::IsValidUtf8(decoded)) std::abort();
  StreamDecoder stream(&tok, /*skip_special_tokens=*/true);
  std::string streamed;
  for (int32_t id : *ids) streamed += stream.Add(id);
  streamed += stream.Finish();
  if (streamed != tok.Decode(*ids, true)) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  auto tok = Tokenizer::FromHuggingFaceJson(input);
  if (!tok.ok()) return 0;
  for (std::string_view text :
       {std::string_view("Hello world! 123"),
        std::string_view(" <s>x</s>\n\t\xE4\xB8\xAD\xF0\x9F\x98\x80 e\xCC\x81"),
        input.substr(0, 48)}) {
    Check(*tok, text);
  }
  auto meta = kvferry::tokenizer::ExportGgufMetadata(input);
  if (meta.ok()) {
    auto gguf = Tokenizer::FromGguf(*meta);
    if (gguf.ok()) Check(*gguf, "Hello world! 123");
  }
  return 0;
}
