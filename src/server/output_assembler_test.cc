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

// One byte per engine output; the last one finishes.
std::string StreamText(OutputAssembler* a, const std::string& bytes, size_t from) {
  std::string text;
  for (size_t i = from; i < bytes.size(); ++i) {
    text += a->Add(Out(bytes.substr(i, 1), i + 1 == bytes.size())).text;
  }
  return text;
}

TEST(OutputAssemblerTest, StreamHeadPlusResumedStreamEqualsColocated) {
  const tokenizer::Tokenizer tok = tokenizer::Tokenizer::BuiltinByteLevel();
  for (const std::string seq : {"xEN\xE2\x82\xACz", "E\xE2\x82\xACzEND!", "\xE2\x82\xACz"}) {
    OutputAssembler colocated(&tok, true, {"END"});
    const std::string expected = StreamText(&colocated, seq, 0);
    // P: its one token, held back as a stream holds it.
    OutputAssembler p(&tok, true, {"END"});
    const ChoiceOutput head = p.AddAsStreamHead(Out(seq.substr(0, 1), /*finished=*/true));
    EXPECT_TRUE(p.finished());
    EXPECT_EQ(head.finish_reason, "length");
    EXPECT_EQ(p.total().finish_reason, "length");
    // D: the same token first (its delta is not sent: P's was), then the rest.
    OutputAssembler d(&tok, true, {"END"});
    EXPECT_EQ(d.Add(Out(seq.substr(0, 1))).text, head.text);
    EXPECT_EQ(head.text + StreamText(&d, seq, 1), expected) << seq;
    EXPECT_EQ(d.total().text, colocated.total().text) << seq;
    EXPECT_EQ(d.total().finish_reason, colocated.total().finish_reason) << seq;
  }
  // Held back: "E" may start "END", "\xE2" is incomplete.
  OutputAssembler p(&tok, false, {"END"});
  EXPECT_EQ(p.AddAsStreamHead(Out("E", true)).text, "");
  OutputAssembler q(&tok, false, {});
  EXPECT_EQ(q.AddAsStreamHead(Out("\xE2", true)).text, "");
  // A stop string in the head is the whole answer.
  OutputAssembler r(&tok, false, {"b"});
  const ChoiceOutput stopped = r.AddAsStreamHead(Out("ab", true));
  EXPECT_EQ(stopped.text, "a");
  EXPECT_EQ(stopped.finish_reason, "stop");
}

}  // namespace
}  // namespace kvferry::server
