#include "tokenizer/post_processors.h"

#include <fmt/format.h>

namespace kvferry::tokenizer {
namespace {

class Template : public PostProcessor {
 public:
  Template(std::vector<int32_t> prefix, std::vector<int32_t> suffix)
      : prefix_(std::move(prefix)), suffix_(std::move(suffix)) {}
  void Process(std::vector<int32_t>* ids, bool add_special_tokens) const override {
    if (!add_special_tokens) return;
    ids->insert(ids->begin(), prefix_.begin(), prefix_.end());
    ids->insert(ids->end(), suffix_.begin(), suffix_.end());
  }

 private:
  std::vector<int32_t> prefix_, suffix_;
};

class Identity : public PostProcessor {
 public:
  void Process(std::vector<int32_t>*, bool) const override {}
};

class SequencePostProcessor : public PostProcessor {
 public:
  explicit SequencePostProcessor(std::vector<std::unique_ptr<PostProcessor>> steps)
      : steps_(std::move(steps)) {}
  void Process(std::vector<int32_t>* ids, bool add_special_tokens) const override {
    for (const auto& step : steps_) step->Process(ids, add_special_tokens);
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> steps_;
};

// The ids of special token `name` from the template's "special_tokens" map.
StatusOr<std::vector<int32_t>> SpecialIds(const JsonSection& section, const std::string& name,
                                          int32_t id_limit) {
  const JsonSection entry = section.Member("special_tokens").Member(name.c_str());
  if (!entry.json().is_object()) {
    return section.Invalid(fmt::format("special token \"{}\" missing from special_tokens", name));
  }
  KVF_ASSIGN_OR_RETURN(JsonSection ids, entry.Array("ids"));
  std::vector<int32_t> out;
  for (const nlohmann::json& id : ids.json()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= id_limit) {
      return ids.Invalid(fmt::format("ids must be integers in [0, {})", id_limit));
    }
    out.push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  return out;
}

StatusOr<std::unique_ptr<PostProcessor>> TemplateFromJson(const JsonSection& section,
                                                          int32_t id_limit) {
  KVF_ASSIGN_OR_RETURN(JsonSection single, section.Array("single"));
  std::vector<int32_t> prefix, suffix;
  bool seen_a = false;
  for (size_t i = 0; i < single.json().size(); ++i) {
    const JsonSection item = single.Element(i);
    if (!item.Member("SpecialToken").IsNull()) {
      KVF_ASSIGN_OR_RETURN(std::string name, item.Member("SpecialToken").String("id"));
      KVF_ASSIGN_OR_RETURN(std::vector<int32_t> ids, SpecialIds(section, name, id_limit));
      (seen_a ? suffix : prefix).insert((seen_a ? suffix : prefix).end(), ids.begin(), ids.end());
    } else if (!item.Member("Sequence").IsNull()) {
      KVF_ASSIGN_OR_RETURN(std::string id, item.Member("Sequence").String("id"));
      if (id != "A" || seen_a) return item.Invalid("the single template takes $A exactly once");
      seen_a = true;
    } else {
      return item.Invalid("must be {\"SpecialToken\": ...} or {\"Sequence\": ...}");
    }
  }
  if (!seen_a) return single.Invalid("the single template takes $A exactly once");
  return MakeTemplateProcessor(std::move(prefix), std::move(suffix));
}

}  // namespace

StatusOr<std::unique_ptr<PostProcessor>> PostProcessorFromJson(const JsonSection& section,
                                                               int32_t id_limit) {
  KVF_ASSIGN_OR_RETURN(std::string type, section.Type());
  if (type == "TemplateProcessing") return TemplateFromJson(section, id_limit);
  if (type == "ByteLevel") return std::unique_ptr<PostProcessor>(new Identity());
  if (type == "Sequence") {
    KVF_ASSIGN_OR_RETURN(JsonSection list, section.Array("processors"));
    std::vector<std::unique_ptr<PostProcessor>> steps;
    for (size_t i = 0; i < list.json().size(); ++i) {
      KVF_ASSIGN_OR_RETURN(auto step, PostProcessorFromJson(list.Element(i), id_limit));
      steps.push_back(std::move(step));
    }
    return std::unique_ptr<PostProcessor>(new SequencePostProcessor(std::move(steps)));
  }
  return section.Unsupported(fmt::format("unsupported post_processor type \"{}\"", type));
}

std::unique_ptr<PostProcessor> MakeTemplateProcessor(std::vector<int32_t> prefix,
                                                     std::vector<int32_t> suffix) {
  return std::make_unique<Template>(std::move(prefix), std::move(suffix));
}

}  // namespace kvferry::tokenizer
