#include "kvferry/kv_offload/disk_tier.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace kvferry::kv_offload {
namespace {

namespace fs = std::filesystem;
using Kind = kv::BlockEvent::Kind;

constexpr int32_t kBlock = 4;

class DiskTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("kvf_disk_tier_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  DiskTierOptions Options(uint64_t capacity = 1 << 20) const {
    DiskTierOptions o;
    o.dir = root_.string();
    o.capacity_bytes = capacity;
    o.block_size = kBlock;
    o.salt = 7;
    o.layout = 9;
    o.record_events = true;
    return o;
  }
  std::unique_ptr<DiskTier> OpenTier(const DiskTierOptions& o) {
    auto t = DiskTier::Open(o);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return t.ok() ? std::move(*t) : nullptr;
  }
  // Block i of the chain 0, 1, 2, ...: prefix tokens [0, 4(i+1)), payload of `bytes` bytes.
  static std::vector<int32_t> Prefix(int i) {
    std::vector<int32_t> t(static_cast<size_t>(kBlock * (i + 1)));
    for (size_t k = 0; k < t.size(); ++k) t[k] = static_cast<int32_t>(k * 3 + 1);
    return t;
  }
  static std::vector<std::byte> Payload(int i, size_t bytes = 100) {
    std::vector<std::byte> p(bytes);
    for (size_t k = 0; k < bytes; ++k) p[k] = static_cast<std::byte>(k + static_cast<size_t>(i));
    return p;
  }
  static uint64_t Hash(int i) { return 1000 + static_cast<uint64_t>(i); }
  static std::optional<uint64_t> Parent(int i) {
    return i == 0 ? std::nullopt : std::optional<uint64_t>(Hash(i - 1));
  }
  static bool PutBlock(DiskTier& t, int i, size_t bytes = 100) {
    return t.Put(Hash(i), Parent(i), Prefix(i), Payload(i, bytes));
  }
  fs::path FileOf(const DiskTier& t, int i) const {
    char name[32];
    std::snprintf(name, sizeof(name), "%016llx.kvb", static_cast<unsigned long long>(Hash(i)));
    return fs::path(t.directory()) / name;
  }

  fs::path root_;
};

