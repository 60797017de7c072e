#include "kvferry/cluster/member.h"

#include <gtest/gtest.h>

namespace kvferry::cluster {
namespace {

MemberInfo Sample() {
  MemberInfo m;
  m.id = "p0";
  m.role = MemberRole::kPrefill;
  m.url = "http://10.0.0.2:8100";
  m.engine_id = "p0";
  m.side_channel = "10.0.0.2:5600";
  m.model = "tiny";
  m.kv_blocks_total = 4096;
  m.block_size = 16;
  return m;
}

TEST(MemberTest, RoundTrips) {
  const MemberInfo m = Sample();
  auto back = DecodeMember("p0", EncodeMember(m));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, m);
}

TEST(MemberTest, KvEventFieldsRoundTripAndAreChecked) {
  MemberInfo m = Sample();
  m.kv_events = "tcp://10.0.0.2:5557";
  m.kv_events_replay = "tcp://10.0.0.2:5558";
  m.prefix_hash_salt = 0xfedcba9876543210ULL;
  const std::string text = EncodeMember(m);
  EXPECT_NE(text.find(R"("prefix_hash_salt":"fedcba9876543210")"), std::string::npos) << text;
  auto back = DecodeMember("p0", text);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, m);
  std::string bad = text;
  bad.replace(bad.find("fedcba"), 6, "xyzxyz");
  EXPECT_EQ(DecodeMember("p0", bad).status().code(), StatusCode::kInvalidArgument);
}

TEST(MemberTest, RolesFromKvRole) {
  EXPECT_EQ(*MemberRoleFromKvRole("kv_producer"), MemberRole::kPrefill);
  EXPECT_EQ(*MemberRoleFromKvRole("kv_consumer"), MemberRole::kDecode);
  EXPECT_EQ(*MemberRoleFromKvRole("kv_both"), MemberRole::kBoth);
  EXPECT_FALSE(MemberRoleFromKvRole("producer").ok());
  EXPECT_TRUE(CanPrefill(MemberRole::kBoth) && CanDecode(MemberRole::kBoth));
  EXPECT_FALSE(CanDecode(MemberRole::kPrefill));
  EXPECT_FALSE(CanPrefill(MemberRole::kDecode));
}

TEST(MemberTest, UnknownKeysAreIgnored) {
  std::string text = EncodeMember(Sample());
  text.insert(1, R"("added_later":[1,2],)");
  EXPECT_TRUE(DecodeMember("p0", text).ok());
}

TEST(MemberTest, GarbageIsRefusedNamingTheField) {
  const std::string good = EncodeMember(Sample());
  const auto refused = [](std::string_view text, std::string_view mentions) {
    auto m = DecodeMember("p0", text);
    EXPECT_FALSE(m.ok()) << text;
    if (!m.ok()) {
      EXPECT_NE(m.status().message().find(mentions), std::string::npos) << m.status();
    }
  };
  refused("", "not a JSON object");
  refused("garbage", "not a JSON object");
  refused("[1,2]", "not a JSON object");
  refused(R"({"version":2})", "version 2");
  auto replace = [&](std::string from, std::string to) {
    std::string t = good;
    t.replace(t.find(from), from.size(), to);
    return t;
  };
  refused(replace(R"("role":"prefill")", R"("role":"leader")"), "role");
  refused(replace(R"("url":"http://10.0.0.2:8100")", R"("url":"10.0.0.2")"), "url");
  refused(replace(R"("url":"http://10.0.0.2:8100")", R"("url":"http://10.0.0.2:99999")"), "url");
  refused(replace(R"("url":"http://10.0.0.2:8100")", R"("url":7)"), "'url' is not a string");
  refused(replace(R"("tp_size":1)", R"("tp_size":"1")"), "'tp_size' is not an integer");
  refused(replace(R"("tp_size":1)", R"("tp_size":0)"), "tp_size");
  refused(replace(R"("kv_blocks_total":4096,)", ""), "missing 'kv_blocks_total'");
  EXPECT_FALSE(DecodeMember("", good).ok());
}

TEST(MemberTest, HttpUrls) {
  EXPECT_TRUE(ValidateHttpUrl("http://h:1").ok());
  EXPECT_TRUE(ValidateHttpUrl("http://[::1]:8000").ok());
  EXPECT_TRUE(ValidateHttpUrl("https://h:443").ok());
  for (const char* bad : {"h:1", "ftp://h:1", "http://h", "http://:1", "http://h:0",
                          "http://h:1/path", "http://h:x"}) {
    EXPECT_FALSE(ValidateHttpUrl(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace kvferry::cluster
