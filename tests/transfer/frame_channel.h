// Control channel, agent options and data patterns of the two-process transfer tests: the test and
// its peer helper exchange metadata and commands as length-prefixed frames (common/frame_socket.h,
// out of band, as a real side channel would), and both know the bytes each buffer should hold.
#pragma once

#include <cstdint>
#include <string>

#include "kvferry/common/frame_socket.h"
#include "kvferry/transfer/agent.h"

namespace kvferry::transfer::testing {

using kvferry::RecvFrame;
using kvferry::SendFrame;

// Agent options for a test transport: "tcp" (UCX, AM data path), "shm" (UCX put/get), "shm-am"
// (UCX shared memory, AM data path), "shm-mapped" (UCX shared memory; the peer's buffer comes
// from Agent::AllocateMemory, so the initiator maps it and copies), "socket" (the socket
// backend over loopback).
inline AgentOptions TestAgentOptions(const std::string& name, const std::string& transport) {
  AgentOptions opt;
  opt.name = name;
  if (transport == "socket") {
    opt.backend = BackendKind::kSocket;
    return opt;
  }
  opt.backend = BackendKind::kUcx;
  opt.ucx.transport = transport == "tcp" ? UcxTransport::kTcp : UcxTransport::kShm;
  if (transport == "shm-am") opt.ucx.data_path = UcxDataPath::kActiveMessage;
  return opt;
}

// The peer's initial buffer contents: a function of the index, so both sides know it.
inline uint8_t InitialByte(uint64_t i) { return static_cast<uint8_t>((i * 131 + 7) ^ (i >> 11)); }
// Bytes the test writes, a function of (seed, index).
inline uint8_t SeededByte(uint64_t seed, uint64_t i) {
  return static_cast<uint8_t>((i * 2654435761u + seed * 40503u) >> 7);
}

}  // namespace kvferry::transfer::testing
