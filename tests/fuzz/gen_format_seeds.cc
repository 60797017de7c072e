// Writes the seed corpora of fuzz_safetensors and fuzz_gguf (tests/fuzz/corpus/safetensors/,
// tests/fuzz/corpus/gguf/): small valid files made by the real writers, and files broken in one
// way each, so that fuzzing starts both inside and just outside what the parsers accept. Run by
// hand when a format changes:
//   build/bin/fuzz_gen_format_seeds tests/fuzz/corpus
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "kvferry/common/half.h"
#include "kvferry/formats/gguf_writer.h"
#include "kvferry/formats/safetensors_writer.h"

namespace {

using namespace kvferry::formats;
using Bytes = std::vector<std::byte>;

void Write(const std::string& dir, const std::string& name, const Bytes& bytes) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/" + name, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
}

template <typename T>
std::span<const std::byte> AsBytes(const std::vector<T>& v) {
  return std::as_bytes(std::span(v));
}

template <typename T>
void Append(Bytes& out, T value) {
  const size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &value, sizeof(T));
}

void AppendString(Bytes& out, const std::string& s) {
  Append<uint64_t>(out, s.size());
  for (char c : s) out.push_back(static_cast<std::byte>(c));
}

void Check(const kvferry::Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    std::exit(1);
  }
}

// ---- safetensors ----

Bytes SafetensorsRaw(const std::string& header, size_t data_bytes) {
  Bytes out;
  Append<uint64_t>(out, header.size());
  for (char c : header) out.push_back(static_cast<std::byte>(c));
  out.resize(out.size() + data_bytes, std::byte{0x3f});
  return out;
}

Bytes SafetensorsModel() {
  SafetensorsWriter w;
  w.SetMetadata("format", "pt");
  w.SetMetadata("kvferry_config", R"({"vocab_size": 8, "hidden_size": 4})");
  const std::vector<float> f32{1.0f, -2.0f, 0.5f, 3.0f, 0.0f, -0.25f};
  const std::vector<uint16_t> f16{kvferry::F32ToF16(1.0f), kvferry::F32ToF16(-1.5f), 0, 0x7c00};
  const std::vector<uint16_t> bf16{kvferry::F32ToBF16(2.0f), kvferry::F32ToBF16(-4.0f)};
  Check(w.AddTensor("model.embed_tokens.weight", DType::kF32, {2, 3}, AsBytes(f32)));
  Check(w.AddTensor("model.norm.weight", DType::kF16, {4}, AsBytes(f16)));
  Check(w.AddTensor("lm_head.weight", DType::kBF16, {1, 2}, AsBytes(bf16)));
  return w.Bytes();
}

void SafetensorsSeeds(const std::string& dir) {
  const Bytes model = SafetensorsModel();
  Write(dir, "model", model);
  SafetensorsWriter others;
  const std::vector<uint8_t> eight{1, 2, 3, 4, 5, 6, 7, 8};
  Check(others.AddTensor("i8", DType::kI8, {4}, AsBytes(eight).first(4)));
  Check(others.AddTensor("f8", DType::kF8_E4M3, {2}, AsBytes(eight).first(2)));
  Check(others.AddTensor("bool", DType::kBool, {1}, AsBytes(eight).first(1)));
  Check(others.AddTensor("f4", DType::kF4, {2}, AsBytes(eight).first(1)));
  Check(others.AddTensor("u64", DType::kU64, {}, AsBytes(eight)));
  Write(dir, "other_dtypes", others.Bytes());
  SafetensorsWriter metadata_only;
  metadata_only.SetMetadata("format", "pt");
  Write(dir, "metadata_only", metadata_only.Bytes());
  Write(dir, "scalar_empty",
        SafetensorsRaw(R"({"s":{"dtype":"F32","shape":[],"data_offsets":[0,4]},)"
                       R"("e":{"dtype":"F16","shape":[0,3],"data_offsets":[4,4]}}  )",
                       4));
  Write(dir, "short", Bytes(5));
  Bytes past_end = model;
  past_end[1] = std::byte{0x10};  // header length + 4096
  Write(dir, "header_past_end", past_end);
  Write(dir, "truncated", Bytes(model.begin(), model.end() - 3));
  Write(dir, "overlap",
        SafetensorsRaw(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                       R"("b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})",
                       6));
  Write(dir, "gap",
        SafetensorsRaw(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                       R"("b":{"dtype":"U8","shape":[2],"data_offsets":[4,6]}})",
                       6));
  Write(dir, "unknown_dtype",
        SafetensorsRaw(R"({"a":{"dtype":"Q4_0","shape":[32],"data_offsets":[0,18]}})", 18));
  Write(dir, "duplicate_name",
        SafetensorsRaw(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                       R"("a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                       2));
  Write(dir, "size_mismatch",
        SafetensorsRaw(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8));
  Write(dir, "end_before_begin",
        SafetensorsRaw(R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[2,1]}})", 2));
}

