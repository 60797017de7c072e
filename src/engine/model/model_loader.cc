#include "engine/model/model_loader.h"

#include <filesystem>
#include <fstream>

#include "engine/model/deepseek_rope.h"
#include "engine/model/gguf_config.h"
#include "engine/model/gguf_tokenizer.h"
#include "engine/model/hf_config.h"
#include "engine/model/tensor_slots.h"
#include "kvferry/common/logging.h"
#include "kvferry/formats/gguf.h"
#include "kvferry/formats/safetensors_model.h"

namespace kvferry::engine {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

// The JSON object in `path`; null when the file is absent and not `required`.
StatusOr<Json> ReadJsonFile(const fs::path& path, bool required) {
  std::ifstream in(path);
  if (!in) {
    if (!required) return Json();
    return NotFoundError("cannot open '" + path.string() + "'");
  }
  Json j = Json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return InvalidArgumentError("'" + path.string() + "' is not a JSON object");
  }
  return j;
}

// Touches every page of the big tensors once, logging progress, so a large model is read from
// disk now and not during the first request.
void ReadThrough(const std::vector<formats::TensorView>& tensors, const std::string& what) {
  uint64_t total = 0;
  for (const formats::TensorView& t : tensors) total += t.size_bytes;
  if (total < (uint64_t{256} << 20)) return;
  uint64_t done = 0, next_report = 0;
  volatile uint8_t sink = 0;
  for (const formats::TensorView& t : tensors) {
    for (uint64_t off = 0; off < t.size_bytes; off += 4096) {
      sink = sink + static_cast<uint8_t>(t.data[off]);
    }
    done += t.size_bytes;
    if (done >= next_report) {
      KVF_LOG_INFO("loading {}: {:.1f} / {:.1f} GiB ({}%)", what, done / double(1 << 30),
                   total / double(1 << 30), done * 100 / total);
      next_report = done + total / 10;
    }
  }
}

template <typename File>
Status Bind(TensorNaming naming, const std::shared_ptr<File>& file,
            const std::set<std::string>& ignored, ModelWeights* w) {
  w->storage.push_back(file);
  KVF_RETURN_IF_ERROR(BindTensors(TensorSlots(naming, w), file->tensors(), ignored, w));
  ReadThrough(file->tensors(), w->config.name);
  PermuteMlaRopeRows(w, /*to_interleaved=*/false);  // DeepSeek: the checkpoint's pair order
  return Status::Ok();
}

// Tensors Hugging Face checkpoints may carry that are derived, not weights.
std::set<std::string> IgnoredHfTensors(int32_t layers) {
  std::set<std::string> out;
  for (int32_t l = 0; l < layers; ++l) {
    out.insert("model.layers." + std::to_string(l) + ".self_attn.rotary_emb.inv_freq");
  }
  return out;
}

StatusOr<ModelWeights> LoadHuggingFace(const fs::path& dir) {
  KVF_ASSIGN_OR_RETURN(Json config, ReadJsonFile(dir / "config.json", true));
  KVF_ASSIGN_OR_RETURN(Json generation, ReadJsonFile(dir / "generation_config.json", false));
  ModelWeights w;
  KVF_ASSIGN_OR_RETURN(w.config, ModelConfigFromHf(config, generation, dir.filename().string()));
  KVF_ASSIGN_OR_RETURN(formats::SafetensorsModel st, formats::SafetensorsModel::Open(dir));
  auto file = std::make_shared<formats::SafetensorsModel>(std::move(st));
  KVF_RETURN_IF_ERROR(
      Bind(TensorNaming::kHuggingFace, file, IgnoredHfTensors(w.config.num_layers), &w));
  return w;
}

StatusOr<ModelWeights> LoadSafetensorsFile(const fs::path& path) {
  KVF_ASSIGN_OR_RETURN(formats::SafetensorsModel st, formats::SafetensorsModel::Open(path));
  auto file = std::make_shared<formats::SafetensorsModel>(std::move(st));
  Json config;
  if (auto it = file->metadata().find("kvferry_config"); it != file->metadata().end()) {
    config = Json::parse(it->second, nullptr, false);
    if (config.is_discarded()) {
      return InvalidArgumentError("'" + path.string() + "': kvferry_config is not JSON");
    }
    // Files of kvferry 0.1 had no "architectures": they are Llama.
    if (config.is_object() && !config.contains("architectures")) {
      config["architectures"] = {"LlamaForCausalLM"};
    }
  } else {
    KVF_ASSIGN_OR_RETURN(config, ReadJsonFile(path.parent_path() / "config.json", true));
  }
  ModelWeights w;
  const std::string name =
      config.is_object() ? config.value("name", path.stem().string()) : path.stem().string();
  KVF_ASSIGN_OR_RETURN(w.config, ModelConfigFromHf(config, Json(), name));
  KVF_RETURN_IF_ERROR(
      Bind(TensorNaming::kHuggingFace, file, IgnoredHfTensors(w.config.num_layers), &w));
  return w;
}

