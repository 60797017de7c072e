#include "kvferry/kv_events/event_wire.h"

#include <gtest/gtest.h>

#include <cmath>
#include <msgpack.hpp>

namespace kvferry::kv_events {
namespace {

using Packer = msgpack::packer<msgpack::sbuffer>;

std::string Str(const msgpack::sbuffer& b) { return std::string(b.data(), b.size()); }

void PackStr(Packer& pk, std::string_view s) {
  pk.pack_str(static_cast<uint32_t>(s.size()));
  pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}

EventBatch Sample() {
  return EventBatch{1765000000.25,
                    {BlockStored{{~uint64_t{0}, 7}, std::nullopt, {1, 2, 3, 4}, 2, "CPU"},
                     BlockStored{{9}, 7, {5, 6}, 2, std::nullopt},
                     BlockRemoved{{7, ~uint64_t{0}}, "CPU"}, AllBlocksCleared{}},
                    0};
}

TEST(EventWireTest, RoundTrips) {
  const EventBatch b = Sample();
  StatusOr<EventBatch> back = DecodeEventBatch(EncodeEventBatch(b));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, b);
}

TEST(EventWireTest, BytesAreMsgspecs) {
  // msgspec's encoding of vLLM's KVEventBatch(ts=1.5, events=[AllBlocksCleared()],
  // data_parallel_rank=0): an array of three, a float64, a one-entry map tagged "type".
  const std::string expected = std::string(
      "\x93\xcb\x3f\xf8\x00\x00\x00\x00\x00\x00\x91\x81\xa4type\xb0"
      "AllBlocksCleared\x00",
      35);
  EXPECT_EQ(EncodeEventBatch(EventBatch{1.5, {AllBlocksCleared{}}, 0}), expected);
}

TEST(EventWireTest, ReadsOlderArrayEventsAndBytesHashes) {
  msgpack::sbuffer buf;
  Packer pk(buf);
  pk.pack_array(2);  // no rank: vLLM before data_parallel_rank
  pk.pack(3);        // an integer ts
  pk.pack_array(2);
  pk.pack_array(7);  // ["BlockStored", hashes, parent, tokens, block_size, lora_id, medium]
  PackStr(pk, "BlockStored");
  pk.pack_array(1);
  const std::string sha(32, '\x01');
  pk.pack_bin(32);
  pk.pack_bin_body(sha.data(), 32);
  pk.pack(uint64_t{5});
  pk.pack_array(2);
  pk.pack(10);
  pk.pack(11);
  pk.pack(2);
  pk.pack_nil();
  PackStr(pk, "GPU");
  pk.pack_array(2);
  PackStr(pk, "BlockRemoved");
  pk.pack_array(1);
  pk.pack(uint64_t{5});
  StatusOr<EventBatch> b = DecodeEventBatch(Str(buf));
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->ts, 3.0);
  EXPECT_FALSE(b->data_parallel_rank.has_value());
  ASSERT_EQ(b->events.size(), 2u);
  EXPECT_EQ(std::get<BlockStored>(b->events[0]),
            (BlockStored{{0x0101010101010101ULL}, 5, {10, 11}, 2, "GPU"}));
  EXPECT_EQ(std::get<BlockRemoved>(b->events[1]), (BlockRemoved{{5}, std::nullopt}));
}

TEST(EventWireTest, RefusesWhatIsNotABatch) {
  const std::string good = EncodeEventBatch(Sample());
  for (size_t n = 0; n < good.size(); ++n) {
    EXPECT_EQ(DecodeEventBatch(good.substr(0, n)).status().code(), StatusCode::kInvalidArgument)
        << "prefix of " << n << " bytes";
  }
  EXPECT_EQ(DecodeEventBatch(good + "x").status().code(), StatusCode::kInvalidArgument);
  // Token ids that do not fill the blocks, an unknown type, a negative token.
  auto one = [](const Event& e) { return EncodeEventBatch(EventBatch{0, {e}, 0}); };
  EXPECT_EQ(
      DecodeEventBatch(one(BlockStored{{1}, std::nullopt, {1, 2, 3}, 2, "CPU"})).status().code(),
      StatusCode::kInvalidArgument);
  EXPECT_EQ(
      DecodeEventBatch(one(BlockStored{{1}, std::nullopt, {1, -2}, 2, "CPU"})).status().code(),
      StatusCode::kInvalidArgument);
  msgpack::sbuffer buf;
  Packer pk(buf);
  pk.pack_array(2);
  pk.pack(1.0);
  pk.pack_array(1);
  pk.pack_map(1);
  PackStr(pk, "type");
  PackStr(pk, "BlockMoved");
  const Status unknown = DecodeEventBatch(Str(buf)).status();
  EXPECT_EQ(unknown.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.message().find("BlockMoved"), std::string::npos) << unknown;
}

TEST(EventWireTest, FlipsEveryByteWithoutCrashing) {
  const std::string good = EncodeEventBatch(Sample());
  for (size_t i = 0; i < good.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string bad = good;
      bad[i] = static_cast<char>(bad[i] ^ (1 << bit));
      // Any answer but a crash or an unbounded allocation; what decodes round-trips.
      StatusOr<EventBatch> got = DecodeEventBatch(bad);
      if (!got.ok() || std::isnan(got->ts)) continue;
      StatusOr<EventBatch> again = DecodeEventBatch(EncodeEventBatch(*got));
      ASSERT_TRUE(again.ok()) << again.status();
      EXPECT_EQ(*again, *got) << "byte " << i << " bit " << bit;
    }
  }
}

TEST(EventWireTest, SequenceFramesAreBigEndian) {
  EXPECT_EQ(EncodeSeq(258), std::string("\0\0\0\0\0\0\x01\x02", 8));
  EXPECT_EQ(*DecodeSeq(EncodeSeq(-1)), -1);
  EXPECT_EQ(*DecodeSeq(EncodeSeq(123456789012)), 123456789012);
  EXPECT_EQ(DecodeSeq("1234567").status().code(), StatusCode::kInvalidArgument);
}

TEST(EventWireTest, PoolEventsGoOnTheWireWithTheirBlockSizeAndTier) {
  using Tier = kv::BlockEvent::Tier;
  const kv::BlockEvent stored{
      kv::BlockEvent::Kind::kStored, {4, 5}, 3, {1, 2, 3, 4}, Tier::kMemory};
  EXPECT_EQ(std::get<BlockStored>(ToWire(stored, 2)),
            (BlockStored{{4, 5}, 3, {1, 2, 3, 4}, 2, "CPU"}));
  const kv::BlockEvent on_disk{kv::BlockEvent::Kind::kStored, {4}, 3, {1, 2}, Tier::kDisk};
  EXPECT_EQ(std::get<BlockStored>(ToWire(on_disk, 2)), (BlockStored{{4}, 3, {1, 2}, 2, "STORAGE"}));
  const kv::BlockEvent removed{kv::BlockEvent::Kind::kRemoved, {4}, std::nullopt, {}, Tier::kDisk};
  EXPECT_EQ(std::get<BlockRemoved>(ToWire(removed, 2)), (BlockRemoved{{4}, "STORAGE"}));
  EXPECT_EQ(
      EventName(ToWire(
          kv::BlockEvent{kv::BlockEvent::Kind::kAllCleared, {}, std::nullopt, {}, Tier::kMemory},
          2)),
      "AllBlocksCleared");
}

}  // namespace
}  // namespace kvferry::kv_events
