// Logging through spdlog. One process-wide logger named "kvferry"; the level comes from the
// KVFERRY_LOG environment variable (trace|debug|info|warn|error|off, default info) or
// SetLogLevel(). Log lines go to stderr.
//
//   KVF_LOG_INFO("connected to {} over {}", peer, lanes);
//
// Thread-safety: all functions may be called from any thread.
#pragma once

#include <spdlog/spdlog.h>

#include <string_view>

namespace kvferry {

spdlog::logger& Logger();
void SetLogLevel(std::string_view level);  // unknown names leave the level unchanged

}  // namespace kvferry

#define KVF_LOG_TRACE(...) ::kvferry::Logger().trace(__VA_ARGS__)
#define KVF_LOG_DEBUG(...) ::kvferry::Logger().debug(__VA_ARGS__)
#define KVF_LOG_INFO(...) ::kvferry::Logger().info(__VA_ARGS__)
#define KVF_LOG_WARN(...) ::kvferry::Logger().warn(__VA_ARGS__)
#define KVF_LOG_ERROR(...) ::kvferry::Logger().error(__VA_ARGS__)
