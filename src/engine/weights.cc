#include "engine/weights.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

namespace kvferry::engine {

namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Uniform in [-1, 1), from (seed, tensor, index) only.
float HashUniform(uint64_t seed, uint64_t tensor, uint64_t index) {
  const uint64_t h = SplitMix64(SplitMix64(seed ^ (tensor * 0xd1b54a32d192ed03ull)) + index);
  return static_cast<float>(static_cast<double>(h >> 40) / static_cast<double>(1ull << 23) - 1.0);
}

// Uniform on [-1,1) has std 1/sqrt(3): `stddev` scales to the wanted spread.
std::vector<float> Fill(uint64_t seed, uint64_t tensor, int64_t n, float stddev) {
  std::vector<float> v(static_cast<size_t>(n));
  const float scale = stddev * std::sqrt(3.0f);
  for (int64_t i = 0; i < n; ++i) v[i] = HashUniform(seed, tensor, i) * scale;
  return v;
}

std::vector<float> Norm(uint64_t seed, uint64_t tensor, int64_t n) {
  std::vector<float> v = Fill(seed, tensor, n, 0.1f);
  for (float& x : v) x += 1.0f;
  return v;
}

bool Printable(int32_t token) { return token == '\n' || (token >= 32 && token < 127); }

}  // namespace

StatusOr<ModelWeights> GenerateWeights(const ModelConfig& c) {
  KVF_RETURN_IF_ERROR(c.Validate());
  const uint64_t s = c.weight_seed;
  const int64_t d = c.hidden_dim;
  const int64_t q = int64_t{c.num_heads} * c.head_dim;
  const int64_t kv = int64_t{c.num_kv_heads} * c.head_dim;
  const int64_t f = c.ffn_dim;
  ModelWeights w;
  w.config = c;
  w.embed = Fill(s, 1, int64_t{c.vocab_size} * d, 1.0f);
  uint64_t tensor = 100;
  for (int32_t l = 0; l < c.num_layers; ++l) {
    LayerWeights lw;
    lw.attn_norm = Norm(s, tensor++, d);
    // Query/key weights a bit larger than 1/sqrt(dim) so attention is not uniform.
    lw.qkv = Fill(s, tensor++, (q + 2 * kv) * d, 2.0f / std::sqrt(static_cast<float>(d)));
    lw.o = Fill(s, tensor++, d * q, 1.0f / std::sqrt(static_cast<float>(q)));
    lw.ffn_norm = Norm(s, tensor++, d);
    lw.gate_up = Fill(s, tensor++, 2 * f * d, 1.0f / std::sqrt(static_cast<float>(d)));
    lw.down = Fill(s, tensor++, d * f, 1.0f / std::sqrt(static_cast<float>(f)));
    w.layers.push_back(std::move(lw));
  }
  w.final_norm = Norm(s, 2, d);
  if (!c.tie_embeddings) {
    w.lm_head = Fill(s, 3, int64_t{c.vocab_size} * d, 3.0f / std::sqrt(static_cast<float>(d)));
    for (int32_t t = 0; t < c.vocab_size; ++t) {
      if (c.vocab_size <= 256 + 8 && !Printable(t)) {
        std::fill(w.lm_head.begin() + t * d, w.lm_head.begin() + (t + 1) * d, 0.0f);
      }
    }
  }
  return w;
}

// ---- checkpoint (safetensors, F32) ----

