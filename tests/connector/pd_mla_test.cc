// P/D with multi-head latent attention (docs/connector.md, "MLA"): `tiny-mla` P and D engines
// with real FerryConnectors over loopback. D's output equals colocated output bit for bit over
// logical blocks {16, 64, 128, 256} x flash/paged x host buffer on/off, with and without a
// partial prefix hit on D, and every load is proven pulled (not recomputed) with the exact bytes
// of an MLA cache: layers x (latent + rope key) x dtype bytes per token of P's kernel blocks.
// MLA moves fewer bytes per token and layer than `tiny`, the GQA model of the same width; at
// tensor-parallel sizes {1, 2, 4} each way each D rank reads the latent once, the reads spread
// over P's ranks; a P and D of different attention geometry fail the handshake, saying why.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "pd_harness.h"

namespace kvferry::pd_test {
namespace {

using kv::Layout;

// tiny-mla: 2 layers, a row of kv_lora_rank 32 + qk_rope_head_dim 8 per token per layer.
constexpr uint64_t kMlaLayers = 2;
constexpr uint64_t kMlaRowValues = 32 + 8;

InstanceSpec Mla(int32_t block_size, const char* backend, bool host, Layout layout = Layout::kNHD) {
  InstanceSpec s{block_size, backend, layout, host};
  s.model = "tiny-mla";
  return s;
}

// Bytes a pull of tokens [begin, end) reads from P: P's kernel blocks covering them, one region
// per layer, one row of latent + rope key per token.
uint64_t MlaPullBytes(int32_t p_block_size_kernel, int64_t begin, int64_t end,
                      kv::DType dtype = kv::DType::kF32) {
  const int64_t blocks =
      (end + p_block_size_kernel - 1) / p_block_size_kernel - begin / p_block_size_kernel;
  return static_cast<uint64_t>(blocks) * p_block_size_kernel * kMlaLayers * kMlaRowValues *
         kv::DTypeBytes(dtype);
}

class PdMlaTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    prompts_ = {MakePrompt(5, 1), MakePrompt(600, 2)};
    for (const auto& prompt : prompts_) {
      reference_.push_back(Colocated(prompt, Greedy(4), kv::DType::kF32, "tiny-mla"));
    }
  }
  static std::vector<std::vector<int32_t>> prompts_;
  static std::vector<Completion> reference_;
};
std::vector<std::vector<int32_t>> PdMlaTest::prompts_;
std::vector<Completion> PdMlaTest::reference_;

// One P/D pair over both prompts. With `warm_tokens` > 0, D first computes that many tokens of
// the long prompt itself, so its prefix cache holds the full logical blocks among them and only
// the rest is pulled.
void RunMlaPair(const InstanceSpec& ps, const InstanceSpec& ds, int32_t warm_tokens,
                const std::vector<std::vector<int32_t>>& prompts,
                const std::vector<Completion>& reference) {
  SCOPED_TRACE("P " + Describe(ps) + "  D " + Describe(ds) + "  D warm " +
               std::to_string(warm_tokens));
  auto p = MakeInstance("P", ps, Config());
  auto d = MakeInstance("D", ds, Config());
  ASSERT_TRUE(p && d);
  if (warm_tokens > 0) {
    std::vector<int32_t> head(prompts[1].begin(), prompts[1].begin() + warm_tokens);
    ASSERT_TRUE(d->engine()->AddRequest("warm", head, Greedy(1)).ok());
    RunAll({d->engine()});
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::string id = "req" + std::to_string(i);
    auto params = Prefill(*p, id, prompts[i]);
    ASSERT_TRUE(params.has_value());
    ASSERT_TRUE(params->first_token.has_value());  // D resumes after P's first token
    ASSERT_TRUE(d->engine()->AddRequest(id, prompts[i], Greedy(4), *params).ok());
    auto all = RunAll({d->engine(), p->engine()});
    ASSERT_TRUE(all[id].finished);
    const int32_t n = static_cast<int32_t>(prompts[i].size());
    ExpectSame(all[id], reference[i], "prompt " + std::to_string(n));
    // D's prefix hit: the full logical blocks of the warm tokens (the short prompt shares none).
    const int32_t hit = i == 1 ? warm_tokens / ds.block_size * ds.block_size : 0;
    ExpectPulled(all[id], n - hit, MlaPullBytes(p->engine()->block_size_kernel(), hit, n),
                 "prompt " + std::to_string(n));
    if (all[id].kv_load) {
      EXPECT_EQ(all[id].kv_load->local_hit_tokens, hit);
    }
  }
  EXPECT_TRUE(d->worker->invalid.empty());
  EXPECT_EQ(p->connector()->Stats().leases_released_by_notification, prompts.size());
  ExpectPoolClean(*p->engine(), "P");
  ExpectPoolClean(*d->engine(), "D");
}

