#include "cluster/member_load.h"

#include <cstdlib>
#include <string>

namespace kvferry::cluster {

namespace {

// One sample line "name{labels} value" split into its series ("name{labels}") and value.
bool SplitSample(std::string_view line, std::string_view* series, double* value) {
  if (line.empty() || line.front() == '#') return false;
  const size_t space = line.rfind(' ');
  if (space == std::string_view::npos || space == 0) return false;
  *series = line.substr(0, space);
  const std::string v(line.substr(space + 1));
  char* end = nullptr;
  *value = std::strtod(v.c_str(), &end);
  return end != v.c_str() && *end == '\0';
}

// The engine a series' name says the instance runs (the first such series decides).
void NoteEngine(std::string_view series, MemberLoad* load) {
  if (load->engine != EngineKind::kUnknown) return;
  if (series.starts_with("kvferry:")) load->engine = EngineKind::kKvferry;
  if (series.starts_with("vllm:")) load->engine = EngineKind::kVllm;
}

void Absorb(std::string_view series, double v, MemberLoad* load) {
  NoteEngine(series, load);
  const auto i64 = static_cast<int64_t>(v);
  const auto i32 = static_cast<int32_t>(v);
  // vLLM's series carry labels (model_name, engine); its request counts are summed over them.
  const std::string_view name = series.substr(0, series.find('{'));
  if (name == "vllm:num_requests_running") {
    load->running += i32;
  } else if (name == "vllm:num_requests_waiting") {
    load->waiting += i32;
  } else if (series == "kvferry:pending_prefill_tokens") {
    load->pending_prefill_tokens = i64;
  } else if (series == "kvferry:num_requests{state=\"running\"}") {
    load->running += i32;
  } else if (series == "kvferry:num_requests{state=\"waiting\"}" ||
             series == "kvferry:num_requests{state=\"waiting_for_remote_kv\"}") {
    load->waiting += i32;
  } else if (series == "kvferry:kv_blocks{state=\"free\"}" ||
             series == "kvferry:kv_blocks{state=\"cached\"}") {
    load->free_kv_blocks += i64;
  } else if (series == "kvferry:kv_blocks_total") {
    load->total_kv_blocks = i64;
  } else if (series == "kvferry:prefix_cache_hit_tokens_total") {
    load->prefix_cache_hit_tokens = i64;
  }
}

}  // namespace

std::string_view EngineKindName(EngineKind e) {
  switch (e) {
    case EngineKind::kKvferry:
      return "kvferry";
    case EngineKind::kVllm:
      return "vllm";
    case EngineKind::kUnknown:
      break;
  }
  return "unknown";
}

MemberLoad ParseMemberLoad(std::string_view text) {
  MemberLoad load;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    std::string_view series;
    double value = 0;
    if (SplitSample(line, &series, &value)) Absorb(series, value, &load);
  }
  return load;
}

}  // namespace kvferry::cluster
