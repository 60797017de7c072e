// Fault injection for the loopback backend (BackendKind::kLoopback), for tests of the layers
// above transfer. The loopback backend copies bytes with memcpy between agents of one process;
// agents find each other by name through a process-wide registry when a blob is loaded.
//
// A fault applies to the next Post of the named agent (as initiator) and is then consumed:
//   kFailNext   the transfer fails with `code` (default Unavailable) and no bytes move
//   kStallNext  the transfer never completes: it fails with DeadlineExceeded at its deadline,
//               no bytes move, no notification is sent
//   kDropNotification  the bytes move, the transfer completes, the notification is not sent
//
// Thread-safety: may be called from any thread.
#pragma once

#include <string_view>

#include "kvferry/common/status.h"

namespace kvferry::transfer::loopback {

enum class Fault : uint8_t { kFailNext, kStallNext, kDropNotification };

// NotFound if no loopback agent of that name exists.
Status InjectFault(std::string_view agent_name, Fault fault,
                   StatusCode code = StatusCode::kUnavailable);
// The same for the next transfer whose TARGET is the named agent, whoever initiates it: an
// unreachable (kFailNext) or hung (kStallNext) peer, as one tensor-parallel rank of an instance
// can be while its other ranks answer.
Status InjectTargetFault(std::string_view agent_name, Fault fault,
                         StatusCode code = StatusCode::kUnavailable);
// Removes pending faults of the agent (as initiator and as target).
void ClearFaults(std::string_view agent_name);

}  // namespace kvferry::transfer::loopback
