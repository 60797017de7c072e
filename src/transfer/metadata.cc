#include "transfer/metadata.h"

#include <cstring>
#include <msgpack.hpp>

namespace kvferry::transfer {
namespace {
constexpr std::string_view kMagic = "kvferry-xfer";
}

uint64_t Fnv1a64(std::string_view bytes) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string EncodeMetadata(const AgentMetadata& md) {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(&buf);
  pk.pack_array(6);
  pk.pack(std::string(kMagic));
  pk.pack(kMetadataVersion);
  pk.pack(md.backend);
  pk.pack(md.agent_name);
  pk.pack_array(static_cast<uint32_t>(md.regions.size()));
  for (const RegionEntry& r : md.regions) {
    pk.pack_array(2);
    pk.pack(r.id);
    pk.pack(r.length);
  }
  pk.pack_bin(static_cast<uint32_t>(md.backend_blob.size()));
  pk.pack_bin_body(md.backend_blob.data(), static_cast<uint32_t>(md.backend_blob.size()));
  std::string out(buf.data(), buf.size());
  uint64_t h = Fnv1a64(out);
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((h >> (8 * i)) & 0xff));
  return out;
}

StatusOr<AgentMetadata> DecodeMetadata(std::string_view bytes) {
  if (bytes.size() < 9) return InvalidArgumentError("transfer metadata: too short");
  std::string_view body = bytes.substr(0, bytes.size() - 8);
  uint64_t stored = 0;
  for (int i = 0; i < 8; ++i) {
    stored |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[body.size() + i])) << (8 * i);
  }
  if (stored != Fnv1a64(body)) return InvalidArgumentError("transfer metadata: checksum mismatch");
  try {
    msgpack::object_handle oh = msgpack::unpack(body.data(), body.size());
    const msgpack::object& o = oh.get();
    if (o.type != msgpack::type::ARRAY || o.via.array.size != 6) {
      return InvalidArgumentError("transfer metadata: not a 6-element array");
    }
    const msgpack::object* f = o.via.array.ptr;
    if (f[0].as<std::string>() != kMagic)
      return InvalidArgumentError("transfer metadata: bad magic");
    uint32_t version = f[1].as<uint32_t>();
    if (version != kMetadataVersion) {
      return InvalidArgumentError("transfer metadata: unsupported version " +
                                  std::to_string(version));
    }
    AgentMetadata md;
    md.backend = f[2].as<std::string>();
    md.agent_name = f[3].as<std::string>();
    if (f[4].type != msgpack::type::ARRAY)
      return InvalidArgumentError("transfer metadata: regions");
    for (uint32_t i = 0; i < f[4].via.array.size; ++i) {
      const msgpack::object& r = f[4].via.array.ptr[i];
      if (r.type != msgpack::type::ARRAY || r.via.array.size != 2) {
        return InvalidArgumentError("transfer metadata: region entry");
      }
      md.regions.push_back({r.via.array.ptr[0].as<uint32_t>(), r.via.array.ptr[1].as<uint64_t>()});
    }
    if (f[5].type != msgpack::type::BIN) return InvalidArgumentError("transfer metadata: blob");
    md.backend_blob.assign(f[5].via.bin.ptr, f[5].via.bin.size);
    if (md.agent_name.empty()) return InvalidArgumentError("transfer metadata: empty agent name");
    return md;
  } catch (const std::exception& e) {
    return InvalidArgumentError(std::string("transfer metadata: ") + e.what());
  }
}

}  // namespace kvferry::transfer
