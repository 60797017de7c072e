#include "kvferry/common/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>
#include <mutex>

namespace kvferry {
namespace {

std::shared_ptr<spdlog::logger> MakeLogger() {
  auto logger = spdlog::stderr_color_mt("kvferry");
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%L%$ [%P] %v");
  logger->set_level(spdlog::level::info);
  if (const char* env = std::getenv("KVFERRY_LOG")) {
    auto lvl = spdlog::level::from_str(env);
    if (lvl != spdlog::level::off || std::string_view(env) == "off") logger->set_level(lvl);
  }
  return logger;
}

}  // namespace

spdlog::logger& Logger() {
  static std::shared_ptr<spdlog::logger> logger = MakeLogger();
  return *logger;
}

void SetLogLevel(std::string_view level) {
  auto lvl = spdlog::level::from_str(std::string(level));
  if (lvl != spdlog::level::off || level == "off") Logger().set_level(lvl);
}

}  // namespace kvferry
