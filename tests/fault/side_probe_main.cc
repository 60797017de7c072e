// kvf_side_probe: sends one crafted message to a running instance's side channel and prints
// what came back, for the side-channel bad-input and security tests (fault_side_channel_test.py).
//
//   kvf_side_probe HOST PORT MODE [TOKEN [SECRET_KEY_FILE SERVER_KEY_FILE]]
//     raw-garbage     plain TCP bytes that are not ZeroMQ at all, then close
//     garbage         one ZeroMQ message of random bytes
//     truncated       the first half of a valid handshake request
//     newer-version   a well-formed request carrying handshake version kHandshakeVersion + 1
//     wrong-op        a well-formed envelope asking for something other than metadata
//     multi-frame     a valid request split over three frames
//     get-meta        a valid request with TOKEN; the reply decoded with P's own compat hash
//     wrong-hash      a valid request with TOKEN; the reply decoded expecting another hash
//     release:ID      a release of P's request ID with TOKEN, as a D that will not read it sends
//                     (prints "RESULT OK" when P accepted it)
//
// With the two key files, the fetch (garbage ... wrong-hash) speaks CURVE: this probe's secret
// key (kvferry keygen's NAME.key) and P's public key (a key list's first key).
//
// Prints one line: "RESULT OK engine=<id> blocks=<n>" or "RESULT <status>" (the decoded reply's
// error, or the transport's). Exit code 0 whenever a line was printed.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <msgpack.hpp>
#include <random>
#include <string>
#include <zmq.hpp>

#include "connector/handshake_wire.h"
#include "connector/side_channel.h"
#include "kvferry/connector/curve_keys.h"

namespace {

using namespace kvferry;
using namespace kvferry::connector::internal;

std::string Envelope(uint32_t version, const std::string& op) {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_array(5);
  pk.pack(std::string("kvferry.hs"));
  pk.pack(version);
  pk.pack(op);
  pk.pack(0);
  pk.pack(std::string(""));
  return std::string(buf.data(), buf.size());
}

// The compat hash P put in its reply (element 3 of the envelope), or "".
std::string HashOf(const std::string& reply) {
  try {
    msgpack::object_handle oh = msgpack::unpack(reply.data(), reply.size());
    const msgpack::object& o = oh.get();
    if (o.type == msgpack::type::ARRAY && o.via.array.size >= 4 &&
        o.via.array.ptr[3].type == msgpack::type::STR) {
      return o.via.array.ptr[3].as<std::string>();
    }
  } catch (const std::exception&) {
  }
  return "";
}

int Print(const std::string& line) {
  std::printf("RESULT %s\n", line.c_str());
  return 0;
}

int PrintReply(const StatusOr<std::string>& reply, const std::string& expected_hash) {
  if (!reply.ok()) return Print(reply.status().ToString());
  auto ranks = DecodeHandshakeReply(*reply, expected_hash);
  if (!ranks.ok()) return Print(ranks.status().ToString());
  return Print("OK engine=" + ranks->front().engine_id +
               " blocks=" + std::to_string(ranks->front().num_blocks_logical()));
}

int RawGarbage(const std::string& host, int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, host.c_str(), &a.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return Print("UNAVAILABLE: connect failed");
  }
  std::string junk = "GET / HTTP/1.1\r\n\r\n\xff\x00\x01garbage";
  std::mt19937 rng(7);
  for (int i = 0; i < 4096; ++i) junk.push_back(static_cast<char>(rng()));
  ssize_t n = write(fd, junk.data(), junk.size());
  close(fd);
  return Print(n > 0 ? "SENT" : "UNAVAILABLE: write failed");
}

int MultiFrame(const std::string& host, int port, const std::string& request) {
  zmq::context_t ctx;
  zmq::socket_t s(ctx, zmq::socket_type::req);
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::rcvtimeo, 3000);
  s.connect("tcp://" + host + ":" + std::to_string(port));
  size_t third = request.size() / 3;
  s.send(zmq::buffer(request.substr(0, third)), zmq::send_flags::sndmore);
  s.send(zmq::buffer(request.substr(third, third)), zmq::send_flags::sndmore);
  s.send(zmq::buffer(request.substr(2 * third)), zmq::send_flags::none);
  zmq::message_t reply;
  if (!s.recv(reply)) return Print("DEADLINE_EXCEEDED: no reply to a multi-frame message");
  return PrintReply(std::string(static_cast<const char*>(reply.data()), reply.size()), "");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s HOST PORT MODE [TOKEN]\n", argv[0]);
    return 2;
  }
  std::string host = argv[1], mode = argv[3], token = argc > 4 ? argv[4] : "";
  int port = std::atoi(argv[2]);
  std::optional<CurveClientKeys> curve;
  if (argc > 6) {
    auto own = connector::ReadCurveSecretKeyFile(argv[5]);
    auto server = connector::ReadCurveKeyListFile(argv[6]);
    if (!own.ok() || !server.ok()) {
      std::fprintf(stderr, "bad key files: %s %s\n", own.status().ToString().c_str(),
                   server.status().ToString().c_str());
      return 2;
    }
    curve = CurveClientKeys{own->public_key, own->secret_key, (*server)[0].key};
  }
  auto fetch = [&](const std::string& bytes) {
    return FetchOverSideChannel(host, port, bytes, Deadline::AfterMs(3000), curve);
  };
  if (mode == "raw-garbage") return RawGarbage(host, port);
  if (mode == "garbage") {
    std::string junk;
    std::mt19937 rng(11);
    for (int i = 0; i < 37; ++i) junk.push_back(static_cast<char>(rng()));
    return PrintReply(fetch(junk), "");
  }
  std::string valid = EncodeHandshakeRequest(0, token);
  if (mode == "truncated") return PrintReply(fetch(valid.substr(0, valid.size() / 2)), "");
  if (mode == "newer-version")
    return PrintReply(fetch(Envelope(kHandshakeVersion + 1, "get_meta")), "");
  if (mode == "wrong-op") return PrintReply(fetch(Envelope(kHandshakeVersion, "get_blocks")), "");
  if (mode == "multi-frame") return MultiFrame(host, port, valid);
  if (mode == "get-meta") {
    auto reply = fetch(valid);
    return PrintReply(reply, reply.ok() ? HashOf(*reply) : "");
  }
  if (mode == "wrong-hash") return PrintReply(fetch(valid), "not-the-right-hash");
  if (mode.rfind("release:", 0) == 0) {
    auto reply = fetch(EncodeReleaseRequest(mode.substr(8), token));
    if (!reply.ok()) return Print(reply.status().ToString());
    const Status ok = DecodeOkReply(*reply).status();
    return Print(ok.ok() ? "OK" : ok.ToString());
  }
  std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
  return 2;
}
