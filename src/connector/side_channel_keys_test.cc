// SideChannelKeys: which CURVE keys each side uses, and the plaintext auth_token kept on
// loopback.
#include "connector/side_channel_keys.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "kvferry/connector/curve_keys.h"

namespace kvferry::connector::internal {
namespace {

class KeyFiles {
 public:
  KeyFiles() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "kvf-sckeys-XXXXXX").string();
    dir_ = ::mkdtemp(tmpl.data());
    for (const char* name : {"p0", "p1", "d0"}) {
      auto pair = GenerateCurveKeyPair();
      EXPECT_TRUE(pair.ok());
      EXPECT_TRUE(WriteCurveKeyPair(*pair, Path(std::string(name) + ".key"),
                                    Path(std::string(name) + ".pub"))
                      .ok());
      pairs_[name] = *pair;
    }
  }
  ~KeyFiles() { std::filesystem::remove_all(dir_); }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  const CurveKeyPair& Pair(const std::string& name) { return pairs_[name]; }
  std::string Write(const std::string& name, const std::string& text) {
    std::ofstream(Path(name)) << text;
    return Path(name);
  }

 private:
  std::string dir_;
  std::map<std::string, CurveKeyPair> pairs_;
};

TEST(SideChannelKeysTest, LoopbackHosts) {
  for (const char* h : {"127.0.0.1", "127.3.2.1", "::1", "localhost"}) {
    EXPECT_TRUE(IsLoopbackHost(h)) << h;
  }
  for (const char* h : {"10.0.0.2", "0.0.0.0", "128.0.0.1", "::", "example.com", "", "127.0.0"}) {
    EXPECT_FALSE(IsLoopbackHost(h)) << h;
  }
}

TEST(SideChannelKeysTest, PlaintextTokenStaysOnLoopback) {
  KvTransferConfig p;
  p.kv_role = KvRole::kProducer;
  p.auth_token = "s3cret";
  p.side_channel_host = "10.0.0.2";
  auto refused = SideChannelKeys::Load(p);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("loopback"), std::string_view::npos);
  p.side_channel_host = "127.0.0.1";
  EXPECT_TRUE(SideChannelKeys::Load(p).ok());

  KvTransferConfig d;
  d.kv_role = KvRole::kConsumer;
  d.auth_token = "s3cret";
  d.side_channel_host = "10.0.0.3";  // a consumer does not serve: nothing to refuse at start
  auto keys = SideChannelKeys::Load(d);
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_FALSE(keys->curve());
  EXPECT_EQ(keys->ForPeer("p0", "10.0.0.2").status().code(), StatusCode::kFailedPrecondition);
  auto local = keys->ForPeer("p0", "127.0.0.1");
  ASSERT_TRUE(local.ok());
  EXPECT_FALSE(local->has_value());

  d.auth_token.clear();  // no token: plaintext anywhere (the operator's choice, warned about)
  keys = SideChannelKeys::Load(d);
  ASSERT_TRUE(keys.ok());
  EXPECT_TRUE(keys->ForPeer("p0", "10.0.0.2").ok());
}

TEST(SideChannelKeysTest, ProducerAdmitsTheListedClients) {
  KeyFiles f;
  KvTransferConfig p;
  p.kv_role = KvRole::kProducer;
  p.side_channel_host = "10.0.0.2";
  p.auth_token = "also fine: encrypted";
  p.curve_secret_key_file = f.Path("p0.key");
  p.curve_client_keys_file = f.Write("clients", "d0 " + f.Pair("d0").public_key + "\n");
  auto keys = SideChannelKeys::Load(p);
  ASSERT_TRUE(keys.ok()) << keys.status();
  ASSERT_TRUE(keys->server().has_value());
  EXPECT_EQ(keys->server()->secret_key, f.Pair("p0").secret_key);
  EXPECT_EQ(keys->server()->client_keys, std::vector<std::string>{f.Pair("d0").public_key});

  p.curve_client_keys_file = f.Path("missing");
  EXPECT_EQ(SideChannelKeys::Load(p).status().code(), StatusCode::kInvalidArgument);
}

TEST(SideChannelKeysTest, ConsumerUsesThePublicKeyOfTheNamedEngine) {
  KeyFiles f;
  KvTransferConfig d;
  d.kv_role = KvRole::kConsumer;
  d.curve_secret_key_file = f.Path("d0.key");
  d.curve_server_keys_file = f.Write("servers", "p0 " + f.Pair("p0").public_key + "\n");
  auto keys = SideChannelKeys::Load(d);
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_FALSE(keys->server().has_value());
  auto p0 = keys->ForPeer("p0", "10.0.0.2");
  ASSERT_TRUE(p0.ok()) << p0.status();
  ASSERT_TRUE(p0->has_value());
  EXPECT_EQ((*p0)->server_key, f.Pair("p0").public_key);
  EXPECT_EQ((*p0)->public_key, f.Pair("d0").public_key);
  EXPECT_EQ((*p0)->secret_key, f.Pair("d0").secret_key);
  auto p1 = keys->ForPeer("p1", "10.0.0.3");
  EXPECT_EQ(p1.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(p1.status().message().find("'p1'"), std::string_view::npos) << p1.status();

  // A key without an engine id serves every engine not listed by name.
  d.curve_server_keys_file =
      f.Write("servers2", f.Pair("p1").public_key + "\np0 " + f.Pair("p0").public_key + "\n");
  keys = SideChannelKeys::Load(d);
  ASSERT_TRUE(keys.ok());
  EXPECT_EQ(keys->ForPeer("p0", "h").value()->server_key, f.Pair("p0").public_key);
  EXPECT_EQ(keys->ForPeer("p7", "h").value()->server_key, f.Pair("p1").public_key);

  // CURVE on but no server keys at all: every P is refused (none is trusted).
  d.curve_server_keys_file.clear();
  keys = SideChannelKeys::Load(d);
  ASSERT_TRUE(keys.ok());
  EXPECT_EQ(keys->ForPeer("p0", "127.0.0.1").status().code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace kvferry::connector::internal
