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

std::string_view UcxTransportName(UcxTransport transport) {
  switch (transport) {
    case UcxTransport::kAuto:
      return "auto";
    case UcxTransport::kTcp:
      return "tcp";
    case UcxTransport::kShm:
      return "shm";
  }
  return "?";
}

StatusOr<UcxTransport> ParseUcxTransport(std::string_view name) {
  for (UcxTransport t : {UcxTransport::kAuto, UcxTransport::kTcp, UcxTransport::kShm}) {
    if (name == UcxTransportName(t)) return t;
  }
  return InvalidArgumentError("ucx_transport '" + std::string(name) + "' is not auto|tcp|shm");
}

}  // namespace kvferry::transfer
