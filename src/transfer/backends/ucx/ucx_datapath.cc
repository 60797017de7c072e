// UCX backend data path: posting transfers (RMA and active-message paths), the active-message
// handlers of both sides, completion and failure. See ucx_backend.cc for the design.
#include <atomic>
#include <cstring>

#include "kvferry/common/logging.h"
#include "transfer/backends/ucx/ucx_backend.h"

namespace kvferry::transfer::ucx {
namespace {

struct SendCtx {
  std::string header;
  std::string owned;
  std::function<void(ucs_status_t)> on_done;
};

void SendDone(void* request, ucs_status_t status, void* user_data) {
  auto* c = static_cast<SendCtx*>(user_data);
  if (c->on_done) c->on_done(status);
  delete c;
  ucp_request_free(request);
}

struct RecvDataCtx {
  std::function<void(ucs_status_t)> done;
};

void RecvDone(void* request, ucs_status_t status, size_t, void* user_data) {
  auto* c = static_cast<RecvDataCtx*>(user_data);
  c->done(status);
  delete c;
  ucp_request_free(request);
}

struct FlushCtx {
  UcxBackend* self;
  uint64_t token;
  std::function<void(ucs_status_t)> done;
};

void FlushDone(void* request, ucs_status_t status, void* user_data) {
  auto* c = static_cast<FlushCtx*>(user_data);
  c->done(status);
  delete c;
  ucp_request_free(request);
}

template <typename T>
std::string Pod(const T& v) {
  return std::string(reinterpret_cast<const char*>(&v), sizeof(v));
}

int32_t CodeOf(const Status& s) { return static_cast<int32_t>(s.code()); }

}  // namespace

Status UcxBackend::SendAm(ucp_ep_h ep, unsigned id, std::string header, const void* data,
                          size_t length, std::string owned, uint32_t flags,
                          std::function<void(ucs_status_t)> on_done) {
  auto* c = new SendCtx{std::move(header), std::move(owned), std::move(on_done)};
  if (data == nullptr && !c->owned.empty()) data = c->owned.data();
  ucp_request_param_t prm{};
  prm.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  prm.cb.send = SendDone;
  prm.user_data = c;
  prm.flags = flags;
  void* r = ucp_am_send_nbx(ep, id, c->header.data(), c->header.size(), data, length, &prm);
  if (r == nullptr) {
    if (c->on_done) c->on_done(UCS_OK);
    delete c;
    return Status::Ok();
  }
  if (UCS_PTR_IS_ERR(r)) {
    delete c;
    return FromUcs(UCS_PTR_STATUS(r), "ucp_am_send_nbx");
  }
  return Status::Ok();
}

Status UcxBackend::SendNotif(Peer& p, const std::string& message) {
  uint16_t name_len = static_cast<uint16_t>(ctx_.agent_name.size());
  std::string payload = Pod(name_len) + ctx_.agent_name + message;
  size_t len = payload.size();  // before the move below
  return SendAm(p.ep, kAmNotify, "", nullptr, len, std::move(payload), UCP_AM_SEND_FLAG_EAGER, {});
}

void UcxBackend::DoPost(const std::shared_ptr<Xfer>& x) {
  auto it = peers_.find(x->peer_id);
  if (it == peers_.end() || it->second->failed) {
    x->completion->Finish(UnavailableError("connection to peer has failed"));
    return;
  }
  Peer& p = *it->second;
  x->token = next_token_++;
  xfers_[x->token] = x;
  for (const Segment& s : x->segs) {
    if (!p.regions.count(s.remote_region)) {
      CompleteXfer(x->token,
                   NotFoundError("no remote key for region " + std::to_string(s.remote_region) +
                                 " of '" + p.name + "'"));
      return;
    }
  }
  bool all_mapped = true;
  for (const Segment& s : x->segs) all_mapped &= p.regions.at(s.remote_region).mapped != nullptr;
  if (all_mapped) {
    PostMapped(p, x);
  } else if (p.use_am) {
    PostAm(p, x);
  } else {
    PostRma(p, x);
  }
}

void UcxBackend::PostMapped(Peer& p, const std::shared_ptr<Xfer>& x) {
  // The peer takes no part, so a hung peer cannot stall this; a dead one is refused here (its
  // segment would still be readable, and writable to no one).
  if (ProcessIsDead(p.pid)) {
    FailPeer(p.id,
             UnavailableError("peer process " + std::to_string(p.pid) + " on this host died"));
    return;
  }
  for (const Segment& s : x->segs) {
    uint8_t* remote = p.regions.at(s.remote_region).mapped + s.remote_offset;
    if (x->op == XferOp::kWrite) {
      std::memcpy(remote, s.local_addr, s.length);
    } else {
      std::memcpy(s.local_addr, remote, s.length);
    }
  }
  // The notification (an active message through the peer's FIFO) is ordered after the copies.
  std::atomic_thread_fence(std::memory_order_release);
  DataLanded(x->token);
}

void UcxBackend::PostRma(Peer& p, const std::shared_ptr<Xfer>& x) {
  uint64_t token = x->token;
  for (const Segment& s : x->segs) {
    ucp_request_param_t prm{};
    prm.op_attr_mask = UCP_OP_ATTR_FLAG_MULTI_SEND;
    auto lr = regions_.find(s.local_region);
    if (lr != regions_.end()) {
      prm.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
      prm.memh = lr->second.memh;
    }
    RemoteRegion& rr = p.regions.at(s.remote_region);
    uint64_t raddr = rr.base + s.remote_offset;
    void* r = x->op == XferOp::kWrite
                  ? ucp_put_nbx(p.ep, s.local_addr, s.length, raddr, rr.rkey.get(), &prm)
                  : ucp_get_nbx(p.ep, s.local_addr, s.length, raddr, rr.rkey.get(), &prm);
    if (UCS_PTR_IS_ERR(r)) {
      CompleteXfer(token, FromUcs(UCS_PTR_STATUS(r), XferOp::kWrite == x->op ? "put" : "get"));
      return;
    }
    if (r != nullptr) ucp_request_free(r);  // the flush below tracks it
  }
  auto* fc = new FlushCtx{this, token, nullptr};
  fc->done = [this, token](ucs_status_t st) {
    if (st == UCS_OK) {
      deferred_.push_back([this, token] { DataLanded(token); });
    } else {
      Status s = FromUcs(st, "flush");
      deferred_.push_back([this, token, s] { CompleteXfer(token, s); });
    }
  };
  ucp_request_param_t fp{};
  fp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  fp.cb.send = FlushDone;
  fp.user_data = fc;
  void* r = ucp_ep_flush_nbx(p.ep, &fp);
  if (r == nullptr) {
    delete fc;
    DataLanded(token);
  } else if (UCS_PTR_IS_ERR(r)) {
    delete fc;
    CompleteXfer(token, FromUcs(UCS_PTR_STATUS(r), "flush"));
  }
}

void UcxBackend::PostAm(Peer& p, const std::shared_ptr<Xfer>& x) {
  uint64_t token = x->token;
  uint32_t nsegs = static_cast<uint32_t>(x->segs.size());
  if (x->op == XferOp::kWrite) {
    for (const Segment& s : x->segs) {
      WriteHdr h{p.conn_id, token, s.remote_offset, s.remote_region, nsegs};
      Status st = SendAm(p.ep, kAmWriteData, Pod(h), s.local_addr, s.length, "", 0, {});
      if (!st.ok()) {
        CompleteXfer(token, st);
        return;
      }
    }
    return;  // done when the target's ack arrives (OnWriteAck)
  }
  x->remaining = nsegs;
  std::string entries;
  entries.reserve(nsegs * sizeof(ReadEntry));
  for (const Segment& s : x->segs) {
    ReadEntry e{s.remote_offset, s.length, reinterpret_cast<uint64_t>(s.local_addr),
                s.remote_region, 0};
    entries += Pod(e);
  }
  ReadReqHdr h{p.conn_id, token, nsegs};
  size_t len = entries.size();
  Status st = SendAm(p.ep, kAmReadReq, Pod(h), nullptr, len, std::move(entries), 0, {});
  if (!st.ok()) CompleteXfer(token, st);
}

void UcxBackend::DataLanded(uint64_t token) {
  auto it = xfers_.find(token);
  if (it == xfers_.end()) return;  // cancelled or failed meanwhile
  std::shared_ptr<Xfer> x = it->second;
  if (!x->notification.empty()) {
    auto pit = peers_.find(x->peer_id);
    if (pit != peers_.end() && !pit->second->failed) {
      Status s = SendNotif(*pit->second, x->notification);
      if (!s.ok()) {
        CompleteXfer(token, s.WithContext("data landed, notification failed"));
        return;
      }
    }
  }
  CompleteXfer(token, Status::Ok());
}

void UcxBackend::CompleteXfer(uint64_t token, Status s) {
  auto it = xfers_.find(token);
  if (it == xfers_.end()) return;
  std::shared_ptr<Xfer> x = std::move(it->second);
  xfers_.erase(it);
  x->completion->Finish(std::move(s));
}

void UcxBackend::FailPeer(uint32_t peer_id, Status s) {
  auto it = peers_.find(peer_id);
  if (it == peers_.end()) return;
  Peer& p = *it->second;
  bool was_failed = p.failed;
  if (!was_failed) {
    // Marked before the transfers finish, so that a Post after a failed Wait sees it.
    p.failed = true;
    MutexLock l(&mu_);
    failed_peers_.insert(peer_id);
  }
  std::vector<uint64_t> tokens;
  for (auto& [token, x] : xfers_) {
    if (x->peer_id == peer_id) tokens.push_back(token);
  }
  for (uint64_t t : tokens) CompleteXfer(t, s);
  if (was_failed) return;
  if (s.code() != StatusCode::kAborted) {
    KVF_LOG_WARN("transfer: agent '{}': closing connection to '{}': {}", ctx_.agent_name, p.name,
                 s.ToString());
  }
  p.regions.clear();  // rkeys before the endpoint
  CloseEp(p.ep, std::move(p.err_arg));
  p.ep = nullptr;
}

void UcxBackend::CloseEp(ucp_ep_h ep, std::shared_ptr<const void> err_arg) {
  if (ep == nullptr) return;
  ucp_request_param_t cp{};
  cp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  cp.flags = UCP_EP_CLOSE_FLAG_FORCE;
  void* r = ucp_ep_close_nbx(ep, &cp);
  // Otherwise the close is complete (or failed): the endpoint no longer exists.
  if (UCS_PTR_IS_PTR(r)) closing_.push_back({r, std::move(err_arg)});
}

ucp_ep_h UcxBackend::BackEp(uint64_t conn) {
  auto it = back_.find(conn);
  if (it == back_.end()) return nullptr;
  BackChannel& b = it->second;
  if (b.ep != nullptr) return b.ep;
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                  UCP_EP_PARAM_FIELD_ERR_HANDLER;
  ep.address = reinterpret_cast<const ucp_address_t*>(b.address.data());
  ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  ep.err_handler.cb = OnBackEpError;
  b.err_arg = std::make_unique<BackErrArg>(BackErrArg{this, conn});
  ep.err_handler.arg = b.err_arg.get();
  if (ucp_ep_create(worker_.get(), &ep, &b.ep) != UCS_OK) {
    back_.erase(it);  // as if the initiator were gone
    return nullptr;
  }
  return b.ep;
}

void UcxBackend::CloseBack(uint64_t conn) {
  auto it = back_.find(conn);
  if (it == back_.end()) return;
  CloseEp(it->second.ep, std::move(it->second.err_arg));
  back_.erase(it);  // later requests on this connection find no back channel and are dropped
  for (auto w = inbound_.begin(); w != inbound_.end();) {
    w = w->first.first == conn ? inbound_.erase(w) : std::next(w);
  }
}

// ---- active-message handlers (run inside ucp_worker_progress) ------------------------------

// Lands `length` bytes of an AM at `dest`: copies eager data, or starts a rendezvous receive
// straight into `dest`. Sets *ret to what the handler must return.
void UcxBackend::Receive(void* data, size_t length, const ucp_am_recv_param_t* param, uint8_t* dest,
                         std::function<void(ucs_status_t)> done, ucs_status_t* ret) {
  *ret = UCS_OK;
  if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
    if (length > 0) std::memcpy(dest, data, length);
    done(UCS_OK);
    return;
  }
  auto* c = new RecvDataCtx{std::move(done)};
  ucp_request_param_t prm{};
  prm.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  prm.cb.recv_am = RecvDone;
  prm.user_data = c;
  void* r = ucp_am_recv_data_nbx(worker_.get(), data, dest, length, &prm);
  if (UCS_PTR_IS_ERR(r)) {
    c->done(UCS_PTR_STATUS(r));
    delete c;
    return;
  }
  *ret = UCS_INPROGRESS;
}