StatusOr<ModelWeights> LoadGguf(const fs::path& path) {
  KVF_ASSIGN_OR_RETURN(formats::GgufFile gguf, formats::GgufFile::Open(path));
  auto file = std::make_shared<formats::GgufFile>(std::move(gguf));
  ModelWeights w;
  KVF_ASSIGN_OR_RETURN(w.config, ModelConfigFromGguf(*file, path.stem().string()));
  KVF_RETURN_IF_ERROR(Bind(TensorNaming::kGguf, file, {"rope_freqs.weight"}, &w));
  return w;
}

}  // namespace

namespace {

StatusOr<tokenizer::Tokenizer> LoadHfTokenizer(const fs::path& dir) {
  const fs::path json = dir / "tokenizer.json", config = dir / "tokenizer_config.json";
  std::error_code ec;
  if (!fs::exists(json, ec)) {
    return NotFoundError("no tokenizer.json in '" + dir.string() +
                         "' (kvferry needs the "
                         "Hugging Face tokenizer files beside the weights)");
  }
  return tokenizer::Tokenizer::FromHuggingFaceFiles(json,
                                                    fs::exists(config, ec) ? config : fs::path());
}

StatusOr<tokenizer::Tokenizer> LoadTokenizer(const std::string& model, ModelFormat format,
                                             int32_t model_vocab) {
  std::error_code ec;
  switch (format) {
    case ModelFormat::kBuiltin:
      return tokenizer::Tokenizer::BuiltinByteLevel();
    case ModelFormat::kGguf: {
      KVF_ASSIGN_OR_RETURN(formats::GgufFile file, formats::GgufFile::Open(model));
      KVF_ASSIGN_OR_RETURN(tokenizer::GgufTokenizerMetadata t, ReadGgufTokenizer(file.metadata()));
      return tokenizer::Tokenizer::FromGguf(t);
    }
    case ModelFormat::kHuggingFace:
      break;
  }
  if (fs::is_directory(model, ec)) return LoadHfTokenizer(model);
  const fs::path dir = fs::path(model).parent_path();
  if (fs::exists(dir / "tokenizer.json", ec)) return LoadHfTokenizer(dir);
  // A kvferry file of a byte-level model (what SaveCheckpoint writes for the built-ins).
  if (model_vocab >= tokenizer::Tokenizer::kBuiltinVocabSize) {
    return tokenizer::Tokenizer::BuiltinByteLevel();
  }
  return NotFoundError("no tokenizer.json beside '" + model + "'");
}

}  // namespace

StatusOr<tokenizer::Tokenizer> LoadTokenizerOverride(const std::string& tokenizer) {
  if (tokenizer == "byte-level") return tokenizer::Tokenizer::BuiltinByteLevel();
  std::error_code ec;
  if (fs::is_directory(tokenizer, ec)) return LoadHfTokenizer(tokenizer);
  return LoadHfTokenizer(fs::path(tokenizer).parent_path());
}

StatusOr<Model> LoadModel(const std::string& model, const std::string& tokenizer) {
  KVF_ASSIGN_OR_RETURN(ModelFormat format, DetectModelFormat(model));
  KVF_ASSIGN_OR_RETURN(ModelWeights weights, LoadModelWeights(model));
  KVF_ASSIGN_OR_RETURN(tokenizer::Tokenizer tok,
                       tokenizer.empty() ? LoadTokenizer(model, format, weights.config.vocab_size)
                                         : LoadTokenizerOverride(tokenizer));
  if (tok.vocab_size() > weights.config.vocab_size) {
    return InvalidArgumentError("the tokenizer of '" + model + "' has " +
                                std::to_string(tok.vocab_size()) + " tokens, the model's " +
                                "embedding only " + std::to_string(weights.config.vocab_size));
  }
  std::vector<int32_t>& eos = weights.config.eos_token_ids;
  for (int32_t id : tok.eos_token_ids()) {
    if (std::find(eos.begin(), eos.end(), id) == eos.end()) eos.push_back(id);
  }
  KVF_RETURN_IF_ERROR(weights.config.Validate());
  return Model{std::move(weights), std::move(tok)};
}

StatusOr<ModelFormat> DetectModelFormat(const std::string& model) {
  if (BuiltinModelConfig(model).ok()) return ModelFormat::kBuiltin;
  std::error_code ec;
  if (fs::is_directory(model, ec)) return ModelFormat::kHuggingFace;
  if (fs::is_regular_file(model, ec)) {
    std::ifstream in(model, std::ios::binary);
    char magic[4] = {};
    in.read(magic, 4);
    if (in && std::string_view(magic, 4) == "GGUF") return ModelFormat::kGguf;
    return ModelFormat::kHuggingFace;
  }
  return NotFoundError(
      "model '" + model +
      "' is neither a built-in (tiny, small, tiny-odd, tiny-kv4, tiny-mla) nor an existing path");
}

StatusOr<ModelWeights> LoadModelWeights(const std::string& model) {
  KVF_ASSIGN_OR_RETURN(ModelFormat format, DetectModelFormat(model));
  switch (format) {
    case ModelFormat::kBuiltin:
      return GenerateWeights(*BuiltinModelConfig(model));
    case ModelFormat::kGguf:
      return LoadGguf(model);
    case ModelFormat::kHuggingFace:
      break;
  }
  std::error_code ec;
  if (fs::is_directory(model, ec)) return LoadHuggingFace(model);
  return LoadSafetensorsFile(model);
}

}  // namespace kvferry::engine
