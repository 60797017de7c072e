// Writes the binary seed corpus of fuzz_handshake (tests/fuzz/corpus/handshake/) with the real
// encoders, so the seeds are valid messages the fuzzer mutates from. Built only with
// KVFERRY_FUZZ; run by hand when the wire format changes:
//   build-fuzz/bin/fuzz_gen_seeds tests/fuzz/corpus/handshake
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "connector/handshake_wire.h"

namespace {

using namespace kvferry::connector::internal;

void Write(const std::string& dir, const std::string& name, const std::string& bytes) {
  std::ofstream(dir + "/" + name, std::ios::binary) << bytes;
}

HandshakeMetadata Sample(bool mla) {
  HandshakeMetadata m;
  m.engine_id = "prefill-0";
  m.block_size_logical = 32;
  m.block_size_kernel = 16;
  m.layout = kvferry::kv::Layout::kHND;
  m.dtype = kvferry::kv::DType::kF16;
  m.kind = mla ? kvferry::kv::AttentionKind::kMLA : kvferry::kv::AttentionKind::kStandard;
  m.num_layers = 2;
  m.num_kv_heads = mla ? 1 : 2;
  m.head_dim = 8;
  m.num_blocks_kernel = 8;
  kvferry::kv::CacheSpec spec = m.Spec();
  for (int32_t r = 0; r < spec.num_regions(); ++r) {
    m.regions.push_back({static_cast<uint32_t>(r + 1), 0x1000ull * (r + 1), spec.region_bytes(),
                         spec.bytes_per_kernel_block()});
  }
  m.generation_table = {9, 0x9000, 4 * sizeof(uint64_t), 0};
  m.agent_metadata = "agent";
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  std::string dir = argv[1];
  const std::string hash = "0123456789abcdef";  // fuzz_handshake.cc expects this one
  Write(dir, "request", EncodeHandshakeRequest(0, ""));
  Write(dir, "request_token", EncodeHandshakeRequest(1, "secret"));
  const HandshakeMetadata one = Sample(false), mla = Sample(true);
  Write(dir, "reply", EncodeHandshakeReply(hash, {&one, 1}));
  Write(dir, "reply_mla", EncodeHandshakeReply(hash, {&mla, 1}));
  Write(dir, "reply_other_hash", EncodeHandshakeReply("fedcba9876543210", {&one, 1}));
  std::vector<HandshakeMetadata> two = {Sample(false), Sample(false)};
  two[0].tp_size = two[1].tp_size = 2;
  two[1].tp_rank = 1;
  Write(dir, "reply_tp2", EncodeHandshakeReply(hash, two));
  Write(dir, "error", EncodeHandshakeError("no such rank"));
  Write(dir, "release", EncodeReleaseRequest("cmpl-1-0#0", "secret"));
  Write(dir, "ok", EncodeOk({0, 1, 1}));
  return 0;
}
