// The socket backend blob (socket_blob.h): round trip, every truncation, every flipped byte,
// and the addresses it refuses, like the agent metadata envelope's tests
// (src/transfer/metadata_test.cc).
#include "transfer/backends/socket/socket_blob.h"

#include <gtest/gtest.h>

namespace kvferry::transfer::sock {
namespace {

SocketBlob Sample() { return {"prefill-0.example", 40123, 0x0123456789abcdefull}; }

void ExpectInvalid(std::string_view bytes, const std::string& why) {
  StatusOr<SocketBlob> b = DecodeSocketBlob(bytes);
  ASSERT_FALSE(b.ok()) << why;
  EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument) << why << ": " << b.status();
}

TEST(SocketBlobTest, RoundTrip) {
  StatusOr<SocketBlob> b = DecodeSocketBlob(EncodeSocketBlob(Sample()));
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->host, "prefill-0.example");
  EXPECT_EQ(b->port, 40123);
  EXPECT_EQ(b->secret, 0x0123456789abcdefull);
}

TEST(SocketBlobTest, EveryTruncationIsInvalidArgument) {
  const std::string bytes = EncodeSocketBlob(Sample());
  for (size_t n = 0; n < bytes.size(); ++n) {
    ExpectInvalid(std::string_view(bytes).substr(0, n), "prefix of " + std::to_string(n));
  }
}

// Magic, version and host length are checked: a flip there is refused. Port, secret and host
// are values (the envelope's checksum guards them): a flip there decodes to another blob, and
// the wrong secret is refused by the target's hello check instead.
TEST(SocketBlobTest, EveryFlippedByteIsRefusedOrChangesAValue) {
  const std::string bytes = EncodeSocketBlob(Sample());
  constexpr size_t kPort = 8, kSecret = 10, kHostLen = 18, kHost = 20;
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string bad = bytes;
    bad[i] = static_cast<char>(bad[i] ^ 0x5a);
    StatusOr<SocketBlob> b = DecodeSocketBlob(bad);
    if (i < kPort || (i >= kHostLen && i < kHost)) {
      ExpectInvalid(bad, "flipped byte " + std::to_string(i));
      continue;
    }
    ASSERT_TRUE(b.ok()) << i << ": " << b.status();
    if (i < kSecret) {
      EXPECT_NE(b->port, Sample().port) << i;
    } else if (i < kHostLen) {
      EXPECT_NE(b->secret, Sample().secret) << i;
    } else {
      EXPECT_NE(b->host, Sample().host) << i;
    }
  }
}

TEST(SocketBlobTest, BadAddressesAreInvalidArgument) {
  ExpectInvalid(EncodeSocketBlob({"", 40123, 1}), "empty host");
  ExpectInvalid(EncodeSocketBlob({"127.0.0.1", 0, 1}), "port 0");
  ExpectInvalid(EncodeSocketBlob(Sample()) + "x", "a byte after the host");
  ExpectInvalid("hello world, not a blob", "text");
}

}  // namespace
}  // namespace kvferry::transfer::sock
