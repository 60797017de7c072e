// The accuracy test (after vLLM's run_accuracy_test.sh and test_edge_cases.py), with real
// processes on loopback: outputs through the proxy (P -> D) must equal a colocated instance's,
// token for token and logprob for logprob, over a matrix of KV geometries (block sizes,
// attention backends, layouts), host buffer on/off, prompts shorter than one block, D prefix-
// cache full and partial hits, streaming, and concurrent requests. Afterwards no block may be
// left held or used on either side.
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <thread>

#include "e2e_process.h"

namespace kvferry::e2e {
namespace {

using nlohmann::json;

struct Geometry {
  int block_size;
  const char* backend;
  const char* layout;
};

// `transfer`: the transfer backend of kv_connector_extra_config ("ucx" or "socket").
// `extra`: more serve flags (model, KV dtype).
std::vector<std::string> ServeArgs(const Geometry& g, const std::string& engine_id,
                                   bool host_buffer, const std::string& transfer = "ucx",
                                   const std::vector<std::string>& extra = {}) {
  const json kv = TestKvTransferConfig(engine_id, transfer, host_buffer);
  std::vector<std::string> args = {"serve",
                                   "--port",
                                   "0",
                                   "--threads",
                                   "1",
                                   "--block-size",
                                   std::to_string(g.block_size),
                                   "--attention-backend",
                                   g.backend,
                                   "--kv-cache-layout",
                                   g.layout,
                                   "--kv-transfer-config",
                                   kv.dump()};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

json Request(const std::string& prompt, int max_tokens, bool stream = false) {
  return {{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0},
          {"logprobs", 0},    {"return_token_ids", true}, {"ignore_eos", true},
          {"stream", stream}};
}

// The answer's prompt KV really came from P (a recompute gives the same tokens, so equal output
// alone proves nothing): every prompt token D did not hold itself was pulled (D resumes after
// P's first token, so it computes no prompt token) — or D held all of them (requests sharing a
// prefix may warm D's cache for each other: notification only, no bytes). `prompt_tokens` < 0:
// take it from the usage.
void ExpectPulled(const json& answer, int64_t prompt_tokens = -1) {
  ASSERT_TRUE(answer.contains("kv_load")) << answer.dump();
  const json& kl = answer["kv_load"];
  if (prompt_tokens < 0) prompt_tokens = answer["usage"]["prompt_tokens"].get<int64_t>();
  EXPECT_EQ(kl["local_hit_tokens"].get<int64_t>() + kl["pulled_tokens"].get<int64_t>(),
            prompt_tokens)
      << kl.dump();
  if (kl["outcome"] == "notify_only") {
    EXPECT_EQ(kl["pulled_bytes"], 0) << kl.dump();
  } else {
    EXPECT_EQ(kl["outcome"], "pulled") << kl.dump();
    EXPECT_GT(kl["pulled_bytes"].get<int64_t>(), 0) << kl.dump();
  }
}

double SumOfFallbacks(int port) {
  double sum = 0;
  for (const char* kind : {"handshake", "transfer", "deadline", "generation"}) {
    sum += Metric(port, std::string("kvferry:kv_transfer_failures_total{kind=\"") + kind + "\"}");
  }
  return sum;
}

// What must be equal: the tokens and their logprobs (and hence the text).
json Essence(const json& answer) {
  const json& c = answer["choices"][0];
  return {{"text", c["text"]},
          {"token_ids", c["token_ids"]},
          {"logprobs", c["logprobs"]["token_logprobs"]},
          {"finish_reason", c["finish_reason"]}};
}

class PdAccuracyTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    log_dir_ = new std::string(std::filesystem::temp_directory_path() /
                               ("kvferry-e2e-" + std::to_string(getpid())));
    std::filesystem::create_directories(*log_dir_);
    colocated_ =
        new KvferryProcess("colocated", {"serve", "--port", "0", "--threads", "1"}, *log_dir_);
  }
  static void TearDownTestSuite() {
    delete colocated_;
    colocated_ = nullptr;
    if (!::testing::UnitTest::GetInstance()->Failed()) std::filesystem::remove_all(*log_dir_);
    delete log_dir_;
  }

