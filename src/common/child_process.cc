#include "kvferry/common/child_process.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <utility>

namespace kvferry {

StatusOr<ChildProcess> ChildProcess::Fork(const std::function<int()>& body, ForkOptions options) {
  const pid_t pid = ::fork();
  if (pid < 0) return InternalError(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    if (options.new_process_group) ::setpgid(0, 0);
    int code = 127;
    try {
      code = body();
    } catch (...) {
    }
    ::_exit(code);
  }
  // Also here, so that a Signal right after Fork finds the group whichever runs first.
  if (options.new_process_group) ::setpgid(pid, pid);
  return ChildProcess(pid, options.new_process_group);
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)), group_(other.group_), exit_(other.exit_) {}

ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
  if (this != &other) {
    if (!reaped()) WaitOrKill(Deadline::AfterMs(0));
    pid_ = std::exchange(other.pid_, -1);
    group_ = other.group_;
    exit_ = other.exit_;
  }
  return *this;
}

ChildProcess::~ChildProcess() {
  if (!reaped()) WaitOrKill(Deadline::AfterMs(0));
}

bool ChildProcess::Signal(int signal) {
  if (reaped()) return false;
  return ::kill(group_ ? -pid_ : pid_, signal) == 0;
}

ChildExit ChildProcess::Reaped(int status) {
  exit_ = ChildExit{};
  if (WIFEXITED(status)) {
    exit_.exited = true;
    exit_.code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    exit_.signal = WTERMSIG(status);
  }
  pid_ = -1;
  return exit_;
}

ChildExit ChildProcess::Lost() {
  exit_ = ChildExit{};
  pid_ = -1;
  return exit_;
}

ChildExit ChildProcess::WaitOrKill(Deadline deadline) {
  if (reaped()) return exit_;
  while (true) {
    int status = 0;
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) return Reaped(status);
    if (r < 0 && errno != EINTR) return Lost();
    if (deadline.Expired()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  Signal(SIGKILL);
  ChildExit e = Wait();
  exit_.killed_at_deadline = true;
  e.killed_at_deadline = true;
  return e;
}

ChildExit ChildProcess::Wait() {
  if (reaped()) return exit_;
  int status = 0;
  pid_t r;
  do {
    r = ::waitpid(pid_, &status, 0);
  } while (r < 0 && errno == EINTR);
  return r == pid_ ? Reaped(status) : Lost();
}

}  // namespace kvferry
