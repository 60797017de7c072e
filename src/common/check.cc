#include "kvferry/common/check.h"

#include <cstdio>
#include <cstdlib>

namespace kvferry::check_internal {

void Fail(const char* file, int line, std::string_view macro, std::string_view condition,
          std::string_view detail) {
  // Straight to stderr, not through the logger: its level may be "off", and a failed check may
  // come while the logger itself is being torn down at exit.
  fmt::print(stderr, "{}:{}: {} failed: {}{}{}\n", file, line, macro, condition,
             detail.empty() ? "" : ": ", detail);
  std::fflush(stderr);
  std::abort();
}

}  // namespace kvferry::check_internal
