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
// its own registered regions, and a connection must open with the secret from the metadata.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "kvferry/common/logging.h"
#include "transfer/backend.h"
#include "transfer/backends/socket/socket_wire.h"

namespace kvferry::transfer {
namespace {

using namespace sock;  // NOLINT: the wire vocabulary

constexpr int64_t kConnectTimeoutMs = 5000;
constexpr uint64_t kRecvBudget = 16ull << 20;  // bytes per connection per pass (fairness)
constexpr size_t kMaxOkWrites = 4096;          // remembered per connection (notify match)

std::string Pod(const FrameHdr& h) {
  return std::string(reinterpret_cast<const char*>(&h), sizeof(h));
}

std::string Errno(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

// One message queued on a connection: `head` (header and any owned payload), then `data_len`
// bytes borrowed from registered memory at `data` (or, once that memory may no longer be read,
// from `copy`).
struct OutItem {
  std::string head;
  const uint8_t* data = nullptr;
  uint64_t data_len = 0;
  uint64_t sent = 0;
  uint64_t token = 0;   // the initiator transfer this belongs to (Cancel), else 0
  uint32_t region = 0;  // the local region `data` points into (DeregisterMemory), else 0
  FrameType type = kHello;
  std::vector<uint8_t> copy;  // heap storage: stays put when the deque moves the item
  uint64_t total() const { return head.size() + data_len; }
};

OutItem Control(std::string head, FrameType type, uint64_t token = 0) {
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

enum class RecvMode { kHeader, kToMemory, kToBuffer, kDiscard };

struct Conn {
  uint64_t id = 0;
  int fd = -1;
  bool outbound = false;
  uint32_t peer_id = 0;   // outbound: the peer it serves
  std::string peer_name;  // inbound: from the hello
  bool hello_seen = false;
  std::deque<OutItem> out;
  RecvMode mode = RecvMode::kHeader;
  FrameHdr hdr{};
  uint64_t got = 0;
  uint8_t* dest = nullptr;                   // kToMemory
  std::string buf;                           // kToBuffer
  uint32_t dest_region = 0;                  // inbound write landing in this region
  uint64_t dest_token = 0;                   // outbound read landing for this transfer
  std::map<uint64_t, uint32_t> writes_seen;  // inbound: token -> segments received
  std::map<uint64_t, int32_t> write_code;    // inbound: token -> first error
  std::set<uint64_t> ok_writes;              // inbound: acked OK, notification not yet seen
};

struct Xfer {
  uint32_t peer_id = 0;
  XferOp op = XferOp::kRead;
  std::vector<Segment> segs;
  std::string notification;
  std::shared_ptr<Completion> completion;
  uint32_t remaining = 0;
  std::vector<bool> landed;  // READ: segments received (a repeated index is a protocol error)
};

struct PeerInfo {
  std::string name;
  uint64_t conn = 0;
  bool failed = false;
  Status why;
};

struct Region {
  uint8_t* base = nullptr;
  uint64_t length = 0;
};

struct Blob {
  std::string host;
  uint16_t port = 0;
  uint64_t secret = 0;
};

std::string EncodeBlob(const Blob& b) {
  std::string s;
  auto put = [&s](const auto& v) { s.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  put(kWireMagic);
  put(kWireVersion);
  put(b.port);
  put(b.secret);
  put(static_cast<uint16_t>(b.host.size()));
  s += b.host;
  return s;
}

StatusOr<Blob> DecodeBlob(std::string_view s) {
  uint32_t magic = 0, version = 0;
  uint16_t host_len = 0;
  Blob b;
  constexpr size_t kFixed = 4 + 4 + 2 + 8 + 2;
  if (s.size() < kFixed) return InvalidArgumentError("socket metadata: truncated");
  const char* p = s.data();
  std::memcpy(&magic, p, 4);
  std::memcpy(&version, p + 4, 4);
  std::memcpy(&b.port, p + 8, 2);
  std::memcpy(&b.secret, p + 10, 8);
  std::memcpy(&host_len, p + 18, 2);
  if (magic != kWireMagic) return InvalidArgumentError("socket metadata: bad magic");
  if (version != kWireVersion) {
    return InvalidArgumentError("socket metadata: version " + std::to_string(version) +
                                ", this build speaks " + std::to_string(kWireVersion));
  }
  if (s.size() != kFixed + host_len || host_len == 0 || b.port == 0) {
    return InvalidArgumentError("socket metadata: bad address");
  }
  b.host.assign(p + kFixed, host_len);
  return b;
}

#if defined(__SANITIZE_THREAD__)
#define KVF_SOCKET_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define KVF_SOCKET_TSAN 1
#endif
#endif
#ifdef KVF_SOCKET_TSAN
extern "C" void __tsan_ignore_thread_begin();
extern "C" void __tsan_ignore_thread_end();
#endif

// Ignores ThreadSanitizer's view of the memory one send/recv touches. These are the only two
// places where bytes of registered memory cross the socket, on behalf of a peer process; the
// application's accesses to that memory are ordered with them through that other process (it
// asks after it was told, over its own channel), which TSan cannot see. Left to TSan, each such
// send/recv is one "race" per word, symbolized and suppressed one by one: megabytes took
// seconds and stalled transfers past their deadlines. The buffers queued and parsed here (frame
// headers, requests) are the backend's own and under its mutex, where TSan still checks them.
class TsanIgnoreScope {
 public:
#ifdef KVF_SOCKET_TSAN
  TsanIgnoreScope() { __tsan_ignore_thread_begin(); }
  ~TsanIgnoreScope() { __tsan_ignore_thread_end(); }
#endif
};

ssize_t SendRegistered(int fd, const msghdr* msg) {
  [[maybe_unused]] TsanIgnoreScope ignore;
  return ::sendmsg(fd, msg, MSG_NOSIGNAL | MSG_DONTWAIT);
}
ssize_t RecvRegistered(int fd, void* into, size_t n) {
  [[maybe_unused]] TsanIgnoreScope ignore;
  return ::recv(fd, into, n, MSG_DONTWAIT);
}

void SetNoDelay(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// A non-blocking TCP connection to host:port, established within `timeout_ms`.
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

class SocketBackend final : public Backend {
 public:
  explicit SocketBackend(BackendContext ctx) : ctx_(std::move(ctx)) {}

  ~SocketBackend() override {
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

  Status Start() {
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
    if (rc != 0)
      return UnavailableError("socket backend: resolve " + host + ": " + gai_strerror(rc));
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

  Status RegisterMemory(uint32_t id, void* addr, uint64_t length) override {
    MutexLock l(&mu_);
    regions_[id] = {static_cast<uint8_t*>(addr), length};
    return Status::Ok();
  }

  Status DeregisterMemory(uint32_t id) override {
    MutexLock l(&mu_);
    if (!regions_.erase(id)) return NotFoundError("unknown region " + std::to_string(id));
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
    for (uint64_t token : failed) {
      FailXfer(token, FailedPreconditionError("local region deregistered while in flight"));
    }
    return Status::Ok();
  }

  StatusOr<std::string> LocalBlob() const override {
    return EncodeBlob({ctx_.socket.listen_host, port_, secret_});
  }

  Status AddPeer(uint32_t peer_id, const std::string& peer_name, std::string_view blob) override {
    KVF_ASSIGN_OR_RETURN(Blob b, DecodeBlob(blob));
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

  void RemovePeer(uint32_t peer_id) override {
    MutexLock l(&mu_);
    auto it = peers_.find(peer_id);
    if (it == peers_.end()) return;
    if (conns_.count(it->second.conn)) CloseConn(it->second.conn, AbortedError("peer removed"));
    peers_.erase(peer_id);
  }

  Status Post(uint32_t peer_id, XferOp op, std::vector<Segment> segments, std::string notification,
              std::shared_ptr<Completion> completion) override {
    MutexLock l(&mu_);
    KVF_ASSIGN_OR_RETURN(Conn * c, ConnOfPeer(peer_id));
    for (const Segment& s : segments) {
      if (!regions_.count(s.local_region)) {  // deregistered since the Agent checked
        return NotFoundError("local region " + std::to_string(s.local_region) +
                             " is not registered");
      }
    }
    const uint32_t n = static_cast<uint32_t>(segments.size());
    if (op == XferOp::kRead && uint64_t{n} * sizeof(ReadEntry) > kMaxControlPayload) {
      return InvalidArgumentError("a READ of " + std::to_string(n) +
                                  " segments is over the socket backend's request limit");
    }
    const uint64_t token = next_token_++;
    if (op == XferOp::kRead) {
      std::string entries;
      entries.reserve(n * sizeof(ReadEntry));
      for (const Segment& s : segments) {
        ReadEntry e{s.remote_offset, s.length, s.remote_region, 0};
        entries.append(reinterpret_cast<const char*>(&e), sizeof(e));
      }
      FrameHdr h{};
      h.type = kReadReq;
      h.token = token;
      h.count = n;
      h.length = entries.size();
      Queue(*c, Control(Pod(h) + entries, kReadReq, token));
    } else {
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
        Queue(*c, Data(Pod(h), kWriteData, s.local_addr, s.length, token, s.local_region));
      }
      // Behind the data on the same stream: the target sees it only after the bytes landed,
      // and drops it if the write failed.
      if (!notification.empty()) QueueNotify(*c, notification, token);
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

  void Cancel(const std::shared_ptr<Completion>& completion) override {
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

  Status SendNotification(uint32_t peer_id, std::string message) override {
    MutexLock l(&mu_);
    KVF_ASSIGN_OR_RETURN(Conn * c, ConnOfPeer(peer_id));
    QueueNotify(*c, message, 0);
    Flush(*c);
    Wake();
    return Status::Ok();
  }

 private:
  Conn& NewConn(int fd, bool outbound) REQUIRES(mu_) {
    const uint64_t id = next_conn_++;
    Conn& c = conns_[id];
    c.id = id;
    c.fd = fd;
    c.outbound = outbound;
    return c;
  }

  StatusOr<Conn*> ConnOfPeer(uint32_t peer_id) REQUIRES(mu_) {
    auto it = peers_.find(peer_id);
    if (it == peers_.end()) return NotFoundError("unknown peer " + std::to_string(peer_id));
    if (it->second.failed) return it->second.why;
    auto c = conns_.find(it->second.conn);
    if (c == conns_.end())
      return UnavailableError("connection to '" + it->second.name + "' closed");
    return &c->second;
  }

  void Queue(Conn& c, OutItem item) REQUIRES(mu_) { c.out.push_back(std::move(item)); }

  void QueueNotify(Conn& c, const std::string& message, uint64_t token) REQUIRES(mu_) {
    FrameHdr h{};
    h.type = kNotify;
    h.token = token;
    h.length = message.size();
    Queue(c, Control(Pod(h) + message, kNotify, token));
  }

  void Wake() {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t w = ::write(wake_fd_, &one, sizeof(one));
  }

  const Region* FindRegion(uint32_t id, uint64_t offset, uint64_t length) REQUIRES(mu_) {
    auto it = regions_.find(id);
    if (it == regions_.end() || offset > it->second.length || length > it->second.length - offset) {
      return nullptr;
    }
    return &it->second;
  }

  // Closes a connection; an outbound one fails its peer and every transfer to it with `why`.
  void CloseConn(uint64_t id, const Status& why) REQUIRES(mu_) {
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

  // True if data frames of transfer `token` still wait in `c`'s send queue.
  static bool HasQueued(const Conn& c, uint64_t token) {
    for (const OutItem& o : c.out) {
      if (o.token == token && o.type == kWriteData) return true;
    }
    return false;
  }

  void FailXfer(uint64_t token, Status s) REQUIRES(mu_) {
    auto it = xfers_.find(token);
    if (it == xfers_.end()) return;
    it->second.completion->Finish(std::move(s));
    xfers_.erase(it);
  }

  // Sends what the socket takes now. False if the connection was closed.
  bool Flush(Conn& c) REQUIRES(mu_) {
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

  // Reads what the socket has (up to kRecvBudget). False if the connection was closed.
  bool ReadSome(Conn& c, std::vector<Notification>* notes) REQUIRES(mu_) {
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

  bool ProtocolError(Conn& c, const std::string& what) REQUIRES(mu_) {
    KVF_LOG_WARN("transfer: agent '{}': closing a connection: {}", ctx_.agent_name, what);
    CloseConn(c.id, UnavailableError("connection to peer broke the protocol: " + what));
    return false;
  }

  // A header arrived: choose where its payload goes. False if the connection was closed.
  bool OnHeader(Conn& c) REQUIRES(mu_) {
    const FrameHdr& h = c.hdr;
    c.mode = RecvMode::kDiscard;
    if (!c.outbound && !c.hello_seen && h.type != kHello) {
      return ProtocolError(c, "no hello");
    }
    switch (h.type) {
      case kHello:
        if (c.outbound || c.hello_seen || h.code != static_cast<int32_t>(kWireMagic) ||
            h.offset != kWireVersion || h.token != secret_ || h.length > 4096) {
          return ProtocolError(c, "bad hello (version, byte order or secret)");
        }
        break;
      case kReadReq:
        if (c.outbound || h.count == 0 || h.length != uint64_t{h.count} * sizeof(ReadEntry) ||
            h.length > kMaxControlPayload) {
          return ProtocolError(c, "bad read request");
        }
        break;
      case kNotify:
        if (c.outbound || h.length > kMaxControlPayload) return ProtocolError(c, "bad notify");
        break;
      case kWriteData: {
        if (c.outbound || h.count == 0 || h.index >= h.count) {
          return ProtocolError(c, "bad write header");
        }
        const Region* r = FindRegion(h.region, h.offset, h.length);
        if (r == nullptr) {
          c.write_code.emplace(h.token, static_cast<int32_t>(StatusCode::kNotFound));
        } else {
          c.mode = RecvMode::kToMemory;
          c.dest = r->base + h.offset;
          c.dest_region = h.region;
        }
        return true;
      }
      case kReadData: {
        if (!c.outbound) return ProtocolError(c, "read data on an inbound connection");
        auto it = xfers_.find(h.token);
        if (it == xfers_.end()) return true;  // released meanwhile: discard
        Xfer& x = it->second;
        if (x.op != XferOp::kRead || h.index >= x.segs.size() ||
            x.segs[h.index].length != h.length || x.landed[h.index]) {
          FailXfer(h.token, DataLossError("read reply does not match the request"));
          return true;
        }
        if (!regions_.count(x.segs[h.index].local_region)) {  // deregistered meanwhile
          FailXfer(h.token, FailedPreconditionError("local region deregistered while in flight"));
          return true;
        }
        x.landed[h.index] = true;
        c.mode = RecvMode::kToMemory;
        c.dest = x.segs[h.index].local_addr;
        c.dest_token = h.token;
        c.dest_region = x.segs[h.index].local_region;
        return true;
      }
      case kReadErr:
      case kWriteAck:
        if (!c.outbound || h.length != 0) return ProtocolError(c, "bad reply");
        return true;
      default:
        return ProtocolError(c, "unknown frame type " + std::to_string(h.type));
    }
    c.mode = RecvMode::kToBuffer;
    c.buf.assign(h.length, '\0');
    return true;
  }

  // A whole frame (header and payload) arrived. False if the connection was closed.
  bool OnFrame(Conn& c, RecvMode mode, std::vector<Notification>* notes) REQUIRES(mu_) {
    const FrameHdr h = c.hdr;
    switch (h.type) {
      case kHello:
        c.hello_seen = true;
        c.peer_name = std::move(c.buf);
        break;
      case kReadReq:
        ServeRead(c, h);
        break;
      case kNotify:
        // A write's notification only after that whole write landed (acked OK).
        if (h.token != 0 && c.ok_writes.erase(h.token) == 0) break;
        notes->push_back(Notification{c.peer_name, std::move(c.buf)});
        break;
      case kWriteData: {
        uint32_t& seen = c.writes_seen[h.token];
        if (++seen < h.count) break;
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
        break;
      }
      case kReadData: {
        if (mode != RecvMode::kToMemory) break;  // discarded
        auto it = xfers_.find(h.token);
        if (it == xfers_.end() || --it->second.remaining > 0) break;
        Finished(h.token);
        break;
      }
      case kReadErr:
      case kWriteAck: {
        auto it = xfers_.find(h.token);
        if (it == xfers_.end()) break;  // released or failed meanwhile
        const bool is_read = h.type == kReadErr;
        if ((it->second.op == XferOp::kRead) != is_read) {
          FailXfer(h.token, DataLossError("peer answered with the wrong reply kind"));
        } else if (is_read && h.code == 0) {
          FailXfer(h.token, DataLossError("peer refused the read without a reason"));
        } else if (h.code != 0) {
          FailXfer(h.token, Status(static_cast<StatusCode>(h.code),
                                   is_read ? "peer rejected the read (unknown region or range)"
                                           : "peer rejected the write (unknown region or range)"));
        } else if (HasQueued(c, h.token)) {
          FailXfer(h.token, DataLossError("peer acknowledged a write before receiving it"));
        } else {
          Finished(h.token);
        }
        break;
      }
      default:
        break;
    }
    return true;
  }

  // The bytes of a transfer are visible at their destination: notify (READ), then finish.
  void Finished(uint64_t token) REQUIRES(mu_) {
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

  void ServeRead(Conn& c, const FrameHdr& h) REQUIRES(mu_) {
    std::vector<ReadEntry> es(h.count);
    std::memcpy(es.data(), c.buf.data(), h.length);
    for (const ReadEntry& e : es) {
      if (FindRegion(e.region, e.offset, e.length) == nullptr) {
        FrameHdr err{};
        err.type = kReadErr;
        err.token = h.token;
        err.code = static_cast<int32_t>(StatusCode::kNotFound);
        Queue(c, Control(Pod(err), kReadErr));
        return;
      }
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

  void AcceptAll() REQUIRES(mu_) {
    while (true) {
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;
      SetNoDelay(fd);
      NewConn(fd, /*outbound=*/false);
    }
  }

  void CheckDeadlines() REQUIRES(mu_) {
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

  void IoLoop() {
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
      if (::poll(pfds.data(), pfds.size(), timeout_ms) < 0 && errno != EINTR) {
        KVF_LOG_ERROR("transfer: socket backend poll: {}", std::strerror(errno));
      }
      if (pfds[1].revents & POLLIN) {
        uint64_t v;
        [[maybe_unused]] ssize_t r = ::read(wake_fd_, &v, sizeof(v));
      }
      {
        MutexLock l(&mu_);
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

  const BackendContext ctx_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;
  uint16_t port_ = 0;
  uint64_t secret_ = 0;
  std::thread io_;

  Mutex mu_;
  bool stop_ GUARDED_BY(mu_) = false;
  uint64_t next_conn_ GUARDED_BY(mu_) = 1;
  uint64_t next_token_ GUARDED_BY(mu_) = 1;
  std::map<uint64_t, Conn> conns_ GUARDED_BY(mu_);
  std::map<uint32_t, PeerInfo> peers_ GUARDED_BY(mu_);
  std::map<uint32_t, Region> regions_ GUARDED_BY(mu_);
  std::map<uint64_t, Xfer> xfers_ GUARDED_BY(mu_);
  char scratch_[64 << 10] GUARDED_BY(mu_);
};

}  // namespace

StatusOr<std::unique_ptr<Backend>> CreateSocketBackend(BackendContext context) {
  auto b = std::make_unique<SocketBackend>(std::move(context));
  KVF_RETURN_IF_ERROR(b->Start());
  return std::unique_ptr<Backend>(std::move(b));
}

}  // namespace kvferry::transfer
