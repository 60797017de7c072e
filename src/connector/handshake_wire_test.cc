#include "connector/handshake_wire.h"

#include <gtest/gtest.h>

#include <random>

namespace kvferry::connector::internal {
namespace {

HandshakeMetadata SampleMetadata() {
  HandshakeMetadata m;
  m.engine_id = "prefill-0";
  m.tp_rank = 0;
  m.tp_size = 1;
  m.block_size_logical = 128;
  m.block_size_kernel = 64;
  m.layout = kv::Layout::kHND;
  m.dtype = kv::DType::kF16;
  m.num_layers = 2;
  m.num_kv_heads = 2;
  m.head_dim = 32;
  m.num_blocks_kernel = 40;
  m.host_buffer = true;
  kv::CacheSpec spec = m.Spec();
  for (int32_t r = 0; r < spec.num_regions(); ++r) {
    m.regions.push_back({static_cast<uint32_t>(r + 1), 0x7f0000000000ull + r * spec.region_bytes(),
                         spec.region_bytes(), spec.bytes_per_kernel_block()});
  }
  m.generation_table = {9, 0x7f1000000000ull, 20 * sizeof(uint64_t), 0};
  m.agent_metadata = std::string("\x00\x01opaque\xff", 9);
  return m;
}

kv::CacheSpec SampleSpec() { return SampleMetadata().Spec(); }

std::string Reply(std::string_view hash, const HandshakeMetadata& m) {
  return EncodeHandshakeReply(hash, std::span<const HandshakeMetadata>(&m, 1));
}

// Rank r of n: rank 0's geometry, its own regions and agent.
HandshakeMetadata RankMetadata(int32_t r, int32_t n) {
  HandshakeMetadata m = SampleMetadata();
  m.tp_rank = r;
  m.tp_size = n;
  for (WireRegion& reg : m.regions) reg.id += 100 * r;
  m.agent_metadata += std::to_string(r);
  return m;
}

TEST(HandshakeWireTest, ReplyRoundTrips) {
  HandshakeMetadata m = SampleMetadata();
  std::string hash = CompatibilityHash("tiny", SampleSpec());
  auto decoded = DecodeHandshakeReply(Reply(hash, m), hash);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ASSERT_EQ(decoded->size(), 1u);
  EXPECT_EQ((*decoded)[0], m);
  EXPECT_EQ((*decoded)[0].num_blocks_logical(), 20);
}

TEST(HandshakeWireTest, EveryRanksMetadataInOneReply) {
  std::vector<HandshakeMetadata> ranks;
  for (int32_t r = 0; r < 4; ++r) ranks.push_back(RankMetadata(r, 4));
  std::string hash = CompatibilityHash("tiny", SampleSpec());
  auto decoded = DecodeHandshakeReply(EncodeHandshakeReply(hash, ranks), hash);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, ranks);
}

// A split engine's rank serves only its own body (vLLM's TP workers, one process each).
TEST(HandshakeWireTest, ASplitEnginesShareOfRanks) {
  std::string hash = CompatibilityHash("tiny", SampleSpec());
  for (int32_t r = 0; r < 2; ++r) {
    std::vector<HandshakeMetadata> share = {RankMetadata(r, 2)};
    auto decoded = DecodeHandshakeReply(EncodeHandshakeReply(hash, share), hash);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(*decoded, share);
  }
}

TEST(HandshakeWireTest, RanksThatDisagreeAreRejected) {
  std::string hash = CompatibilityHash("tiny", SampleSpec());
  std::vector<HandshakeMetadata> gap = {RankMetadata(0, 3), RankMetadata(2, 3)};
  auto d = DecodeHandshakeReply(EncodeHandshakeReply(hash, gap), hash);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("says rank 2 of 3"), std::string_view::npos) << d.status();

  std::vector<HandshakeMetadata> past_the_end = {RankMetadata(1, 2), RankMetadata(0, 2)};
  EXPECT_EQ(DecodeHandshakeReply(EncodeHandshakeReply(hash, past_the_end), hash).status().code(),
            StatusCode::kInvalidArgument);
  std::vector<HandshakeMetadata> outside = {RankMetadata(2, 2)};
  EXPECT_EQ(DecodeHandshakeReply(EncodeHandshakeReply(hash, outside), hash).status().code(),
            StatusCode::kInvalidArgument);

