#include "kvferry/common/status.h"

#include <gtest/gtest.h>

#include "kvferry/common/deadline.h"
#include "kvferry/common/unique_handle.h"

namespace kvferry {
namespace {

StatusOr<int> Half(int x) {
  if (x % 2 != 0) return InvalidArgumentError("odd: " + std::to_string(x));
  return x / 2;
}

Status QuarterInto(int x, int* out) {
  KVF_ASSIGN_OR_RETURN(int h, Half(x));
  KVF_ASSIGN_OR_RETURN(int q, Half(h));
  *out = q;
  return Status::Ok();
}

TEST(StatusTest, OkAndErrors) {
  EXPECT_TRUE(Status::Ok().ok());
  Status s = NotFoundError("x");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.ToString(), "NOT_FOUND: x");
  EXPECT_EQ(s.WithContext("load").ToString(), "NOT_FOUND: load: x");
  EXPECT_EQ(Status::Ok().WithContext("c"), Status::Ok());
  EXPECT_EQ(UnauthenticatedError("no key").ToString(), "UNAUTHENTICATED: no key");
}

TEST(StatusTest, Propagation) {
  int out = -1;
  EXPECT_TRUE(QuarterInto(8, &out).ok());
  EXPECT_EQ(out, 2);
  Status s = QuarterInto(6, &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "odd: 3");
}

TEST(StatusTest, StatusOrFromOkIsInternal) {
  StatusOr<int> v(Status::Ok());
  EXPECT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::kInternal);
}

TEST(StatusTest, ReturnIfError) {
  auto f = [](bool fail) -> Status {
    KVF_RETURN_IF_ERROR(fail ? AbortedError("a") : Status::Ok());
    return DataLossError("reached");
  };
  EXPECT_EQ(f(true).code(), StatusCode::kAborted);
  EXPECT_EQ(f(false).code(), StatusCode::kDataLoss);
}

int g_destroyed = 0;
void DestroyInt(int* p) {
  ++g_destroyed;
  delete p;
}

TEST(UniqueHandleTest, DestroysOnce) {
  g_destroyed = 0;
  {
    UniqueHandle<int, DestroyInt> h(new int(3));
    UniqueHandle<int, DestroyInt> moved = std::move(h);
    EXPECT_EQ(*moved, 3);
  }
  EXPECT_EQ(g_destroyed, 1);
}

TEST(ScopeExitTest, RunsUnlessDismissed) {
  int n = 0;
  {
    ScopeExit e([&] { ++n; });
  }
  {
    ScopeExit e([&] { ++n; });
    e.Dismiss();
  }
  EXPECT_EQ(n, 1);
}

TEST(DeadlineTest, Expires) {
  EXPECT_TRUE(Deadline::AfterMs(0).Expired());
  EXPECT_FALSE(Deadline::AfterMs(60'000).Expired());
  EXPECT_GT(Deadline::AfterMs(60'000).RemainingMs(), 0);
}

}  // namespace
}  // namespace kvferry
