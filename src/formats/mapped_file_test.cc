#include "kvferry/formats/mapped_file.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "formats/test_util.h"

namespace kvferry::formats {
namespace {

using testing::TempDir;

TEST(MappedFileTest, MapsTheWholeFile) {
  TempDir dir;
  testing::WriteFile(dir.File("a"), std::string("hello mapping"));
  auto file = MappedFile::Open(dir.File("a"));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->path(), dir.File("a"));
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(file->bytes().data()), file->bytes().size()),
            "hello mapping");
}

TEST(MappedFileTest, MoveKeepsTheMapping) {
  TempDir dir;
  testing::WriteFile(dir.File("a"), std::string("abc"));
  auto file = MappedFile::Open(dir.File("a"));
  ASSERT_TRUE(file.ok());
  const std::byte* data = file->bytes().data();
  MappedFile moved = std::move(*file);
  EXPECT_EQ(moved.bytes().data(), data);
  EXPECT_EQ(moved.bytes().size(), 3u);
  EXPECT_TRUE(file->bytes().empty());  // NOLINT: the moved-from object is empty
  MappedFile other = std::move(moved);
  moved = std::move(other);  // assigning back releases nothing twice
  EXPECT_EQ(moved.bytes()[2], std::byte{'c'});
}

TEST(MappedFileTest, EmptyFileIsAnEmptySpan) {
  TempDir dir;
  testing::WriteFile(dir.File("empty"), std::string());
  auto file = MappedFile::Open(dir.File("empty"));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_TRUE(file->bytes().empty());
}

TEST(MappedFileTest, ErrorsNameThePath) {
  TempDir dir;
  auto missing = MappedFile::Open(dir.File("missing"));
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find(dir.File("missing")), std::string_view::npos);
  auto directory = MappedFile::Open(dir.path());
  EXPECT_EQ(directory.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(directory.status().message().find("not a regular file"), std::string_view::npos);
}

}  // namespace
}  // namespace kvferry::formats
