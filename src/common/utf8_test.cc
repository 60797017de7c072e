#include "kvferry/common/utf8.h"

#include <gtest/gtest.h>

namespace kvferry {
namespace {

TEST(Utf8Test, ValidatesWellFormedSequencesOnly) {
  EXPECT_TRUE(IsValidUtf8("plain ascii"));
  EXPECT_TRUE(IsValidUtf8("caf\xC3\xA9 \xE4\xB8\xAD \xF0\x9F\x98\x80"));
  EXPECT_EQ(FirstInvalidOffset("ab\xC0\x80"), 2u);         // overlong
  EXPECT_EQ(FirstInvalidOffset("\xED\xA0\x80"), 0u);       // surrogate
  EXPECT_EQ(FirstInvalidOffset("x\xF4\x90\x80\x80"), 1u);  // above U+10FFFF
  EXPECT_EQ(FirstInvalidOffset("x\xE4\xB8"), 1u);          // cut off
}

// The example of Unicode 15, §3.9, Table 3-8: each maximal subpart is one U+FFFD.
TEST(Utf8Test, ReplacesMaximalSubparts) {
  EXPECT_EQ(ToValidUtf8("\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64"),
            "a\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"
            "b\xEF\xBF\xBD"
            "c\xEF\xBF\xBD\xEF\xBF\xBD"
            "d");
  EXPECT_EQ(ToValidUtf8("ok"), "ok");
  EXPECT_EQ(ToValidUtf8("\xE4\xB8"), "\xEF\xBF\xBD");
}

TEST(Utf8Test, IncompleteTail) {
  EXPECT_EQ(IncompleteTailLength("abc"), 0u);
  EXPECT_EQ(IncompleteTailLength("a\xE4"), 1u);
  EXPECT_EQ(IncompleteTailLength("a\xE4\xB8"), 2u);
  EXPECT_EQ(IncompleteTailLength("a\xE4\xB8\xAD"), 0u);
  EXPECT_EQ(IncompleteTailLength("\xF0\x9F\x98"), 3u);
  EXPECT_EQ(IncompleteTailLength("a\x80"), 0u);     // a stray continuation cannot complete
  EXPECT_EQ(IncompleteTailLength("\xED\xA0"), 0u);  // would be a surrogate: already invalid
}

TEST(Utf8Test, CodePointsRoundTrip) {
  for (char32_t cp : {U'A', U'\u00E9', U'\u4E2D', U'\U0001F600'}) {
    std::string s;
    AppendUtf8(cp, &s);
    size_t i = 0;
    EXPECT_EQ(NextCodePoint(s, &i), cp);
    EXPECT_EQ(i, s.size());
  }
}

}  // namespace
}  // namespace kvferry
