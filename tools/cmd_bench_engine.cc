// `kvferry bench engine`: prefill and decode throughput of the engine at several batch sizes for
// the built-in models, and the engine's matmul beside OpenBLAS sgemm on the model's shapes,
// measured in the same run (the ratio is the figure of merit; docs/benchmarks.md "## Engine").
// With --tensor-parallel-sizes, each size runs on the same core budget (--threads split over
// the ranks) and prints its ratio to the first size.
//
// OpenBLAS is a benchmark-only dependency: bench/engine/CMakeLists.txt links it into the CLI and
// defines KVF_HAVE_OPENBLAS; without it the sgemm column reads "n/a".
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/kernels/matmul.h"
#include "engine/thread_pool.h"
#include "kvferry/engine/engine.h"
#include "tools/bench_ceilings.h"
#include "tools/command_registry.h"

#ifdef KVF_HAVE_OPENBLAS
#include <cblas.h>
extern "C" void openblas_set_num_threads(int);
#endif

namespace {

using Clock = std::chrono::steady_clock;
using kvferry::engine::Engine;
using kvferry::engine::EngineConfig;
using kvferry::engine::SamplingParams;

struct EngineBenchOptions {
  std::vector<std::string> models = {"tiny", "small"};
  std::vector<int> batch_sizes = {1, 4, 16};
  std::vector<int> tp_sizes = {1};
  int prompt_len = 128;
  int decode_tokens = 16;
  int decode_context = 16;  // the prompt before the decode steps (its tokens are in the KV)
  int kv_cache_mib = 512;
  int threads = 2;
  double min_seconds = 0.3;
  bool json = false;
  bool matmul = true;        // the matmul shapes beside OpenBLAS
  bool memory_read = false;  // the memory-read ceiling (GB/s) of `threads` threads
  bool fma_peak = false;     // the FMA peak (GFLOP/s) of `threads` threads
  bool prefill = true;       // the prefill runs (off: decode only)
};

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::vector<int32_t> SyntheticPrompt(int len, int salt) {
  std::vector<int32_t> p = {256};
  for (int i = 1; i < len; ++i) p.push_back(32 + (i * 7 + salt * 13) % 95);
  return p;
}

struct EngineResult {
  std::string model;
  int batch = 0;
  int tp = 1;
  double prefill_tok_s = 0;
  double decode_tok_s = 0;
  double prefill_ratio = 0;  // to the first TP size of the same model and batch
  double decode_ratio = 0;
};

// `threads` is the budget of the whole engine: each of the `tp` ranks gets threads / tp.
std::unique_ptr<Engine> MakeEngine(const std::string& model, int batch, int prompt_len, int threads,
                                   int tp, int kv_cache_mib) {
  EngineConfig c;
  c.model = model;
  c.tensor_parallel_size = tp;
  c.num_threads = std::max(1, threads / tp);
  c.enable_prefix_caching = false;
  c.max_num_batched_tokens = batch * prompt_len;
  c.max_num_seqs = batch;
  c.kv_cache_memory_bytes = int64_t{kv_cache_mib} << 20;
  auto e = Engine::Create(c);
  if (!e.ok()) {
    std::fprintf(stderr, "error: %s\n", e.status().ToString().c_str());
    return nullptr;
  }
  return std::move(*e);
}

EngineResult BenchEngine(const std::string& model, int batch, int tp, const EngineBenchOptions& o) {
  EngineResult r;
  r.model = model;
  r.batch = batch;
  r.tp = tp;
  // Prefill: `batch` prompts of prompt_len tokens in one step, max_tokens 1.
  if (o.prefill) {
    auto e = MakeEngine(model, batch, o.prompt_len, o.threads, tp, o.kv_cache_mib);
    if (!e) return r;
    SamplingParams p;
    p.max_tokens = 1;
    p.ignore_eos = true;
    int64_t tokens = 0;
    double elapsed = 0;
    for (int rep = 0; elapsed < o.min_seconds || rep < 1; ++rep) {
      for (int b = 0; b < batch; ++b) {
        (void)e->AddRequest("p" + std::to_string(rep) + "_" + std::to_string(b),
                            SyntheticPrompt(o.prompt_len, rep * batch + b), p);
      }
      const auto t0 = Clock::now();
      while (e->HasWork()) e->Step();
      elapsed += Seconds(t0, Clock::now());
      tokens += int64_t{batch} * o.prompt_len;
    }
    r.prefill_tok_s = tokens / elapsed;
  }
  // Decode: `batch` requests with decode_context-token prompts; time the steps after the
  // prefill step.
  {
    auto e = MakeEngine(model, batch, o.decode_context, o.threads, tp, o.kv_cache_mib);
    if (!e) return r;
    SamplingParams p;
    p.max_tokens = o.decode_tokens + 1;
    p.ignore_eos = true;
    int64_t tokens = 0;
    double elapsed = 0;
    for (int rep = 0; elapsed < o.min_seconds || rep < 1; ++rep) {
      for (int b = 0; b < batch; ++b) {
        (void)e->AddRequest("d" + std::to_string(rep) + "_" + std::to_string(b),
                            SyntheticPrompt(o.decode_context, rep * batch + b), p);
      }
      e->Step();  // prefill + first token
      const auto t0 = Clock::now();
      while (e->HasWork()) e->Step();
      elapsed += Seconds(t0, Clock::now());
      tokens += int64_t{batch} * o.decode_tokens;
    }
    r.decode_tok_s = tokens / elapsed;
  }
  return r;
}

struct MatmulResult {
  std::string shape;
  int64_t m = 0, k = 0, n = 0;
  double ours_gflops = 0;
  double openblas_gflops = 0;  // 0: unavailable
};

template <typename F>
double Gflops(int64_t m, int64_t k, int64_t n, double min_seconds, F&& run) {
  run();  // warm up
  int64_t reps = 0;
  const auto t0 = Clock::now();
  double elapsed = 0;
  while (elapsed < min_seconds) {
    run();
    ++reps;
    elapsed = Seconds(t0, Clock::now());
  }
  return 2.0 * m * k * n * reps / elapsed / 1e9;
}

MatmulResult BenchMatmul(const std::string& name, int64_t m, int64_t k, int64_t n,
                         kvferry::engine::ThreadPool* pool, double min_seconds) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> x(m * k), w(n * k), y(m * n);
  for (float& v : x) v = dist(rng);
  for (float& v : w) v = dist(rng);
  MatmulResult r{name, m, k, n};
  r.ours_gflops = Gflops(m, k, n, min_seconds, [&] {
    kvferry::engine::kernels::MatMul(x.data(), m, k, w.data(), n, y.data(), pool);
  });
#ifdef KVF_HAVE_OPENBLAS
  r.openblas_gflops = Gflops(m, k, n, min_seconds, [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(n),
                static_cast<int>(k), 1.0f, x.data(), static_cast<int>(k), w.data(),
                static_cast<int>(k), 0.0f, y.data(), static_cast<int>(n));
  });
