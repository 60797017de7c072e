#include "engine/model/checkpoint_writer.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "engine/kernels/quant_types.h"
#include "engine/model/deepseek_rope.h"
#include "engine/model/gguf_config.h"
#include "engine/model/hf_config.h"
#include "engine/model/model_loader.h"
#include "engine/model/tensor_slots.h"
#include "kvferry/common/half.h"
#include "kvferry/formats/safetensors_writer.h"

namespace kvferry::engine {
namespace {

// `values` as blocks of the quantized `dtype` (rows whose length is a multiple of its block, so
// blocks never straddle rows and the values can be quantized as one run). Each block is
// quantized on its own, so the run is split between the CPU's threads at block bounds: the same
// bytes, in a fraction of the time (ggml's k-quant search is slow: 60 s single-threaded for a
// 0.6B model's Q4_K_M).
std::vector<std::byte> Quantize(const std::vector<float>& values, formats::DType dtype) {
  const int64_t block = formats::DTypeBlockElements(dtype);
  const int64_t blocks = static_cast<int64_t>(values.size()) / block;
  const int64_t bytes = formats::DTypeBlockBytes(dtype);
  std::vector<std::byte> out(static_cast<size_t>(blocks * bytes));
  const int64_t threads = std::clamp<int64_t>(std::thread::hardware_concurrency(), 1,
                                              std::max<int64_t>(blocks / 64, 1));
  std::vector<std::thread> workers;
  for (int64_t t = 0; t < threads; ++t) {
    const int64_t b0 = blocks * t / threads, b1 = blocks * (t + 1) / threads;
    workers.emplace_back([&, b0, b1] {
      kernels::QuantizeRow(dtype, values.data() + b0 * block, (b1 - b0) * block,
                           out.data() + b0 * bytes);
    });
  }
  for (std::thread& w : workers) w.join();
  return out;
}

// `values` in `dtype` (little-endian bytes; a quantized type: Quantize).
std::vector<std::byte> Encode(const std::vector<float>& values, formats::DType dtype) {
  if (kernels::IsComputedQuantType(dtype)) return Quantize(values, dtype);
  if (dtype == formats::DType::kF32) {
    std::vector<std::byte> out(values.size() * 4);
    std::memcpy(out.data(), values.data(), out.size());
    return out;
  }
  std::vector<std::byte> out(values.size() * 2);
  for (size_t i = 0; i < values.size(); ++i) {
    const uint16_t bits =
        dtype == formats::DType::kBF16 ? F32ToBF16(values[i]) : F32ToF16(values[i]);
    std::memcpy(out.data() + 2 * i, &bits, 2);
  }
  return out;
}

// GGUF has no DeepSeek tensor names here (Hugging Face directories and kvferry files do).
Status RefuseMlaGguf(const ModelConfig& c) {
  if (!c.is_mla()) return Status::Ok();
  return UnimplementedError("model " + c.name +
                            ": writing MLA (deepseek) models as GGUF is not supported");
}

bool IsFloat(formats::DType d) {
  return d == formats::DType::kF32 || d == formats::DType::kF16 || d == formats::DType::kBF16;
}

Status RequireFloat(formats::DType dtype) {
  if (IsFloat(dtype)) return Status::Ok();
  return InvalidArgumentError(
      "checkpoints are written in F32, F16 or BF16 (and GGUF files in the quantized types of "
      "docs/models.md), not " +
      std::string(formats::DTypeName(dtype)));
}

// The dtype of a matrix: its GGUF name and row length in, the type it is written in out.
using TypeOf = std::function<formats::DType(const std::string& name, int64_t cols)>;
using AddTensor = std::function<Status(const std::string&, formats::DType,
                                       const std::vector<int64_t>&, const std::vector<std::byte>&)>;

Status RequireWholeBlocks(const std::string& name, int64_t cols, formats::DType dtype) {
  if (cols % formats::DTypeBlockElements(dtype) == 0) return Status::Ok();
  return InvalidArgumentError("tensor '" + name + "': rows of " + std::to_string(cols) +
                              " values are not whole " + std::string(formats::DTypeName(dtype)) +
                              " blocks of " + std::to_string(formats::DTypeBlockElements(dtype)));
}

// A GGUF expert tensor [E][rows][cols]: the experts' matrices one after another.
Status AddExperts(const TensorSlot& slot, const TypeOf& type_of, const AddTensor& add) {
  const int64_t cols = slot.shape.back();
  const formats::DType dtype = type_of(slot.name, cols);
  KVF_RETURN_IF_ERROR(RequireWholeBlocks(slot.name, cols, dtype));
  std::vector<float> values;
  for (const WeightMatrix& m : *slot.experts) {
    const std::vector<float> v = ToF32(m);
    values.insert(values.end(), v.begin(), v.end());
  }
  return add(slot.name, dtype, slot.shape, Encode(values, dtype));
}

// Calls add(name, shape, bytes) for every tensor of `weights` under `naming`. Norms and biases
// stay F32 (as llama.cpp's converter keeps 1-D tensors); matrices take type_of's dtype.
Status ForEachTensor(const ModelWeights& weights, TensorNaming naming, const TypeOf& type_of,
                     const AddTensor& add) {
  if (naming == TensorNaming::kGguf) KVF_RETURN_IF_ERROR(RefuseMlaGguf(weights.config));
  ModelWeights copy = weights;  // shares the bytes; the slots point into the copy
  PermuteMlaRopeRows(&copy, /*to_interleaved=*/true);  // DeepSeek checkpoints' pair order
  for (const TensorSlot& slot : TensorSlots(naming, &copy)) {
    if (slot.vector != nullptr) {
      KVF_RETURN_IF_ERROR(add(slot.name, formats::DType::kF32, slot.shape,
                              Encode(*slot.vector, formats::DType::kF32)));
      continue;
    }
    if (slot.experts != nullptr) {
      KVF_RETURN_IF_ERROR(AddExperts(slot, type_of, add));
      continue;
    }
    WeightMatrix m = *slot.matrix;
    const formats::DType dtype = type_of(slot.name, m.cols);
    KVF_RETURN_IF_ERROR(RequireWholeBlocks(slot.name, m.cols, dtype));
    if (slot.interleaved_heads > 0) m = RotateHalfRows(m, slot.interleaved_heads, true, &copy);
    KVF_RETURN_IF_ERROR(add(slot.name, dtype, slot.shape, Encode(ToF32(m), dtype)));
  }
  return Status::Ok();
}

TypeOf Uniform(formats::DType dtype) {
  return [dtype](const std::string&, int64_t) { return dtype; };
}

// An MoE router (ffn_gate_inp) in F16 or BF16, widened to F32: llama.cpp's converter writes
// routers in F32 whatever the checkpoint's dtype, so a GGUF file holds the values of the Hugging
// Face checkpoint of the same dtype, exactly, in F32.
bool WidenRouter(const std::string& name, formats::DType* dtype, std::vector<std::byte>* bytes) {
  if (name.find("ffn_gate_inp") == std::string::npos ||
      (*dtype != formats::DType::kF16 && *dtype != formats::DType::kBF16)) {
    return false;
  }
  std::vector<float> values(bytes->size() / 2);
  for (size_t i = 0; i < values.size(); ++i) {
    uint16_t bits;
    std::memcpy(&bits, bytes->data() + 2 * i, 2);
    values[i] = *dtype == formats::DType::kBF16 ? BF16ToF32(bits) : F16ToF32(bits);
  }
  *dtype = formats::DType::kF32;
  *bytes = Encode(values, formats::DType::kF32);
  return true;
}

Status WriteGguf(const ModelWeights& weights, const std::string& path, const TypeOf& type_of,
                 int32_t llama_ftype,
                 const std::function<Status(formats::GgufWriter*)>& add_tokenizer) {
  formats::GgufWriter writer;
  KVF_RETURN_IF_ERROR(RefuseMlaGguf(weights.config));
  KVF_RETURN_IF_ERROR(AddGgufModelMetadata(weights.config, &writer));
  if (llama_ftype > 0) {
    KVF_RETURN_IF_ERROR(writer.AddMetadata(
        "general.file_type", formats::GgufValue::Int(formats::GgufValueType::kU32, llama_ftype)));
  }
  if (add_tokenizer) KVF_RETURN_IF_ERROR(add_tokenizer(&writer));
  KVF_RETURN_IF_ERROR(
      ForEachTensor(weights, TensorNaming::kGguf, type_of,
                    [&](const std::string& name, formats::DType dt,
                        const std::vector<int64_t>& shape, const std::vector<std::byte>& bytes) {
                      std::vector<std::byte> widened = bytes;
                      if (WidenRouter(name, &dt, &widened))
                        return writer.AddTensor(name, dt, shape, widened);
                      return writer.AddTensor(name, dt, shape, bytes);
                    }));
  return writer.Write(path);
}

}  // namespace

Status WriteHfCheckpoint(const ModelWeights& weights, const std::string& dir, formats::DType dtype,
                         int shards) {
  formats::SafetensorsWriter writer;
  writer.SetMetadata("format", "pt");
  KVF_RETURN_IF_ERROR(RequireFloat(dtype));
  KVF_RETURN_IF_ERROR(
      ForEachTensor(weights, TensorNaming::kHuggingFace, Uniform(dtype),
                    [&](const std::string& name, formats::DType dt,
                        const std::vector<int64_t>& shape, const std::vector<std::byte>& bytes) {
                      return writer.AddTensor(name, dt, shape, bytes);
                    }));
  KVF_RETURN_IF_ERROR(writer.WriteDirectory(dir, shards));
  const std::string torch_dtype = dtype == formats::DType::kBF16  ? "bfloat16"
                                  : dtype == formats::DType::kF16 ? "float16"
                                                                  : "float32";
  std::ofstream out(std::filesystem::path(dir) / "config.json");
  out << HfConfigJson(weights.config, torch_dtype).dump(2) << "\n";
  if (!out) return DataLossError("cannot write config.json in '" + dir + "'");
  return Status::Ok();
}

Status WriteGgufCheckpoint(const ModelWeights& weights, const std::string& path,
                           formats::DType dtype,
                           const std::function<Status(formats::GgufWriter*)>& add_tokenizer) {
  if (!kernels::IsComputedQuantType(dtype)) KVF_RETURN_IF_ERROR(RequireFloat(dtype));
  return WriteGguf(weights, path, Uniform(dtype), 0, add_tokenizer);
}

Status WriteGgufCheckpoint(const ModelWeights& weights, const std::string& path,
                           const GgufFileType& type,
                           const std::function<Status(formats::GgufWriter*)>& add_tokenizer) {
  const int32_t n_layers = weights.config.num_layers;
  const bool has_output = !weights.config.tie_embeddings;
  auto type_of = [&](const std::string& name, int64_t cols) {
    return GgufTensorType(type, name, n_layers, cols, has_output, weights.config.moe.num_experts);
  };
  return WriteGguf(weights, path, type_of, type.llama_ftype, add_tokenizer);
}

Status SaveCheckpoint(const ModelWeights& weights, const std::string& path) {
  formats::SafetensorsWriter writer;
  nlohmann::json config = HfConfigJson(weights.config, "float32");
  config["name"] = weights.config.name;
  writer.SetMetadata("format", "kvferry");
  writer.SetMetadata("kvferry_config", config.dump());
  KVF_RETURN_IF_ERROR(
      ForEachTensor(weights, TensorNaming::kHuggingFace, Uniform(formats::DType::kF32),
                    [&](const std::string& name, formats::DType dt,
                        const std::vector<int64_t>& shape, const std::vector<std::byte>& bytes) {
                      return writer.AddTensor(name, dt, shape, bytes);
                    }));
  return writer.Write(path);
}

}  // namespace kvferry::engine
