// The socket backend's connection I/O: connecting to a peer, and the I/O thread that accepts
// connections, sends queued frames, receives frames into registered memory or buffers, answers
// requests and enforces deadlines. Design: socket_backend.cc; wire format: socket_wire.h.
//
// Thread-safety: every SocketBackend member here requires `mu_` (annotated), except IoLoop,
// which is the I/O thread's body and takes `mu_` itself around each pass.
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "kvferry/common/logging.h"
#include "kvferry/common/tsan_ignore.h"
#include "transfer/backends/socket/socket_backend.h"

namespace kvferry::transfer::sock {
namespace {

// ThreadSanitizer ignores the memory one send/recv of registered memory touches
// (common/tsan_ignore.h). These are the only two places where bytes of registered memory cross
// the socket, on behalf of a peer process; the application's accesses to that memory are
// ordered with them through that other process (it asks after it was told, over its own
// channel), which TSan cannot see. Left to TSan, each such send/recv is one "race" per word,
// symbolized and suppressed one by one: megabytes took seconds and stalled transfers past their
// deadlines. The buffers queued and parsed here (frame headers, requests) are the backend's own
// and under its mutex, where TSan still checks them.
ssize_t SendRegistered(int fd, const msghdr* msg) {
  [[maybe_unused]] TsanIgnoreScope ignore;
  return ::sendmsg(fd, msg, MSG_NOSIGNAL | MSG_DONTWAIT);
}
ssize_t RecvRegistered(int fd, void* into, size_t n) {
  [[maybe_unused]] TsanIgnoreScope ignore;
  return ::recv(fd, into, n, MSG_DONTWAIT);
}

// The I/O thread warns when it ran this much later than it asked to: it was not scheduled, or
// waited for the backend's lock (a peer then sees its transfers stall with no error here).
constexpr int64_t kLateMs = 1000;
using IoClock = std::chrono::steady_clock;

void WarnIfLate(const std::string& agent, const char* what, IoClock::time_point since,
                int64_t expected_ms) {
  const int64_t ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(IoClock::now() - since).count();
  if (ms <= expected_ms + kLateMs) return;
  KVF_LOG_WARN("transfer: agent '{}': socket I/O thread {} took {} ms (expected {} ms)", agent,
               what, ms, expected_ms);
}

}  // namespace

void SetNoDelay(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

StatusOr<int> ConnectTo(const std::string& host, uint16_t port, int64_t timeout_ms) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) return UnavailableError("resolve " + host + ": " + ::gai_strerror(rc));
  Status last = UnavailableError("no address for " + host);
  const Deadline deadline = Deadline::AfterMs(timeout_ms);
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
      last = UnavailableError(Errno("connect"));
      ::close(fd);
      continue;
    }
    pollfd p{fd, POLLOUT, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(0, deadline.RemainingMs())));
    int err = 0;
    socklen_t len = sizeof(err);
    if (ready == 1 && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0) {
      ::freeaddrinfo(res);
      SetNoDelay(fd);
      return fd;
    }
    last = ready == 0 ? DeadlineExceededError("connect to " + host + ":" + std::to_string(port) +
                                              " timed out")
                      : UnavailableError("connect to " + host + ":" + std::to_string(port) + ": " +
                                         std::strerror(err != 0 ? err : errno));
    ::close(fd);
  }
  ::freeaddrinfo(res);
  return last;
}

// ---- connection and transfer failures ------------------------------------------------------

void SocketBackend::CloseConn(uint64_t id, const Status& why) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  ::close(it->second.fd);
  if (it->second.outbound) {
    const uint32_t peer_id = it->second.peer_id;
    auto pit = peers_.find(peer_id);
    if (pit != peers_.end()) {
      pit->second.failed = true;
      pit->second.why =
          why.code() == StatusCode::kAborted ? UnavailableError(std::string(why.message())) : why;
    }
    for (auto x = xfers_.begin(); x != xfers_.end();) {
      if (x->second.peer_id == peer_id) {
        x->second.completion->Finish(why);
        x = xfers_.erase(x);
      } else {
        ++x;
      }
    }
  }
  conns_.erase(it);
}

bool SocketBackend::HasQueued(const Conn& c, uint64_t token) {
  for (const OutItem& o : c.out) {
    if (o.token == token && o.type == kWriteData) return true;
  }
  return false;
}

void SocketBackend::FailXfer(uint64_t token, Status s) {
  auto it = xfers_.find(token);
  if (it == xfers_.end()) return;
  it->second.completion->Finish(std::move(s));
  xfers_.erase(it);
}

