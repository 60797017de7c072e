#include "tokenizer/regex.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "tokenizer/pattern.h"

namespace kvferry::tokenizer {
namespace {

std::vector<std::string> Matches(const Regex& r, std::string_view text) {
  std::vector<std::string> out;
  Status s =
      r.ForEachMatch(text, [&](size_t b, size_t e) { out.emplace_back(text.substr(b, e - b)); });
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

TEST(RegexTest, UnicodePropertiesAndCaselessGroups) {
  StatusOr<Regex> letters = Regex::Compile(R"(\p{L}+)");
  ASSERT_TRUE(letters.ok());
  EXPECT_EQ(Matches(*letters, "caf\xC3\xA9 \xE4\xB8\xAD\xE6\x96\x87!"),
            (std::vector<std::string>{"caf\xC3\xA9", "\xE4\xB8\xAD\xE6\x96\x87"}));
  StatusOr<Regex> space = Regex::Compile(R"(\s+)");
  ASSERT_TRUE(space.ok());
  EXPECT_EQ(Matches(*space,
                    "a\xE3\x80\x80"
                    "b"),
            std::vector<std::string>{"\xE3\x80\x80"});
  StatusOr<Regex> contraction = Regex::Compile(R"((?i:'s|'ll))");
  ASSERT_TRUE(contraction.ok());
  EXPECT_EQ(Matches(*contraction, "IT'S WE'LL"), (std::vector<std::string>{"'S", "'LL"}));
}

TEST(RegexTest, EmptyMatchesAdvanceOneCharacter) {
  StatusOr<Regex> empty = Regex::Compile("");
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(Matches(*empty, "a\xC3\xA9").size(), 3u);  // before a, before é, at the end
}

TEST(RegexTest, LiteralsAreLiteralAndEmptyMatchesNothing) {
  StatusOr<Regex> dot = Regex::Literal("a.b");
  ASSERT_TRUE(dot.ok());
  EXPECT_EQ(Matches(*dot, "axb a.b"), std::vector<std::string>{"a.b"});
  StatusOr<Regex> none = Regex::Literal("");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(Matches(*none, "abc").empty());
}

TEST(RegexTest, BadPatternIsAnError) {
  StatusOr<Regex> r = Regex::Compile("(unclosed");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("bad regex"), std::string_view::npos);
}

TEST(RegexTest, CatastrophicBacktrackingIsStoppedNotHung) {
  StatusOr<Regex> r = Regex::Compile("(a+)+$");
  ASSERT_TRUE(r.ok());
  const std::string text = std::string(64, 'a') + "b";
  Status s = r->ForEachMatch(text, [](size_t, size_t) {});
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s;
}

// Hugging Face's own table for Split with the regex \w+|[^\w\s]+ inverted
// (tokenizers/src/pre_tokenizers/split.rs, test `basic`).
TEST(PatternTest, SplitBehaviorsMatchTokenizersTable) {
  StatusOr<Pattern> p = Pattern::FromRegex(R"(\w+|[^\w\s]+)");
  ASSERT_TRUE(p.ok());
  const std::string text = "How are you doing?";
  auto split = [&](SplitBehavior b) {
    StatusOr<std::vector<Span>> spans = p->FindMatches(text);
    EXPECT_TRUE(spans.ok());
    std::vector<std::string> out;
    for (std::string_view v : SplitAtSpans(text, *spans, b, /*invert=*/true)) out.emplace_back(v);
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(split(SplitBehavior::kRemoved), (V{"How", "are", "you", "doing", "?"}));
  EXPECT_EQ(split(SplitBehavior::kIsolated), (V{"How", " ", "are", " ", "you", " ", "doing", "?"}));
  EXPECT_EQ(split(SplitBehavior::kMergedWithPrevious), (V{"How ", "are ", "you ", "doing", "?"}));
  EXPECT_EQ(split(SplitBehavior::kMergedWithNext), (V{"How", " are", " you", " doing", "?"}));
  EXPECT_EQ(split(SplitBehavior::kContiguous), (V{"How", " ", "are", " ", "you", " ", "doing?"}));
}

}  // namespace
}  // namespace kvferry::tokenizer
