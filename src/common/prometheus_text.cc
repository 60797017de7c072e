#include "kvferry/common/prometheus_text.h"

#include <cstdio>

namespace kvferry {
namespace {

std::string Escape(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

}  // namespace

void PrometheusText::Family(const char* name, const char* type, const char* help) {
  name_ = name;
  out_ += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void PrometheusText::Sample(std::initializer_list<std::pair<const char*, std::string_view>> labels,
                            double v) {
  out_ += name_;
  if (labels.size() > 0) {
    out_ += "{";
    bool first = true;
    for (const auto& [k, val] : labels) {
      out_ += (first ? "" : ",") + std::string(k) + "=\"" + Escape(val) + "\"";
      first = false;
    }
    out_ += "}";
  }
  char buf[48];
  std::snprintf(buf, sizeof(buf), " %.17g\n", v);
  out_ += buf;
}

}  // namespace kvferry
