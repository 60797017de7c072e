// libFuzzer target: the side-channel handshake decoders (src/connector/handshake_wire.h).
//
// Properties checked on every input, besides "no crash, no sanitizer report":
//   - DecodeHandshakeRequest / DecodeReleaseRequest / DecodeOkReply / DecodeHandshakeReply
//     never abort and return a Status;
//   - whatever decodes successfully re-encodes and decodes to the same value (round trip).
// The first input byte selects the compat hash the reply decoder expects (the sample's, or
// the hash carried in the input itself), so both the mismatch path and the body decoder run.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "connector/handshake_wire.h"

namespace {

using kvferry::connector::internal::DecodeHandshakeReply;
using kvferry::connector::internal::DecodeHandshakeRequest;
using kvferry::connector::internal::DecodeOkReply;
using kvferry::connector::internal::DecodeReleaseRequest;
using kvferry::connector::internal::EncodeHandshakeReply;
using kvferry::connector::internal::EncodeHandshakeRequest;
using kvferry::connector::internal::EncodeReleaseRequest;

void Check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);

  auto req = DecodeHandshakeRequest(bytes);
  if (req.ok()) {
    auto again = DecodeHandshakeRequest(EncodeHandshakeRequest(req->tp_rank, req->auth_token));
    Check(again.ok() && again->tp_rank == req->tp_rank && again->auth_token == req->auth_token);
  }

  auto rel = DecodeReleaseRequest(bytes);
  if (rel.ok()) {
    auto again = DecodeReleaseRequest(EncodeReleaseRequest(rel->request_id, rel->auth_token));
    Check(again.ok() && again->request_id == rel->request_id &&
          again->auth_token == rel->auth_token);
  }
  (void)DecodeOkReply(bytes);

  // The seeds are encoded with this hash (tests/fuzz/gen_seeds.cc).
  static const std::string kHash = "0123456789abcdef";
  for (std::string_view expected : {std::string_view(kHash), std::string_view("")}) {
    auto ranks = DecodeHandshakeReply(bytes, expected);
    if (ranks.ok()) {
      auto again = DecodeHandshakeReply(EncodeHandshakeReply(expected, *ranks), expected);
      Check(again.ok() && *again == *ranks);
      // Derived values must not crash on whatever geometry was accepted.
      for (const auto& meta : *ranks) (void)meta.num_blocks_logical();
    }
  }
  return 0;
}
