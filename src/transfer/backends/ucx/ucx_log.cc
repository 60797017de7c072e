#include "transfer/backends/ucx/ucx_log.h"

#include <ucs/debug/log_def.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "kvferry/common/logging.h"

namespace kvferry::transfer::ucx {
namespace {

spdlog::level::level_enum LevelOf(ucs_log_level_t level) {
  switch (level) {
    case UCS_LOG_LEVEL_FATAL:
    case UCS_LOG_LEVEL_ERROR:
      return spdlog::level::err;
    case UCS_LOG_LEVEL_WARN:
      return spdlog::level::warn;
    case UCS_LOG_LEVEL_DIAG:
    case UCS_LOG_LEVEL_INFO:
    case UCS_LOG_LEVEL_PRINT:
      return spdlog::level::info;
    case UCS_LOG_LEVEL_DEBUG:
      return spdlog::level::debug;
    default:
      return spdlog::level::trace;
  }
}

// UCX calls this for every message its level lets through; UCS_LOG_FUNC_RC_STOP keeps the
// default handler (stdout) from printing it too.
ucs_log_func_rc_t ToKvferryLog(const char* file, unsigned line, const char* /*function*/,
                               ucs_log_level_t level, const ucs_log_component_config_t* /*conf*/,
                               const char* format, va_list ap) {
  va_list measure;
  va_copy(measure, ap);
  int n = std::vsnprintf(nullptr, 0, format, measure);
  va_end(measure);
  std::string message(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(message.data(), message.size() + 1, format, ap);
  const char* slash = std::strrchr(file, '/');
  Logger().log(LevelOf(level), "ucx {}:{}: {}", slash ? slash + 1 : file, line, message);
  return UCS_LOG_FUNC_RC_STOP;
}

}  // namespace

void RouteUcxLogToKvferry() {
  static std::once_flag once;
  std::call_once(once, [] {
    const char* file = std::getenv("UCX_LOG_FILE");
    if (file != nullptr && *file != '\0') return;  // the user chose UCX's destination
    ucs_log_push_handler(ToKvferryLog);
  });
}

}  // namespace kvferry::transfer::ucx
