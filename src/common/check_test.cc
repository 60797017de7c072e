// Compiled with NDEBUG whatever the build type (src/common/CMakeLists.txt), as a Release build
// compiles the library: every death below shows a check that assert() would have lost.
#ifndef NDEBUG
#error "check_test.cc must be compiled with NDEBUG"
#endif

#include "kvferry/common/check.h"

#include <gtest/gtest.h>

#include <cassert>

namespace kvferry {
namespace {

Status Broken() { return InternalError("free queue has a cycle"); }

TEST(CheckTest, PassingChecksDoNothingAndEvaluateOnce) {
  int evaluated = 0;
  KVF_CHECK(++evaluated == 1);
  KVF_CHECK(++evaluated == 2, "never formatted: {}", evaluated);
  KVF_CHECK_OK((++evaluated, Status::Ok()));
  EXPECT_EQ(evaluated, 3);
}

TEST(CheckDeathTest, NamesFileLineAndCondition) {
  const int ref_count = -1;
  EXPECT_DEATH(KVF_CHECK(ref_count >= 0), "check_test.cc:[0-9]+: KVF_CHECK failed: ref_count >= 0");
}

TEST(CheckDeathTest, FormatsItsMessage) {
  const int j = 7;
  EXPECT_DEATH(KVF_CHECK(j < 4, "kernel block {} of {}", j, 4),
               "KVF_CHECK failed: j < 4: kernel block 7 of 4");
}

TEST(CheckDeathTest, CheckOkNamesTheExpressionAndTheStatus) {
  EXPECT_DEATH(KVF_CHECK_OK(Broken()),
               "check_test.cc:[0-9]+: KVF_CHECK_OK failed: Broken\\(\\): INTERNAL: free queue has "
               "a cycle");
}

// The reason the macro exists: here assert() is gone and the check is not.
TEST(CheckDeathTest, FiresWhereAssertIsCompiledOut) {
  bool asserted = false;
  assert((asserted = true));  // NOLINT(bugprone-assert-side-effect): compiled out here
  EXPECT_FALSE(asserted);
  EXPECT_DEATH(KVF_CHECK(asserted), "KVF_CHECK failed: asserted");
  EXPECT_DEATH(KVF_CHECK_OK(Broken()), "KVF_CHECK_OK failed");
}

}  // namespace
}  // namespace kvferry
