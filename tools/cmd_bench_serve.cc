// `kvferry bench serve`: a load generator against an OpenAI-compatible endpoint (kvferry serve,
// kvferry proxy, or vLLM). Streams every request to measure time to first token (TTFT) and
// inter-token latency (ITL); reports throughput and p50/p90/p99; `--json` for machines;
// `--save-outputs` writes each prompt's tokens and logprobs (one JSON line per prompt, in prompt
// order) so two deployments can be compared exactly; `--compare` runs the same workload on a
// P/D deployment and on a colocated one and prints the ratio table (docs/serving.md).
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench/plot/svg_plot.h"
#include "kvferry/common/deadline.h"
#include "kvferry/common/thread_annotations.h"
#include "tools/command_registry.h"

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

struct ServeBenchOptions {
  std::string url = "http://127.0.0.1:8000";
  std::string endpoint = "completions";  // completions | chat
  std::string model;
  int num_prompts = 32;
  double request_rate = 0;  // req/s, Poisson arrivals; 0: all at once (bounded by concurrency)
  int concurrency = 8;
  int input_len = 128;
  double input_len_range = 0.0;  // uniform in [len*(1-r), len*(1+r)]
  int output_len = 32;
  double output_len_range = 0.0;
  int shared_prefix_len = 0;  // every prompt starts with the same bytes (prefix-cache hits)
  std::string prompts_file;   // one prompt per line, instead of synthetic prompts
  int warmup = 2;
  unsigned seed = 0;
  double temperature = 0.0;
  int timeout_s = 300;
  std::string save_outputs;
  bool json_out = false;
  bool compare = false;
  std::string plot;  // with --compare: an SVG of both deployments' TTFT and ITL distributions
  std::string pd_url;
  std::string colocated_url;
};

struct Prompt {
  std::string text;
  int max_tokens = 0;
};

struct RequestResult {
  bool ok = false;
  std::string error;
  double ttft_s = 0;
  std::vector<double> itl_s;
  double e2e_s = 0;
  int prompt_tokens = 0;
  int output_tokens = 0;
  std::string text;
  json token_ids = json::array();
  json logprobs = json::array();
  std::string finish_reason;
};

std::vector<Prompt> MakePrompts(const ServeBenchOptions& o) {
  std::mt19937 rng(o.seed);
  std::vector<Prompt> prompts;
  auto pick_len = [&rng](int len, double range) {
    const int lo = std::max(1, static_cast<int>(std::lround(len * (1.0 - range))));
    const int hi = std::max(lo, static_cast<int>(std::lround(len * (1.0 + range))));
    return std::uniform_int_distribution<int>(lo, hi)(rng);
  };
  std::vector<std::string> lines;
  if (!o.prompts_file.empty()) {
    std::ifstream in(o.prompts_file);
    for (std::string line; std::getline(in, line);) {
      if (!line.empty()) lines.push_back(line);
    }
  }
  std::uniform_int_distribution<int> printable(32, 126);
  std::string prefix;
  for (int i = 0; i < o.shared_prefix_len; ++i) prefix += static_cast<char>(printable(rng));
  const int n = lines.empty() ? o.num_prompts : static_cast<int>(lines.size());
  for (int i = 0; i < n; ++i) {
    Prompt p;
    if (!lines.empty()) {
      p.text = lines[i];
    } else {
      p.text = prefix;
      const int len = pick_len(o.input_len, o.input_len_range);
      while (static_cast<int>(p.text.size()) < len) p.text += static_cast<char>(printable(rng));
    }
    p.max_tokens = pick_len(o.output_len, o.output_len_range);
    prompts.push_back(std::move(p));
  }
  return prompts;
}

// Parses "http://host:port" into a client.
std::unique_ptr<httplib::Client> ClientFor(const std::string& url, int timeout_s) {
  auto c = std::make_unique<httplib::Client>(url);
  c->set_connection_timeout(std::chrono::seconds(5));
  c->set_read_timeout(std::chrono::seconds(timeout_s));
  c->set_write_timeout(std::chrono::seconds(timeout_s));
  c->set_tcp_nodelay(true);
  return c;
}