bool SocketBackend::ProtocolError(Conn& c, Refusal why, const std::string& what) {
  refused_.Count(why);
  KVF_LOG_WARN("transfer: agent '{}': closing a connection ({}): {}", ctx_.agent_name,
               RefusalName(why), what);
  CloseConn(c.id, UnavailableError("connection to peer broke the protocol: " + what));
  return false;
}

// ---- sending and receiving -----------------------------------------------------------------

bool SocketBackend::Flush(Conn& c) {
  while (!c.out.empty()) {
    OutItem& item = c.out.front();
    iovec iov[2];
    int n = 0;
    if (item.sent < item.head.size()) {
      iov[n++] = {item.head.data() + item.sent, item.head.size() - item.sent};
      if (item.data_len > 0) iov[n++] = {const_cast<uint8_t*>(item.data), item.data_len};
    } else {
      const uint64_t off = item.sent - item.head.size();
      iov[n++] = {const_cast<uint8_t*>(item.data) + off, item.data_len - off};
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = n;
    const ssize_t w = SendRegistered(c.fd, &msg);
    if (w < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return true;
      CloseConn(c.id, UnavailableError("connection to peer failed: " + Errno("send")));
      return false;
    }
    item.sent += static_cast<uint64_t>(w);
    if (item.sent == item.total()) c.out.pop_front();
  }
  return true;
}

bool SocketBackend::ReadSome(Conn& c, std::vector<Notification>* notes) {
  uint64_t budget = kRecvBudget;
  while (budget > 0) {
    char* into;
    uint64_t want;
    if (c.mode == RecvMode::kHeader) {
      into = reinterpret_cast<char*>(&c.hdr) + c.got;
      want = sizeof(FrameHdr) - c.got;
    } else if (c.mode == RecvMode::kToMemory) {
      into = reinterpret_cast<char*>(c.dest) + c.got;
      want = c.hdr.length - c.got;
    } else if (c.mode == RecvMode::kToBuffer) {
      into = c.buf.data() + c.got;
      want = c.hdr.length - c.got;
    } else {
      into = scratch_;
      want = std::min<uint64_t>(sizeof(scratch_), c.hdr.length - c.got);
    }
    const ssize_t r = RecvRegistered(c.fd, into, std::min(want, budget));
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return true;
    if (r <= 0) {
      CloseConn(c.id, UnavailableError(r == 0 ? "connection to peer closed by the peer"
                                              : "connection to peer failed: " + Errno("recv")));
      return false;
    }
    budget -= static_cast<uint64_t>(r);
    c.got += static_cast<uint64_t>(r);
    if (c.mode == RecvMode::kHeader) {
      if (c.got < sizeof(FrameHdr)) continue;
      c.got = 0;
      if (!OnHeader(c)) return false;
      if (c.mode != RecvMode::kHeader && c.hdr.length > 0) continue;
    } else if (c.got < c.hdr.length) {
      continue;
    }
    c.got = 0;
    const RecvMode was = c.mode;
    c.mode = RecvMode::kHeader;
    if (!OnFrame(c, was, notes)) return false;
  }
  return true;
}

// ---- frame handling ------------------------------------------------------------------------

bool SocketBackend::OnHeader(Conn& c) {
  const FrameHdr& h = c.hdr;
  c.mode = RecvMode::kDiscard;
  const HeaderVerdict v = CheckHeader(h, c.outbound, c.hello_seen, secret_);
  if (v.refusal != Refusal::kNone) {
    return ProtocolError(c, v.refusal, "frame type " + std::to_string(h.type) + " refused");
  }
  switch (v.payload) {
    case Payload::kWriteData:
      OnWriteDataHeader(c);
      return true;
    case Payload::kReadData:
      OnReadDataHeader(c);
      return true;
    case Payload::kReply:
      return true;
    case Payload::kBuffer:
      break;
  }
  c.mode = RecvMode::kToBuffer;
  c.buf.assign(h.length, '\0');
  return true;
}

// Target: a segment of a WRITE lands straight in the region, or is discarded (and the write
// will be refused) if the range is not registered.
void SocketBackend::OnWriteDataHeader(Conn& c) {
  const FrameHdr& h = c.hdr;
  Refusal why = Refusal::kNone;
  uint8_t* dest = PlaceWrite(h, regions_, &why);
  if (why != Refusal::kNone) {
    refused_.Count(why);
    c.write_code.emplace(h.token, static_cast<int32_t>(StatusCode::kNotFound));
  } else {
    c.mode = RecvMode::kToMemory;
    c.dest = dest;
    c.dest_region = h.region;
  }
}

// Initiator: a segment of our READ lands straight in its local destination, or is discarded
// if the transfer is gone or the reply does not match what was asked.
void SocketBackend::OnReadDataHeader(Conn& c) {
  const FrameHdr& h = c.hdr;
  auto it = xfers_.find(h.token);
  if (it == xfers_.end()) return;  // released meanwhile: discard
  Xfer& x = it->second;
  if (x.op != XferOp::kRead || h.index >= x.segs.size() || x.segs[h.index].length != h.length ||
      x.landed[h.index]) {
    refused_.Count(Refusal::kReplyMismatch);
    FailXfer(h.token, DataLossError("read reply does not match the request"));
    return;
  }
  if (!regions_.count(x.segs[h.index].local_region)) {  // deregistered meanwhile
    FailXfer(h.token, FailedPreconditionError("local region deregistered while in flight"));
    return;
  }
  x.landed[h.index] = true;
  c.mode = RecvMode::kToMemory;
  c.dest = x.segs[h.index].local_addr;
  c.dest_token = h.token;
  c.dest_region = x.segs[h.index].local_region;
}

bool SocketBackend::OnFrame(Conn& c, RecvMode mode, std::vector<Notification>* notes) {
  const FrameHdr h = c.hdr;
  switch (h.type) {
    case kHello:
      c.hello_seen = true;
      c.peer_name = std::move(c.buf);
      KVF_LOG_DEBUG("transfer: agent '{}': connection {} is from '{}'", ctx_.agent_name, c.id,
                    c.peer_name);
      break;
    case kReadReq:
      ServeRead(c, h);
      break;
    case kNotify:
      // A write's notification only after that whole write landed (acked OK).
      if (h.token != 0 && c.ok_writes.erase(h.token) == 0) break;
      notes->push_back(Notification{c.peer_name, std::move(c.buf)});
      break;
    case kWriteData:
      OnWriteDataFrame(c, h);
      break;
    case kReadData: {
      if (mode != RecvMode::kToMemory) break;  // discarded
      auto it = xfers_.find(h.token);
      if (it == xfers_.end() || --it->second.remaining > 0) break;
      Finished(h.token);
      break;
    }
    case kReadErr:
    case kWriteAck:
      OnReply(c, h);
      break;
    default:
      break;
  }
  return true;
}

void SocketBackend::OnWriteDataFrame(Conn& c, const FrameHdr& h) {
  uint32_t& seen = c.writes_seen[h.token];
  if (++seen < h.count) return;
  c.writes_seen.erase(h.token);
  int32_t code = 0;
  if (auto e = c.write_code.find(h.token); e != c.write_code.end()) {
    code = e->second;
    c.write_code.erase(e);
  } else {
    c.ok_writes.insert(h.token);
    if (c.ok_writes.size() > kMaxOkWrites) c.ok_writes.erase(c.ok_writes.begin());
  }
  FrameHdr ack{};
  ack.type = kWriteAck;
  ack.token = h.token;
  ack.code = code;
  Queue(c, Control(Pod(ack), kWriteAck));
}

void SocketBackend::OnReply(Conn& c, const FrameHdr& h) {
  auto it = xfers_.find(h.token);
  if (it == xfers_.end()) return;  // released or failed meanwhile
  const bool is_read = h.type == kReadErr;
  const char* mismatch = nullptr;
  if ((it->second.op == XferOp::kRead) != is_read) {
    mismatch = "peer answered with the wrong reply kind";
  } else if (is_read && h.code == 0) {
    mismatch = "peer refused the read without a reason";
  } else if (h.code == 0 && HasQueued(c, h.token)) {
    mismatch = "peer acknowledged a write before receiving it";
  }
  if (mismatch != nullptr) {
    refused_.Count(Refusal::kReplyMismatch);
    FailXfer(h.token, DataLossError(mismatch));
  } else if (h.code != 0) {
    FailXfer(h.token, Status(static_cast<StatusCode>(h.code),
                             is_read ? "peer rejected the read (unknown region or range)"
                                     : "peer rejected the write (unknown region or range)"));
  } else {
    Finished(h.token);
  }
}

void SocketBackend::Finished(uint64_t token) {
  auto it = xfers_.find(token);
  if (it == xfers_.end()) return;
  Xfer x = std::move(it->second);
  xfers_.erase(it);
  if (!x.notification.empty()) {
    auto c = ConnOfPeer(x.peer_id);
    if (!c.ok()) {
      x.completion->Finish(c.status().WithContext("data landed, notification failed"));
      return;
    }
    QueueNotify(**c, x.notification, 0);
  }
  x.completion->Finish(Status::Ok());
}

void SocketBackend::ServeRead(Conn& c, const FrameHdr& h) {
  KVF_LOG_DEBUG("transfer: agent '{}': serving READ {} ({} segments) to '{}'", ctx_.agent_name,
                h.token, h.count, c.peer_name);
  std::vector<ReadEntry> es(h.count);
  std::memcpy(es.data(), c.buf.data(), h.length);
  if (const Refusal why = CheckReadEntries(es.data(), h.count, regions_); why != Refusal::kNone) {
    refused_.Count(why);
    FrameHdr err{};
    err.type = kReadErr;
    err.token = h.token;
    err.code = static_cast<int32_t>(StatusCode::kNotFound);
    Queue(c, Control(Pod(err), kReadErr));
    return;
  }
  for (uint32_t i = 0; i < h.count; ++i) {
    const ReadEntry& e = es[i];
    FrameHdr d{};
    d.type = kReadData;
    d.token = h.token;
    d.index = i;
    d.length = e.length;
    Queue(c, Data(Pod(d), kReadData, FindRegion(e.region, e.offset, e.length)->base + e.offset,
                  e.length, h.token, e.region));
  }
}

// ---- the I/O thread ------------------------------------------------------------------------

void SocketBackend::AcceptAll() {
  while (true) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    SetNoDelay(fd);
    const Conn& c = NewConn(fd, /*outbound=*/false);
    KVF_LOG_DEBUG("transfer: agent '{}': accepted connection {}", ctx_.agent_name, c.id);
  }
}

