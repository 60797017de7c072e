// Sends UCX's own log messages (warnings such as "unused env variable", errors) to kvferry's
// logger, which writes to stderr.
//
// Why: UCX's default log handler writes to UCX_LOG_FILE, and to stdout when that is empty, so
// its lines would land in a command's output (`kvferry bench xfer --json`). UCX reads
// UCX_LOG_FILE once, when libucs is loaded (before main), so setting the variable from here
// would come too late; a pushed log handler (ucs_log_push_handler) is UCX's hook for this. A
// user who set UCX_LOG_FILE keeps UCX's own handler writing there. UCX_LOG_LEVEL still decides
// which messages UCX emits; the kvferry log level then applies to them as to any other line.
//
// Thread-safety: RouteUcxLogToKvferry may be called from any thread, any number of times; the
// handler is installed once per process. Call it before creating a UCX context, so that no
// other thread is inside UCX's log dispatch while the handler list changes.
#pragma once

namespace kvferry::transfer::ucx {

void RouteUcxLogToKvferry();

}  // namespace kvferry::transfer::ucx