// The streaming request for one prompt (completions or chat), asking for token ids, logprobs
// and the usage chunk.
httplib::Request MakeRequest(const ServeBenchOptions& o, const Prompt& p) {
  json body = {{"max_tokens", p.max_tokens},
               {"temperature", o.temperature},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}},
               {"logprobs", o.endpoint == "chat" ? json(true) : json(0)},
               {"return_token_ids", true},
               {"ignore_eos", true},
               {"seed", 1234}};
  if (!o.model.empty()) body["model"] = o.model;
  std::string path;
  if (o.endpoint == "chat") {
    path = "/v1/chat/completions";
    body["messages"] = json::array({{{"role", "user"}, {"content", p.text}}});
  } else {
    path = "/v1/completions";
    body["prompt"] = p.text;
  }
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  return req;
}

// Reads one streamed answer (server-sent events, "data: {...}" separated by blank lines) into
// a RequestResult as the bytes arrive: time to the first token, the inter-token latency of
// each later chunk (per token), token ids, text, logprobs, the finish reason, the prompt
// tokens of the usage chunk, and an error event.
class StreamReader {
 public:
  StreamReader(RequestResult* r, Clock::time_point t0) : r_(r), t0_(t0), last_(t0) {}

  // Takes `n` more bytes; handles every event they complete.
  void Append(const char* data, size_t n) {
    buffer_.append(data, n);
    size_t end;
    while ((end = buffer_.find("\n\n")) != std::string::npos) {
      std::string event = buffer_.substr(0, end);
      buffer_.erase(0, end + 2);
      OnEvent(event);
    }
  }
  // The bytes not (yet) part of a whole event: all of a non-streamed (error) body.
  const std::string& pending() const { return buffer_; }

 private:
  void OnEvent(const std::string& event) {
    if (event.rfind("data: ", 0) != 0) return;
    const std::string payload = event.substr(6);
    if (payload == "[DONE]") return;
    json j = json::parse(payload, nullptr, false);
    if (j.is_discarded()) return;
    if (j.contains("error")) {
      r_->error = j["error"].dump();
      return;
    }
    if (j.contains("usage") && j["usage"].is_object()) {
      r_->prompt_tokens = j["usage"].value("prompt_tokens", 0);
    }
    if (!j.contains("choices") || j["choices"].empty()) return;
    OnChoice(j["choices"][0]);
  }

  void OnChoice(const json& c) {
    const json& ids = c.contains("token_ids") ? c["token_ids"] : json::array();
    if (!ids.empty()) OnTokens(ids);
    if (c.contains("text")) r_->text += c["text"].get<std::string>();
    if (c.contains("delta") && c["delta"].contains("content")) {
      r_->text += c["delta"]["content"].get<std::string>();
    }
    if (c.contains("logprobs") && c["logprobs"].is_object()) {
      const json& lp = c["logprobs"];
      if (lp.contains("token_logprobs")) {
        for (const json& x : lp["token_logprobs"]) r_->logprobs.push_back(x);
      } else if (lp.contains("content")) {
        for (const json& x : lp["content"]) r_->logprobs.push_back(x["logprob"]);
      }
    }
    if (c.contains("finish_reason") && c["finish_reason"].is_string()) {
      r_->finish_reason = c["finish_reason"].get<std::string>();
    }
  }

  void OnTokens(const json& ids) {
    const Clock::time_point now = Clock::now();
    if (first_) {
      r_->ttft_s = std::chrono::duration<double>(now - t0_).count();
      first_ = false;
    } else {
      r_->itl_s.push_back(std::chrono::duration<double>(now - last_).count() / ids.size());
    }
    last_ = now;
    for (const json& id : ids) r_->token_ids.push_back(id);
  }

  RequestResult* r_;
  const Clock::time_point t0_;
  Clock::time_point last_;
  bool first_ = true;
  std::string buffer_;
};

// Sends one prompt and reads its streamed answer; r.ok unless the request failed, the status
// was not 200, an error event came, or the stream ended without a finish reason.
RequestResult SendOne(const ServeBenchOptions& o, const std::string& url, const Prompt& p) {
  RequestResult r;
  httplib::Request req = MakeRequest(o, p);
  auto client = ClientFor(url, o.timeout_s);
  const Clock::time_point t0 = Clock::now();
  StreamReader stream(&r, t0);
  int status = 0;
  req.response_handler = [&](const httplib::Response& res) {
    status = res.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    stream.Append(data, n);
    return true;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  const bool sent = client->send(req, res, err);
  r.e2e_s = std::chrono::duration<double>(Clock::now() - t0).count();
  r.output_tokens = static_cast<int>(r.token_ids.size());
  if (!sent) {
    r.error = "HTTP: " + httplib::to_string(err);
  } else if (status != 200) {
    r.error = "HTTP " + std::to_string(status) + ": " + stream.pending();
  } else if (r.error.empty() && r.finish_reason.empty()) {
    r.error = "stream ended without a finish_reason";
  }
  r.ok = r.error.empty();
  return r;
}

struct Summary {
  int ok = 0, failed = 0;
  double duration_s = 0;
  double req_per_s = 0, output_tok_per_s = 0, total_tok_per_s = 0;
  std::vector<double> ttft, itl, e2e;
  std::string first_error;
};

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = p / 100.0 * (v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (rank - lo);
}
double Mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / v.size();
}