// Every P spec of the matrix meets two D specs, once without and once with a partial D prefix
// hit: D first computes 300 tokens of the long prompt, so it holds their full logical blocks
// (288 tokens with blocks of 16, 256 with 64, 128 and 256) and pulls only the rest.
TEST_F(PdMlaTest, GeometryMatrixWithDPrefixHits) {
  std::vector<InstanceSpec> specs;
  for (int32_t bs : {16, 64, 128, 256}) {
    for (const char* backend : {"flash", "paged"}) {
      for (bool host : {false, true}) specs.push_back(Mla(bs, backend, host));
    }
  }
  const size_t n = specs.size();
  for (size_t i = 0; i < n; ++i) {
    RunMlaPair(specs[i], specs[(i * 5 + 3) % n], 0, prompts_, reference_);
    if (HasFatalFailure()) return;
    RunMlaPair(specs[i], specs[(i * 3 + 7) % n], 300, prompts_, reference_);
    if (HasFatalFailure()) return;
  }
}

// With one head, NHD and HND are the same bytes; both layouts still pull exactly.
TEST_F(PdMlaTest, LayoutsAndHalfPrecision) {
  RunMlaPair(Mla(128, "flash", false, Layout::kHND), Mla(64, "paged", true, Layout::kNHD), 0,
             prompts_, reference_);
  InstanceSpec p16 = Mla(64, "paged", false);
  p16.dtype = kv::DType::kBF16;
  InstanceSpec d16 = Mla(16, "flash", true, Layout::kHND);
  d16.dtype = kv::DType::kBF16;
  auto p = MakeInstance("P", p16, Config());
  auto d = MakeInstance("D", d16, Config());
  ASSERT_TRUE(p && d);
  const Completion want = Colocated(prompts_[1], Greedy(4), kv::DType::kBF16, "tiny-mla");
  auto params = Prefill(*p, "r", prompts_[1]);
  ASSERT_TRUE(params.has_value());
  ASSERT_TRUE(d->engine()->AddRequest("r", prompts_[1], Greedy(4), *params).ok());
  auto all = RunAll({d->engine(), p->engine()});
  ExpectSame(all["r"], want, "bf16");
  ExpectPulled(all["r"], 600, MlaPullBytes(64, 0, 600, kv::DType::kBF16), "bf16");
}

// Bytes per token are exactly layers x (latent + rope key) x dtype bytes when the pulled tokens
// fill P's kernel blocks: 2 x 40 x 4 = 320 B (f32). GQA models of the same width 128 move more:
// tiny 2 x 2 KV heads x 32 x 4 = 512 B per token per layer where tiny-mla moves 40 x 4 = 160,
// and tiny-kv4 (2 layers like tiny-mla) 1024 B per token in all against 320.
TEST_F(PdMlaTest, BytesPerTokenAreTheLatentRowAndFewerThanGqa) {
  const std::vector<int32_t> prompt = MakePrompt(16 * 20, 3);  // 320 pulled tokens
  auto pull = [&](const std::string& model) {
    InstanceSpec s{16, "paged", Layout::kNHD, false};
    s.model = model;
    auto p = MakeInstance("P", s, Config());
    auto d = MakeInstance("D", s, Config());
    EXPECT_TRUE(p && d);
    auto params = Prefill(*p, "r", prompt);
    EXPECT_TRUE(params.has_value());
    EXPECT_TRUE(d->engine()->AddRequest("r", prompt, Greedy(2), *params).ok());
    auto all = RunAll({d->engine(), p->engine()});
    ExpectSame(all["r"], Colocated(prompt, Greedy(2), kv::DType::kF32, model), model);
    ExpectPulled(all["r"], 320, 0, model);
    const engine::ModelConfig m = engine::BuiltinModelConfig(model).value();
    if (!all["r"].kv_load) return 0.0;
    return all["r"].kv_load->bytes / 320.0 / m.num_layers;  // bytes per token per layer
  };
  const double mla = pull("tiny-mla");
  EXPECT_EQ(mla * kMlaLayers, static_cast<double>(kMlaLayers * kMlaRowValues * 4));
  EXPECT_EQ(mla, 160.0);
  const double gqa = pull("tiny");
  EXPECT_EQ(gqa, 512.0);
  EXPECT_LT(mla, gqa);
  // tiny-kv4: GQA at the same width and the same 2 layers (4 KV heads of 16): 1024 B per token
  // in all against tiny-mla's 320.
  const double kv4 = pull("tiny-kv4");
  EXPECT_EQ(kv4 * 2, 1024.0);
  EXPECT_LT(mla * 2, kv4 * 2);
}

