// CURVE key files: generation, the file formats, and the checks on secret key files.
#include "kvferry/connector/curve_keys.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace kvferry::connector {
namespace {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "kvf-curve-XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

void WriteText(const std::string& path, const std::string& text, mode_t mode) {
  std::ofstream(path) << text;
  ::chmod(path.c_str(), mode);
}

TEST(CurveKeysTest, GeneratedPairIsConsistent) {
  ASSERT_TRUE(CurveAvailable());
  auto a = GenerateCurveKeyPair();
  auto b = GenerateCurveKeyPair();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(IsCurveKey(a->public_key));
  EXPECT_TRUE(IsCurveKey(a->secret_key));
  EXPECT_NE(a->secret_key, b->secret_key);
  auto pub = CurvePublicKeyOf(a->secret_key);
  ASSERT_TRUE(pub.ok()) << pub.status();
  EXPECT_EQ(*pub, a->public_key);
  EXPECT_FALSE(CurvePublicKeyOf("short").ok());
  EXPECT_FALSE(IsCurveKey(std::string(40, ' ')));
}

TEST(CurveKeysTest, WrittenPairReadsBackAndIsNeverOverwritten) {
  TempDir dir;
  auto pair = GenerateCurveKeyPair();
  ASSERT_TRUE(pair.ok());
  ASSERT_TRUE(WriteCurveKeyPair(*pair, dir.File("p0.key"), dir.File("p0.pub")).ok());
  struct stat st {};
  ASSERT_EQ(::stat(dir.File("p0.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto read = ReadCurveSecretKeyFile(dir.File("p0.key"));
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->secret_key, pair->secret_key);
  EXPECT_EQ(read->public_key, pair->public_key);
  auto pub = ReadCurveKeyListFile(dir.File("p0.pub"));
  ASSERT_TRUE(pub.ok()) << pub.status();
  ASSERT_EQ(pub->size(), 1u);
  EXPECT_EQ((*pub)[0].key, pair->public_key);

  auto other = GenerateCurveKeyPair();
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(WriteCurveKeyPair(*other, dir.File("p0.key"), dir.File("x.pub")).code(),
            StatusCode::kAlreadyExists);
  EXPECT_EQ(WriteCurveKeyPair(*other, dir.File("y.key"), dir.File("p0.pub")).code(),
            StatusCode::kAlreadyExists);
  read = ReadCurveSecretKeyFile(dir.File("p0.key"));
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(read->secret_key, pair->secret_key);
}

TEST(CurveKeysTest, SecretKeyFileReadableByOthersIsRefused) {
  TempDir dir;
  auto pair = GenerateCurveKeyPair();
  ASSERT_TRUE(pair.ok());
  WriteText(dir.File("open.key"), pair->secret_key + "\n", 0644);
  auto read = ReadCurveSecretKeyFile(dir.File("open.key"));
  EXPECT_EQ(read.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(read.status().message().find("other users"), std::string_view::npos);
  ::chmod(dir.File("open.key").c_str(), 0640);  // a service group may read it
  EXPECT_TRUE(ReadCurveSecretKeyFile(dir.File("open.key")).ok());

  WriteText(dir.File("two.key"), pair->secret_key + "\n" + pair->secret_key + "\n", 0600);
  EXPECT_FALSE(ReadCurveSecretKeyFile(dir.File("two.key")).ok());
  EXPECT_FALSE(ReadCurveSecretKeyFile(dir.File("missing.key")).ok());
}

TEST(CurveKeysTest, KeyListLabelsAndComments) {
  auto a = GenerateCurveKeyPair();
  auto b = GenerateCurveKeyPair();
  ASSERT_TRUE(a.ok() && b.ok());
  // '#' is a Z85 digit, but no key can start with it: comments are unambiguous.
  EXPECT_FALSE(IsCurveKey("#" + a->public_key.substr(1)));
  EXPECT_FALSE(IsCurveKey("$" + a->public_key.substr(1)));
  EXPECT_TRUE(IsCurveKey("0" + a->public_key.substr(1)));
  const std::string text = "# Ds admitted by p0\n\n" + a->public_key + "\n  d1\t" + b->public_key +
                           "  \n#" + b->public_key +         // commented out, bare
                           "\n#d2 " + a->public_key + "\n";  // commented out, labelled
  auto keys = ParseCurveKeyList(text, "clients");
  ASSERT_TRUE(keys.ok()) << keys.status();
  ASSERT_EQ(keys->size(), 2u);
  EXPECT_EQ((*keys)[0].label, "");
  EXPECT_EQ((*keys)[0].key, a->public_key);
  EXPECT_EQ((*keys)[1].label, "d1");
  EXPECT_EQ((*keys)[1].key, b->public_key);

  auto bad = ParseCurveKeyList(a->public_key + "\nd1 not-a-key\n", "clients");
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("clients:2"), std::string_view::npos) << bad.status();
}

TEST(CurveKeysTest, EmptyKeyListFileIsRefused) {
  TempDir dir;
  WriteText(dir.File("empty"), "# nobody yet\n", 0644);
  EXPECT_EQ(ReadCurveKeyListFile(dir.File("empty")).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvferry::connector