ucs_status_t UcxBackend::OnHello(void* arg, const void*, size_t, void* data, size_t len,
                                 const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxBackend*>(arg);
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) || len <= 8) return UCS_OK;
  uint64_t conn;
  std::memcpy(&conn, data, 8);
  BackChannel& b = self->back_[conn];
  b.address.assign(static_cast<const char*>(data) + 8, len - 8);
  return UCS_OK;
}

ucs_status_t UcxBackend::OnNotify(void* arg, const void*, size_t, void* data, size_t len,
                                  const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxBackend*>(arg);
  if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) return UCS_OK;  // never sent that way
  const char* p = static_cast<const char*>(data);
  uint16_t name_len = 0;
  if (len < sizeof(name_len)) return UCS_OK;
  std::memcpy(&name_len, p, sizeof(name_len));
  if (len < sizeof(name_len) + name_len) return UCS_OK;
  Notification n{std::string(p + 2, name_len), std::string(p + 2 + name_len, len - 2 - name_len)};
  self->ctx_.deliver_notification(std::move(n));
  return UCS_OK;
}

void UcxBackend::FinishInbound(uint64_t conn, uint64_t token, ucs_status_t st) {
  auto key = std::make_pair(conn, token);
  auto it = inbound_.find(key);
  if (it == inbound_.end()) return;
  InboundWrite& w = it->second;
  if (st != UCS_OK && w.code == 0) w.code = CodeOf(FromUcs(st, "receive"));
  if (++w.received < w.expected) return;
  int32_t code = w.code;
  inbound_.erase(it);
  deferred_.push_back([this, conn, token, code] { SendAck(conn, token, code); });
}