TEST_F(DiskTierTest, ABlockIsFoundWhileQueuedAndAfterItIsWritten) {
  auto t = OpenTier(Options());
  ASSERT_TRUE(PutBlock(*t, 0));
  EXPECT_TRUE(t->Contains(Hash(0)));
  EXPECT_FALSE(PutBlock(*t, 0));  // already there
  ASSERT_TRUE(t->Flush(10'000));
  EXPECT_TRUE(fs::exists(FileOf(*t, 0)));
  auto got = t->Get(Hash(0), Prefix(0));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, Payload(0));
  const DiskTierStats s = t->Stats();
  EXPECT_EQ(s.files, 1);
  EXPECT_EQ(s.stored, 1);
  EXPECT_EQ(s.loaded, 1);
  EXPECT_EQ(s.pending_bytes, 0);
  const std::vector<kv::BlockEvent> ev = t->TakeEvents();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(
      ev[0],
      (kv::BlockEvent{
          Kind::kStored, {Hash(0)}, std::nullopt, {1, 4, 7, 10}, kv::BlockEvent::Tier::kDisk}));
}

TEST_F(DiskTierTest, AnotherPrefixUnderTheSameHashIsAMiss) {
  auto t = OpenTier(Options());
  ASSERT_TRUE(PutBlock(*t, 1));
  std::vector<int32_t> other = Prefix(1);
  other[0] = 99;  // a 64-bit collision: same hash, other tokens
  EXPECT_EQ(t->Get(Hash(1), other).status().code(), StatusCode::kNotFound);  // queued
  ASSERT_TRUE(t->Flush(10'000));
  EXPECT_EQ(t->Get(Hash(1), other).status().code(), StatusCode::kNotFound);  // on disk
  EXPECT_TRUE(t->Get(Hash(1), Prefix(1)).ok());
  EXPECT_EQ(t->Get(Hash(5), Prefix(5)).status().code(), StatusCode::kNotFound);
}

TEST_F(DiskTierTest, BlocksOutliveTheTierAndAreAnnouncedParentsFirst) {
  {
    auto t = OpenTier(Options());
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(PutBlock(*t, i));
  }  // the destructor finishes the writes
  auto t = OpenTier(Options());
  EXPECT_EQ(t->Stats().files, 3);
  const std::vector<kv::BlockEvent> ev = t->TakeEvents();
  ASSERT_EQ(ev.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(ev[i].block_hashes, std::vector<uint64_t>{Hash(i)});
    EXPECT_EQ(ev[i].parent_block_hash, Parent(i));
  }
  for (int i = 0; i < 3; ++i) EXPECT_EQ(*t->Get(Hash(i), Prefix(i)), Payload(i));
  // Another salt or layout is another directory: nothing of these.
  DiskTierOptions other = Options();
  other.layout = 10;
  EXPECT_EQ(OpenTier(other)->Stats().files, 0);
}

TEST_F(DiskTierTest, DamagedFilesAreMissesAndDeleted) {
  {
    auto t = OpenTier(Options());
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(PutBlock(*t, i));
  }
  auto t = OpenTier(Options());
  // Corrupt block 0 (one payload byte), truncate block 1, and leave a half-written file.
  {
    std::fstream f(FileOf(*t, 0), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(FileOf(*t, 0)) - 20));
    f.put('\x5a');
  }
  fs::resize_file(FileOf(*t, 1), fs::file_size(FileOf(*t, 1)) - 1);
  std::ofstream(fs::path(t->directory()) / "00000000000003e8.kvb.tmp") << "torn";
  t->TakeEvents();
  EXPECT_EQ(t->Get(Hash(0), Prefix(0)).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(t->Get(Hash(1), Prefix(1)).status().code(), StatusCode::kDataLoss);
  EXPECT_FALSE(fs::exists(FileOf(*t, 0)));
  EXPECT_FALSE(t->Contains(Hash(1)));
  EXPECT_EQ(*t->Get(Hash(2), Prefix(2)), Payload(2));
  DiskTierStats s = t->Stats();
  EXPECT_EQ(s.corrupt, 2);
  EXPECT_EQ(s.files, 1);
  const std::vector<kv::BlockEvent> ev = t->TakeEvents();
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].kind, Kind::kRemoved);
  // At Open: a truncated file is found by its size and the temporary one is removed.
  fs::resize_file(FileOf(*t, 2), 10);
  t.reset();
  t = OpenTier(Options());
  s = t->Stats();
  EXPECT_EQ(s.files, 0);
  EXPECT_EQ(s.corrupt, 1);
  EXPECT_TRUE(fs::is_empty(t->directory()));
}

TEST_F(DiskTierTest, CapacityEvictsTheLeastRecentlyUsed) {
  // Each file: 64 head + 4*4*(i+1) tokens + 100 payload + 8 checksum: 188, 204, 220, 236 bytes.
  auto t = OpenTier(Options(650));
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(PutBlock(*t, i));
    ASSERT_TRUE(t->Flush(10'000));
  }
  ASSERT_TRUE(t->Get(Hash(0), Prefix(0)).ok());  // 0 is now more recent than 1
  t->TakeEvents();
  ASSERT_TRUE(PutBlock(*t, 3));
  ASSERT_TRUE(t->Flush(10'000));
  EXPECT_TRUE(t->Contains(Hash(0)));
  EXPECT_FALSE(t->Contains(Hash(1)));
  EXPECT_FALSE(fs::exists(FileOf(*t, 1)));
  DiskTierStats s = t->Stats();
  EXPECT_EQ(s.bytes, 188 + 220 + 236);
  EXPECT_EQ(s.evicted, 1);
  const std::vector<kv::BlockEvent> ev = t->TakeEvents();
  ASSERT_FALSE(ev.empty());
  EXPECT_EQ(ev[0], (kv::BlockEvent{
                       Kind::kRemoved, {Hash(1)}, std::nullopt, {}, kv::BlockEvent::Tier::kDisk}));
  // A block larger than the whole capacity is dropped, nothing evicted for it.
  ASSERT_TRUE(PutBlock(*t, 4, 1000));
  ASSERT_TRUE(t->Flush(10'000));
  EXPECT_FALSE(t->Contains(Hash(4)));
  EXPECT_EQ(t->Stats().dropped, 1);
  EXPECT_EQ(t->Stats().evicted, s.evicted);
}

// A real full disk: a 64 KiB tmpfs in a mount namespace of this process (needs CAP_SYS_ADMIN).
TEST_F(DiskTierTest, AFullDiskPausesOffloadingAndServesWhatItHas) {
  fs::create_directories(root_);
  if (::unshare(CLONE_NEWNS) != 0 ||
      ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
      ::mount("tmpfs", root_.c_str(), "tmpfs", 0, "size=64k") != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs here (" << std::strerror(errno)
                 << "); the full-disk case needs CAP_SYS_ADMIN";
  }
  DiskTierOptions o = Options(uint64_t{1} << 30);  // the budget is not what stops it
  o.pause_after_error_ms = 60'000;
  auto t = OpenTier(o);
  ASSERT_TRUE(PutBlock(*t, 0, 1000));
  ASSERT_TRUE(t->Flush(10'000));
  ASSERT_TRUE(t->Contains(Hash(0)));
  int i = 1;
  while (!t->Stats().paused && i < 100) {
    PutBlock(*t, i++, 16 << 10);
    ASSERT_TRUE(t->Flush(10'000));
  }
  const DiskTierStats s = t->Stats();
  EXPECT_TRUE(s.paused);
  EXPECT_EQ(s.write_errors, 1);
  EXPECT_FALSE(PutBlock(*t, 200));  // paused: dropped at once
  EXPECT_EQ(t->Stats().dropped, s.dropped + 1);
  EXPECT_EQ(*t->Get(Hash(0), Prefix(0)), Payload(0, 1000));  // still serving
  for (const auto& e : fs::directory_iterator(t->directory())) {
    EXPECT_FALSE(e.path().string().ends_with(".tmp")) << e.path();
  }
  t.reset();
  ::umount2(root_.c_str(), MNT_DETACH);
}

}  // namespace
}  // namespace kvferry::kv_offload
