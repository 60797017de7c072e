// MetricsRegistry: counters, gauges and histograms rendered in the Prometheus text exposition
// format (version 0.0.4) for `/metrics`.
//
// An instrument is identified by its family name plus its label set; Get*() creates it on first
// use and returns the same object afterwards, so callers may cache the pointer. Instruments live
// as long as the registry. Rendering groups the instruments of one family under one HELP/TYPE.
//
//   auto* ttft = registry.GetHistogram("kvferry:time_to_first_token_seconds", "TTFT",
//                                      LatencyBucketsSeconds());
//   ttft->Observe(0.012);
//   registry.GetCounter("kvferry:requests_total", "Requests", {{"status", "ok"}})->Inc();
//
// Thread-safety: every method of every class here may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kvferry/common/thread_annotations.h"

namespace kvferry::server {

using Labels = std::vector<std::pair<std::string, std::string>>;

// Monotonic sum. Inc() with a negative value is ignored.
class Counter {
 public:
  void Inc(double v = 1.0);
  // For a counter that mirrors a monotonic total kept elsewhere (e.g. a connector snapshot).
  void SetTotal(double v) { value_.store(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Add(double v);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// Cumulative histogram with fixed upper bounds (sorted ascending; +Inf is implicit).
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void Observe(double v);

  struct Snapshot {
    std::vector<double> upper_bounds;
    std::vector<uint64_t> cumulative_counts;  // one per bound, then +Inf
    double sum = 0.0;
    uint64_t count = 0;
  };
  Snapshot Read() const;

 private:
  const std::vector<double> upper_bounds_;
  mutable Mutex mu_;
  std::vector<uint64_t> bucket_counts_ GUARDED_BY(mu_);  // non-cumulative, + overflow bucket
  double sum_ GUARDED_BY(mu_) = 0.0;
  uint64_t count_ GUARDED_BY(mu_) = 0;
};

// Bucket bounds for request latencies: 1 ms .. 60 s.
std::vector<double> LatencyBucketsSeconds();

class MetricsRegistry {
 public:
  Counter* GetCounter(const std::string& name, const std::string& help, const Labels& labels = {});
  Gauge* GetGauge(const std::string& name, const std::string& help, const Labels& labels = {});
  // `upper_bounds` is used only when the instrument is created.
  Histogram* GetHistogram(const std::string& name, const std::string& help,
                          std::vector<double> upper_bounds, const Labels& labels = {});

  // The whole registry in Prometheus text format, families sorted by name.
  std::string RenderPrometheus() const;

 private:
  enum class Kind { kCounter, kGauge, kHistogram };
  struct Family {
    Kind kind;
    std::string help;
    std::map<std::string, Labels> label_sets;  // key: rendered labels
    std::map<std::string, std::unique_ptr<Counter>> counters;
    std::map<std::string, std::unique_ptr<Gauge>> gauges;
    std::map<std::string, std::unique_ptr<Histogram>> histograms;
  };
  Family* FamilyLocked(const std::string& name, const std::string& help, Kind kind) REQUIRES(mu_);

  mutable Mutex mu_;
  std::map<std::string, Family> families_ GUARDED_BY(mu_);
};

}  // namespace kvferry::server