void UcxBackend::SendAck(uint64_t conn, uint64_t token, int32_t code) {
  ucp_ep_h ep = BackEp(conn);
  if (ep == nullptr) return;  // the initiator is gone
  AckHdr h{token, code};
  SendAm(ep, kAmWriteAck, Pod(h), nullptr, 0, "", UCP_AM_SEND_FLAG_EAGER, {})
      .IgnoreError();  // the initiator's deadline covers a lost ack
}

ucs_status_t UcxBackend::OnWriteData(void* arg, const void* hdr, size_t hlen, void* data,
                                     size_t len, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxBackend*>(arg);
  if (hlen != sizeof(WriteHdr)) return UCS_OK;
  WriteHdr h;
  std::memcpy(&h, hdr, sizeof(h));
  uint64_t reply = h.conn;
  auto key = std::make_pair(reply, h.token);
  auto [it, inserted] = self->inbound_.try_emplace(key);
  if (inserted) it->second.expected = h.nsegs;
  const LocalRegion* r = self->FindRegion(h.region, h.offset, len);
  if (r == nullptr) {
    if (it->second.code == 0) {
      it->second.code = static_cast<int32_t>(StatusCode::kNotFound);
    }
    self->FinishInbound(reply, h.token, UCS_OK);
    return UCS_OK;  // drops rendezvous data; the sender completes normally
  }
  ucs_status_t ret;
  uint64_t token = h.token;
  self->Receive(
      data, len, param, r->base + h.offset,
      [self, reply, token](ucs_status_t st) { self->FinishInbound(reply, token, st); }, &ret);
  return ret;
}

