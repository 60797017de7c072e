#include "kvferry/connector/connector.h"

namespace kvferry::connector {

std::string_view LoadOutcomeName(LoadOutcome outcome) {
  switch (outcome) {
    case LoadOutcome::kPulled:
      return "pulled";
    case LoadOutcome::kNotifyOnly:
      return "notify_only";
    case LoadOutcome::kFailedHandshake:
      return "failed_handshake";
    case LoadOutcome::kFailedTransfer:
      return "failed_transfer";
    case LoadOutcome::kFailedDeadline:
      return "failed_deadline";
    case LoadOutcome::kFailedGeneration:
      return "failed_generation";
    case LoadOutcome::kNoneOffered:
      return "none_offered";
  }
  return "?";
}

}  // namespace kvferry::connector
