// Socket backend (BackendKind::kSocket): kvferry's own TCP data path (docs/transfer.md,
// "Socket backend"; wire format in socket_wire.h).
//
// Why: UCX 1.13 over TCP has no one-sided lane under peer error handling, so its best path
// (active messages with rendezvous) copies every byte through user-space bounce buffers at both
// ends, and reaches about half of a plain TCP stream. Here the target send()s straight from
// registered memory and the initiator recv()s straight into the destination: one kernel copy at
// each end, as iperf3 has.
//
// Design: one listener and one I/O thread per agent, polling the listener, an eventfd (wake-up)
// and every connection, all non-blocking. Callers (Post, Cancel, ...) take `mu_`, queue frames,
// try to send at once, and wake the I/O thread; the I/O thread takes `mu_` to move bytes, so a
// Cancel or DeregisterMemory that returns is never followed by a byte landing in, or read from,
// memory the caller may now free. Every in-flight transfer has its deadline, checked at least
// every 5 ms; on expiry the transfer fails with DeadlineExceeded and its connection is closed
// (bytes of that transfer must not land later). A closed or reset connection fails the peer's
// transfers with Unavailable at once (a dead process's sockets are closed by its kernel; a
// hung one is caught by the deadline). A target checks every (region, offset, length) against
// its own registered regions, and a connection must open with the secret from the metadata;
// whatever a receiver refuses (socket_frame.h) is counted by reason (Stats).
#include "transfer/backends/socket/socket_backend.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "kvferry/common/logging.h"
#include "transfer/backends/socket/socket_blob.h"

namespace kvferry::transfer::sock {

std::string Pod(const FrameHdr& h) {
  return std::string(reinterpret_cast<const char*>(&h), sizeof(h));
}

std::string Errno(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

OutItem Control(std::string head, FrameType type, uint64_t token) {
  OutItem item;
  item.head = std::move(head);
  item.type = type;
  item.token = token;
  return item;
}

OutItem Data(std::string head, FrameType type, const uint8_t* data, uint64_t length, uint64_t token,
             uint32_t region) {
  OutItem item = Control(std::move(head), type, token);
  item.data = data;
  item.data_len = length;
  item.region = region;
  return item;
}

// ---- start / stop --------------------------------------------------------------------------

SocketBackend::~SocketBackend() {
  {
    MutexLock l(&mu_);
    stop_ = true;
  }
  Wake();
  if (io_.joinable()) io_.join();
  MutexLock l(&mu_);
  for (auto& [token, x] : xfers_) x.completion->Finish(AbortedError("transfer agent stopped"));
  xfers_.clear();
  for (auto& [id, c] : conns_) ::close(c.fd);
  conns_.clear();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

Status SocketBackend::Start() {
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) return UnavailableError(Errno("eventfd"));
  std::random_device rd;
  secret_ = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const std::string& host = ctx_.socket.listen_host;
  const int rc =
      ::getaddrinfo(host.c_str(), std::to_string(ctx_.socket.listen_port).c_str(), &hints, &res);
  if (rc != 0) return UnavailableError("socket backend: resolve " + host + ": " + gai_strerror(rc));
  for (addrinfo* a = res; a != nullptr && listen_fd_ < 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 128) == 0) {
      listen_fd_ = fd;
    } else {
      ::close(fd);
    }
  }
  ::freeaddrinfo(res);
  if (listen_fd_ < 0) {
    return UnavailableError("socket backend: cannot listen on " + host + ":" +
                            std::to_string(ctx_.socket.listen_port));
  }
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                           : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  io_ = std::thread([this] { IoLoop(); });
  KVF_LOG_INFO("transfer: agent '{}' (socket backend) listening on {}:{}", ctx_.agent_name, host,
               port_);
  return Status::Ok();
}

// ---- memory and metadata -------------------------------------------------------------------

Status SocketBackend::RegisterMemory(uint32_t id, void* addr, uint64_t length) {
  MutexLock l(&mu_);
  regions_[id] = {static_cast<uint8_t*>(addr), length};
  return Status::Ok();
}

Status SocketBackend::DeregisterMemory(uint32_t id) {
  MutexLock l(&mu_);
  if (!regions_.erase(id)) return NotFoundError("unknown region " + std::to_string(id));
  const std::set<uint64_t> failed = DetachRegion(id);
  DropUnsentRequests(failed);
  for (uint64_t token : failed) {
    FailXfer(token, FailedPreconditionError("local region deregistered while in flight"));
  }
  return Status::Ok();
}