ucs_status_t UcxBackend::OnWriteAck(void* arg, const void* hdr, size_t hlen, void*, size_t,
                                    const ucp_am_recv_param_t*) {
  auto* self = static_cast<UcxBackend*>(arg);
  if (hlen != sizeof(AckHdr)) return UCS_OK;
  AckHdr h;
  std::memcpy(&h, hdr, sizeof(h));
  uint64_t token = h.token;
  if (h.code == 0) {
    self->deferred_.push_back([self, token] { self->DataLanded(token); });
  } else {
    Status s(static_cast<StatusCode>(h.code), "peer rejected the write (unknown region or range)");
    self->deferred_.push_back([self, token, s] { self->CompleteXfer(token, s); });
  }
  return UCS_OK;
}

ucs_status_t UcxBackend::OnReadReq(void* arg, const void* hdr, size_t hlen, void* data, size_t len,
                                   const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxBackend*>(arg);
  if (hlen != sizeof(ReadReqHdr)) return UCS_OK;
  ReadReqHdr h;
  std::memcpy(&h, hdr, sizeof(h));
  auto serve = [self, conn = h.conn, token = h.token](std::string entries) {
    ucp_ep_h reply = self->BackEp(conn);
    if (reply == nullptr) return;  // the initiator is gone
    size_t n = entries.size() / sizeof(ReadEntry);
    std::vector<ReadEntry> es(n);
    std::memcpy(es.data(), entries.data(), n * sizeof(ReadEntry));
    for (const ReadEntry& e : es) {
      if (self->FindRegion(e.region, e.offset, e.length) == nullptr) {
        ReadDataHdr rh{token, 0, static_cast<int32_t>(StatusCode::kNotFound)};
        self->SendAm(reply, kAmReadData, Pod(rh), nullptr, 0, "", UCP_AM_SEND_FLAG_EAGER, {})
            .IgnoreError();
        return;
      }
    }
    for (const ReadEntry& e : es) {
      const LocalRegion* r = self->FindRegion(e.region, e.offset, e.length);
      ReadDataHdr rh{token, e.dest, 0};
      if (!self->SendAm(reply, kAmReadData, Pod(rh), r->base + e.offset, e.length, "", 0, {})
               .ok()) {
        return;  // the reply endpoint broke; the initiator's deadline covers it
      }
    }
  };
  if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
    std::string entries(static_cast<const char*>(data), len);
    self->deferred_.push_back([serve, entries = std::move(entries)] { serve(entries); });
    return UCS_OK;
  }
  auto buf = std::make_shared<std::string>(len, '\0');
  ucs_status_t ret;
  self->Receive(
      data, len, param, reinterpret_cast<uint8_t*>(buf->data()),
      [self, serve, buf](ucs_status_t st) {
        if (st == UCS_OK) self->deferred_.push_back([serve, buf] { serve(*buf); });
      },
      &ret);
  return ret;
}