namespace {

using Json = nlohmann::json;

Json ConfigToJson(const ModelConfig& c) {
  return Json{{"name", c.name},
              {"vocab_size", c.vocab_size},
              {"hidden_size", c.hidden_dim},
              {"num_hidden_layers", c.num_layers},
              {"num_attention_heads", c.num_heads},
              {"num_key_value_heads", c.num_kv_heads},
              {"head_dim", c.head_dim},
              {"intermediate_size", c.ffn_dim},
              {"max_position_embeddings", c.max_position},
              {"rope_theta", c.rope_theta},
              {"rms_norm_eps", c.rms_norm_eps},
              {"tie_word_embeddings", c.tie_embeddings},
              {"bos_token_id", c.bos_token_id},
              {"eos_token_id", c.eos_token_id}};
}

StatusOr<ModelConfig> ConfigFromJson(const Json& j) {
  ModelConfig c;
  try {
    c.name = j.value("name", std::string("checkpoint"));
    c.vocab_size = j.at("vocab_size").get<int32_t>();
    c.hidden_dim = j.at("hidden_size").get<int32_t>();
    c.num_layers = j.at("num_hidden_layers").get<int32_t>();
    c.num_heads = j.at("num_attention_heads").get<int32_t>();
    c.num_kv_heads = j.value("num_key_value_heads", c.num_heads);
    c.head_dim = j.value("head_dim", c.num_heads > 0 ? c.hidden_dim / c.num_heads : 0);
    c.ffn_dim = j.at("intermediate_size").get<int32_t>();
    c.max_position = j.value("max_position_embeddings", 2048);
    c.rope_theta = j.value("rope_theta", 10000.0f);
    c.rms_norm_eps = j.value("rms_norm_eps", 1e-5f);
    c.tie_embeddings = j.value("tie_word_embeddings", false);
    c.bos_token_id = j.value("bos_token_id", -1);
    c.eos_token_id = j.value("eos_token_id", -1);
  } catch (const Json::exception& e) {
    return InvalidArgumentError(std::string("checkpoint config: ") + e.what());
  }
  KVF_RETURN_IF_ERROR(c.Validate());
  return c;
}

struct Entry {
  std::string name;
  std::vector<int64_t> shape;
  const float* data;
  int64_t rows_offset = 0;  // unused: whole tensors only
};

// The tensors of a model in file order, as (name, shape, pointer into fused storage).
std::vector<Entry> Entries(const ModelWeights& w) {
  const ModelConfig& c = w.config;
  const int64_t d = c.hidden_dim, q = int64_t{c.num_heads} * c.head_dim;
  const int64_t kv = int64_t{c.num_kv_heads} * c.head_dim, f = c.ffn_dim;
  std::vector<Entry> e;
  e.push_back({"model.embed_tokens.weight", {c.vocab_size, d}, w.embed.data()});
  for (int32_t l = 0; l < c.num_layers; ++l) {
    const LayerWeights& lw = w.layers[l];
    const std::string p = "model.layers." + std::to_string(l) + ".";
    e.push_back({p + "input_layernorm.weight", {d}, lw.attn_norm.data()});
    e.push_back({p + "self_attn.q_proj.weight", {q, d}, lw.qkv.data()});
    e.push_back({p + "self_attn.k_proj.weight", {kv, d}, lw.qkv.data() + q * d});
    e.push_back({p + "self_attn.v_proj.weight", {kv, d}, lw.qkv.data() + (q + kv) * d});
    e.push_back({p + "self_attn.o_proj.weight", {d, q}, lw.o.data()});
    e.push_back({p + "post_attention_layernorm.weight", {d}, lw.ffn_norm.data()});
    e.push_back({p + "mlp.gate_proj.weight", {f, d}, lw.gate_up.data()});
    e.push_back({p + "mlp.up_proj.weight", {f, d}, lw.gate_up.data() + f * d});
    e.push_back({p + "mlp.down_proj.weight", {d, f}, lw.down.data()});
  }
  e.push_back({"model.norm.weight", {d}, w.final_norm.data()});
  if (!c.tie_embeddings) e.push_back({"lm_head.weight", {c.vocab_size, d}, w.lm_head.data()});
  return e;
}

int64_t Elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

// Storage of a model with the right sizes, zero-filled.
ModelWeights Allocate(const ModelConfig& c) {
  const int64_t d = c.hidden_dim, q = int64_t{c.num_heads} * c.head_dim;
  const int64_t kv = int64_t{c.num_kv_heads} * c.head_dim, f = c.ffn_dim;
  ModelWeights w;
  w.config = c;
  w.embed.resize(static_cast<size_t>(c.vocab_size * d));
  w.layers.resize(c.num_layers);
  for (LayerWeights& lw : w.layers) {
    lw.attn_norm.resize(d);
    lw.qkv.resize((q + 2 * kv) * d);
    lw.o.resize(d * q);
    lw.ffn_norm.resize(d);
    lw.gate_up.resize(2 * f * d);
    lw.down.resize(d * f);
  }
  w.final_norm.resize(d);
  if (!c.tie_embeddings) w.lm_head.resize(static_cast<size_t>(c.vocab_size * d));
  return w;
}

}  // namespace

