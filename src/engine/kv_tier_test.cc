// The disk tier through the engine (docs/kv_offload.md): answers equal a colocated engine's
// token for token and logprob for logprob, whether a prompt's blocks come from RAM, from disk,
// from disk after a restart, or are recomputed because a file was damaged — and the test checks
// each time that the blocks did come from where it says.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "engine/engine_test_util.h"
#include "kvferry/kv/block_pool.h"

namespace kvferry::engine {
namespace {

namespace fs = std::filesystem;
using testing_util::Completion;
using testing_util::Greedy;
using testing_util::RunToEnd;

constexpr int32_t kBlock = 16;

struct Case {
  const char* model;
  kv::DType dtype;
  kv::Layout layout;
  int32_t tp;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.model << " " << kv::DTypeName(c.dtype) << " " << kv::LayoutName(c.layout) << " tp"
      << c.tp;
}

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  std::string name = std::string(info.param.model) + "_" +
                     std::string(kv::DTypeName(info.param.dtype)) + "_tp" +
                     std::to_string(info.param.tp);
  for (char& c : name) c = c == '-' ? '_' : c;
  return name;
}

class KvTierTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kvf_kv_tier_" + std::to_string(::getpid()) + "_" + CaseName({GetParam(), 0}));
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  EngineConfig Config(bool disk) const {
    EngineConfig c;
    c.model = GetParam().model;
    c.kv_cache_dtype = GetParam().dtype;
    c.kv_cache_layout = GetParam().layout;
    c.tensor_parallel_size = GetParam().tp;
    c.block_size = kBlock;
    c.num_kv_blocks = 12;  // two 100-token prompts do not fit together: the second evicts
    c.num_threads = 1;
    if (disk) {
      c.kv_offload_dir = dir_.string();
      c.kv_offload_bytes = 64 << 20;
    }
    return c;
  }
  std::unique_ptr<Engine> Make(bool disk) const {
    auto e = Engine::Create(Config(disk));
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return e.ok() ? std::move(*e) : nullptr;
  }
  // A 100-token prompt of the model's vocabulary, one per `which`.
  static std::vector<int32_t> Prompt(const Engine& e, int which) {
    std::vector<int32_t> p(100);
    const int32_t vocab = e.model_config().vocab_size;
    for (size_t i = 0; i < p.size(); ++i) {
      p[i] = static_cast<int32_t>((i * 37 + static_cast<size_t>(which) * 1009 + 11) % vocab);
    }
    return p;
  }
  static Completion Run(Engine& e, int which) {
    static int n = 0;
    const std::string id = "r" + std::to_string(n++);
    EXPECT_TRUE(e.AddRequest(id, Prompt(e, which), Greedy(8)).ok());
    return RunToEnd(e)[id];
  }
  static void ExpectSame(const Completion& got, const Completion& want) {
    EXPECT_EQ(got.tokens, want.tokens);
    EXPECT_EQ(got.logprobs, want.logprobs);  // exactly: the same KV bytes
  }
  // The file of block `b` of prompt `which`, found by its chain hash.
  fs::path FileOf(const Engine& e, int which, int b) const {
    const std::vector<kv::BlockHash> h =
        kv::ChainHashes(e.prefix_hash_salt(), 0, kBlock, Prompt(e, which));
    char name[32];
    std::snprintf(name, sizeof(name), "%016llx.kvb", static_cast<unsigned long long>(h[b]));
    for (const auto& f : fs::recursive_directory_iterator(dir_)) {
      if (f.path().filename() == name) return f.path();
    }
    ADD_FAILURE() << "no file for block " << b;
    return {};
  }
  static int64_t DiskHits(const Engine& e) { return e.stats().num_disk_hit_tokens; }
  // The tier's files once its queued writes are done (they are asynchronous), 10 s at most.
  static int64_t FilesWritten(const Engine& e) {
    for (int i = 0; i < 1000 && e.kv_offload_stats()->pending_bytes > 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return e.kv_offload_stats()->files;
  }

  fs::path dir_;
};

// Six whole blocks of a 100-token prompt can come from cache (never the last token).
constexpr int64_t kReusable = 96;

TEST_P(KvTierTest, AnswersEqualColocatedFromDiskAndAfterARestart) {
  const Completion want = Run(*Make(false), 0);
  {
    auto e = Make(true);
    ExpectSame(Run(*e, 0), want);
    EXPECT_EQ(DiskHits(*e), 0);
    Run(*e, 1);  // evicts prompt 0's blocks from RAM
    Run(*e, 2);
    const int64_t computed = e->stats().num_prompt_tokens_computed;
    ExpectSame(Run(*e, 0), want);
    EXPECT_EQ(DiskHits(*e), kReusable);
    EXPECT_EQ(e->stats().num_prompt_tokens_computed - computed, 100 - kReusable);
    EXPECT_EQ(e->stats().num_blocks_used, 0);
    ASSERT_TRUE(e->kv_offload_stats().has_value());
    EXPECT_EQ(e->kv_offload_stats()->loaded, kReusable / kBlock);
  }                     // the tier finishes its writes
  auto e = Make(true);  // a restart: only the files remain
  EXPECT_GE(e->kv_offload_stats()->files, 3 * kReusable / kBlock);
  ExpectSame(Run(*e, 0), want);
  EXPECT_EQ(DiskHits(*e), kReusable);
  EXPECT_EQ(e->stats().num_prompt_tokens_computed, 100 - kReusable);
}

TEST_P(KvTierTest, DamagedFilesAreRecomputedExactly) {
  const Completion want = Run(*Make(false), 0);
  Run(*Make(true), 0);
  {
    auto probe = Make(true);
    std::fstream f(FileOf(*probe, 0, 2), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-12, std::ios::end);  // a byte of the payload's last bytes
    f.put('\x7f');
  }
  auto e = Make(true);
  ExpectSame(Run(*e, 0), want);
  EXPECT_EQ(DiskHits(*e), 2 * kBlock);  // blocks 0 and 1; block 2 damaged, the rest computed
  EXPECT_EQ(e->stats().num_prompt_tokens_computed, 100 - 2 * kBlock);
  EXPECT_EQ(e->kv_offload_stats()->corrupt, 1);
  const fs::path first = FileOf(*e, 0, 0);
  e.reset();
  fs::resize_file(first, fs::file_size(first) / 2);  // torn
  auto again = Make(true);
  EXPECT_EQ(again->kv_offload_stats()->corrupt, 1);  // found at open, by its size
  ExpectSame(Run(*again, 0), want);
  EXPECT_EQ(DiskHits(*again), 0);
}

TEST_P(KvTierTest, FilesOfAnotherCacheLayoutAreNeverRead) {
  Run(*Make(true), 0);
  EngineConfig other = Config(true);
  other.kv_cache_dtype =
      other.kv_cache_dtype == kv::DType::kF32 ? kv::DType::kF16 : kv::DType::kF32;
  EngineConfig plain = other;
  plain.kv_offload_dir.clear();
  auto want_engine = Engine::Create(plain);
  auto e = Engine::Create(other);
  ASSERT_TRUE(e.ok() && want_engine.ok());
  ExpectSame(Run(**e, 0), Run(**want_engine, 0));
  EXPECT_EQ(DiskHits(**e), 0);
  EXPECT_EQ(FilesWritten(**e), kReusable / kBlock);  // its own, now
}

INSTANTIATE_TEST_SUITE_P(Models, KvTierTest,
                         ::testing::Values(Case{"tiny", kv::DType::kF32, kv::Layout::kNHD, 1},
                                           Case{"tiny-mla", kv::DType::kF16, kv::Layout::kNHD, 1},
                                           Case{"tiny", kv::DType::kBF16, kv::Layout::kHND, 2}),
                         CaseName);

TEST(KvTierConfigTest, TheDiskTierNeedsABudgetAndThePrefixCache) {
  EngineConfig c;
  c.kv_offload_dir = "/tmp/kvf-never-created";
  EXPECT_EQ(Engine::Create(c).status().code(), StatusCode::kInvalidArgument);
  c.kv_offload_bytes = 1 << 20;
  c.enable_prefix_caching = false;
  EXPECT_EQ(Engine::Create(c).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvferry::engine