// Tensor parallelism: every rank of P and of D caches the whole latent, so each D rank reads it
// once, from P rank d mod P's TP size — the reads spread over P's ranks, each P rank read is
// notified by its readers — and moves the full latent bytes. P and D at TP {1, 2, 4} each way
// (host buffer on D at odd pairs), against colocated TP 1.
TEST_F(PdMlaTest, TensorParallelReadsTheLatentOncePerDRankSpreadOverPRanks) {
  int pair = 0;
  for (int32_t p_tp : {1, 2, 4}) {
    for (int32_t d_tp : {1, 2, 4}) {
      InstanceSpec ps = Mla(64, "paged", false);
      ps.tp = p_tp;
      InstanceSpec ds = Mla(16, "flash", pair++ % 2 == 1, Layout::kHND);
      ds.tp = d_tp;
      SCOPED_TRACE("P " + Describe(ps) + "  D " + Describe(ds));
      auto p = MakeInstance("P", ps, Config());
      auto d = MakeInstance("D", ds, Config());
      ASSERT_TRUE(p && d);
      const std::vector<int32_t>& prompt = prompts_[1];
      auto params = Prefill(*p, "r", prompt);
      ASSERT_TRUE(params.has_value());
      ASSERT_TRUE(d->engine()->AddRequest("r", prompt, Greedy(4), *params).ok());
      auto all = RunAll({d->engine(), p->engine()});
      ASSERT_TRUE(all["r"].finished);
      ExpectSame(all["r"], reference_[1], "tp pair");
      const uint64_t rank_bytes = MlaPullBytes(64, 0, 600);
      ExpectPulled(all["r"], 600, rank_bytes * d_tp, "tp pair");
      ASSERT_TRUE(all["r"].kv_load.has_value());
      ASSERT_EQ(all["r"].kv_load->ranks.size(), static_cast<size_t>(d_tp));
      for (int32_t r = 0; r < d_tp; ++r) {
        const connector::RankLoad& rank = all["r"].kv_load->ranks[r];
        EXPECT_EQ(rank.bytes, rank_bytes) << "D rank " << r;
        EXPECT_EQ(rank.source_ranks, std::vector<int32_t>{r % p_tp}) << "D rank " << r;
      }
      EXPECT_EQ(d->connector()->Stats().notifications_sent, static_cast<uint64_t>(d_tp));
      EXPECT_EQ(p->connector()->Stats().leases_released_by_notification, 1u);
      EXPECT_EQ(p->connector()->Stats().leases_expired, 0u);
      ExpectPoolClean(*p->engine(), "P");
      ExpectPoolClean(*d->engine(), "D");
    }
  }
}

// A D whose cache is not P's MLA geometry (here a GQA model) fails the handshake with the
// geometry named; D recomputes (the default policy) and still answers; both pools drain.
TEST_F(PdMlaTest, GeometryMismatchFailsTheHandshake) {
  // A short lease: nobody will read P's blocks, so P frees them when it runs out.
  auto p = MakeInstance("P", Mla(64, "paged", false), Config(/*lease_ms=*/300));
  auto d = MakeInstance("D", {64, "paged", Layout::kNHD, false}, Config());
  ASSERT_TRUE(p && d);
  auto params = Prefill(*p, "r", prompts_[0]);
  ASSERT_TRUE(params.has_value());
  ASSERT_TRUE(d->engine()->AddRequest("r", prompts_[0], Greedy(4), *params).ok());
  auto all = RunAll({d->engine(), p->engine()});
  ASSERT_TRUE(all["r"].finished);
  ExpectOutcome(all["r"], connector::LoadOutcome::kFailedHandshake, "mla P, gqa D");
  // D recomputed the prompt with its own model and answered (its output is not comparable with
  // either colocated model: the first token is P's).
  EXPECT_TRUE(all["r"].error.ok()) << all["r"].error;
  EXPECT_EQ(all["r"].tokens.size(), 4u);
  ExpectPoolClean(*p->engine(), "P");
  ExpectPoolClean(*d->engine(), "D");
}

}  // namespace
}  // namespace kvferry::pd_test
