// `kvferry quantize IN OUT --type TYPE`: writes a model's matrices as GGUF quantized
// blocks, as llama.cpp's llama-quantize does (ggml's reference quantizer; norms and biases stay
// F32). IN is an F32/F16/BF16 GGUF file or Hugging Face directory; OUT a GGUF file with IN's
// tokenizer (docs/models.md, "Quantized GGUF").
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "engine/model/checkpoint_writer.h"
#include "engine/model/gguf_file_type.h"
#include "engine/model/gguf_tokenizer.h"
#include "engine/model/model_loader.h"
#include "engine/model/tensor_slots.h"
#include "kvferry/formats/gguf.h"
#include "tools/command_registry.h"

namespace {

namespace fs = std::filesystem;
using kvferry::Status;
using kvferry::StatusOr;
using kvferry::engine::ModelWeights;
using kvferry::tokenizer::GgufTokenizerMetadata;

struct QuantizeOptions {
  std::string in;
  std::string out;
  std::string type;
  bool pure = false;
};

StatusOr<std::string> ReadText(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return kvferry::NotFoundError("cannot read '" + path.string() + "'");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// IN's tokenizer as GGUF keys: a GGUF file's own, or a Hugging Face directory's tokenizer.json
// (and tokenizer_config.json) converted as llama.cpp's converter does.
StatusOr<GgufTokenizerMetadata> InputTokenizer(const std::string& in,
                                               kvferry::engine::ModelFormat format,
                                               int32_t vocab_size) {
  if (format == kvferry::engine::ModelFormat::kGguf) {
    KVF_ASSIGN_OR_RETURN(auto file, kvferry::formats::GgufFile::Open(in));
    return kvferry::engine::ReadGgufTokenizer(file.metadata());
  }
  const fs::path dir(in);
  KVF_ASSIGN_OR_RETURN(std::string json, ReadText(dir / "tokenizer.json"));
  std::string config;
  if (fs::exists(dir / "tokenizer_config.json")) {
    KVF_ASSIGN_OR_RETURN(config, ReadText(dir / "tokenizer_config.json"));
  }
  return kvferry::engine::GgufTokenizerFromHuggingFace(json, config, vocab_size);
}

// The matrices must hold plain floats: quantizing blocks again would compound their error. Every
// matrix of the model is looked at (the slots of its tensor table), named in the refusal.
Status RequireFloatMatrices(const ModelWeights& w, const std::string& in) {
  ModelWeights copy = w;  // shares the bytes; the slots point into the copy
  for (const auto& slot :
       kvferry::engine::TensorSlots(kvferry::engine::TensorNaming::kHuggingFace, &copy)) {
    if (slot.matrix == nullptr || !slot.matrix->quantized()) continue;
    return kvferry::InvalidArgumentError(
        "'" + in + "' is already quantized (" +
        std::string(kvferry::formats::DTypeName(slot.matrix->dtype)) + ": " + slot.name +
        "); quantize an F32, F16 or BF16 model");
  }
  return Status::Ok();
}

// "Q4_K 10, Q6_K 5, F32 9": how many of `path`'s tensors each type holds, most first.
StatusOr<std::string> TypeCounts(const std::string& path) {
  KVF_ASSIGN_OR_RETURN(auto file, kvferry::formats::GgufFile::Open(path));
  std::map<std::string, int> counts;
  for (const auto& t : file.tensors()) ++counts[std::string(kvferry::formats::DTypeName(t.dtype))];
  std::vector<std::pair<int, std::string>> order;
  for (const auto& [name, n] : counts) order.emplace_back(-n, name);
  std::sort(order.begin(), order.end());
  std::string out;
  for (const auto& [n, name] : order) {
    out += (out.empty() ? "" : ", ") + name + " " + std::to_string(-n);
  }
  return out;
}

Status Quantize(const QuantizeOptions& o) {
  auto type = kvferry::engine::GgufFileTypeFromName(o.type);
  if (!type) {
    return kvferry::InvalidArgumentError("--type '" + o.type + "': kvferry quantizes to " +
                                         kvferry::engine::GgufFileTypeNames() +
                                         " (the other GGUF types are not supported yet; "
                                         "docs/models.md)");
  }
  type->pure = o.pure;
  KVF_ASSIGN_OR_RETURN(auto format, kvferry::engine::DetectModelFormat(o.in));
  if (format == kvferry::engine::ModelFormat::kBuiltin) {
    return kvferry::InvalidArgumentError("'" + o.in +
                                         "' is a built-in model; give a GGUF file or a Hugging "
                                         "Face directory");
  }
  KVF_ASSIGN_OR_RETURN(ModelWeights w, kvferry::engine::LoadModelWeights(o.in));
  KVF_RETURN_IF_ERROR(RequireFloatMatrices(w, o.in));
  KVF_ASSIGN_OR_RETURN(GgufTokenizerMetadata tok,
                       InputTokenizer(o.in, format, w.config.vocab_size));
  KVF_RETURN_IF_ERROR(kvferry::engine::WriteGgufCheckpoint(
      w, o.out, *type, [&tok](kvferry::formats::GgufWriter* writer) {
        return kvferry::engine::AddGgufTokenizer(tok, writer);
      }));
  std::error_code ec;
  KVF_ASSIGN_OR_RETURN(std::string types, TypeCounts(o.out));
  std::fprintf(stderr, "quantize: %s, %lld parameters, %s (%s): %s (%.1f MiB)\n",
               w.config.architecture.c_str(), static_cast<long long>(w.config.NumParameters()),
               type->name.c_str(), types.c_str(), o.out.c_str(),
               static_cast<double>(fs::file_size(o.out, ec)) / (1 << 20));
  return Status::Ok();
}

int RunQuantize(const QuantizeOptions& o) {
  const Status s = Quantize(o);
  if (!s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}

void AddQuantize(CLI::App& app) {
  auto o = std::make_shared<QuantizeOptions>();
  auto* sub = app.add_subcommand(
      "quantize", "Write an F32/F16/BF16 GGUF file or Hugging Face directory as a quantized GGUF");
  sub->add_option("IN", o->in, "GGUF file or Hugging Face directory (F32, F16 or BF16)")
      ->required();
  sub->add_option("OUT", o->out, "GGUF file to write")->required();
  sub->add_option("--type", o->type,
                  "q8_0, q4_0, q5_0, q4_1, q5_1, q4_k_s, q4_k_m, q5_k_s, q5_k_m or q6_k: each "
                  "matrix in the type llama-quantize assigns it (the _k_m mixtures keep some "
                  "attn_v and ffn_down matrices and the output in Q6_K); norms and biases stay F32")
      ->required();
  sub->add_flag("--pure", o->pure, "Every matrix in the type's base type (llama-quantize --pure)");
  sub->callback([o] { throw CLI::RuntimeError(RunQuantize(*o)); });
}
KVF_REGISTER_COMMAND(AddQuantize);

}  // namespace