std::set<uint64_t> SocketBackend::DetachRegion(uint32_t id) {
  std::set<uint64_t> failed;  // our transfers that lost their local memory
  for (auto& [cid, c] : conns_) {
    // Bytes landing in the region: the rest is discarded, and that transfer fails.
    if (c.mode == RecvMode::kToMemory && c.dest_region == id) {
      c.mode = RecvMode::kDiscard;
      if (c.outbound) {
        failed.insert(c.dest_token);
      } else {
        c.write_code.emplace(c.hdr.token, static_cast<int32_t>(StatusCode::kNotFound));
      }
    }
    for (auto o = c.out.begin(); o != c.out.end();) {
      if (o->region != id || o->data == nullptr) {
        ++o;
        continue;
      }
      o->region = 0;
      if (o->sent > 0) {
        // Started: the frame must be finished; its bytes are copied while still valid.
        o->copy.assign(o->data, o->data + o->data_len);
        o->data = o->copy.data();
        ++o;
      } else if (o->type == kReadData) {
        // A read we serve: it becomes an error for the initiator's transfer.
        FrameHdr h{};
        h.type = kReadErr;
        h.token = o->token;
        h.code = static_cast<int32_t>(StatusCode::kNotFound);
        *o = Control(Pod(h), kReadErr);
        ++o;
      } else {
        failed.insert(o->token);  // a write of ours: dropped, the transfer fails
        o = c.out.erase(o);
      }
    }
  }
  // Every transfer of ours with a segment in the region fails now (a READ whose reply has
  // not come yet must not land later), and loses its unsent frames, its notification too.
  for (const auto& [token, x] : xfers_) {
    for (const Segment& seg : x.segs) {
      if (seg.local_region == id) failed.insert(token);
    }
  }
  return failed;
}

void SocketBackend::DropUnsentRequests(const std::set<uint64_t>& failed) {
  for (auto& [cid, c] : conns_) {
    if (c.mode == RecvMode::kToMemory && c.outbound && failed.count(c.dest_token)) {
      c.mode = RecvMode::kDiscard;
    }
    for (auto o = c.out.begin(); o != c.out.end();) {
      // Only our own requests (outbound): replies we serve carry the peer's tokens.
      if (c.outbound && o->sent == 0 && o->token != 0 && failed.count(o->token)) {
        o = c.out.erase(o);
      } else {
        ++o;
      }
    }
  }
}

StatusOr<std::string> SocketBackend::LocalBlob() const {
  return EncodeSocketBlob({ctx_.socket.listen_host, port_, secret_});
}

// ---- peers ---------------------------------------------------------------------------------

Status SocketBackend::AddPeer(uint32_t peer_id, const std::string& peer_name,
                              std::string_view blob) {
  KVF_ASSIGN_OR_RETURN(SocketBlob b, DecodeSocketBlob(blob));
  KVF_ASSIGN_OR_RETURN(int fd, ConnectTo(b.host, b.port, kConnectTimeoutMs));
  MutexLock l(&mu_);
  Conn& c = NewConn(fd, /*outbound=*/true);
  c.peer_id = peer_id;
  peers_[peer_id] = PeerInfo{peer_name, c.id, false, Status::Ok()};
  FrameHdr h{};
  h.type = kHello;
  h.code = static_cast<int32_t>(kWireMagic);
  h.offset = kWireVersion;
  h.token = b.secret;
  h.length = ctx_.agent_name.size();
  Queue(c, Control(Pod(h) + ctx_.agent_name, kHello));
  Flush(c);
  Wake();
  KVF_LOG_INFO("transfer: agent '{}' connected to '{}' (socket backend, {}:{})", ctx_.agent_name,
               peer_name, b.host, b.port);
  return Status::Ok();
}

void SocketBackend::RemovePeer(uint32_t peer_id) {
  MutexLock l(&mu_);
  auto it = peers_.find(peer_id);
  if (it == peers_.end()) return;
  if (conns_.count(it->second.conn)) CloseConn(it->second.conn, AbortedError("peer removed"));
  peers_.erase(peer_id);
}

// ---- transfers and notifications -----------------------------------------------------------

Status SocketBackend::Post(uint32_t peer_id, XferOp op, std::vector<Segment> segments,
                           std::string notification, std::shared_ptr<Completion> completion) {
  MutexLock l(&mu_);
  KVF_ASSIGN_OR_RETURN(Conn * c, ConnOfPeer(peer_id));
  for (const Segment& s : segments) {
    if (!regions_.count(s.local_region)) {  // deregistered since the Agent checked
      return NotFoundError("local region " + std::to_string(s.local_region) + " is not registered");
    }
  }
  const uint32_t n = static_cast<uint32_t>(segments.size());
  if (op == XferOp::kRead && uint64_t{n} * sizeof(ReadEntry) > kMaxControlPayload) {
    return InvalidArgumentError("a READ of " + std::to_string(n) +
                                " segments is over the socket backend's request limit");
  }
  const uint64_t token = next_token_++;
  if (op == XferOp::kRead) {
    QueueRead(*c, token, segments);
  } else {
    QueueWrite(*c, token, segments, notification);
  }
  xfers_[token] = Xfer{peer_id,
                       op,
                       std::move(segments),
                       op == XferOp::kRead ? std::move(notification) : std::string(),
                       std::move(completion),
                       n,
                       std::vector<bool>(op == XferOp::kRead ? n : 0, false)};
  Flush(*c);
  Wake();
  return Status::Ok();
}

