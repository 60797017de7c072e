// PrometheusText: builds Prometheus's text exposition — families (# HELP / # TYPE) and their
// samples, label values escaped — for the reports that are written by hand rather than kept in a
// registry (the proxy's cluster and KV-routing figures).
//
// Thread-safety: a value; one thread builds it.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

namespace kvferry {

class PrometheusText {
 public:
  // Starts a family; the samples that follow belong to it.
  void Family(const char* name, const char* type, const char* help);
  void Sample(std::initializer_list<std::pair<const char*, std::string_view>> labels, double v);
  std::string Take() { return std::move(out_); }

 private:
  std::string name_;
  std::string out_;
};

}  // namespace kvferry
