#include "kvferry/jinja/chat.h"

namespace kvferry::jinja {

StatusOr<nlohmann::ordered_json> ChatContext(const ChatInputs& inputs) {
  if (!inputs.messages.is_array()) return InvalidArgumentError("messages must be a JSON array");
  if (!inputs.extra.is_object()) return InvalidArgumentError("extra must be a JSON object");
  nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
  ctx["messages"] = inputs.messages;
  ctx["tools"] = inputs.tools.value_or(nullptr);
  ctx["documents"] = inputs.documents.value_or(nullptr);
  ctx["add_generation_prompt"] = inputs.add_generation_prompt;
  for (const auto& [name, token] : inputs.special_tokens) {
    if (ctx.contains(name))
      return InvalidArgumentError("special token '" + name + "' repeats a variable");
    ctx[name] = token;
  }
  for (const auto& [name, value] : inputs.extra.items()) {
    // Python would refuse the repeated keyword argument too.
    if (ctx.contains(name))
      return InvalidArgumentError("extra variable '" + name + "' repeats a variable");
    ctx[name] = value;
  }
  return ctx;
}

StatusOr<std::string> RenderChat(const Template& tmpl, const ChatInputs& inputs,
                                 const RenderOptions& options) {
  KVF_ASSIGN_OR_RETURN(nlohmann::ordered_json ctx, ChatContext(inputs));
  return tmpl.Render(ctx, options);
}

}  // namespace kvferry::jinja
