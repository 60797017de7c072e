#include "kvferry/transfer/backend_options.h"

#include <string>

namespace kvferry::transfer {
namespace {

// The value of `all` whose name is `name`; InvalidArgument "<what> 'name' is not a|b|c".
template <typename E, size_t N>
StatusOr<E> ParseByName(std::string_view name, const E (&all)[N], std::string_view (*name_of)(E),
                        std::string_view what) {
  std::string choices;
  for (E e : all) {
    if (name == name_of(e)) return e;
    choices += (choices.empty() ? "" : "|") + std::string(name_of(e));
  }
  return InvalidArgumentError(std::string(what) + " '" + std::string(name) + "' is not " + choices);
}

}  // namespace

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
  static constexpr BackendKind kAll[] = {BackendKind::kUcx, BackendKind::kSocket,
                                         BackendKind::kLoopback};
  if (name == "UCX") return BackendKind::kUcx;
  return ParseByName(name, kAll, &BackendKindName, "transfer backend");
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
  static constexpr UcxTransport kAll[] = {UcxTransport::kAuto, UcxTransport::kTcp,
                                          UcxTransport::kShm};
  return ParseByName(name, kAll, &UcxTransportName, "ucx_transport");
}

}  // namespace kvferry::transfer