#endif
  return r;
}

// Every model x batch x TP size, each with its ratio to the first TP size (printed as it goes
// unless --json).
std::vector<EngineResult> BenchEngines(const EngineBenchOptions& o) {
  std::vector<EngineResult> engines;
  for (const std::string& model : o.models) {
    for (int b : o.batch_sizes) {
      const size_t first = engines.size();
      for (int tp : o.tp_sizes) {
        EngineResult r = BenchEngine(model, b, tp, o);
        const EngineResult& base = engines.size() > first ? engines[first] : r;
        r.prefill_ratio = base.prefill_tok_s > 0 ? r.prefill_tok_s / base.prefill_tok_s : 0;
        r.decode_ratio = base.decode_tok_s > 0 ? r.decode_tok_s / base.decode_tok_s : 0;
        engines.push_back(r);
        if (o.json) continue;
        std::printf("engine %-6s tp %d batch %3d  prefill %10.1f tok/s  decode %9.1f tok/s",
                    r.model.c_str(), r.tp, r.batch, r.prefill_tok_s, r.decode_tok_s);
        if (o.tp_sizes.size() > 1) {
          std::printf("  (x%.2f / x%.2f of tp %d)", r.prefill_ratio, r.decode_ratio, o.tp_sizes[0]);
        }
        std::printf("\n");
        std::fflush(stdout);
      }
    }
  }
  return engines;
}

