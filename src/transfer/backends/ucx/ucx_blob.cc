#include "transfer/backends/ucx/ucx_blob.h"

#include <exception>
#include <msgpack.hpp>

namespace kvferry::transfer::ucx {

std::string EncodeUcxBlob(const UcxBlob& blob) {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(&buf);
  pk.pack_array(4);
  pk.pack_bin(static_cast<uint32_t>(blob.worker_address.size()));
  pk.pack_bin_body(blob.worker_address.data(), static_cast<uint32_t>(blob.worker_address.size()));
  pk.pack(blob.host_id);
  pk.pack(blob.pid);
  pk.pack_array(static_cast<uint32_t>(blob.regions.size()));
  for (const UcxBlob::Region& r : blob.regions) {
    pk.pack_array(3);
    pk.pack(r.id);
    pk.pack(r.base);
    pk.pack_bin(static_cast<uint32_t>(r.rkey.size()));
    pk.pack_bin_body(r.rkey.data(), static_cast<uint32_t>(r.rkey.size()));
  }
  return std::string(buf.data(), buf.size());
}

StatusOr<UcxBlob> DecodeUcxBlob(std::string_view bytes) {
  UcxBlob blob;
  try {
    msgpack::object_handle oh = msgpack::unpack(bytes.data(), bytes.size());
    const msgpack::object& o = oh.get();
    if (o.type != msgpack::type::ARRAY || o.via.array.size != 4 ||
        o.via.array.ptr[0].type != msgpack::type::BIN ||
        o.via.array.ptr[3].type != msgpack::type::ARRAY) {
      return InvalidArgumentError("UCX metadata: malformed");
    }
    const msgpack::object* f = o.via.array.ptr;
    blob.worker_address.assign(f[0].via.bin.ptr, f[0].via.bin.size);
    blob.host_id = f[1].as<std::string>();
    blob.pid = f[2].as<int64_t>();
    for (uint32_t i = 0; i < f[3].via.array.size; ++i) {
      const msgpack::object& r = f[3].via.array.ptr[i];
      if (r.type != msgpack::type::ARRAY || r.via.array.size != 3 ||
          r.via.array.ptr[2].type != msgpack::type::BIN) {
        return InvalidArgumentError("UCX metadata: malformed region");
      }
      blob.regions.push_back(
          {r.via.array.ptr[0].as<uint32_t>(), r.via.array.ptr[1].as<uint64_t>(),
           std::string(r.via.array.ptr[2].via.bin.ptr, r.via.array.ptr[2].via.bin.size)});
    }
  } catch (const std::exception& e) {
    return InvalidArgumentError(std::string("UCX metadata: ") + e.what());
  }
  return blob;
}

}  // namespace kvferry::transfer::ucx
