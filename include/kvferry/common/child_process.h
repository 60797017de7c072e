// ChildProcess: a function run in a forked child process, and the parent's handle on it: wait
// for it with a deadline, kill it (SIGKILL) past the deadline, and learn how it ended. For the
// peers that tests, benchmarks and the bench commands run in a process of their own (the
// two-process transfer and P/D tests, `kvferry bench xfer` and `bench tp-pull`, the etcd test
// fixture); nothing in the serving path forks.
//
// The child leaves through _exit with the body's return value: no destructors or atexit
// handlers run there, since they belong to the parent's state (a body that wants them calls
// exit itself). As with any fork of a multi-threaded process, the child has only the forking
// thread; its body must not wait on other threads or on locks they may have held.
//
// A handle that goes away before its child was reaped kills (SIGKILL) and reaps it, so no test
// leaves a stray process or a zombie behind.
//
// Thread-safety: one controlling thread per handle.
#pragma once

#include <sys/types.h>

#include <functional>

#include "kvferry/common/deadline.h"
#include "kvferry/common/status.h"

namespace kvferry {

// How a reaped child ended.
struct ChildExit {
  bool exited = false;              // it exited (WIFEXITED)
  int code = -1;                    // its exit status, when it exited
  int signal = 0;                   // the signal that ended it, when it did not exit
  bool killed_at_deadline = false;  // WaitOrKill's deadline passed and it was killed (SIGKILL)

  // The exit status, or `otherwise` when it did not exit (a signal, or killed at the deadline).
  int ExitCodeOr(int otherwise) const { return exited ? code : otherwise; }
};

struct ForkOptions {
  // The child leads a process group of its own, and Signal and the kill at the deadline go to
  // the whole group: for a body that execs a shell whose own children must go with it.
  bool new_process_group = false;
};

class ChildProcess {
 public:
  // Forks; the child runs `body` and _exits with its return value (127 if it throws).
  // Internal if fork fails.
  static StatusOr<ChildProcess> Fork(const std::function<int()>& body, ForkOptions options = {});

  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&& other) noexcept;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  // Kills (SIGKILL) and reaps a child not reaped yet.
  ~ChildProcess();

  pid_t pid() const { return pid_; }
  bool reaped() const { return pid_ <= 0; }

  // Sends `signal` (its group's, with new_process_group). False once reaped or if kill fails.
  bool Signal(int signal);
  // Reaps the child if it ends by `deadline` (checked every 5 ms); otherwise kills it (SIGKILL)
  // and reaps it then. Once reaped, later calls return the same ChildExit.
  ChildExit WaitOrKill(Deadline deadline);
  // Reaps the child, however long that takes (after a Signal that ends it, for instance).
  ChildExit Wait();

 private:
  ChildProcess(pid_t pid, bool group) : pid_(pid), group_(group) {}
  // Records how the child ended and forgets its pid.
  ChildExit Reaped(int status);
  // waitpid failed (not our child: someone else reaped it): how it ended is unknown.
  ChildExit Lost();

  pid_t pid_ = -1;
  bool group_ = false;
  ChildExit exit_;
};

}  // namespace kvferry