// Runs the prompts against `url`: warm-up first (not counted), then the measured run.
Summary RunWorkload(const ServeBenchOptions& o, const std::string& url,
                    const std::vector<Prompt>& prompts, std::vector<RequestResult>* results) {
  for (int i = 0; i < o.warmup && !prompts.empty(); ++i) {
    SendOne(o, url, prompts[i % prompts.size()]);
  }
  results->assign(prompts.size(), RequestResult{});
  kvferry::Mutex mu;
  kvferry::CondVar cv;
  int in_flight = 0;
  std::vector<std::thread> threads;
  std::mt19937 rng(o.seed + 1);
  std::exponential_distribution<double> gap(o.request_rate > 0 ? o.request_rate : 1.0);
  const Clock::time_point start = Clock::now();
  Clock::time_point next_arrival = start;
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (o.request_rate > 0) {
      std::this_thread::sleep_until(next_arrival);
      next_arrival +=
          std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(gap(rng)));
    }
    {
      kvferry::MutexLock lock(&mu);
      const int limit = std::max(1, o.concurrency);
      while (!cv.WaitFor(&mu, std::chrono::seconds(1),
                         [&]() REQUIRES(mu) { return in_flight < limit; })) {
      }
      ++in_flight;
    }
    threads.emplace_back([&, i] {
      (*results)[i] = SendOne(o, url, prompts[i]);
      kvferry::MutexLock lock(&mu);
      --in_flight;
      cv.NotifyAll();
    });
  }
  for (auto& t : threads) t.join();
  Summary s;
  s.duration_s = std::chrono::duration<double>(Clock::now() - start).count();
  long out_tokens = 0, all_tokens = 0;
  for (const RequestResult& r : *results) {
    if (!r.ok) {
      ++s.failed;
      if (s.first_error.empty()) s.first_error = r.error;
      continue;
    }
    ++s.ok;
    out_tokens += r.output_tokens;
    all_tokens += r.output_tokens + r.prompt_tokens;
    s.ttft.push_back(r.ttft_s);
    s.e2e.push_back(r.e2e_s);
    s.itl.insert(s.itl.end(), r.itl_s.begin(), r.itl_s.end());
  }
  s.req_per_s = s.ok / s.duration_s;
  s.output_tok_per_s = out_tokens / s.duration_s;
  s.total_tok_per_s = all_tokens / s.duration_s;
  return s;
}

json SummaryJson(const Summary& s) {
  auto dist = [](const std::vector<double>& v) {
    return json{{"mean_ms", Mean(v) * 1e3},
                {"p50_ms", Percentile(v, 50) * 1e3},
                {"p90_ms", Percentile(v, 90) * 1e3},
                {"p99_ms", Percentile(v, 99) * 1e3}};
  };
  return {{"completed", s.ok},
          {"failed", s.failed},
          {"duration_s", s.duration_s},
          {"request_throughput", s.req_per_s},
          {"output_token_throughput", s.output_tok_per_s},
          {"total_token_throughput", s.total_tok_per_s},
          {"ttft", dist(s.ttft)},
          {"itl", dist(s.itl)},
          {"e2e", dist(s.e2e)},
          {"first_error", s.first_error}};
}

void PrintSummary(const std::string& label, const Summary& s) {
  std::printf("== %s ==\n", label.c_str());
  std::printf("requests        %d ok, %d failed, %.2f s\n", s.ok, s.failed, s.duration_s);
  std::printf("throughput      %.2f req/s, %.1f output tok/s, %.1f total tok/s\n", s.req_per_s,
              s.output_tok_per_s, s.total_tok_per_s);
  auto line = [](const char* name, const std::vector<double>& v) {
    std::printf("%-15s mean %8.2f  p50 %8.2f  p90 %8.2f  p99 %8.2f ms\n", name, Mean(v) * 1e3,
                Percentile(v, 50) * 1e3, Percentile(v, 90) * 1e3, Percentile(v, 99) * 1e3);
  };
  line("TTFT", s.ttft);
  line("ITL", s.itl);
  line("E2E latency", s.e2e);
  if (!s.first_error.empty()) std::printf("first error     %s\n", s.first_error.c_str());
}

