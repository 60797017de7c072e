#include "tokenizer/pattern.h"

#include <fmt/format.h>

#include <algorithm>

namespace kvferry::tokenizer {

StatusOr<Pattern> Pattern::FromJson(const JsonSection& section) {
  const nlohmann::json& j = section.json();
  if (!j.is_object() || j.size() != 1) {
    return section.Invalid("must be {\"String\": ...} or {\"Regex\": ...}");
  }
  const bool has_string = j.contains("String");
  if (!has_string && !j.contains("Regex")) {
    return section.Invalid("must be {\"String\": ...} or {\"Regex\": ...}");
  }
  KVF_ASSIGN_OR_RETURN(std::string text, section.String(has_string ? "String" : "Regex"));
  StatusOr<Pattern> p = has_string ? FromString(text) : FromRegex(text);
  if (!p.ok()) return section.Invalid(p.status().message());
  return p;
}

StatusOr<Pattern> Pattern::FromString(std::string_view literal) {
  KVF_ASSIGN_OR_RETURN(Regex r, Regex::Literal(literal));
  return Pattern(std::move(r), false, std::string(literal));
}

StatusOr<Pattern> Pattern::FromRegex(std::string_view regex) {
  KVF_ASSIGN_OR_RETURN(Regex r, Regex::Compile(regex));
  return Pattern(std::move(r), true, std::string(regex));
}

StatusOr<std::vector<Span>> Pattern::FindMatches(std::string_view text) const {
  if (text.empty()) return std::vector<Span>{{0, 0, false}};
  std::vector<Span> spans;
  size_t prev = 0;
  KVF_RETURN_IF_ERROR(regex_.ForEachMatch(text, [&](size_t begin, size_t end) {
    if (prev != begin) spans.push_back({prev, begin, false});
    spans.push_back({begin, end, true});
    prev = end;
  }));
  if (prev != text.size()) spans.push_back({prev, text.size(), false});
  return spans;
}

StatusOr<std::string> Pattern::ReplaceAll(std::string_view text, std::string_view content,
                                          size_t max_bytes) const {
  std::string out;
  size_t prev = 0;
  bool too_big = false;
  KVF_RETURN_IF_ERROR(regex_.ForEachMatch(text, [&](size_t begin, size_t end) {
    if (too_big) return;
    out.append(text.substr(prev, begin - prev));
    out.append(content);
    prev = end;
    too_big = out.size() > max_bytes;
  }));
  if (too_big) return ResourceExhaustedError("Replace: output too large");
  out.append(text.substr(prev));
  if (out.size() > max_bytes) return ResourceExhaustedError("Replace: output too large");
  return out;
}

StatusOr<SplitBehavior> ParseSplitBehavior(const JsonSection& section, const char* key) {
  KVF_ASSIGN_OR_RETURN(std::string name, section.String(key));
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  return section.Invalid(fmt::format("unknown {} \"{}\"", key, name));
}

namespace {

// (begin, end, removed) pieces for a behavior, as NormalizedString::split computes them.
struct Piece {
  size_t begin, end;
  bool removed;
};

std::vector<Piece> MergePieces(const std::vector<Span>& spans, SplitBehavior behavior) {
  std::vector<Piece> out;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const Span& s : spans) out.push_back({s.begin, s.end, false});
      break;
    case SplitBehavior::kRemoved:
      for (const Span& s : spans) out.push_back({s.begin, s.end, s.is_match});
      break;
    case SplitBehavior::kContiguous: {
      bool prev_match = false;
      for (const Span& s : spans) {
        if (s.is_match == prev_match && !out.empty()) {
          out.back().end = s.end;
        } else {
          out.push_back({s.begin, s.end, false});
        }
        prev_match = s.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithPrevious: {
      bool prev_match = false;
      for (const Span& s : spans) {
        if (s.is_match && !prev_match && !out.empty()) {
          out.back().end = s.end;
        } else {
          out.push_back({s.begin, s.end, false});
        }
        prev_match = s.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool prev_match = false;  // walking backwards: the match seen just before, to the right
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !prev_match && !out.empty()) {
          out.back().begin = it->begin;
        } else {
          out.push_back({it->begin, it->end, false});
        }
        prev_match = it->is_match;
      }
      std::reverse(out.begin(), out.end());
      break;
    }
  }
  return out;
}

}  // namespace

std::vector<std::string_view> SplitAtSpans(std::string_view text, std::vector<Span> spans,
                                           SplitBehavior behavior, bool invert) {
  if (invert) {
    for (Span& s : spans) s.is_match = !s.is_match;
  }
  std::vector<std::string_view> pieces;
  for (const Piece& p : MergePieces(spans, behavior)) {
    if (!p.removed && p.end > p.begin) pieces.push_back(text.substr(p.begin, p.end - p.begin));
  }
  return pieces;
}

}  // namespace kvferry::tokenizer
