// SIGINT/SIGTERM handling for the long-running subcommands (serve, proxy): a handler sets a
// flag that the main thread polls. A handler rather than sigwait: threads that libraries start
// before main() (OpenBLAS, UCX) do not block the signals, and a second SIGTERM delivered to one
// of them must not kill the process mid-drain. SIGPIPE is ignored.
//
// Thread-safety: InstallStopHandlers() once from the main thread; StopSignal() from any thread.
#pragma once

namespace kvferry::tools {

void InstallStopHandlers();
// The signal received (SIGINT or SIGTERM), or 0 while none has arrived.
int StopSignal();

}  // namespace kvferry::tools
