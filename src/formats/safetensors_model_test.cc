#include "kvferry/formats/safetensors_model.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "formats/test_util.h"
#include "kvferry/formats/safetensors_writer.h"

namespace kvferry::formats {
namespace {

using testing::AsBytes;
using testing::TempDir;
using Json = nlohmann::json;

// Five F32 tensors t0..t4 of shape [i + 1], value i in every element.
SafetensorsWriter FiveTensors() {
  SafetensorsWriter w;
  w.SetMetadata("format", "pt");
  for (int i = 0; i < 5; ++i) {
    const std::vector<float> v(i + 1, static_cast<float>(i));
    EXPECT_TRUE(w.AddTensor("t" + std::to_string(i), DType::kF32, {i + 1}, AsBytes(v)).ok());
  }
  return w;
}

void ExpectFiveTensors(const SafetensorsModel& m) {
  ASSERT_EQ(m.tensors().size(), 5u);
  for (int i = 0; i < 5; ++i) {
    auto t = m.Get("t" + std::to_string(i));
    ASSERT_TRUE(t.ok()) << t.status();
    std::vector<float> v(i + 1);
    ASSERT_TRUE(ReadAsF32(**t, v).ok());
    EXPECT_EQ(v, std::vector<float>(i + 1, static_cast<float>(i)));
  }
  EXPECT_EQ(m.metadata().at("format"), "pt");
}

StatusOr<SafetensorsModel> OpenDir(const TempDir& dir) {
  return SafetensorsModel::Open(dir.path());
}

void ExpectModelError(const StatusOr<SafetensorsModel>& m, StatusCode code,
                      const std::string& part) {
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), code) << m.status();
  EXPECT_NE(m.status().message().find(part), std::string_view::npos) << m.status();
}

Json ReadIndex(const TempDir& dir) {
  std::vector<std::byte> b = testing::ReadFile(dir.File(std::string(kSafetensorsIndexFile)));
  return Json::parse(reinterpret_cast<const char*>(b.data()),
                     reinterpret_cast<const char*>(b.data() + b.size()));
}

void WriteIndex(const TempDir& dir, const Json& index) {
  testing::WriteFile(dir.File(std::string(kSafetensorsIndexFile)), index.dump());
}

TEST(SafetensorsModelTest, OneFileByPathOrDirectory) {
  TempDir dir;
  ASSERT_TRUE(FiveTensors().WriteDirectory(dir.path(), 1).ok());
  EXPECT_TRUE(std::filesystem::exists(dir.File("model.safetensors")));
  auto by_dir = OpenDir(dir);
  ASSERT_TRUE(by_dir.ok()) << by_dir.status();
  ExpectFiveTensors(*by_dir);
  EXPECT_EQ(by_dir->shards().size(), 1u);
  auto by_file = SafetensorsModel::Open(dir.File("model.safetensors"));
  ASSERT_TRUE(by_file.ok()) << by_file.status();
  ExpectFiveTensors(*by_file);
}