// The small model's projection shapes: decode (M = 1, 16) and prefill (M = 128) rows; none
// with --no-matmul.
std::vector<MatmulResult> BenchMatmuls(const EngineBenchOptions& o) {
  kvferry::engine::ThreadPool pool(o.threads);
  std::vector<MatmulResult> mms;
  for (int64_t m : {1, 16, 128}) {
    if (!o.matmul) break;
    mms.push_back(BenchMatmul("small.qkv", m, 512, 1024, &pool, o.min_seconds));
    mms.push_back(BenchMatmul("small.gate_up", m, 512, 2816, &pool, o.min_seconds));
    mms.push_back(BenchMatmul("small.down", m, 1408, 512, &pool, o.min_seconds));
  }
  return mms;
}

void PrintMatmuls(const std::vector<MatmulResult>& mms) {
  for (const MatmulResult& r : mms) {
    if (r.openblas_gflops > 0) {
      std::printf(
          "matmul %-14s M=%4lld K=%5lld N=%5lld  ours %7.2f GFLOP/s  openblas %7.2f "
          "GFLOP/s  ratio %.2f\n",
          r.shape.c_str(), static_cast<long long>(r.m), static_cast<long long>(r.k),
          static_cast<long long>(r.n), r.ours_gflops, r.openblas_gflops,
          r.ours_gflops / r.openblas_gflops);
    } else {
      std::printf("matmul %-14s M=%4lld K=%5lld N=%5lld  ours %7.2f GFLOP/s  openblas n/a\n",
                  r.shape.c_str(), static_cast<long long>(r.m), static_cast<long long>(r.k),
                  static_cast<long long>(r.n), r.ours_gflops);
    }
  }
}

// --json: the whole run as one object.
void PrintJson(const EngineBenchOptions& o, const std::vector<EngineResult>& engines,
               double read_gbs, const kvferry::tools::FmaPeak& fma,
               const std::vector<MatmulResult>& mms) {
  nlohmann::json j;
  j["threads"] = o.threads;
  j["prompt_len"] = o.prompt_len;
  j["decode_tokens"] = o.decode_tokens;
  j["decode_context"] = o.decode_context;
  if (o.memory_read) j["memory_read_gbs"] = read_gbs;
  if (o.fma_peak) {
    j["fma_peak_gflops"] = fma.gflops;
    j["fma_isa"] = fma.isa;
  }
  for (const EngineResult& r : engines) {
    j["engine"].push_back({{"model", r.model},
                           {"batch", r.batch},
                           {"tensor_parallel_size", r.tp},
                           {"prefill_tok_s", r.prefill_tok_s},
                           {"decode_tok_s", r.decode_tok_s},
                           {"prefill_ratio_to_first_tp", r.prefill_ratio},
                           {"decode_ratio_to_first_tp", r.decode_ratio}});
  }
  for (const MatmulResult& r : mms) {
    nlohmann::json m = {
        {"shape", r.shape}, {"m", r.m}, {"k", r.k}, {"n", r.n}, {"ours_gflops", r.ours_gflops}};
    if (r.openblas_gflops > 0) {
      m["openblas_gflops"] = r.openblas_gflops;
      m["ratio"] = r.ours_gflops / r.openblas_gflops;
    }
    j["matmul"].push_back(m);
  }
  std::printf("%s\n", j.dump(2).c_str());
}

