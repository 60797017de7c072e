#include "kvferry/jinja/template.h"

#include "jinja/evaluator.h"
#include "jinja/lexer.h"
#include "jinja/parser.h"
#include "jinja/scopes.h"
#include "jinja/utf8.h"
#include "jinja/value.h"

namespace kvferry::jinja {

// Source positions are 32-bit; chat templates are a few KiB.
constexpr size_t kMaxSourceBytes = size_t{16} << 20;

struct Template::Impl {
  explicit Impl(std::string normalized) : map(std::move(normalized)) {}
  SourceMap map;
  ast::Body body;
  ast::StartUndefined root_undefined;
};

StatusOr<Template> Template::Parse(std::string_view source) {
  if (source.size() > kMaxSourceBytes) {
    return InvalidArgumentError("template source exceeds " + std::to_string(kMaxSourceBytes) +
                                " bytes");
  }
  if (!utf8::IsValid(source)) return InvalidArgumentError("template source is not valid UTF-8");
  auto impl = std::make_shared<Impl>(NormalizeNewlines(source));
  KVF_ASSIGN_OR_RETURN(std::vector<Token> tokens, Tokenize(impl->map));
  KVF_ASSIGN_OR_RETURN(impl->body, jinja::Parse(tokens, impl->map));
  impl->root_undefined = AnalyzeScopes(impl->body);
  return Template(std::move(impl));
}

StatusOr<std::string> Template::Render(const nlohmann::ordered_json& context,
                                       const RenderOptions& options) const {
  if (!context.is_object() && !context.is_null()) {
    return InvalidArgumentError("template context must be a JSON object");
  }
  KVF_ASSIGN_OR_RETURN(
      Value vars, Value::FromJson(context.is_null() ? nlohmann::ordered_json::object() : context));
  return Evaluate(impl_->body, impl_->root_undefined, impl_->map, vars.as_dict(), options);
}

}  // namespace kvferry::jinja
