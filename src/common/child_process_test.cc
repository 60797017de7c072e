#include "kvferry/common/child_process.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <thread>

namespace kvferry {
namespace {

using Clock = std::chrono::steady_clock;

int SleepForever() {
  while (true) ::pause();
}

TEST(ChildProcessTest, ReportsTheExitCode) {
  StatusOr<ChildProcess> c = ChildProcess::Fork([] { return 7; });
  ASSERT_TRUE(c.ok()) << c.status();
  const ChildExit e = c->WaitOrKill(Deadline::AfterMs(10'000));
  EXPECT_TRUE(e.exited);
  EXPECT_EQ(e.code, 7);
  EXPECT_EQ(e.ExitCodeOr(-1), 7);
  EXPECT_FALSE(e.killed_at_deadline);
  EXPECT_TRUE(c->reaped());
}

TEST(ChildProcessTest, ReturnsAsSoonAsTheChildEnds) {
  StatusOr<ChildProcess> c = ChildProcess::Fork([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return 0;
  });
  ASSERT_TRUE(c.ok()) << c.status();
  const auto t0 = Clock::now();
  EXPECT_EQ(c->WaitOrKill(Deadline::AfterMs(20'000)).ExitCodeOr(-1), 0);
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(10));
}

TEST(ChildProcessTest, KilledPastTheDeadline) {
  StatusOr<ChildProcess> c = ChildProcess::Fork(SleepForever);
  ASSERT_TRUE(c.ok()) << c.status();
  const auto t0 = Clock::now();
  const ChildExit e = c->WaitOrKill(Deadline::AfterMs(100));
  EXPECT_GE(Clock::now() - t0, std::chrono::milliseconds(100));
  EXPECT_TRUE(e.killed_at_deadline);
  EXPECT_FALSE(e.exited);
  EXPECT_EQ(e.signal, SIGKILL);
  EXPECT_EQ(e.ExitCodeOr(-1), -1);
  // Reaped once: asking again gives the same answer, and signalling is refused.
  EXPECT_TRUE(c->WaitOrKill(Deadline::AfterMs(0)).killed_at_deadline);
  EXPECT_FALSE(c->Signal(SIGTERM));
}

TEST(ChildProcessTest, AStoppedChildIsKilledAtTheDeadline) {
  StatusOr<ChildProcess> c = ChildProcess::Fork(SleepForever);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(c->Signal(SIGSTOP));
  int status = 0;
  ASSERT_EQ(::waitpid(c->pid(), &status, WUNTRACED), c->pid());  // stopped, not reaped
  ASSERT_TRUE(WIFSTOPPED(status));
  const ChildExit e = c->WaitOrKill(Deadline::AfterMs(50));
  EXPECT_TRUE(e.killed_at_deadline);
  EXPECT_EQ(e.signal, SIGKILL);
}

TEST(ChildProcessTest, WaitAfterASignal) {
  StatusOr<ChildProcess> c = ChildProcess::Fork(SleepForever);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(c->Signal(SIGTERM));
  const ChildExit e = c->Wait();
  EXPECT_FALSE(e.exited);
  EXPECT_EQ(e.signal, SIGTERM);
  EXPECT_FALSE(e.killed_at_deadline);
}

TEST(ChildProcessTest, NewProcessGroupIsLedByTheChildAndSignalledWhole) {
  StatusOr<ChildProcess> c = ChildProcess::Fork([] { return ::getpgrp() == ::getpid() ? 0 : 1; },
                                                {.new_process_group = true});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->WaitOrKill(Deadline::AfterMs(10'000)).ExitCodeOr(-1), 0);

  // The group's signal reaches a grandchild too. The child blocks SIGUSR1 (so it lives to
  // report), the grandchild unblocks it and waits to die of it.
  StatusOr<ChildProcess> parent = ChildProcess::Fork(
      [] {
        sigset_t usr1;
        sigemptyset(&usr1);
        sigaddset(&usr1, SIGUSR1);
        sigprocmask(SIG_BLOCK, &usr1, nullptr);
        const pid_t g = ::fork();
        if (g == 0) {
          sigprocmask(SIG_UNBLOCK, &usr1, nullptr);
          SleepForever();
        }
        int status = 0;
        ::waitpid(g, &status, 0);
        return WIFSIGNALED(status) && WTERMSIG(status) == SIGUSR1 ? 0 : 1;
      },
      {.new_process_group = true});
  ASSERT_TRUE(parent.ok()) << parent.status();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the grandchild is forked
  ASSERT_TRUE(parent->Signal(SIGUSR1));
  const ChildExit e = parent->WaitOrKill(Deadline::AfterMs(10'000));
  EXPECT_FALSE(e.killed_at_deadline);
  EXPECT_EQ(e.ExitCodeOr(-1), 0);
}

TEST(ChildProcessTest, DestroyingTheHandleKillsAndReaps) {
  pid_t pid = -1;
  {
    StatusOr<ChildProcess> c = ChildProcess::Fork(SleepForever);
    ASSERT_TRUE(c.ok()) << c.status();
    pid = c->pid();
  }
  errno = 0;
  EXPECT_EQ(::waitpid(pid, nullptr, WNOHANG), -1);  // reaped already: no longer our child
  EXPECT_EQ(errno, ECHILD);
}

TEST(ChildProcessTest, MovingKeepsTheChild) {
  StatusOr<ChildProcess> c = ChildProcess::Fork([] { return 3; });
  ASSERT_TRUE(c.ok()) << c.status();
  ChildProcess moved = std::move(*c);
  EXPECT_TRUE(c->reaped());  // NOLINT(bugprone-use-after-move): the moved-from owns nothing
  EXPECT_EQ(moved.WaitOrKill(Deadline::AfterMs(10'000)).ExitCodeOr(-1), 3);
}

}  // namespace
}  // namespace kvferry
