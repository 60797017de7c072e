// Writing a file whole (internal, for the writers): the bytes go to a temporary file beside
// `path` that is renamed over it at the end. A reader that has the old file mapped keeps its
// bytes (truncating a mapped file in place would fault its readers with SIGBUS), and a failed
// write leaves no half-written file under the final name.
//
// Thread-safety: reentrant; two writers of one path race (the last rename wins).
#pragma once

#include <cstddef>
#include <functional>
#include <span>
#include <string>

#include "kvferry/common/status.h"

namespace kvferry::formats::internal {

// Receives the bytes of a file in order.
using ByteSink = std::function<void(std::span<const std::byte>)>;

// Calls `emit` with a sink that writes to `path` (through the temporary file). InvalidArgument
// naming the path when it cannot be created or written.
Status WriteFileReplacing(const std::string& path,
                          const std::function<void(const ByteSink&)>& emit);

}  // namespace kvferry::formats::internal