  // The colocated reference answer for `body`, from `instance` (default: the fixture's).
  json Reference(const json& body, KvferryProcess* instance = nullptr) {
    json b = body;
    b["stream"] = false;
    auto r = Post((instance != nullptr ? instance : colocated_)->port(), "/v1/completions", b);
    EXPECT_TRUE(r.has_value());
    EXPECT_EQ((*r)["_status"], 200) << r->dump();
    return Essence(*r);
  }

  struct Deployment {
    std::unique_ptr<KvferryProcess> p, d, proxy;
    bool ok() const { return p->ok() && d->ok() && proxy->ok(); }
    std::string error() const { return p->error() + d->error() + proxy->error(); }
  };
  Deployment Start(const Geometry& pg, const Geometry& dg, bool host_buffer, const char* tag,
                   const std::string& transfer = "ucx",
                   const std::vector<std::string>& extra = {}) {
    Deployment dep;
    dep.p = std::make_unique<KvferryProcess>(
        std::string(tag) + "-p",
        ServeArgs(pg, std::string(tag) + "-p", host_buffer, transfer, extra), *log_dir_);
    dep.d = std::make_unique<KvferryProcess>(
        std::string(tag) + "-d",
        ServeArgs(dg, std::string(tag) + "-d", host_buffer, transfer, extra), *log_dir_);
    if (!dep.p->ok() || !dep.d->ok()) {
      dep.proxy = std::make_unique<KvferryProcess>("none", std::vector<std::string>{"version"},
                                                   *log_dir_, 1);
      return dep;
    }
    dep.proxy = std::make_unique<KvferryProcess>(
        std::string(tag) + "-proxy",
        std::vector<std::string>{"proxy", "--port", "0", "--prefill", dep.p->url(), "--decode",
                                 dep.d->url()},
        *log_dir_);
    return dep;
  }

  // Sends every body through the proxy concurrently and compares with the reference (from
  // `reference`, default the fixture's colocated `tiny`); each answer must have been pulled.
  void ExpectPdEqualsColocated(const Deployment& dep, const std::vector<json>& bodies,
                               KvferryProcess* reference = nullptr) {
    std::vector<std::optional<json>> answers(bodies.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < bodies.size(); ++i) {
      threads.emplace_back(
          [&, i] { answers[i] = Post(dep.proxy->port(), "/v1/completions", bodies[i]); });
    }
    for (auto& t : threads) t.join();
    for (size_t i = 0; i < bodies.size(); ++i) {
      ASSERT_TRUE(answers[i].has_value()) << "request " << i << " got no answer";
      ASSERT_EQ((*answers[i])["_status"], 200) << answers[i]->dump();
      EXPECT_EQ(Essence(*answers[i]), Reference(bodies[i], reference))
          << "prompt of " << bodies[i]["prompt"].get<std::string>().size() << " bytes";
      ExpectPulled(*answers[i]);
    }
  }

  // Nothing held or used on P or D once the requests are done (metrics refresh every 50 ms).
  void ExpectNoBlocksLeft(const Deployment& dep) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    double p_held = -1, p_used = -1, d_used = -1;
    while (std::chrono::steady_clock::now() < deadline) {
      p_held = Metric(dep.p->port(), "kvferry:kv_blocks{state=\"held_for_transfer\"}");
      p_used = Metric(dep.p->port(), "kvferry:kv_blocks{state=\"used\"}");
      d_used = Metric(dep.d->port(), "kvferry:kv_blocks{state=\"used\"}");
      if (p_held == 0 && p_used == 0 && d_used == 0) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_EQ(p_held, 0);
    EXPECT_EQ(p_used, 0);
    EXPECT_EQ(d_used, 0);
  }

