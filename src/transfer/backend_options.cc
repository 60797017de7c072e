#include "kvferry/transfer/backend_options.h"

namespace kvferry::transfer {

std::string_view BackendKindName(BackendKind kind) {
  switch (kind) {
    case BackendKind::kUcx:
      return "ucx";
    case BackendKind::kLoopback:
      return "loopback";
    case BackendKind::kSocket:
      return "socket";
  }
  return "?";
}

StatusOr<BackendKind> ParseBackendKind(std::string_view name) {
  for (BackendKind k : {BackendKind::kUcx, BackendKind::kLoopback, BackendKind::kSocket}) {
    if (name == BackendKindName(k)) return k;
  }
  if (name == "UCX") return BackendKind::kUcx;
  return InvalidArgumentError("transfer backend '" + std::string(name) +
                              "' is not ucx|socket|loopback");
}

}  // namespace kvferry::transfer