  std::vector<HandshakeMetadata> other_layout = {RankMetadata(0, 2), RankMetadata(1, 2)};
  other_layout[1].layout = kv::Layout::kNHD;
  d = DecodeHandshakeReply(EncodeHandshakeReply(hash, other_layout), hash);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("differs from rank 0"), std::string_view::npos) << d.status();

  EXPECT_EQ(DecodeHandshakeReply(EncodeHandshakeReply(hash, {}), hash).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(HandshakeWireTest, PullNotificationCarriesDsTpSize) {
  auto n = DecodePullNotification(EncodePullNotification("cmpl-1:x", 4));
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(n->request_id, "cmpl-1:x");
  EXPECT_EQ(n->d_tp_size, 4);
  for (std::string_view bad : {"req", "req:", "req:0", "req:x", "req:999", ""}) {
    EXPECT_EQ(DecodePullNotification(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(HandshakeWireTest, RequestRoundTrips) {
  auto r = DecodeHandshakeRequest(EncodeHandshakeRequest(3, "tok"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->tp_rank, 3);
  EXPECT_EQ(r->auth_token, "tok");
}

TEST(HandshakeWireTest, ReleaseRoundTripsAndIsNotAGetMeta) {
  std::string bytes = EncodeReleaseRequest("req-9", "tok");
  auto r = DecodeReleaseRequest(bytes);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->request_id, "req-9");
  EXPECT_EQ(r->auth_token, "tok");
  EXPECT_FALSE(DecodeHandshakeRequest(bytes).ok());
  EXPECT_FALSE(DecodeReleaseRequest(EncodeHandshakeRequest(0, "tok")).ok());
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(DecodeReleaseRequest(std::string_view(bytes.data(), n)).ok());
  }
  StatusOr<ServedRanks> served = DecodeOkReply(EncodeOk({1, 2, 4}));
  ASSERT_TRUE(served.ok()) << served.status();
  EXPECT_EQ(served->first_rank, 1);
  EXPECT_EQ(served->num_ranks, 2);
  EXPECT_EQ(served->tp_size, 4);
  // Ranks outside the engine are refused.
  EXPECT_EQ(DecodeOkReply(EncodeOk({3, 2, 4})).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeOkReply(EncodeOk({0, 0, 1})).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeOkReply(EncodeHandshakeError("no")).status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(DecodeOkReply("junk").status().code(), StatusCode::kInvalidArgument);
}

TEST(HandshakeWireTest, CompatibilityHashCoversModelShapeNotBlockSizes) {
  kv::CacheSpec a = SampleSpec();
  std::string h = CompatibilityHash("tiny", a);
  kv::CacheSpec b = a;
  b.block_size_kernel = 16;
  b.layout = kv::Layout::kNHD;
  b.num_blocks_kernel = 7;
  EXPECT_EQ(CompatibilityHash("tiny", b), h);
  EXPECT_NE(CompatibilityHash("small", a), h);
  b = a;
  b.dtype = kv::DType::kF32;
  EXPECT_NE(CompatibilityHash("tiny", b), h);
  b = a;
  b.num_kv_heads = 4;
  EXPECT_NE(CompatibilityHash("tiny", b), h);
  b = a;
  b.head_dim = 64;
  EXPECT_NE(CompatibilityHash("tiny", b), h);
  b = a;
  b.num_layers = 3;
  EXPECT_NE(CompatibilityHash("tiny", b), h);
}

// MLA: the same row width split differently into latent and rope key is another cache, and a
// standard cache of the same width is too; both are named in clear text.
TEST(HandshakeWireTest, CompatibilityHashCoversMlaGeometry) {
  kv::CacheSpec mla = SampleSpec();
  mla.kind = kv::AttentionKind::kMLA;
  mla.num_kv_heads = 1;
  mla.head_dim = 40;
  mla.mla_rope_dim = 8;
  const std::string h = CompatibilityHash("tiny-mla", mla);
  EXPECT_NE(h.find("kind=mla"), std::string::npos) << h;
  EXPECT_NE(h.find("latent_dim=32|rope_dim=8"), std::string::npos) << h;
  kv::CacheSpec other = mla;
  other.mla_rope_dim = 16;  // latent 24 + rope 16: same bytes per token
  EXPECT_NE(CompatibilityHash("tiny-mla", other), h);
  other = mla;
  other.kind = kv::AttentionKind::kStandard;
  other.mla_rope_dim = 0;
  EXPECT_NE(CompatibilityHash("tiny-mla", other), h);
  auto decoded =
      DecodeHandshakeReply(Reply(CompatibilityHash("tiny-mla", other), SampleMetadata()), h);
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(decoded.status().message().find("rope_dim=8"), std::string_view::npos);
}

TEST(HandshakeWireTest, HashMismatchIsRejectedBeforeTheBodyIsDecoded) {
  // The body is garbage: a decoder that looked at it would report InvalidArgument.
  std::string theirs = CompatibilityHash("small", SampleSpec());
  HandshakeMetadata m = SampleMetadata();
  m.regions.clear();  // an invalid body
  auto decoded = DecodeHandshakeReply(Reply(theirs, m), CompatibilityHash("tiny", SampleSpec()));
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(decoded.status().message().find(theirs), std::string_view::npos);
}

TEST(HandshakeWireTest, DtypeMismatchIsNamedInTheError) {
  kv::CacheSpec f16 = SampleSpec();
  f16.dtype = kv::DType::kF16;
  kv::CacheSpec f32 = SampleSpec();
  f32.dtype = kv::DType::kF32;
  auto decoded = DecodeHandshakeReply(Reply(CompatibilityHash("tiny", f16), SampleMetadata()),
                                      CompatibilityHash("tiny", f32));
  ASSERT_FALSE(decoded.ok());
  EXPECT_NE(decoded.status().message().find("dtype=f16"), std::string_view::npos);
  EXPECT_NE(decoded.status().message().find("dtype=f32"), std::string_view::npos);
}

TEST(HandshakeWireTest, ErrorReplyCarriesPeersMessage) {
  auto decoded = DecodeHandshakeReply(EncodeHandshakeError("bad auth token"), "x");
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(decoded.status().message().find("bad auth token"), std::string_view::npos);
}

TEST(HandshakeWireTest, InconsistentBodyIsRejectedNamingTheProblem) {
  std::string hash = CompatibilityHash("tiny", SampleSpec());
  HandshakeMetadata m = SampleMetadata();
  m.regions.pop_back();
  auto d = DecodeHandshakeReply(Reply(hash, m), hash);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("regions"), std::string_view::npos) << d.status();

  m = SampleMetadata();
  m.regions[1].bytes_per_kernel_block += 8;
  d = DecodeHandshakeReply(Reply(hash, m), hash);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("per kernel block"), std::string_view::npos) << d.status();

  m = SampleMetadata();
  m.block_size_kernel = 48;  // does not divide 128
  d = DecodeHandshakeReply(Reply(hash, m), hash);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("does not divide"), std::string_view::npos) << d.status();
}

TEST(HandshakeWireTest, EveryTruncationIsAnErrorNotACrash) {
  std::string hash = CompatibilityHash("tiny", SampleSpec());
  std::string bytes = Reply(hash, SampleMetadata());
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto d = DecodeHandshakeReply(std::string_view(bytes.data(), n), hash);
    ASSERT_FALSE(d.ok()) << "prefix of " << n << " bytes decoded";
    EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument) << d.status();
  }
  std::string req = EncodeHandshakeRequest(0, "t");
  for (size_t n = 0; n < req.size(); ++n) {
    EXPECT_FALSE(DecodeHandshakeRequest(std::string_view(req.data(), n)).ok());
  }
}

