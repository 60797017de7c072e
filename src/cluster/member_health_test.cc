#include "cluster/member_health.h"

#include <gtest/gtest.h>

namespace kvferry::cluster {
namespace {

using State = MemberHealth::State;
using std::chrono::milliseconds;

const MemberHealth::Clock::time_point t0{};

TEST(MemberHealthTest, AJoiningMemberGetsTrafficOnlyAfterAProbe) {
  MemberHealth h({});
  EXPECT_EQ(h.state(), State::kJoining);
  EXPECT_FALSE(h.routable());
  EXPECT_TRUE(h.ProbeDue(t0));
  EXPECT_FALSE(h.OnProbe(false, t0));  // never in: nothing to eject
  EXPECT_EQ(h.state(), State::kJoining);
  EXPECT_FALSE(h.ProbeDue(t0 + milliseconds(499)));
  EXPECT_TRUE(h.ProbeDue(t0 + milliseconds(500)));
  h.OnProbe(true, t0 + milliseconds(500));
  EXPECT_TRUE(h.routable());
  EXPECT_EQ(h.ejections(), 0);
}

TEST(MemberHealthTest, AFailedProbeEjectsAndProbesBackWithGrowingBackoff) {
  MemberHealth h({2, 100, 400});
  h.OnProbe(true, t0);
  EXPECT_TRUE(h.OnProbe(false, t0));
  EXPECT_EQ(h.state(), State::kEjected);
  EXPECT_FALSE(h.ProbeDue(t0 + milliseconds(99)));
  EXPECT_TRUE(h.ProbeDue(t0 + milliseconds(100)));
  auto t = t0 + milliseconds(100);
  EXPECT_FALSE(h.OnProbe(false, t));  // already ejected: not a new ejection
  EXPECT_FALSE(h.ProbeDue(t + milliseconds(199)));
  EXPECT_TRUE(h.ProbeDue(t + milliseconds(200)));
  t += milliseconds(200);
  h.OnProbe(false, t);
  t += milliseconds(400);
  h.OnProbe(false, t);  // capped at 400
  EXPECT_TRUE(h.ProbeDue(t + milliseconds(400)));
  h.OnProbe(true, t + milliseconds(400));
  EXPECT_TRUE(h.routable());
  EXPECT_EQ(h.ejections(), 1);
  EXPECT_TRUE(h.OnProbe(false, t + milliseconds(400)));  // a new ejection starts at the minimum
  EXPECT_TRUE(h.ProbeDue(t + milliseconds(500)));
  EXPECT_EQ(h.ejections(), 2);
}

TEST(MemberHealthTest, FailedRequestsInARowEject) {
  MemberHealth h({3, 100, 400});
  h.OnProbe(true, t0);
  EXPECT_FALSE(h.OnRequest(false, t0));
  EXPECT_FALSE(h.OnRequest(false, t0));
  EXPECT_FALSE(h.OnRequest(true, t0));  // the run is broken
  EXPECT_FALSE(h.OnRequest(false, t0));
  EXPECT_FALSE(h.OnRequest(false, t0));
  EXPECT_TRUE(h.routable());
  EXPECT_TRUE(h.OnRequest(false, t0));
  EXPECT_EQ(h.state(), State::kEjected);
  EXPECT_FALSE(h.OnRequest(false, t0));  // late failures of requests in flight: no new ejection
  EXPECT_EQ(h.ejections(), 1);
}

TEST(MemberHealthTest, HealthyMembersArePolledEveryRound) {
  MemberHealth h({});
  h.OnProbe(true, t0);
  EXPECT_TRUE(h.ProbeDue(t0));
  EXPECT_EQ(HealthStateName(h.state()), "healthy");
}

}  // namespace
}  // namespace kvferry::cluster