int RunEngineBench(const EngineBenchOptions& o) {
#ifdef KVF_HAVE_OPENBLAS
  openblas_set_num_threads(o.threads);
#endif
  const std::vector<EngineResult> engines = BenchEngines(o);
  const double read_gbs = o.memory_read ? kvferry::tools::MemoryReadGbs(o.threads) : 0;
  if (o.memory_read && !o.json) {
    std::printf("memory read ceiling (%d threads) %.2f GB/s\n", o.threads, read_gbs);
  }
  const kvferry::tools::FmaPeak fma =
      o.fma_peak ? kvferry::tools::FmaPeakGflops(o.threads, std::max(0.5, o.min_seconds))
                 : kvferry::tools::FmaPeak{};
  if (o.fma_peak && !o.json) {
    std::printf("FMA peak (%d threads, %s) %.1f GFLOP/s\n", o.threads, fma.isa.c_str(), fma.gflops);
  }
  const std::vector<MatmulResult> mms = BenchMatmuls(o);
  if (o.json) {
    PrintJson(o, engines, read_gbs, fma, mms);
  } else {
    PrintMatmuls(mms);
  }
  return 0;
}

void AddBenchEngine(CLI::App& app) {
  CLI::App* bench = kvferry::tools::BenchGroup(app);
  auto opts = std::make_shared<EngineBenchOptions>();
  auto* sub = bench->add_subcommand(
      "engine", "Engine prefill/decode tokens/s and matmul GFLOP/s beside OpenBLAS sgemm");
  sub->add_option("--models", opts->models,
                  "Models to run: built-in names, Hugging Face directories or .gguf files")
      ->capture_default_str()
      ->delimiter(',');
  sub->add_option_function<std::string>(
      "--model", [opts](const std::string& m) { opts->models = {m}; },
      "One model to run (a built-in name, a Hugging Face directory or a .gguf file)");
  sub->add_option("--batch-sizes", opts->batch_sizes, "Requests per batch")
      ->capture_default_str()
      ->delimiter(',');
  sub->add_option("--tensor-parallel-sizes", opts->tp_sizes,
                  "TP sizes to compare on the same thread budget (ratios to the first)")
      ->capture_default_str()
      ->delimiter(',');
  sub->add_option("--prompt-len", opts->prompt_len, "Prompt tokens in the prefill runs")
      ->capture_default_str();
  sub->add_option("--decode-tokens", opts->decode_tokens, "Decode steps timed per request")
      ->capture_default_str();
  sub->add_option("--decode-context", opts->decode_context,
                  "Prompt tokens before the timed decode steps (the context they attend to)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  sub->add_option("--kv-cache-mib", opts->kv_cache_mib, "KV cache memory of each engine (MiB)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 24));
  sub->add_option("--threads", opts->threads,
                  "Kernel threads of the whole engine, split over its TP ranks (and OpenBLAS's)")
      ->capture_default_str();
  sub->add_option("--min-seconds", opts->min_seconds, "Minimum time per measurement")
      ->capture_default_str();
  sub->add_flag("--json", opts->json, "Print JSON instead of a table");
  sub->add_flag("!--no-matmul", opts->matmul, "Skip the matmul shapes beside OpenBLAS");
  sub->add_flag("--memory-read", opts->memory_read,
                "Also measure the memory-read ceiling of --threads threads (GB/s, 1 GiB buffer)");
  sub->add_flag("!--no-prefill", opts->prefill, "Skip the prefill runs (decode only)");
  sub->add_flag("--fma-peak", opts->fma_peak,
                "Also measure the single-precision FMA peak of --threads threads (GFLOP/s)");
  sub->callback([opts] { throw CLI::RuntimeError(RunEngineBench(*opts)); });
}
KVF_REGISTER_COMMAND(AddBenchEngine);

}  // namespace
