#include "server/output_assembler.h"

#include <gtest/gtest.h>

namespace kvferry::server {
namespace {

engine::RequestOutput Out(std::string bytes, bool finished = false) {
  engine::RequestOutput o;
  for (unsigned char c : bytes) {
    o.new_token_ids.push_back(c);
    o.new_logprobs.push_back(-1.0f);
  }
  o.finished = finished;
  o.finish_reason = finished ? engine::FinishReason::kLength : engine::FinishReason::kNone;
  return o;
}

TEST(OutputAssemblerTest, CutsTextOnlyAtCharacterBoundaries) {
  const tokenizer::Tokenizer tok = tokenizer::Tokenizer::BuiltinByteLevel();
  OutputAssembler a(&tok, /*logprobs=*/true, {});
  EXPECT_EQ(a.Add(Out("a\xE2")).text, "a");
  EXPECT_EQ(a.Add(Out("\x82")).text, "");
  ChoiceOutput last = a.Add(Out("\xAC", /*finished=*/true));
  EXPECT_EQ(last.text, "\xE2\x82\xAC");
  EXPECT_EQ(last.finish_reason, "length");
  EXPECT_EQ(a.total().text, "a\xE2\x82\xAC");
  EXPECT_EQ(a.total().logprobs.size(), 4u);
  EXPECT_EQ(a.num_generated_tokens(), 4);
}

TEST(OutputAssemblerTest, StopStringAcrossOutputsEndsTheRequestBeforeIt) {
  const tokenizer::Tokenizer tok = tokenizer::Tokenizer::BuiltinByteLevel();
  OutputAssembler a(&tok, false, {"END"});
  std::string sent = a.Add(Out("abcE")).text;  // "E" may start "END": held back
  EXPECT_EQ(sent, "ab");
  sent += a.Add(Out("N")).text;
  EXPECT_FALSE(a.finished());
  ChoiceOutput d = a.Add(Out("Dxyz"));
  sent += d.text;
  EXPECT_TRUE(a.finished());
  EXPECT_TRUE(a.stopped_by_string());
  EXPECT_EQ(d.finish_reason, "stop");
  EXPECT_EQ(sent, "abc");
  EXPECT_EQ(a.total().text, "abc");
  EXPECT_EQ(a.Add(Out("more")).text, "");  // nothing after the end
}

TEST(OutputAssemblerTest, FinishFlushesHeldBackText) {
  const tokenizer::Tokenizer tok = tokenizer::Tokenizer::BuiltinByteLevel();
  OutputAssembler a(&tok, false, {"XYZ"});
  EXPECT_EQ(a.Add(Out("abXY")).text, "ab");
  EXPECT_EQ(a.Add(Out("", /*finished=*/true)).text, "XY");
  EXPECT_EQ(a.total().finish_reason, "length");
}

}  // namespace
}  // namespace kvferry::server