ucs_status_t UcxBackend::OnReadData(void* arg, const void* hdr, size_t hlen, void* data, size_t len,
                                    const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxBackend*>(arg);
  if (hlen != sizeof(ReadDataHdr)) return UCS_OK;
  ReadDataHdr h;
  std::memcpy(&h, hdr, sizeof(h));
  auto it = self->xfers_.find(h.token);
  if (it == self->xfers_.end()) return UCS_OK;  // cancelled: drop the data
  uint64_t token = h.token;
  if (h.code != 0) {
    Status s(static_cast<StatusCode>(h.code), "peer rejected the read (unknown region or range)");
    self->deferred_.push_back([self, token, s] { self->CompleteXfer(token, s); });
    return UCS_OK;
  }
  // The destination must be one of this transfer's own segments.
  const Xfer& x = *it->second;
  bool ok = false;
  for (const Segment& s : x.segs) {
    if (reinterpret_cast<uint64_t>(s.local_addr) == h.dest && s.length == len) {
      ok = true;
      break;
    }
  }
  if (!ok) {
    Status s = DataLossError("read reply for an address outside the transfer");
    self->deferred_.push_back([self, token, s] { self->CompleteXfer(token, s); });
    return UCS_OK;
  }
  ucs_status_t ret;
  self->Receive(
      data, len, param, reinterpret_cast<uint8_t*>(h.dest),
      [self, token](ucs_status_t st) {
        auto xi = self->xfers_.find(token);
        if (xi == self->xfers_.end()) return;
        if (st != UCS_OK) {
          Status s = FromUcs(st, "read receive");
          self->deferred_.push_back([self, token, s] { self->CompleteXfer(token, s); });
          return;
        }
        if (--xi->second->remaining == 0) {
          self->deferred_.push_back([self, token] { self->DataLanded(token); });
        }
      },
      &ret);
  return ret;
}

}  // namespace kvferry::transfer::ucx