void SocketBackend::CheckDeadlines() {
  std::set<uint32_t> timed_out;
  for (auto it = xfers_.begin(); it != xfers_.end();) {
    if (!it->second.completion->deadline().Expired()) {
      ++it;
      continue;
    }
    timed_out.insert(it->second.peer_id);
    it->second.completion->Finish(DeadlineExceededError(
        "transfer did not complete before its deadline (peer hung or too slow)"));
    it = xfers_.erase(it);
  }
  for (uint32_t peer_id : timed_out) {
    auto pit = peers_.find(peer_id);
    if (pit == peers_.end()) continue;
    KVF_LOG_WARN("transfer: agent '{}': closing connection to '{}': a transfer timed out",
                 ctx_.agent_name, pit->second.name);
    CloseConn(pit->second.conn,
              UnavailableError("connection closed after a transfer to this peer timed out"));
  }
}

void SocketBackend::IoLoop() {
  std::vector<pollfd> pfds;
  std::vector<uint64_t> ids;
  std::vector<Notification> notes;
  while (true) {
    int timeout_ms;
    pfds.clear();
    ids.clear();
    {
      MutexLock l(&mu_);
      if (stop_) return;
      pfds.push_back({listen_fd_, POLLIN, 0});
      pfds.push_back({wake_fd_, POLLIN, 0});
      for (auto& [id, c] : conns_) {
        pfds.push_back({c.fd, static_cast<int16_t>(POLLIN | (c.out.empty() ? 0 : POLLOUT)), 0});
        ids.push_back(id);
      }
      timeout_ms = xfers_.empty() ? 100 : 5;
    }
    const IoClock::time_point polled = IoClock::now();
    if (::poll(pfds.data(), pfds.size(), timeout_ms) < 0 && errno != EINTR) {
      KVF_LOG_ERROR("transfer: socket backend poll: {}", std::strerror(errno));
    }
    WarnIfLate(ctx_.agent_name, "poll", polled, timeout_ms);
    if (pfds[1].revents & POLLIN) {
      uint64_t v;
      [[maybe_unused]] ssize_t r = ::read(wake_fd_, &v, sizeof(v));
    }
    {
      const IoClock::time_point locking = IoClock::now();
      MutexLock l(&mu_);
      WarnIfLate(ctx_.agent_name, "waiting for its lock", locking, 0);
      if (pfds[0].revents & POLLIN) AcceptAll();
      for (size_t i = 0; i < ids.size(); ++i) {
        const int16_t ev = pfds[i + 2].revents;
        auto it = conns_.find(ids[i]);
        if (it == conns_.end()) continue;
        Conn& c = it->second;
        if ((ev & (POLLIN | POLLHUP | POLLERR)) && !ReadSome(c, &notes)) continue;
        if (!c.out.empty()) Flush(c);  // also replies queued by ReadSome
      }
      CheckDeadlines();
    }
    for (Notification& n : notes) ctx_.deliver_notification(std::move(n));
    notes.clear();
  }
}

}  // namespace kvferry::transfer::sock
