// Internal declarations of the socket backend (BackendKind::kSocket), shared by
// socket_backend.cc (start-up, memory, metadata, the Backend calls that queue frames) and
// socket_io.cc (connecting, the I/O thread: sending, receiving, frame handling, deadlines).
// Design: socket_backend.cc; wire format: socket_wire.h; frame checks: socket_frame.h; metadata
// blob: socket_blob.h.
//
// Thread-safety: the public Backend methods may be called from any thread. Every member below
// `mu_` is guarded by it: callers and the I/O thread both take it to touch connections,
// transfers and regions, so memory a caller frees after Cancel or DeregisterMemory returns is
// never touched again.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "kvferry/common/thread_annotations.h"
#include "transfer/backend.h"
#include "transfer/backends/socket/socket_frame.h"
#include "transfer/backends/socket/socket_wire.h"

namespace kvferry::transfer::sock {

inline constexpr int64_t kConnectTimeoutMs = 5000;
inline constexpr uint64_t kRecvBudget = 16ull << 20;  // bytes per connection per pass (fairness)
inline constexpr size_t kMaxOkWrites = 4096;          // remembered per connection (notify match)

// The bytes of a header, as sent.
std::string Pod(const FrameHdr& h);
// "what: strerror(errno)".
std::string Errno(const char* what);

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

// A frame with no borrowed bytes.
OutItem Control(std::string head, FrameType type, uint64_t token = 0);
// A frame whose payload is `length` bytes of registered memory at `data` (in local `region`).
OutItem Data(std::string head, FrameType type, const uint8_t* data, uint64_t length, uint64_t token,
             uint32_t region);

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

// A non-blocking TCP connection to host:port with TCP_NODELAY, established within `timeout_ms`.
StatusOr<int> ConnectTo(const std::string& host, uint16_t port, int64_t timeout_ms);
void SetNoDelay(int fd);

class SocketBackend final : public Backend {
 public:
  explicit SocketBackend(BackendContext ctx) : ctx_(std::move(ctx)) {}
  // Stops the I/O thread; transfers still in flight fail with Aborted.
  ~SocketBackend() override;

  // Creates the wake-up eventfd and the listener, and starts the I/O thread.
  Status Start();

  Status RegisterMemory(uint32_t id, void* addr, uint64_t length) override;
  Status DeregisterMemory(uint32_t id) override;
  StatusOr<std::string> LocalBlob() const override;
  Status AddPeer(uint32_t peer_id, const std::string& peer_name, std::string_view blob) override;
  void RemovePeer(uint32_t peer_id) override;
  Status Post(uint32_t peer_id, XferOp op, std::vector<Segment> segments, std::string notification,
              std::shared_ptr<Completion> completion) override;
  void Cancel(const std::shared_ptr<Completion>& completion) override;
  Status SendNotification(uint32_t peer_id, std::string message) override;
  // refused_inbound: every reason of socket_frame.h's Refusal, with its count so far.
  AgentStats Stats() const override;

 private:
  // ---- queueing (socket_backend.cc) ----
  Conn& NewConn(int fd, bool outbound) REQUIRES(mu_);
  StatusOr<Conn*> ConnOfPeer(uint32_t peer_id) REQUIRES(mu_);
  void Queue(Conn& c, OutItem item) REQUIRES(mu_) { c.out.push_back(std::move(item)); }
  void QueueNotify(Conn& c, const std::string& message, uint64_t token) REQUIRES(mu_);
  // Queues a READ's request, or a WRITE's data frames and then its notification.
  void QueueRead(Conn& c, uint64_t token, const std::vector<Segment>& segments) REQUIRES(mu_);
  void QueueWrite(Conn& c, uint64_t token, const std::vector<Segment>& segments,
                  const std::string& notification) REQUIRES(mu_);
  // DeregisterMemory's two passes: frames and receives touching region `id`, then the
  // unsent requests of the transfers that fail with it. Returns / takes those transfers.
  std::set<uint64_t> DetachRegion(uint32_t id) REQUIRES(mu_);
  void DropUnsentRequests(const std::set<uint64_t>& failed) REQUIRES(mu_);
  void Wake();
  const Region* FindRegion(uint32_t id, uint64_t offset, uint64_t length) REQUIRES(mu_) {
    return sock::FindRegion(regions_, id, offset, length);
  }

  // ---- connection I/O (socket_io.cc) ----
  // Closes a connection; an outbound one fails its peer and every transfer to it with `why`.
  void CloseConn(uint64_t id, const Status& why) REQUIRES(mu_);
  // True if data frames of transfer `token` still wait in `c`'s send queue.
  static bool HasQueued(const Conn& c, uint64_t token);
  void FailXfer(uint64_t token, Status s) REQUIRES(mu_);
  // Sends what the socket takes now. False if the connection was closed.
  bool Flush(Conn& c) REQUIRES(mu_);
  // Reads what the socket has (up to kRecvBudget). False if the connection was closed.
  bool ReadSome(Conn& c, std::vector<Notification>* notes) REQUIRES(mu_);
  // Counts `why` and closes the connection. Returns false.
  bool ProtocolError(Conn& c, Refusal why, const std::string& what) REQUIRES(mu_);
  // A header arrived: choose where its payload goes. False if the connection was closed.
  bool OnHeader(Conn& c) REQUIRES(mu_);
  // Where a write segment's or a read reply's payload goes (memory, or discarded).
  void OnWriteDataHeader(Conn& c) REQUIRES(mu_);
  void OnReadDataHeader(Conn& c) REQUIRES(mu_);
  // A whole frame (header and payload) arrived. False if the connection was closed.
  bool OnFrame(Conn& c, RecvMode mode, std::vector<Notification>* notes) REQUIRES(mu_);
  // The last segment of an inbound WRITE landed (or was refused): acknowledge it.
  void OnWriteDataFrame(Conn& c, const FrameHdr& h) REQUIRES(mu_);
  // A target's kReadErr or kWriteAck for one of our transfers.
  void OnReply(Conn& c, const FrameHdr& h) REQUIRES(mu_);
  // The bytes of a transfer are visible at their destination: notify (READ), then finish.
  void Finished(uint64_t token) REQUIRES(mu_);
  void ServeRead(Conn& c, const FrameHdr& h) REQUIRES(mu_);
  void AcceptAll() REQUIRES(mu_);
  void CheckDeadlines() REQUIRES(mu_);
  void IoLoop();

  const BackendContext ctx_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;
  uint16_t port_ = 0;
  uint64_t secret_ = 0;
  std::thread io_;

  mutable Mutex mu_;
  bool stop_ GUARDED_BY(mu_) = false;
  uint64_t next_conn_ GUARDED_BY(mu_) = 1;
  uint64_t next_token_ GUARDED_BY(mu_) = 1;
  std::map<uint64_t, Conn> conns_ GUARDED_BY(mu_);
  std::map<uint32_t, PeerInfo> peers_ GUARDED_BY(mu_);
  RegionTable regions_ GUARDED_BY(mu_);
  std::map<uint64_t, Xfer> xfers_ GUARDED_BY(mu_);
  RefusalCounts refused_ GUARDED_BY(mu_);
  char scratch_[64 << 10] GUARDED_BY(mu_);
};

}  // namespace kvferry::transfer::sock