// ---- GGUF ----

Bytes GgufHeader(uint64_t tensors, uint64_t kvs, uint32_t version = 3) {
  Bytes out;
  Append<uint32_t>(out, 0x46554747u);  // "GGUF"
  Append<uint32_t>(out, version);
  Append<uint64_t>(out, tensors);
  Append<uint64_t>(out, kvs);
  return out;
}

// A file of one tensor "w" with this ne[] (innermost first), type id and offset, and
// `data_bytes` after the header padded to 32.
Bytes GgufOneTensor(const std::vector<uint64_t>& ne, uint32_t type, uint64_t offset,
                    size_t data_bytes = 64) {
  Bytes out = GgufHeader(1, 0);
  AppendString(out, "w");
  Append<uint32_t>(out, ne.size());
  for (uint64_t d : ne) Append<uint64_t>(out, d);
  Append<uint32_t>(out, type);
  Append<uint64_t>(out, offset);
  out.resize((out.size() + 31) / 32 * 32 + data_bytes);
  return out;
}

Bytes GgufModel() {
  using T = GgufValueType;
  GgufWriter w;
  Check(w.AddMetadata("general.architecture", GgufValue::String("llama")));
  Check(w.AddMetadata("llama.block_count", GgufValue::Int(T::kU32, 1)));
  Check(w.AddMetadata("llama.context_length", GgufValue::Int(T::kU64, 64)));
  Check(w.AddMetadata("llama.rope.freq_base", GgufValue::Float(T::kF32, 10000.0)));
  Check(w.AddMetadata("eps64", GgufValue::Float(T::kF64, 1e-6)));
  Check(w.AddMetadata("small", GgufValue::Int(T::kI8, -5)));
  Check(w.AddMetadata("flag", GgufValue::Bool(true)));
  Check(w.AddMetadata("tokenizer.ggml.tokens", GgufValue::StringArray({"<s>", "</s>", "a"})));
  Check(w.AddMetadata("tokenizer.ggml.scores", GgufValue::FloatArray(T::kF32, {0, -1, -2})));
  Check(w.AddMetadata("tokenizer.ggml.token_type", GgufValue::IntArray(T::kI32, {3, 3, 1})));
  Check(w.AddMetadata("bools", GgufValue::BoolArray({true, false})));
  const std::vector<float> f32{1, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<uint16_t> f16{kvferry::F32ToF16(1.0f), 0, 0, kvferry::F32ToF16(-2.0f)};
  const std::vector<uint16_t> bf16{kvferry::F32ToBF16(0.5f), kvferry::F32ToBF16(8.0f)};
  Check(w.AddTensor("token_embd.weight", DType::kF32, {2, 4}, AsBytes(f32)));
  Check(w.AddTensor("output_norm.weight", DType::kF16, {4}, AsBytes(f16)));
  Check(w.AddTensor("bf16", DType::kBF16, {2}, AsBytes(bf16)));
  Check(w.AddTensor("q4_0", DType::kQ4_0, {1, 32}, Bytes(18, std::byte{0x11})));
  return w.Bytes();
}

void GgufSeeds(const std::string& dir) {
  const Bytes model = GgufModel();
  Write(dir, "model", model);
  GgufWriter aligned;
  Check(aligned.SetAlignment(64));
  Check(aligned.AddMetadata("general.architecture", GgufValue::String("llama")));
  Check(aligned.AddTensor("w", DType::kF32, {3}, AsBytes(std::vector<float>{1, 2, 3})));
  Write(dir, "aligned64", aligned.Bytes());
  Bytes v2 = model;
  v2[4] = std::byte{2};
  Write(dir, "v2", v2);
  Bytes no_tensors = GgufHeader(0, 1);
  AppendString(no_tensors, "general.alignment");
  Append<uint32_t>(no_tensors, 4);
  Append<uint32_t>(no_tensors, 16);
  Write(dir, "no_tensors", no_tensors);
  Write(dir, "truncated", Bytes(model.begin(), model.begin() + model.size() / 2));
  Bytes bad_magic = model;
  bad_magic[3] = std::byte{'L'};
  Write(dir, "bad_magic", bad_magic);
  Write(dir, "version1", GgufHeader(0, 0, 1));
  Bytes lying = model;
  lying[13] = std::byte{1};  // tensor count + 2^40
  Write(dir, "lying_count", lying);
  Bytes lying_array = GgufHeader(0, 1);
  AppendString(lying_array, "a");
  Append<uint32_t>(lying_array, 9);
  Append<uint32_t>(lying_array, 4);
  Append<uint64_t>(lying_array, uint64_t{1} << 40);
  Append<uint32_t>(lying_array, 7);
  Write(dir, "lying_array", lying_array);
  Bytes nested = GgufHeader(0, 1);
  AppendString(nested, "a");
  Append<uint32_t>(nested, 9);
  Append<uint32_t>(nested, 9);
  Append<uint64_t>(nested, 0);
  Write(dir, "array_of_arrays", nested);
  Bytes bad_bool = GgufHeader(0, 1);
  AppendString(bad_bool, "a");
  Append<uint32_t>(bad_bool, 7);
  Append<uint8_t>(bad_bool, 2);
  Write(dir, "bad_bool", bad_bool);
  Bytes dup = GgufHeader(0, 2);
  for (int i = 0; i < 2; ++i) {
    AppendString(dup, "a");
    Append<uint32_t>(dup, 4);
    Append<uint32_t>(dup, i);
  }
  Write(dir, "duplicate_key", dup);
  Write(dir, "misaligned", GgufOneTensor({4}, 0, 4));
  Write(dir, "past_end", GgufOneTensor({32}, 0, 0));
  Write(dir, "five_dims", GgufOneTensor({1, 1, 1, 1, 4}, 0, 0));
  Write(dir, "unknown_type", GgufOneTensor({4}, 31, 0));
  Write(dir, "q4_k", GgufOneTensor({256}, 12, 0, 144));  // valid: one Q4_K block
  Bytes overlap = GgufHeader(2, 0);
  for (const char* name : {"a", "b"}) {
    AppendString(overlap, name);
    Append<uint32_t>(overlap, 1);
    Append<uint64_t>(overlap, 16);
    Append<uint32_t>(overlap, 0);
    Append<uint64_t>(overlap, name[0] == 'a' ? 0 : 32);
  }
  overlap.resize((overlap.size() + 31) / 32 * 32 + 96);
  Write(dir, "overlap", overlap);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR (writes CORPUS_DIR/safetensors, /gguf)\n", argv[0]);
    return 2;
  }
  const std::string root = argv[1];
  SafetensorsSeeds(root + "/safetensors");
  GgufSeeds(root + "/gguf");
  return 0;
}