Status SaveCheckpoint(const ModelWeights& w, const std::string& path) {
  Json header = Json::object();
  header["__metadata__"] = {{"format", "kvferry"},
                            {"kvferry_config", ConfigToJson(w.config).dump()}};
  int64_t offset = 0;
  const std::vector<Entry> entries = Entries(w);
  for (const Entry& e : entries) {
    const int64_t bytes = Elements(e.shape) * 4;
    header[e.name] = {
        {"dtype", "F32"}, {"shape", e.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string h = header.dump();
  while (h.size() % 8 != 0) h.push_back(' ');
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return InvalidArgumentError("cannot open '" + path + "' for writing");
  uint64_t len = h.size();
  unsigned char le[8];
  for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>(len >> (8 * i));
  out.write(reinterpret_cast<const char*>(le), 8);
  out.write(h.data(), static_cast<std::streamsize>(h.size()));
  for (const Entry& e : entries) {
    out.write(reinterpret_cast<const char*>(e.data), Elements(e.shape) * 4);
  }
  if (!out) return DataLossError("short write to '" + path + "'");
  return Status::Ok();
}

StatusOr<ModelWeights> LoadCheckpoint(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError("cannot open checkpoint '" + path + "'");
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < 8) return DataLossError("checkpoint '" + path + "': shorter than its header");
  uint64_t len = 0;
  for (int i = 0; i < 8; ++i)
    len |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  if (len > bytes.size() - 8)
    return DataLossError("checkpoint '" + path + "': header length beyond the file");
  Json header =
      Json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<int64_t>(len), nullptr, false);
  if (header.is_discarded() || !header.is_object()) {
    return DataLossError("checkpoint '" + path + "': header is not a JSON object");
  }
  const size_t data_begin = 8 + len;
  const size_t data_size = bytes.size() - data_begin;
  if (!header.contains("__metadata__") || !header["__metadata__"].contains("kvferry_config") ||
      !header["__metadata__"]["kvferry_config"].is_string()) {
    return InvalidArgumentError("checkpoint '" + path + "': no __metadata__.kvferry_config");
  }
  Json cj =
      Json::parse(header["__metadata__"]["kvferry_config"].get<std::string>(), nullptr, false);
  if (cj.is_discarded())
    return InvalidArgumentError("checkpoint '" + path + "': bad kvferry_config JSON");
  KVF_ASSIGN_OR_RETURN(ModelConfig config, ConfigFromJson(cj));
  ModelWeights w = Allocate(config);
  for (const Entry& e : Entries(w)) {
    if (!header.contains(e.name))
      return InvalidArgumentError("checkpoint: missing tensor " + e.name);
    const Json& t = header[e.name];
    if (!t.is_object() || t.value("dtype", "") != "F32") {
      return InvalidArgumentError("checkpoint: tensor " + e.name + " must have dtype F32");
    }
    std::vector<int64_t> shape;
    std::vector<uint64_t> offs;
    try {
      shape = t.at("shape").get<std::vector<int64_t>>();
      offs = t.at("data_offsets").get<std::vector<uint64_t>>();
    } catch (const Json::exception&) {
      return InvalidArgumentError("checkpoint: tensor " + e.name + ": bad shape or data_offsets");
    }
    if (shape != e.shape)
      return InvalidArgumentError("checkpoint: tensor " + e.name + " has the wrong shape");
    const uint64_t want = static_cast<uint64_t>(Elements(e.shape)) * 4;
    if (offs.size() != 2 || offs[1] < offs[0] || offs[1] - offs[0] != want || offs[1] > data_size) {
      return DataLossError("checkpoint: tensor " + e.name +
                           " lies outside the file or has the wrong size");
    }
    std::memcpy(const_cast<float*>(e.data), bytes.data() + data_begin + offs[0], want);
  }
  return w;
}

}  // namespace kvferry::engine