TEST(HandshakeWireTest, CorruptedBytesNeverCrashAndNeverPassSilentlyWrong) {
  std::string hash = CompatibilityHash("tiny", SampleSpec());
  HandshakeMetadata m = SampleMetadata();
  std::string bytes = Reply(hash, m);
  std::mt19937 rng(42);
  int decoded_ok = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string b = bytes;
    int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) b[rng() % b.size()] = static_cast<char>(rng());
    auto d = DecodeHandshakeReply(b, hash);
    if (d.ok()) {
      // A flip inside an opaque or numeric value can decode; the result must still be a
      // self-consistent geometry (the decoder's cross checks hold).
      ++decoded_ok;
      ASSERT_EQ(d->size(), 1u);
      EXPECT_EQ(static_cast<int32_t>((*d)[0].regions.size()), (*d)[0].Spec().num_regions());
      EXPECT_EQ((*d)[0].block_size_logical % (*d)[0].block_size_kernel, 0);
    }
  }
  EXPECT_LT(decoded_ok, 3000);
  // Pure garbage and other messages.
  EXPECT_FALSE(DecodeHandshakeReply("", hash).ok());
  EXPECT_FALSE(DecodeHandshakeReply("hello world", hash).ok());
  EXPECT_FALSE(DecodeHandshakeReply(EncodeHandshakeRequest(0, ""), hash).ok());
  EXPECT_FALSE(DecodeHandshakeRequest(bytes).ok());
  // A huge claimed array length must not allocate: 0xdd = array32 with 2^32-1 elements.
  EXPECT_FALSE(DecodeHandshakeReply(std::string("\xdd\xff\xff\xff\xff", 5), hash).ok());
}

TEST(HandshakeWireTest, OtherVersionIsRejectedNamingBoth) {
  std::string bytes = EncodeHandshakeRequest(0, "");
  // Byte layout: fixarray(5), fixstr(10) "kvferry.hs", positive fixint version.
  ASSERT_EQ(static_cast<uint8_t>(bytes[12]), kHandshakeVersion);
  bytes[12] = 7;
  auto d = DecodeHandshakeRequest(bytes);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("version 7"), std::string_view::npos) << d.status();
}

}  // namespace
}  // namespace kvferry::connector::internal