TEST(SafetensorsModelTest, ShardsRoundTrip) {
  TempDir dir;
  ASSERT_TRUE(FiveTensors().WriteDirectory(dir.path(), 3).ok());
  for (const char* name : {"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                           "model-00003-of-00003.safetensors", "model.safetensors.index.json"}) {
    EXPECT_TRUE(std::filesystem::exists(dir.File(name))) << name;
  }
  EXPECT_FALSE(std::filesystem::exists(dir.File("model.safetensors")));
  const Json index = ReadIndex(dir);
  EXPECT_EQ(index["weight_map"]["t0"], "model-00001-of-00003.safetensors");
  EXPECT_EQ(index["weight_map"]["t4"], "model-00003-of-00003.safetensors");
  EXPECT_EQ(index["metadata"]["total_size"], 4 * (1 + 2 + 3 + 4 + 5));
  auto model = OpenDir(dir);
  ASSERT_TRUE(model.ok()) << model.status();
  ExpectFiveTensors(*model);
  ASSERT_EQ(model->shards().size(), 3u);
  EXPECT_EQ(model->Find("t3")->file, dir.File("model-00003-of-00003.safetensors"));
  EXPECT_EQ(model->Get("t9").status().code(), StatusCode::kNotFound);
}

TEST(SafetensorsModelTest, MissingModel) {
  TempDir dir;
  ExpectModelError(SafetensorsModel::Open(dir.File("nothing")), StatusCode::kNotFound,
                   "no model at");
  ExpectModelError(OpenDir(dir), StatusCode::kNotFound, "has neither model.safetensors nor");
  ASSERT_TRUE(FiveTensors().WriteDirectory(dir.path(), 2).ok());
  std::filesystem::remove(dir.File("model-00002-of-00002.safetensors"));
  ExpectModelError(OpenDir(dir), StatusCode::kNotFound, "model-00002-of-00002.safetensors");
}

TEST(SafetensorsModelTest, ShardsMayNotLeaveTheDirectory) {
  TempDir dir;
  ASSERT_TRUE(FiveTensors().WriteDirectory(dir.path(), 2).ok());
  for (const char* shard : {"../model-00001-of-00002.safetensors", "/etc/passwd", "..", "",
                            "sub/model-00001-of-00002.safetensors"}) {
    Json index = ReadIndex(dir);
    index["weight_map"]["t0"] = shard;
    WriteIndex(dir, index);
    ExpectModelError(OpenDir(dir), StatusCode::kDataLoss, "not a file of the model directory");
  }
}

TEST(SafetensorsModelTest, IndexMustAgreeWithTheShards) {
  TempDir dir;
  ASSERT_TRUE(FiveTensors().WriteDirectory(dir.path(), 2).ok());
  const Json good = ReadIndex(dir);

  Json wrong_shard = good;
  wrong_shard["weight_map"]["t0"] = "model-00002-of-00002.safetensors";
  WriteIndex(dir, wrong_shard);
  ExpectModelError(OpenDir(dir), StatusCode::kDataLoss,
                   "tensor 't0' is in shard '" + dir.File("model-00001-of-00002.safetensors"));

  Json extra = good;
  extra["weight_map"]["t7"] = "model-00002-of-00002.safetensors";
  WriteIndex(dir, extra);
  ExpectModelError(OpenDir(dir), StatusCode::kDataLoss, "places tensor 't7' in");

  Json missing = good;
  missing["weight_map"].erase("t3");
  WriteIndex(dir, missing);
  ExpectModelError(OpenDir(dir), StatusCode::kDataLoss, "holds tensor 't3', which");

  WriteIndex(dir, Json{{"weight_map", {{"t0", 5}}}});
  ExpectModelError(OpenDir(dir), StatusCode::kDataLoss, "weight_map 't0' is not a file name");
  WriteIndex(dir, Json{{"metadata", Json::object()}});
  ExpectModelError(OpenDir(dir), StatusCode::kDataLoss, "no weight_map object");
  testing::WriteFile(dir.File(std::string(kSafetensorsIndexFile)), std::string("{nope"));
  ExpectModelError(OpenDir(dir), StatusCode::kDataLoss, "not a JSON object");
  testing::WriteFile(dir.File(std::string(kSafetensorsIndexFile)), std::string());
  ExpectModelError(OpenDir(dir), StatusCode::kDataLoss, "not a JSON object");

  WriteIndex(dir, good);
  EXPECT_TRUE(OpenDir(dir).ok());
}

TEST(SafetensorsModelTest, NoTensorInTwoShards) {
  TempDir dir;
  const std::vector<float> v(2, 1.0f);
  for (const char* shard : {"a.safetensors", "b.safetensors"}) {
    SafetensorsWriter w;
    ASSERT_TRUE(w.AddTensor("shared", DType::kF32, {2}, AsBytes(v)).ok());
    ASSERT_TRUE(w.AddTensor(shard, DType::kF32, {2}, AsBytes(v)).ok());
    ASSERT_TRUE(w.Write(dir.File(shard)).ok());
  }
  WriteIndex(dir, Json{{"weight_map",
                        {{"shared", "a.safetensors"},
                         {"a.safetensors", "a.safetensors"},
                         {"b.safetensors", "b.safetensors"}}}});
  ExpectModelError(OpenDir(dir), StatusCode::kDataLoss,
                   "tensor 'shared' is in shard '" + dir.File("b.safetensors") + "', but '" +
                       dir.File("model.safetensors.index.json") + "' places it in 'a.safetensors'");
}

TEST(SafetensorsModelTest, ShardsMustAgreeOnMetadata) {
  TempDir dir;
  const std::vector<float> v(2, 1.0f);
  for (const char* shard : {"a.safetensors", "b.safetensors"}) {
    SafetensorsWriter w;
    w.SetMetadata("format", "pt");
    w.SetMetadata("owner", shard);
    ASSERT_TRUE(w.AddTensor(shard, DType::kF32, {2}, AsBytes(v)).ok());
    ASSERT_TRUE(w.Write(dir.File(shard)).ok());
  }
  WriteIndex(dir, Json{{"weight_map",
                        {{"a.safetensors", "a.safetensors"}, {"b.safetensors", "b.safetensors"}}}});
  ExpectModelError(OpenDir(dir), StatusCode::kDataLoss, "__metadata__ 'owner' different");
}

TEST(SafetensorsModelTest, ShardCountMustFitTheTensors) {
  TempDir dir;
  EXPECT_EQ(FiveTensors().WriteDirectory(dir.path(), 0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(FiveTensors().WriteDirectory(dir.path(), 6).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(FiveTensors().WriteDirectory(dir.path(), 5).ok());
  EXPECT_EQ(FiveTensors().WriteDirectory(dir.File("absent"), 1).code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvferry::formats
