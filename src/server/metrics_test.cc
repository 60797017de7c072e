#include "kvferry/server/metrics.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace kvferry::server {
namespace {

TEST(MetricsTest, RendersCountersGaugesAndHistogramsInPrometheusText) {
  MetricsRegistry r;
  r.GetCounter("kvferry:requests_total", "Requests.", {{"code", "200"}})->Inc(3);
  r.GetCounter("kvferry:requests_total", "Requests.", {{"code", "400"}})->Inc();
  r.GetGauge("kvferry:blocks", "Blocks.")->Set(7.5);
  Histogram* h = r.GetHistogram("kvferry:latency_seconds", "Latency.", {0.1, 1.0});
  h->Observe(0.05);
  h->Observe(0.1);  // upper bounds are inclusive
  h->Observe(5.0);
  EXPECT_EQ(r.RenderPrometheus(),
            "# HELP kvferry:blocks Blocks.\n"
            "# TYPE kvferry:blocks gauge\n"
            "kvferry:blocks 7.5\n"
            "# HELP kvferry:latency_seconds Latency.\n"
            "# TYPE kvferry:latency_seconds histogram\n"
            "kvferry:latency_seconds_bucket{le=\"0.1\"} 2\n"
            "kvferry:latency_seconds_bucket{le=\"1\"} 2\n"
            "kvferry:latency_seconds_bucket{le=\"+Inf\"} 3\n"
            "kvferry:latency_seconds_sum 5.15\n"
            "kvferry:latency_seconds_count 3\n"
            "# HELP kvferry:requests_total Requests.\n"
            "# TYPE kvferry:requests_total counter\n"
            "kvferry:requests_total{code=\"200\"} 3\n"
            "kvferry:requests_total{code=\"400\"} 1\n");
}

TEST(MetricsTest, GetReturnsTheSameInstrumentAndEscapesLabels) {
  MetricsRegistry r;
  Counter* a = r.GetCounter("c", "h", {{"k", "a\"b\\c\nd"}});
  EXPECT_EQ(a, r.GetCounter("c", "h", {{"k", "a\"b\\c\nd"}}));
  a->Inc(-5);  // ignored: counters only go up
  a->Inc(2);
  EXPECT_NE(r.RenderPrometheus().find("c{k=\"a\\\"b\\\\c\\nd\"} 2\n"), std::string::npos);
}

TEST(MetricsTest, ConcurrentIncrementsAreNotLost) {
  MetricsRegistry r;
  Counter* c = r.GetCounter("c", "h");
  Histogram* h = r.GetHistogram("h", "h", {1.0});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        c->Inc();
        h->Observe(0.5);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c->value(), 40000);
  EXPECT_EQ(h->Read().count, 40000u);
  EXPECT_EQ(h->Read().cumulative_counts[0], 40000u);
}

}  // namespace
}  // namespace kvferry::server