  static std::string* log_dir_;
  static KvferryProcess* colocated_;
};
std::string* PdAccuracyTest::log_dir_ = nullptr;
KvferryProcess* PdAccuracyTest::colocated_ = nullptr;

// Prompt lengths (bytes; +1 token for <bos>) around the block sizes used below.
std::vector<json> MatrixBodies() {
  std::vector<json> bodies;
  unsigned seed = 100;
  for (int len : {3, 20, 63, 127, 128, 200, 400}) bodies.push_back(Request(Prompt(len, seed++), 8));
  return bodies;
}

struct MatrixCase {
  const char* name;
  Geometry p, d;
  bool host_buffer;
  const char* transfer;  // "ucx" | "socket"
};

class PdMatrixTest : public PdAccuracyTest, public ::testing::WithParamInterface<MatrixCase> {};

TEST_P(PdMatrixTest, ProxyOutputEqualsColocated) {
  ASSERT_TRUE(colocated_->ok()) << colocated_->error();
  const MatrixCase& c = GetParam();
  Deployment dep = Start(c.p, c.d, c.host_buffer, c.name, c.transfer);
  ASSERT_TRUE(dep.ok()) << dep.error();
  const std::vector<json> bodies = MatrixBodies();
  ExpectPdEqualsColocated(dep, bodies);
  // One pull per request and no fallback of any kind (a fallback also gives the exact output).
  EXPECT_EQ(Metric(dep.d->port(), "kvferry:kv_transfers_total"), bodies.size());
  EXPECT_EQ(SumOfFallbacks(dep.d->port()), 0);
  EXPECT_EQ(Metric(dep.p->port(), "kvferry:kv_stage_failures_total"), 0);
  ExpectNoBlocksLeft(dep);
  EXPECT_TRUE(dep.proxy->Stop());
  EXPECT_TRUE(dep.d->Stop());
  EXPECT_TRUE(dep.p->Stop());
}

INSTANTIATE_TEST_SUITE_P(
    Geometries, PdMatrixTest,
    ::testing::Values(
        MatrixCase{"same128", {128, "flash", "NHD"}, {128, "flash", "NHD"}, false, "ucx"},
        MatrixCase{"p128flash_d32hnd", {128, "flash", "NHD"}, {32, "paged", "HND"}, false, "ucx"},
        MatrixCase{"p16hnd_d64flash", {16, "paged", "HND"}, {64, "flash", "NHD"}, false, "ucx"},
        MatrixCase{
            "p48paged_d128flashhnd", {48, "paged", "NHD"}, {128, "flash", "HND"}, false, "ucx"},
        MatrixCase{"hostbuf_same", {128, "flash", "NHD"}, {128, "flash", "NHD"}, true, "ucx"},
        MatrixCase{"hostbuf_p128_d16hnd", {128, "flash", "NHD"}, {16, "flash", "HND"}, true, "ucx"},
        MatrixCase{"socket_p128flash_d32hnd",
                   {128, "flash", "NHD"},
                   {32, "paged", "HND"},
                   false,
                   "socket"},
        MatrixCase{"socket_hostbuf", {128, "flash", "NHD"}, {64, "paged", "HND"}, true, "socket"}),
    [](const ::testing::TestParamInfo<MatrixCase>& info) { return std::string(info.param.name); });

// vLLM's edge cases, plus streaming and concurrency, on P block 128 (kernel 64) / D block 32 HND.
TEST_F(PdAccuracyTest, EdgeCasesPrefixHitsStreamingAndConcurrency) {
  ASSERT_TRUE(colocated_->ok()) << colocated_->error();
  Deployment dep = Start({128, "flash", "NHD"}, {32, "paged", "HND"}, false, "edge");
  ASSERT_TRUE(dep.ok()) << dep.error();

  // 1. A prompt shorter than one block of P.
  ExpectPdEqualsColocated(dep, {Request("Hi", 10)});

  // 2. A full prefix-cache hit on D: prime D directly, then go through the proxy. 287 bytes
  // + <bos> = 288 tokens: D's 9 cached blocks of 32 hold every prompt token (D resumes after
  // P's first token), so nothing is read and P is only told to free its blocks.
  const json full = Request(Prompt(287, 7), 10);
  auto primed = Post(dep.d->port(), "/v1/completions", full);
  ASSERT_TRUE(primed.has_value());
  ASSERT_EQ((*primed)["_status"], 200);
  EXPECT_EQ(Essence(*primed), Reference(full));
  const double released_before =
      Metric(dep.p->port(), "kvferry:kv_leases_total{event=\"released_by_notification\"}");
  const double bytes_before = Metric(dep.d->port(), "kvferry:kv_transfer_bytes_total");
  auto hit = Post(dep.proxy->port(), "/v1/completions", full);
  ASSERT_TRUE(hit.has_value());
  ASSERT_EQ((*hit)["_status"], 200) << hit->dump();
  EXPECT_EQ(Essence(*hit), Reference(full));
  EXPECT_EQ((*hit)["kv_load"]["outcome"], "notify_only") << hit->dump();
  EXPECT_EQ((*hit)["kv_load"]["local_hit_tokens"], 288);
  EXPECT_EQ((*hit)["kv_load"]["pulled_bytes"], 0);
  EXPECT_EQ(Metric(dep.d->port(), "kvferry:kv_transfer_bytes_total"), bytes_before);
  const auto release_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (Metric(dep.p->port(), "kvferry:kv_leases_total{event=\"released_by_notification\"}") <
             released_before + 1 &&
         std::chrono::steady_clock::now() < release_deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(Metric(dep.p->port(), "kvferry:kv_leases_total{event=\"released_by_notification\"}"),
            released_before + 1);

  // 3. A partial prefix hit on D: a longer prompt sharing D's cached prefix.
  const json shorter = Request(Prompt(160, 9), 4);
  ASSERT_TRUE(Post(dep.d->port(), "/v1/completions", shorter).has_value());
  json longer = Request(Prompt(160, 9) + Prompt(150, 10), 10);
  ExpectPdEqualsColocated(dep, {longer});

  // 4. Streaming through the proxy.
  auto streamed = Post(dep.proxy->port(), "/v1/completions", Request(Prompt(250, 11), 12, true));
  ASSERT_TRUE(streamed.has_value());
  EXPECT_EQ(Essence(*streamed), Reference(Request(Prompt(250, 11), 12)));
  ExpectPulled(*streamed, 251);

  // 5. Concurrent requests, some sharing prefixes with each other.
  std::vector<json> many;
  for (int i = 0; i < 12; ++i) {
    many.push_back(Request(Prompt(64 + 40 * (i % 5), 20 + i % 3) + Prompt(i, 50 + i), 6));
  }
  ExpectPdEqualsColocated(dep, many);

  // 6. Chat through the proxy equals chat on the colocated instance.
  const json chat = {{"messages", {{{"role", "user"}, {"content", Prompt(140, 12)}}}},
                     {"max_tokens", 8},
                     {"temperature", 0},
                     {"logprobs", true}};
  auto pd_chat = Post(dep.proxy->port(), "/v1/chat/completions", chat);
  auto co_chat = Post(colocated_->port(), "/v1/chat/completions", chat);
  ASSERT_TRUE(pd_chat.has_value() && co_chat.has_value());
  ExpectPulled(*pd_chat);
  EXPECT_EQ((*pd_chat)["choices"][0]["message"], (*co_chat)["choices"][0]["message"]);
  EXPECT_EQ((*pd_chat)["choices"][0]["logprobs"], (*co_chat)["choices"][0]["logprobs"]);

  // 7. A streaming client that goes away mid-answer: D aborts the request (through the proxy).
  {
    httplib::Client c("127.0.0.1", dep.proxy->port());
    c.set_read_timeout(std::chrono::seconds(30));
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = Request(Prompt(200, 13), 3500, /*stream=*/true).dump();
    req.set_header("Content-Type", "application/json");
    int chunks = 0;
    req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return ++chunks < 4; };
    httplib::Response res;
    httplib::Error err;
    c.send(req, res, err);
    EXPECT_GE(chunks, 4);
    const std::string aborted = "kvferry:request_success_total{finished_reason=\"abort\"}";
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (Metric(dep.d->port(), aborted) < 1 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_EQ(Metric(dep.d->port(), aborted), 1);
  }

  EXPECT_EQ(SumOfFallbacks(dep.d->port()), 0);
  ExpectNoBlocksLeft(dep);
  EXPECT_TRUE(dep.proxy->Stop());
  EXPECT_TRUE(dep.d->Stop());
  EXPECT_TRUE(dep.p->Stop());
}

// A built-in model other than the fixture's `tiny` through the proxy, against a colocated
// instance of that model: P and D of different geometry, every answer pulled and equal.
struct ModelCase {
  const char* name;                     // the test's
  const char* tag;                      // its processes': <tag>-p, -d, -proxy, -colocated
  std::vector<std::string> model_args;  // serve flags of P, D and the colocated reference
  std::vector<std::string> pd_args;     // serve flags of P and D only
  Geometry p, d;
  bool host_buffer = false;
  std::vector<json> (*bodies)() = nullptr;
  bool expect_no_fallbacks = true;  // no fallback of any kind counted on D
  int ranks = 1;  // > 1: each D rank pulled the whole KV once, from its own P rank
};

class PdModelTest : public PdAccuracyTest, public ::testing::WithParamInterface<ModelCase> {};

// Each D rank r read from P rank r alone, 1/ranks of the answer's bytes (every rank caches the
// whole latent of an MLA model).
void ExpectEachRankPulledFromItsOwn(const json& kv_load, int ranks) {
  ASSERT_EQ(kv_load["ranks"].size(), static_cast<size_t>(ranks)) << kv_load.dump();
  for (int r = 0; r < ranks; ++r) {
    EXPECT_EQ(kv_load["ranks"][r]["source_ranks"], json::array({r})) << kv_load.dump();
    EXPECT_EQ(kv_load["ranks"][r]["pulled_bytes"].get<int64_t>() * ranks,
              kv_load["pulled_bytes"].get<int64_t>())
        << kv_load.dump();
  }
}

TEST_P(PdModelTest, ProxyOutputEqualsColocated) {
  const ModelCase& c = GetParam();
  std::vector<std::string> reference_args = {"serve", "--port", "0", "--threads", "1"};
  reference_args.insert(reference_args.end(), c.model_args.begin(), c.model_args.end());
  KvferryProcess reference(std::string(c.tag) + "-colocated", reference_args, *log_dir_);
  ASSERT_TRUE(reference.ok()) << reference.error();
  std::vector<std::string> extra = c.model_args;
  extra.insert(extra.end(), c.pd_args.begin(), c.pd_args.end());
  Deployment dep = Start(c.p, c.d, c.host_buffer, c.tag, "ucx", extra);
  ASSERT_TRUE(dep.ok()) << dep.error();
  const std::vector<json> bodies = c.bodies();
  ExpectPdEqualsColocated(dep, bodies, &reference);
  if (c.ranks > 1) {
    for (const json& body : bodies) {
      auto answer = Post(dep.proxy->port(), "/v1/completions", body);
      ASSERT_TRUE(answer.has_value());
      ExpectEachRankPulledFromItsOwn((*answer)["kv_load"], c.ranks);
      if (HasFatalFailure()) return;
    }
  }
  if (c.expect_no_fallbacks) EXPECT_EQ(SumOfFallbacks(dep.d->port()), 0);
  ExpectNoBlocksLeft(dep);
  EXPECT_TRUE(dep.proxy->Stop());
  EXPECT_TRUE(dep.d->Stop());
  EXPECT_TRUE(dep.p->Stop());
  EXPECT_TRUE(reference.Stop());
}

// Greedy requests of `short_len` and 330 bytes, and one of 300 sampled with `sampling` (its seed
// fixed, so that D and the reference draw the same tokens); prompts seeded from `seed` on.
std::vector<json> ShortLongAndSeeded(int short_len, unsigned seed, int seeded_max_tokens,
                                     const json& sampling) {
  std::vector<json> bodies = {Request(Prompt(short_len, seed), 6),
                              Request(Prompt(330, seed + 1), 6)};
  json seeded = Request(Prompt(300, seed + 2), seeded_max_tokens);
  seeded.update(sampling);
  bodies.push_back(seeded);
  return bodies;
}

INSTANTIATE_TEST_SUITE_P(
    Models, PdModelTest,
    ::testing::Values(
        // `small` with f16 KV on both sides, prompts crossing kernel blocks of 64 and 128, and
        // seeded sampling.
        ModelCase{.name = "SmallF16KvAndSeededSampling",
                  .tag = "small",
                  .model_args = {"--model", "small", "--kv-cache-dtype", "f16"},
                  .p = {128, "flash", "NHD"},
                  .d = {64, "paged", "HND"},
                  .bodies =
                      [] {
                        return ShortLongAndSeeded(
                            40, 61, 12,
                            {{"temperature", 0.9}, {"top_p", 0.95}, {"top_k", 50}, {"seed", 77}});
                      }},
        // `tiny-mla` (multi-head latent attention: a KV cache of [latent | rope key] rows) with
        // a host buffer, greedy and seeded.
        ModelCase{.name = "Mla",
                  .tag = "mla",
                  .model_args = {"--model", "tiny-mla"},
                  .p = {256, "flash", "HND"},
                  .d = {16, "paged", "NHD"},
                  .host_buffer = true,
                  .bodies =
                      [] {
                        return ShortLongAndSeeded(7, 71, 10, {{"temperature", 0.8}, {"seed", 5}});
                      }},
        // `tiny-mla` with P and D at TP 2 against a colocated TP-1 instance.
        ModelCase{
            .name = "MlaTensorParallel2",
            .tag = "mla-tp",
            .model_args = {"--model", "tiny-mla"},
            .pd_args = {"-tp", "2"},
            .p = {64, "paged", "NHD"},
            .d = {128, "flash", "HND"},
            .bodies =
                [] {
                  return std::vector<json>{Request(Prompt(90, 81), 6), Request(Prompt(260, 82), 6)};
                },
            .expect_no_fallbacks = false,
            .ranks = 2}),
    [](const ::testing::TestParamInfo<ModelCase>& info) { return std::string(info.param.name); });

// An unreachable decode instance is a clear error within the deadline, and P frees its lease.
TEST_F(PdAccuracyTest, DeadDecodeInstanceIsAnErrorAndLeaksNothing) {
  ASSERT_TRUE(colocated_->ok()) << colocated_->error();
  Deployment dep = Start({64, "flash", "NHD"}, {64, "flash", "NHD"}, false, "dead");
  ASSERT_TRUE(dep.ok()) << dep.error();
  const int d_port = dep.d->port();
  EXPECT_TRUE(dep.d->Stop());
  const auto t0 = std::chrono::steady_clock::now();
  auto r = Post(dep.proxy->port(), "/v1/completions", Request(Prompt(100, 3), 4));
  ASSERT_TRUE(r.has_value());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(15));
  EXPECT_EQ((*r)["_status"], 503) << r->dump();
  EXPECT_NE((*r)["error"]["message"].get<std::string>().find(std::to_string(d_port)),
            std::string::npos);
  // P prefilled and holds the blocks for a reader that never comes, until its lease ends; it
  // must still shut down cleanly and promptly.
  EXPECT_TRUE(dep.proxy->Stop());
  EXPECT_TRUE(dep.p->Stop());
}

// SIGTERM drains: a request in flight still gets its whole answer, new ones are refused, and the
// process exits 0.
TEST_F(PdAccuracyTest, SigtermLetsRunningRequestsFinish) {
  KvferryProcess instance("drain", {"serve", "--port", "0", "--threads", "1"}, *log_dir_);
  ASSERT_TRUE(instance.ok()) << instance.error();
  const json body = Request(Prompt(50, 21), 1500);
  std::optional<json> answer;
  std::thread client([&] { answer = Post(instance.port(), "/v1/completions", body); });
  // Wait until the request is running, then terminate.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (Metric(instance.port(), "kvferry:num_requests{state=\"running\"}") < 1 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  instance.Terminate();
  client.join();
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ((*answer)["_status"], 200) << answer->dump();
  EXPECT_EQ((*answer)["choices"][0]["token_ids"].size(), 1500u);
  EXPECT_TRUE(instance.Stop()) << instance.error();
}

}  // namespace
}  // namespace kvferry::e2e
