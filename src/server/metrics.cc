#include "kvferry/server/metrics.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdio>

namespace kvferry::server {
namespace {

std::string EscapeLabelValue(const std::string& v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// `{a="x",b="y"}` or "" for no labels; `extra` is appended (used for histogram `le`).
std::string RenderLabels(const Labels& labels, const std::string& extra = "") {
  if (labels.empty() && extra.empty()) return "";
  std::string out = "{";
  bool first = true;
  for (const auto& [k, v] : labels) {
    if (!first) out += ",";
    first = false;
    out += k + "=\"" + EscapeLabelValue(v) + "\"";
  }
  if (!extra.empty()) {
    if (!first) out += ",";
    out += extra;
  }
  out += "}";
  return out;
}

std::string FormatValue(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  char buf[64];
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    std::snprintf(buf, sizeof(buf), "%.0f", v);
  } else {
    std::snprintf(buf, sizeof(buf), "%.9g", v);
  }
  return buf;
}

void AtomicAdd(std::atomic<double>& a, double v) {
  double cur = a.load(std::memory_order_relaxed);
  while (!a.compare_exchange_weak(cur, cur + v, std::memory_order_relaxed)) {
  }
}

}  // namespace

void Counter::Inc(double v) {
  if (v < 0 || std::isnan(v)) return;
  AtomicAdd(value_, v);
}

void Gauge::Add(double v) { AtomicAdd(value_, v); }

Histogram::Histogram(std::vector<double> upper_bounds) : upper_bounds_(std::move(upper_bounds)) {
  assert(std::is_sorted(upper_bounds_.begin(), upper_bounds_.end()));
  MutexLock lock(&mu_);
  bucket_counts_.assign(upper_bounds_.size() + 1, 0);
}

void Histogram::Observe(double v) {
  const size_t i = static_cast<size_t>(
      std::lower_bound(upper_bounds_.begin(), upper_bounds_.end(), v) - upper_bounds_.begin());
  MutexLock lock(&mu_);
  ++bucket_counts_[i];
  sum_ += v;
  ++count_;
}

Histogram::Snapshot Histogram::Read() const {
  Snapshot s;
  s.upper_bounds = upper_bounds_;
  MutexLock lock(&mu_);
  uint64_t running = 0;
  for (uint64_t c : bucket_counts_) {
    running += c;
    s.cumulative_counts.push_back(running);
  }
  s.sum = sum_;
  s.count = count_;
  return s;
}

std::vector<double> LatencyBucketsSeconds() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1,  0.25,
          0.5,   0.75,   1.0,   2.5,  5.0,   10.0, 20.0,  40.0, 60.0};
}

MetricsRegistry::Family* MetricsRegistry::FamilyLocked(const std::string& name,
                                                       const std::string& help, Kind kind) {
  auto [it, inserted] = families_.try_emplace(name);
  if (inserted) {
    it->second.kind = kind;
    it->second.help = help;
  }
  assert(it->second.kind == kind && "metric family registered with two kinds");
  return &it->second;
}

Counter* MetricsRegistry::GetCounter(const std::string& name, const std::string& help,
                                     const Labels& labels) {
  MutexLock lock(&mu_);
  Family* f = FamilyLocked(name, help, Kind::kCounter);
  const std::string key = RenderLabels(labels);
  auto& slot = f->counters[key];
  if (!slot) {
    slot = std::make_unique<Counter>();
    f->label_sets[key] = labels;
  }
  return slot.get();
}

Gauge* MetricsRegistry::GetGauge(const std::string& name, const std::string& help,
                                 const Labels& labels) {
  MutexLock lock(&mu_);
  Family* f = FamilyLocked(name, help, Kind::kGauge);
  const std::string key = RenderLabels(labels);
  auto& slot = f->gauges[key];
  if (!slot) {
    slot = std::make_unique<Gauge>();
    f->label_sets[key] = labels;
  }
  return slot.get();
}

Histogram* MetricsRegistry::GetHistogram(const std::string& name, const std::string& help,
                                         std::vector<double> upper_bounds, const Labels& labels) {
  MutexLock lock(&mu_);
  Family* f = FamilyLocked(name, help, Kind::kHistogram);
  const std::string key = RenderLabels(labels);
  auto& slot = f->histograms[key];
  if (!slot) {
    slot = std::make_unique<Histogram>(std::move(upper_bounds));
    f->label_sets[key] = labels;
  }
  return slot.get();
}

std::string MetricsRegistry::RenderPrometheus() const {
  std::string out;
  MutexLock lock(&mu_);
  for (const auto& [name, f] : families_) {
    const char* type = f.kind == Kind::kCounter ? "counter"
                       : f.kind == Kind::kGauge ? "gauge"
                                                : "histogram";
    out += "# HELP " + name + " " + f.help + "\n";
    out += "# TYPE " + name + " " + type + "\n";
    for (const auto& [key, c] : f.counters)
      out += name + key + " " + FormatValue(c->value()) + "\n";
    for (const auto& [key, g] : f.gauges) out += name + key + " " + FormatValue(g->value()) + "\n";
    for (const auto& [key, h] : f.histograms) {
      const Labels& labels = f.label_sets.at(key);
      const Histogram::Snapshot s = h->Read();
      for (size_t i = 0; i <= s.upper_bounds.size(); ++i) {
        const std::string le =
            i < s.upper_bounds.size() ? FormatValue(s.upper_bounds[i]) : std::string("+Inf");
        out += name + "_bucket" + RenderLabels(labels, "le=\"" + le + "\"") + " " +
               FormatValue(static_cast<double>(s.cumulative_counts[i])) + "\n";
      }
      out += name + "_sum" + key + " " + FormatValue(s.sum) + "\n";
      out += name + "_count" + key + " " + FormatValue(static_cast<double>(s.count)) + "\n";
    }
  }
  return out;
}

}  // namespace kvferry::server