bool SaveOutputs(const std::string& path, const std::vector<RequestResult>& results) {
  std::ofstream out(path);
  for (size_t i = 0; i < results.size(); ++i) {
    const RequestResult& r = results[i];
    json line = {{"index", i},
                 {"ok", r.ok},
                 {"text", r.text},
                 {"token_ids", r.token_ids},
                 {"logprobs", r.logprobs},
                 {"finish_reason", r.finish_reason}};
    out << line.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
  }
  return static_cast<bool>(out);
}

// The TTFT and ITL distributions (CDFs, in ms) of both deployments, one panel each.
kvferry::Status PlotComparison(const Summary& pd, const Summary& co, const std::string& path) {
  auto ms = [](std::vector<double> v) {
    for (double& x : v) x *= 1e3;
    return kvferry::bench::CdfPoints(std::move(v));
  };
  std::vector<kvferry::bench::PlotPanel> panels = {
      {"time to first token",
       "ms",
       "fraction of requests",
       false,
       {{"P/D", ms(pd.ttft), false}, {"colocated", ms(co.ttft), true}}},
      {"inter-token latency",
       "ms",
       "fraction of gaps",
       false,
       {{"P/D", ms(pd.itl), false}, {"colocated", ms(co.itl), true}}}};
  return kvferry::bench::WriteSvgPlot(panels, path, "kvferry bench serve --compare");
}

int RunServeBench(const ServeBenchOptions& o) {
  const std::vector<Prompt> prompts = MakePrompts(o);
  if (prompts.empty()) {
    std::fprintf(stderr, "kvferry bench serve: no prompts\n");
    return 2;
  }
  if (!o.compare) {
    std::vector<RequestResult> results;
    const Summary s = RunWorkload(o, o.url, prompts, &results);
    if (!o.save_outputs.empty() && !SaveOutputs(o.save_outputs, results)) {
      std::fprintf(stderr, "kvferry bench serve: cannot write %s\n", o.save_outputs.c_str());
      return 2;
    }
    if (o.json_out) {
      std::printf("%s\n", SummaryJson(s).dump(2).c_str());
    } else {
      PrintSummary(o.url, s);
    }
    return s.failed == 0 ? 0 : 1;
  }
  if (o.pd_url.empty() || o.colocated_url.empty()) {
    std::fprintf(stderr, "kvferry bench serve --compare needs --pd-url and --colocated-url\n");
    return 2;
  }
  std::vector<RequestResult> pd_results, co_results;
  const Summary pd = RunWorkload(o, o.pd_url, prompts, &pd_results);
  const Summary co = RunWorkload(o, o.colocated_url, prompts, &co_results);
  int identical = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (pd_results[i].ok && co_results[i].ok &&
        pd_results[i].token_ids == co_results[i].token_ids &&
        pd_results[i].logprobs == co_results[i].logprobs) {
      ++identical;
    }
  }
  if (o.json_out) {
    std::printf("%s\n", json{{"pd", SummaryJson(pd)},
                             {"colocated", SummaryJson(co)},
                             {"identical", identical},
                             {"prompts", prompts.size()}}
                            .dump(2)
                            .c_str());
  } else {
    PrintSummary("P/D via " + o.pd_url, pd);
    PrintSummary("colocated " + o.colocated_url, co);
    std::printf("\n%-22s %12s %12s %12s\n", "metric", "P/D", "colocated", "P/D / coloc");
    auto row = [](const char* name, double a, double b) {
      std::printf("%-22s %12.2f %12.2f %12.3f\n", name, a, b, b != 0 ? a / b : 0.0);
    };
    row("req/s", pd.req_per_s, co.req_per_s);
    row("output tok/s", pd.output_tok_per_s, co.output_tok_per_s);
    row("TTFT p50 ms", Percentile(pd.ttft, 50) * 1e3, Percentile(co.ttft, 50) * 1e3);
    row("TTFT p90 ms", Percentile(pd.ttft, 90) * 1e3, Percentile(co.ttft, 90) * 1e3);
    row("TTFT p99 ms", Percentile(pd.ttft, 99) * 1e3, Percentile(co.ttft, 99) * 1e3);
    row("ITL p50 ms", Percentile(pd.itl, 50) * 1e3, Percentile(co.itl, 50) * 1e3);
    row("ITL p90 ms", Percentile(pd.itl, 90) * 1e3, Percentile(co.itl, 90) * 1e3);
    row("ITL p99 ms", Percentile(pd.itl, 99) * 1e3, Percentile(co.itl, 99) * 1e3);
    row("E2E p50 ms", Percentile(pd.e2e, 50) * 1e3, Percentile(co.e2e, 50) * 1e3);
    std::printf("outputs identical      %d/%zu\n", identical, prompts.size());
  }
  if (!o.plot.empty()) {
    kvferry::Status st = PlotComparison(pd, co, o.plot);
    if (!st.ok()) std::fprintf(stderr, "kvferry bench serve: --plot: %s\n", st.ToString().c_str());
  }
  return pd.failed == 0 && co.failed == 0 ? 0 : 1;
}

