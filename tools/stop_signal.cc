#include "tools/stop_signal.h"

#include <signal.h>

#include <atomic>

namespace kvferry::tools {
namespace {

std::atomic<int> g_stop_signal{0};
void OnStopSignal(int sig) { g_stop_signal.store(sig); }

}  // namespace

void InstallStopHandlers() {
  struct sigaction sa {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

int StopSignal() { return g_stop_signal.load(); }

}  // namespace kvferry::tools
