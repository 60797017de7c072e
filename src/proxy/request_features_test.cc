#include "proxy/request_features.h"

#include <gtest/gtest.h>

#include <string>

namespace kvferry::proxy {
namespace {

std::string Completion(const std::string& prompt_json) {
  return R"({"model":"m","max_tokens":4,"prompt":)" + prompt_json + "}";
}

TEST(RequestFeaturesTest, TextPromptsAreMeasuredInBytesAndKeyedByTheirPrefix) {
  const std::string shared(128, 'a');
  const auto a = RouteRequestOf(Completion("\"" + shared + "tail one\""), 128);
  const auto b = RouteRequestOf(Completion("\"" + shared + "another tail\""), 128);
  EXPECT_EQ(a.prompt_bytes, 136);
  EXPECT_EQ(a.prompt_token_ids, -1);
  ASSERT_TRUE(a.affinity_key && b.affinity_key);
  EXPECT_EQ(*a.affinity_key, *b.affinity_key);
  const auto c = RouteRequestOf(Completion("\"b" + shared + "\""), 128);
  EXPECT_NE(*c.affinity_key, *a.affinity_key);
  EXPECT_FALSE(RouteRequestOf(Completion("\"" + std::string(127, 'a') + "\""), 128).affinity_key);
  EXPECT_FALSE(RouteRequestOf(Completion("\"" + shared + "\""), 0).affinity_key);  // disabled
  EXPECT_EQ(RouteRequestOf(Completion("[\"" + shared + "\"]"), 128).affinity_key, a.affinity_key);
}

TEST(RequestFeaturesTest, TokenIdPromptsCountIds) {
  const auto r = RouteRequestOf(Completion("[1,2,3,4,5]"), 4);
  EXPECT_EQ(r.prompt_token_ids, 5);
  ASSERT_TRUE(r.affinity_key);
  EXPECT_EQ(RouteRequestOf(Completion("[[1,2,3,4,9]]"), 4).affinity_key, r.affinity_key);
  EXPECT_NE(RouteRequestOf(Completion("[1,2,3,5,5]"), 4).affinity_key, r.affinity_key);
  EXPECT_FALSE(RouteRequestOf(Completion("[1,2,3]"), 4).affinity_key);
}

TEST(RequestFeaturesTest, ChatMessagesAreTheirRolesAndContents) {
  const std::string system(200, 's');
  const auto a = RouteRequestOf(R"({"messages":[{"role":"system","content":")" + system +
                                    R"("},{"role":"user","content":"hi"}]})",
                                128);
  const auto b =
      RouteRequestOf(R"({"messages":[{"role":"system","content":[{"type":"text","text":")" +
                         system + R"("}]},{"role":"user","content":"something else"}]})",
                     128);
  ASSERT_TRUE(a.affinity_key && b.affinity_key);
  EXPECT_EQ(*a.affinity_key, *b.affinity_key);
  EXPECT_GT(a.prompt_bytes, 200);
}

TEST(RequestFeaturesTest, BodiesWithoutAPromptGiveNothing) {
  for (const char* body : {"", "{", "[]", R"({"prompt":7})", R"({"max_tokens":1})"}) {
    const auto r = RouteRequestOf(body, 1);
    EXPECT_FALSE(r.affinity_key) << body;
    EXPECT_EQ(r.prompt_bytes, 0) << body;
  }
}

// Whatever the types inside, reading a body's features never throws (the server refuses it).
TEST(RequestFeaturesTest, FieldsOfTheWrongTypeAreSkipped) {
  for (const char* body :
       {R"({"messages":[{"role":5,"content":"x"}]})", R"({"messages":[{"role":{},"content":7}]})",
        R"({"messages":[{"content":[{"type":{},"text":3}]}]})", R"({"prompt":[["a"]]})"}) {
    EXPECT_NO_THROW(RouteRequestOf(body, 1)) << body;
  }
}

TEST(RequestFeaturesTest, PromptTokensOfAnAnswer) {
  EXPECT_EQ(PromptTokensOf(R"({"usage":{"prompt_tokens":42,"completion_tokens":1}})"), 42);
  EXPECT_FALSE(PromptTokensOf(R"({"usage":{}})"));
  EXPECT_FALSE(PromptTokensOf("not json"));
}

}  // namespace
}  // namespace kvferry::proxy