void AddBenchServe(CLI::App& app) {
  auto o = std::make_shared<ServeBenchOptions>();
  // The `bench` group may be created by another cmd_bench_*.cc; share it.
  CLI::App* bench = kvferry::tools::BenchGroup(app);
  auto* sub = bench->add_subcommand(
      "serve", "Load generator against an OpenAI-compatible endpoint (TTFT, ITL, throughput)");
  sub->add_option("--url", o->url, "Base URL of the server or proxy")->capture_default_str();
  sub->add_option("--endpoint", o->endpoint, "completions or chat")
      ->check(CLI::IsMember({"completions", "chat"}))
      ->capture_default_str();
  sub->add_option("--model", o->model, "Model name to send (default: none, the served one)");
  sub->add_option("--num-prompts", o->num_prompts, "Requests in the measured run")
      ->capture_default_str();
  sub->add_option("--request-rate", o->request_rate,
                  "Poisson arrival rate in req/s (0: send as fast as --concurrency allows)")
      ->capture_default_str();
  sub->add_option("--concurrency", o->concurrency, "Requests in flight at most")
      ->capture_default_str();
  sub->add_option("--input-len", o->input_len, "Prompt length in tokens (bytes)")
      ->capture_default_str();
  sub->add_option("--input-len-range", o->input_len_range,
                  "Prompt lengths uniform in len*(1 +- range)")
      ->capture_default_str();
  sub->add_option("--output-len", o->output_len, "max_tokens per request (ignore_eos is set)")
      ->capture_default_str();
  sub->add_option("--output-len-range", o->output_len_range,
                  "Output lengths uniform in len*(1 +- range)")
      ->capture_default_str();
  sub->add_option("--shared-prefix-len", o->shared_prefix_len,
                  "Bytes every synthetic prompt shares at its start (prefix-cache hits)")
      ->capture_default_str();
  sub->add_option("--prompts-file", o->prompts_file, "One prompt per line (overrides synthetic)");
  sub->add_option("--warmup", o->warmup, "Warm-up requests before measuring")
      ->capture_default_str();
  sub->add_option("--seed", o->seed, "Seed of the synthetic workload")->capture_default_str();
  sub->add_option("--temperature", o->temperature, "Sampling temperature (0: greedy)")
      ->capture_default_str();
  sub->add_option("--timeout", o->timeout_s, "Per-request timeout, seconds")->capture_default_str();
  sub->add_option("--save-outputs", o->save_outputs,
                  "Write each prompt's text, token ids and logprobs as JSON lines");
  sub->add_flag("--json", o->json_out, "Print the results as JSON");
  sub->add_option("--plot", o->plot,
                  "With --compare: write an SVG of both deployments' TTFT and ITL distributions");
  sub->add_flag("--compare", o->compare,
                "Run the workload on --pd-url and on --colocated-url and print the ratio table");
  sub->add_option("--pd-url", o->pd_url, "With --compare: the proxy of a P/D deployment");
  sub->add_option("--colocated-url", o->colocated_url,
                  "With --compare: a colocated instance with the same total cores");
  sub->callback([o] { throw CLI::RuntimeError(RunServeBench(*o)); });
}
KVF_REGISTER_COMMAND(AddBenchServe);

}  // namespace
