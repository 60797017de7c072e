// The UCX backend blob (ucx_blob.h): round trip, every truncation, damaged bytes and blobs of
// the wrong shape, like the agent metadata envelope's tests (src/transfer/metadata_test.cc).
#include "transfer/backends/ucx/ucx_blob.h"

#include <gtest/gtest.h>

#include <msgpack.hpp>

namespace kvferry::transfer::ucx {
namespace {

UcxBlob Sample() {
  UcxBlob b;
  b.worker_address = std::string("\0\x7f\x80\xffworker", 10);
  b.host_id = "host-a:5b1c0e";
  b.pid = 4242;
  b.regions = {{1, 0x7f0000001000ull, std::string("\0rkey-1", 7)},
               {7, 0xffffffffffff0000ull, std::string(300, '\x5a')}};
  return b;
}

void ExpectInvalid(std::string_view bytes, const std::string& why) {
  StatusOr<UcxBlob> b = DecodeUcxBlob(bytes);
  ASSERT_FALSE(b.ok()) << why;
  EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument) << why << ": " << b.status();
}

TEST(UcxBlobTest, RoundTrip) {
  StatusOr<UcxBlob> b = DecodeUcxBlob(EncodeUcxBlob(Sample()));
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->worker_address, Sample().worker_address);
  EXPECT_EQ(b->host_id, "host-a:5b1c0e");
  EXPECT_EQ(b->pid, 4242);
  ASSERT_EQ(b->regions.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(b->regions[i].id, Sample().regions[i].id) << i;
    EXPECT_EQ(b->regions[i].base, Sample().regions[i].base) << i;
    EXPECT_EQ(b->regions[i].rkey, Sample().regions[i].rkey) << i;
  }
}

TEST(UcxBlobTest, NoRegionsRoundTrip) {
  UcxBlob empty = Sample();
  empty.regions.clear();
  StatusOr<UcxBlob> b = DecodeUcxBlob(EncodeUcxBlob(empty));
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE(b->regions.empty());
  EXPECT_EQ(b->worker_address, empty.worker_address);
}

TEST(UcxBlobTest, EveryTruncationIsInvalidArgument) {
  const std::string bytes = EncodeUcxBlob(Sample());
  for (size_t n = 0; n < bytes.size(); ++n) {
    ExpectInvalid(std::string_view(bytes).substr(0, n), "prefix of " + std::to_string(n));
  }
}

// The envelope's checksum rejects damaged bytes before they reach this decoder; here a flipped
// byte must never crash or read out of bounds (ASan), and is refused as InvalidArgument or
// decodes to some other well-formed blob.
TEST(UcxBlobTest, EveryFlippedByteIsRefusedOrWellFormed) {
  const std::string bytes = EncodeUcxBlob(Sample());
  int refused = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string bad = bytes;
    bad[i] = static_cast<char>(bad[i] ^ 0x5a);
    StatusOr<UcxBlob> b = DecodeUcxBlob(bad);
    if (!b.ok()) {
      EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument) << i << ": " << b.status();
      ++refused;
    }
  }
  // The structural bytes (array and bin headers, the type of each field) are refused.
  EXPECT_GT(refused, 5);
  for (size_t i : {size_t{0}, size_t{1}}) {  // the outer array header, the address's bin header
    std::string bad = bytes;
    bad[i] = static_cast<char>(bad[i] ^ 0x5a);
    ExpectInvalid(bad, "flipped byte " + std::to_string(i));
  }
}

// One blob of the wrong shape per field: each is refused, none throws out of the decoder.
TEST(UcxBlobTest, WrongShapeIsInvalidArgument) {
  auto pack = [](auto&& fill) {
    msgpack::sbuffer buf;
    msgpack::packer<msgpack::sbuffer> pk(&buf);
    fill(pk);
    return std::string(buf.data(), buf.size());
  };
  using Pk = msgpack::packer<msgpack::sbuffer>;
  auto bin = [](Pk& pk, std::string_view s) {
    pk.pack_bin(static_cast<uint32_t>(s.size()));
    pk.pack_bin_body(s.data(), static_cast<uint32_t>(s.size()));
  };
  // A well-formed head (address, host, pid) followed by `regions`.
  auto with_regions = [&](auto&& regions) {
    return pack([&](Pk& pk) {
      pk.pack_array(4);
      bin(pk, "addr");
      pk.pack(std::string("host"));
      pk.pack(int64_t{1});
      regions(pk);
    });
  };
  ExpectInvalid(pack([](Pk& pk) { pk.pack(42); }), "not an array");
  ExpectInvalid(pack([&](Pk& pk) {
                  pk.pack_array(3);
                  bin(pk, "addr");
                  pk.pack(std::string("host"));
                  pk.pack(int64_t{1});
                }),
                "three fields");
  ExpectInvalid(pack([](Pk& pk) {
                  pk.pack_array(4);
                  pk.pack(std::string("addr"));  // str, not bin
                  pk.pack(std::string("host"));
                  pk.pack(int64_t{1});
                  pk.pack_array(0);
                }),
                "address not bin");
  ExpectInvalid(pack([&](Pk& pk) {
                  pk.pack_array(4);
                  bin(pk, "addr");
                  pk.pack(7);  // host not a string
                  pk.pack(int64_t{1});
                  pk.pack_array(0);
                }),
                "host not str");
  ExpectInvalid(pack([&](Pk& pk) {
                  pk.pack_array(4);
                  bin(pk, "addr");
                  pk.pack(std::string("host"));
                  pk.pack(std::string("pid"));
                  pk.pack_array(0);
                }),
                "pid not int");
  ExpectInvalid(with_regions([](Pk& pk) { pk.pack(0); }), "regions not array");
  ExpectInvalid(with_regions([](Pk& pk) {
                  pk.pack_array(1);
                  pk.pack_array(2);
                  pk.pack(1);
                  pk.pack(uint64_t{4096});
                }),
                "region of two fields");
  ExpectInvalid(with_regions([](Pk& pk) {
                  pk.pack_array(1);
                  pk.pack_array(3);
                  pk.pack(1);
                  pk.pack(uint64_t{4096});
                  pk.pack(std::string("rkey"));  // str, not bin
                }),
                "rkey not bin");
  ExpectInvalid(with_regions([&](Pk& pk) {
                  pk.pack_array(1);
                  pk.pack_array(3);
                  pk.pack(uint64_t{1} << 40);  // id beyond uint32
                  pk.pack(uint64_t{4096});
                  bin(pk, "rkey");
                }),
                "region id out of range");
}

TEST(UcxBlobTest, GarbageIsInvalidArgument) {
  ExpectInvalid("", "empty");
  ExpectInvalid("hello world, not a blob", "text");
}

}  // namespace
}  // namespace kvferry::transfer::ucx
