// Peer helper for the two-process transfer tests: a target agent in its own process.
//   transfer_test_peer <socket fd> <tcp|shm|shm-am> <buffer bytes>
// Sends its metadata blob and region id over the socket, then serves commands:
//   DUMP   -> the whole registered buffer
//   STATS  -> "<notifications checked> <violations>"
//   DEREG  -> deregisters the buffer (the test's remote key goes stale); answers the Status
//   QUIT   -> exits 0
// A notification "chk <seed> <n> (<remote off> <len> <local off>)*n" is checked the moment it
// arrives: the named ranges must already hold the seeded bytes (data before notification).
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <thread>
#include <vector>

#include "kvferry/transfer/agent.h"
#include "tests/transfer/frame_channel.h"

using namespace kvferry;            // NOLINT
using namespace kvferry::transfer;  // NOLINT

int main(int argc, char** argv) {
  if (argc != 4) return 2;
  int fd = std::atoi(argv[1]);
  std::string transport = argv[2];
  uint64_t bytes = std::strtoull(argv[3], nullptr, 10);
  AgentOptions opt = testing::TestAgentOptions("peer", transport);
  auto agent = Agent::Create(opt);
  if (!agent.ok()) {
    std::fprintf(stderr, "peer: %s\n", agent.status().ToString().c_str());
    return 1;
  }
  // shm-mapped: the agent allocates the buffer (shared memory the initiator maps); otherwise
  // ordinary memory, registered.
  std::vector<uint8_t> own;
  uint8_t* buf = nullptr;
  StatusOr<RegionHandle> region = NotFoundError("not registered");
  if (transport == "shm-mapped") {
    auto a = (*agent)->AllocateMemory(bytes);
    if (!a.ok()) return 1;
    buf = static_cast<uint8_t*>(a->addr);
    region = a->region;
  } else {
    own.resize(bytes);
    buf = own.data();
    region = (*agent)->RegisterMemory(buf, bytes, MemoryKind::kHost);
  }
  if (!region.ok()) return 1;
  for (uint64_t i = 0; i < bytes; ++i) buf[i] = testing::InitialByte(i);
  if (!testing::SendFrame(fd, *(*agent)->GetLocalMetadata()) ||
      !testing::SendFrame(fd, std::to_string(region->id))) {
    return 1;
  }
  std::atomic<uint64_t> checked{0}, violations{0};
  std::atomic<bool> stop{false};
  std::thread notif([&] {
    while (!stop) {
      for (const Notification& n : (*agent)->WaitNotifications(Deadline::AfterMs(100))) {
        std::istringstream in(n.message);
        std::string tag;
        uint64_t seed = 0, count = 0;
        in >> tag >> seed >> count;
        if (tag != "chk") continue;
        bool ok = true;
        for (uint64_t k = 0; k < count; ++k) {
          uint64_t roff = 0, len = 0, loff = 0;
          in >> roff >> len >> loff;
          for (uint64_t i = 0; i < len && ok; ++i) {
            ok = roff + i < bytes && buf[roff + i] == testing::SeededByte(seed, loff + i);
          }
        }
        if (!ok) ++violations;
        ++checked;
      }
    }
  });
  int rc = 0;
  while (true) {
    auto cmd = testing::RecvFrame(fd, Deadline::AfterMs(120'000));
    if (!cmd || *cmd == "QUIT") break;
    if (*cmd == "DUMP") {
      testing::SendFrame(fd, std::string(reinterpret_cast<const char*>(buf), bytes));
    } else if (*cmd == "DEREG") {  // makes the remote key the test holds stale
      testing::SendFrame(fd, (*agent)->DeregisterMemory(*region).ToString());
    } else if (*cmd == "STATS") {
      testing::SendFrame(fd,
                         std::to_string(checked.load()) + " " + std::to_string(violations.load()));
    } else {
      rc = 3;
      break;
    }
  }
  stop = true;
  notif.join();
  return rc;
}
