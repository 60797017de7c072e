// End to end across tensor-parallel sizes, with real processes on loopback: `kvferry serve
// -tp 2` as P, `kvferry serve -tp 1` as D (and the reverse; and tiny-moe, a mixture of experts,
// at P TP 4 and D TP 2), through `kvferry proxy`. Every
// answer must equal a colocated TP-1 instance's, token for token and logprob for logprob, must
// have been pulled (each D rank its own heads, from the P ranks holding them), and afterwards
// no block may be left held or used on either side.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <random>
#include <thread>

#include "e2e_process.h"

namespace kvferry::e2e {
namespace {

using nlohmann::json;

std::vector<std::string> ServeArgs(const std::string& engine_id, const char* model, int tp,
                                   int block_size, const char* layout, const char* transfer,
                                   bool host_buffer) {
  const json kv = TestKvTransferConfig(engine_id, transfer, host_buffer);
  return {"serve",
          "--model",
          model,
          "--port",
          "0",
          "--threads",
          "1",
          "-tp",
          std::to_string(tp),
          "--block-size",
          std::to_string(block_size),
          "--attention-backend",
          "flash",
          "--kv-cache-layout",
          layout,
          "--kv-transfer-config",
          kv.dump()};
}

json Request(const std::string& prompt, int max_tokens) {
  return {{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0},
          {"logprobs", 0},    {"return_token_ids", true}, {"ignore_eos", true}};
}

json Essence(const json& answer) {
  const json& c = answer["choices"][0];
  return {{"text", c["text"]},
          {"token_ids", c["token_ids"]},
          {"logprobs", c["logprobs"]["token_logprobs"]}};
}

struct TpCase {
  const char* name;
  int p_tp, d_tp;
  int p_block, d_block;
  const char* p_layout;
  const char* d_layout;
  const char* transfer;
  bool host_buffer;
  const char* model = "tiny";
};

class PdTpE2eTest : public ::testing::TestWithParam<TpCase> {
 protected:
  void SetUp() override {
    log_dir_ = std::filesystem::temp_directory_path() /
               ("kvferry-e2e-tp-" + std::to_string(getpid()) + "-" + GetParam().name);
    std::filesystem::create_directories(log_dir_);
  }
  void TearDown() override {
    if (!HasFailure()) std::filesystem::remove_all(log_dir_);
  }
  std::string log_dir_;
};

TEST_P(PdTpE2eTest, ProxyOutputEqualsColocatedTp1) {
  const TpCase& c = GetParam();
  KvferryProcess colocated(
      "colocated", {"serve", "--model", c.model, "--port", "0", "--threads", "1"}, log_dir_);
  KvferryProcess p(
      "p", ServeArgs("p", c.model, c.p_tp, c.p_block, c.p_layout, c.transfer, c.host_buffer),
      log_dir_);
  KvferryProcess d("d", ServeArgs("d", c.model, c.d_tp, c.d_block, c.d_layout, c.transfer, false),
                   log_dir_);
  ASSERT_TRUE(colocated.ok() && p.ok() && d.ok()) << colocated.error() << p.error() << d.error();
  KvferryProcess proxy("proxy", {"proxy", "--port", "0", "--prefill", p.url(), "--decode", d.url()},
                       log_dir_);
  ASSERT_TRUE(proxy.ok()) << proxy.error();

  std::vector<json> bodies;
  for (int len : {3, 60, 200, 390}) bodies.push_back(Request(Prompt(len, 300 + len), 8));
  std::vector<std::optional<json>> answers(bodies.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < bodies.size(); ++i) {
    threads.emplace_back([&, i] { answers[i] = Post(proxy.port(), "/v1/completions", bodies[i]); });
  }
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < bodies.size(); ++i) {
    ASSERT_TRUE(answers[i].has_value());
    ASSERT_EQ((*answers[i])["_status"], 200) << answers[i]->dump();
    auto ref = Post(colocated.port(), "/v1/completions", bodies[i]);
    ASSERT_TRUE(ref.has_value());
    EXPECT_EQ(Essence(*answers[i]), Essence(*ref)) << "request " << i;
    const json& kl = (*answers[i])["kv_load"];
    EXPECT_EQ(kl["outcome"], "pulled") << kl.dump();
    // D resumes after P's first token: every prompt token's KV was pulled.
    EXPECT_EQ(kl["pulled_tokens"].get<int64_t>(),
              (*answers[i])["usage"]["prompt_tokens"].get<int64_t>())
        << kl.dump();
    if (c.d_tp > 1) {
      // Each D rank read half of the bytes (its one KV head of tiny's two), from one P rank.
      ASSERT_EQ(kl["ranks"].size(), static_cast<size_t>(c.d_tp)) << kl.dump();
      for (const json& rank : kl["ranks"]) {
        EXPECT_EQ(rank["pulled_bytes"].get<int64_t>() * c.d_tp, kl["pulled_bytes"].get<int64_t>());
        EXPECT_EQ(rank["source_ranks"].size(), 1u);
      }
    }
  }
  EXPECT_EQ(Metric(d.port(), "kvferry:kv_transfers_total"), bodies.size());
  // Nothing held or used on P or D once the requests are done (metrics refresh every 50 ms).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  double p_held = -1, p_used = -1, d_used = -1;
  while (std::chrono::steady_clock::now() < deadline) {
    p_held = Metric(p.port(), "kvferry:kv_blocks{state=\"held_for_transfer\"}");
    p_used = Metric(p.port(), "kvferry:kv_blocks{state=\"used\"}");
    d_used = Metric(d.port(), "kvferry:kv_blocks{state=\"used\"}");
    if (p_held == 0 && p_used == 0 && d_used == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(p_held, 0);
  EXPECT_EQ(p_used, 0);
  EXPECT_EQ(d_used, 0);
  EXPECT_EQ(Metric(p.port(), "kvferry:kv_leases_total{event=\"expired\"}"), 0);
  EXPECT_TRUE(proxy.Stop());
  EXPECT_TRUE(d.Stop());
  EXPECT_TRUE(p.Stop());
}

INSTANTIATE_TEST_SUITE_P(
    TpSizes, PdTpE2eTest,
    ::testing::Values(TpCase{"p_tp2_d_tp1", 2, 1, 128, 16, "NHD", "HND", "ucx", false},
                      TpCase{"p_tp1_d_tp2_socket", 1, 2, 16, 128, "HND", "NHD", "socket", false},
                      TpCase{"p_tp2_d_tp1_hostbuf", 2, 1, 128, 128, "NHD", "NHD", "ucx", true},
                      // Mixture of experts: P's 4 ranks run 2 of tiny-moe's 8 experts each, D's
                      // 2 ranks 4 each (expert parallelism); the KV is attention's, as ever.
                      TpCase{"tiny_moe_p_tp4_d_tp2", 4, 2, 16, 64, "NHD", "HND", "ucx", false,
                             "tiny-moe"}),
    [](const ::testing::TestParamInfo<TpCase>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace kvferry::e2e