void SocketBackend::QueueRead(Conn& c, uint64_t token, const std::vector<Segment>& segments) {
  std::string entries;
  entries.reserve(segments.size() * sizeof(ReadEntry));
  for (const Segment& s : segments) {
    ReadEntry e{s.remote_offset, s.length, s.remote_region, 0};
    entries.append(reinterpret_cast<const char*>(&e), sizeof(e));
  }
  FrameHdr h{};
  h.type = kReadReq;
  h.token = token;
  h.count = static_cast<uint32_t>(segments.size());
  h.length = entries.size();
  Queue(c, Control(Pod(h) + entries, kReadReq, token));
}

void SocketBackend::QueueWrite(Conn& c, uint64_t token, const std::vector<Segment>& segments,
                               const std::string& notification) {
  const uint32_t n = static_cast<uint32_t>(segments.size());
  for (uint32_t i = 0; i < n; ++i) {
    const Segment& s = segments[i];
    FrameHdr h{};
    h.type = kWriteData;
    h.token = token;
    h.region = s.remote_region;
    h.offset = s.remote_offset;
    h.length = s.length;
    h.index = i;
    h.count = n;
    Queue(c, Data(Pod(h), kWriteData, s.local_addr, s.length, token, s.local_region));
  }
  // Behind the data on the same stream: the target sees it only after the bytes landed, and
  // drops it if the write failed.
  if (!notification.empty()) QueueNotify(c, notification, token);
}

void SocketBackend::Cancel(const std::shared_ptr<Completion>& completion) {
  MutexLock l(&mu_);
  for (auto it = xfers_.begin(); it != xfers_.end(); ++it) {
    if (it->second.completion != completion) continue;
    const uint64_t token = it->first;
    auto pit = peers_.find(it->second.peer_id);
    if (pit != peers_.end() && conns_.count(pit->second.conn)) {
      Conn& c = conns_.at(pit->second.conn);
      if (c.mode == RecvMode::kToMemory && c.dest_token == token) c.mode = RecvMode::kDiscard;
      for (auto o = c.out.begin(); o != c.out.end();) {
        if (o->token != token) {
          ++o;
        } else if (o->sent == 0) {
          o = c.out.erase(o);  // never started: the target never hears of it
        } else {
          // Started: the frame must be finished, but not from the caller's memory.
          if (o->data != nullptr) {
            o->copy.assign(o->data_len, 0);
            o->data = o->copy.data();
          }
          ++o;
        }
      }
    }
    it->second.completion->Finish(AbortedError("transfer released while in flight"));
    xfers_.erase(it);
    return;
  }
}

Status SocketBackend::SendNotification(uint32_t peer_id, std::string message) {
  MutexLock l(&mu_);
  KVF_ASSIGN_OR_RETURN(Conn * c, ConnOfPeer(peer_id));
  QueueNotify(*c, message, 0);
  Flush(*c);
  Wake();
  return Status::Ok();
}

AgentStats SocketBackend::Stats() const {
  MutexLock l(&mu_);
  AgentStats s;
  for (size_t i = 1; i < kNumRefusals; ++i) {
    const auto r = static_cast<Refusal>(i);
    s.refused_inbound.emplace(std::string(RefusalName(r)), refused_[r]);
  }
  return s;
}

// ---- queueing ------------------------------------------------------------------------------

Conn& SocketBackend::NewConn(int fd, bool outbound) {
  const uint64_t id = next_conn_++;
  Conn& c = conns_[id];
  c.id = id;
  c.fd = fd;
  c.outbound = outbound;
  return c;
}

StatusOr<Conn*> SocketBackend::ConnOfPeer(uint32_t peer_id) {
  auto it = peers_.find(peer_id);
  if (it == peers_.end()) return NotFoundError("unknown peer " + std::to_string(peer_id));
  if (it->second.failed) return it->second.why;
  auto c = conns_.find(it->second.conn);
  if (c == conns_.end()) return UnavailableError("connection to '" + it->second.name + "' closed");
  return &c->second;
}

void SocketBackend::QueueNotify(Conn& c, const std::string& message, uint64_t token) {
  FrameHdr h{};
  h.type = kNotify;
  h.token = token;
  h.length = message.size();
  Queue(c, Control(Pod(h) + message, kNotify, token));
}

void SocketBackend::Wake() {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t w = ::write(wake_fd_, &one, sizeof(one));
}

}  // namespace kvferry::transfer::sock

namespace kvferry::transfer {
StatusOr<std::unique_ptr<Backend>> CreateSocketBackend(BackendContext context) {
  auto b = std::make_unique<sock::SocketBackend>(std::move(context));
  KVF_RETURN_IF_ERROR(b->Start());
  return std::unique_ptr<Backend>(std::move(b));
}
}  // namespace kvferry::transfer
