#include "kvferry/cluster/registry_address.h"

#include <gtest/gtest.h>

#include "cluster/etcd_client.h"

namespace kvferry::cluster {
namespace {

TEST(RegistryAddressTest, Parses) {
  auto a = ParseRegistryUrl("etcd://127.0.0.1:2379");
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->endpoints.size(), 1u);
  EXPECT_EQ(a->endpoints[0], (EtcdEndpoint{"127.0.0.1", 2379}));
  EXPECT_EQ(a->prefix, "/kvferry/default/");
  EXPECT_EQ(a->MembersPrefix(), "/kvferry/default/members/");
  auto b = ParseRegistryUrl("etcd://10.0.0.1:2379,10.0.0.2:2380/prod-a");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->endpoints.size(), 2u);
  EXPECT_EQ(b->endpoints[1], (EtcdEndpoint{"10.0.0.2", 2380}));
  EXPECT_EQ(b->prefix, "/kvferry/prod-a/");
  EXPECT_EQ(b->ToString(), "etcd://10.0.0.1:2379,10.0.0.2:2380/prod-a");
}

TEST(RegistryAddressTest, RefusesBadAddresses) {
  for (const char* bad : {"", "127.0.0.1:2379", "http://h:1", "etcd://", "etcd://h", "etcd://h:0",
                          "etcd://h:1,", "etcd://h:1/a/b", "etcd://h:1/sp ace", "etcd://:1"}) {
    EXPECT_EQ(ParseRegistryUrl(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(EtcdCodecTest, Base64RoundTripsEveryLength) {
  std::string bytes;
  for (int n = 0; n < 70; ++n) {
    const std::string enc = Base64Encode(bytes);
    EXPECT_EQ(enc.size() % 4, 0u);
    auto dec = Base64Decode(enc);
    ASSERT_TRUE(dec.ok()) << enc;
    EXPECT_EQ(*dec, bytes);
    bytes += static_cast<char>(n * 37 + 200);
  }
  EXPECT_EQ(Base64Encode("/kvferry/a"), "L2t2ZmVycnkvYQ==");  // as etcd writes it
}

TEST(EtcdCodecTest, Base64RefusesGarbage) {
  for (const char* bad : {"abc", "ab=c", "a===", "@@@@", "QQ==QQ==", "Q=Q="}) {
    EXPECT_FALSE(Base64Decode(bad).ok()) << bad;
  }
}

TEST(EtcdCodecTest, PrefixEnd) {
  EXPECT_EQ(PrefixEnd("/kvferry/"), "/kvferry0");
  EXPECT_EQ(PrefixEnd(std::string("a\xff", 2)), "b");
  EXPECT_EQ(PrefixEnd(std::string("\xff", 1)), std::string(1, '\0'));
}

}  // namespace
}  // namespace kvferry::cluster
