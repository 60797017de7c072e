// Example: the transfer agent API on its own, two agents in one process over the loopback
// backend. Register memory, exchange metadata, READ with a notification, poll to completion.
// The same calls work over UCX with BackendKind::kUcx between processes or hosts.
#include <cstdio>
#include <cstring>
#include <vector>

#include "kvferry/common/deadline.h"
#include "kvferry/transfer/agent.h"

using namespace kvferry;
using namespace kvferry::transfer;

static int Fail(const Status& s) {
  std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
  return 1;
}

int main() {
  AgentOptions target_options, initiator_options;
  target_options.name = "example-target";
  target_options.backend = BackendKind::kLoopback;
  initiator_options.name = "example-initiator";
  initiator_options.backend = BackendKind::kLoopback;
  auto target = Agent::Create(target_options);
  auto initiator = Agent::Create(initiator_options);
  if (!target.ok()) return Fail(target.status());
  if (!initiator.ok()) return Fail(initiator.status());

  std::vector<char> remote(1 << 20), local(1 << 20, 0);
  for (size_t i = 0; i < remote.size(); ++i) remote[i] = static_cast<char>(i * 7);

  auto remote_region = (*target)->RegisterMemory(remote.data(), remote.size(), MemoryKind::kHost);
  auto local_region = (*initiator)->RegisterMemory(local.data(), local.size(), MemoryKind::kHost);
  if (!remote_region.ok()) return Fail(remote_region.status());
  if (!local_region.ok()) return Fail(local_region.status());

  auto blob = (*target)->GetLocalMetadata();  // sent to the peer out of band in real use
  if (!blob.ok()) return Fail(blob.status());
  auto peer = (*initiator)->LoadRemoteMetadata(*blob);
  if (!peer.ok()) return Fail(peer.status());

  // Two adjacent 256 KiB pieces: the agent merges them into one descriptor.
  TransferRequest request{
      .op = XferOp::kRead,
      .peer = *peer,
      .local = {{*local_region, 0, 256 << 10}, {*local_region, 256 << 10, 256 << 10}},
      .remote = {{*remote_region, 0, 256 << 10}, {*remote_region, 256 << 10, 256 << 10}},
      .notification = "req-1 done",
      .timeout_ms = 5000};
  auto xfer = (*initiator)->PrepareTransfer(request);
  if (!xfer.ok()) return Fail(xfer.status());
  if (Status s = (*initiator)->Post(*xfer); !s.ok()) return Fail(s);
  if (Status s = (*initiator)->Wait(*xfer, Deadline::AfterMs(5000)); !s.ok()) return Fail(s);
  auto info = (*initiator)->GetXferInfo(*xfer);
  if (!info.ok()) return Fail(info.status());
  if (Status s = (*initiator)->Release(*xfer); !s.ok()) return Fail(s);

  auto notes = (*target)->WaitNotifications(Deadline::AfterMs(5000));
  bool same = std::memcmp(local.data(), remote.data(), 512 << 10) == 0;
  std::printf("read %llu bytes in %u descriptor(s), data %s, notification: %s\n",
              static_cast<unsigned long long>(info->total_bytes), info->num_descriptors_merged,
              same ? "identical" : "DIFFERENT",
              notes.empty() ? "(none)" : notes[0].message.c_str());
  return same && !notes.empty() ? 0 : 1;
}
