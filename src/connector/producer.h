// Producer: P's side of one FerryConnector. It owns what P keeps for remote readers:
//   - host-buffer staging: the chunks each request computed (pending saves, computed ranges),
//     copied from every rank's cache into that rank's registered host buffer, and where a
//     staging copy failed (those blocks are never offered);
//   - the offer of a finished remote-decode request: its kv_transfer_params (the hand-off
//     record, P's first token included, written here only) and the lease on its blocks;
//   - the lease's end: D's notifications counted per P rank, releases D sends over the side
//     channel, expiry.
// It also answers P's side channel (handshake metadata, releases).
//
// Per step (FerryConnectorImpl dispatches): OnTokensComputed after the forward pass, Finish at
// RequestFinished (which stages the request's outstanding chunks first, so D never reads a host
// block P has not written), StageSaves in AfterForward, Poll in GetFinished, TakeHolds in
// BuildConnectorMeta. With a scheduler outside this connector (vLLM's), the worker's
// BindMetadata brings the saves (QueueSave) and the holds (Hold) that scheduler decided instead.
//
// Thread-safety: engine thread only, except HandleSideChannel (the side channel's server
// thread: it reads what Registration fixed and appends to the release mailbox under its mutex).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "connector/connector_context.h"
#include "connector/handshake_wire.h"
#include "connector/registration.h"
#include "kvferry/common/deadline.h"
#include "kvferry/common/thread_annotations.h"
#include "kvferry/connector/connector.h"

namespace kvferry::connector::internal {

// Test hook: before P stages tokens [token_begin, ...) of a request into its host buffer;
// returning true makes that staging fail as a copy error would.
using StageFaultHook = std::function<bool(const std::string& request_id, int32_t token_begin)>;

class Producer {
 public:
  // `stage_fault` may point to an empty function; it must outlive the producer.
  Producer(ConnectorContext* ctx, Registration* registration, const StageFaultHook* stage_fault)
      : ctx_(ctx), reg_(registration), stage_fault_(stage_fault) {}

  // Host buffer: remembers tokens [token_begin, token_end) of a remote-decode request to stage.
  void OnTokensComputed(const RequestView& request, std::span<const kv::LogicalBlockId> block_ids,
                        int32_t token_begin, int32_t token_end);
  // RequestFinished of a remote-decode request: stages what it has not yet, then offers its
  // blocks under a lease (none for a request that ended by itself).
  FinishResult Finish(const RequestView& request, std::span<const kv::LogicalBlockId> block_ids);
  // AfterForward: stages every pending chunk.
  void StageSaves() { StagePendingSaves(nullptr); }
  // GetFinished: ends leases (released, notified by every reader, or expired) into
  // `out->finished_sending`.
  void Poll(ConnectorOutput* out);
  // The requests whose blocks were leased since the last call (ConnectorMetadata).
  std::vector<std::string> TakeHolds();
  // The side channel's handler (server thread).
  std::string HandleSideChannel(std::string_view request);

  // --- when the scheduler is not this connector's (vLLM's; ConnectorMetadata::saves, holds) ---
  // Remembers tokens [token_begin, token_end) of a request to stage (host buffer only).
  void QueueSave(const SaveSpec& save);
  // Leases a finished request's blocks now; the lease ends as FerryConnector's own do (Poll).
  // A notification that came before its hold (remembered by NoteNotification) ends it at the
  // next Poll; generations other than the ones promised end it there too.
  void Hold(const HoldSpec& hold);

 private:
  struct PendingSave {
    std::string request_id;
    std::vector<kv::LogicalBlockId> block_ids;
    int32_t token_begin = 0;
    int32_t token_end = 0;
  };
  // [first, end) of the tokens a request computed itself since it was last admitted (tokens
  // before `first` came from P's prefix cache, possibly from a request that was never staged).
  // A chunk not starting at `end` means a new admission (preemption).
  struct ComputedRange {
    int32_t first = 0;
    int32_t end = 0;
  };
  // Notifications received per leased request: per rank, the agents they came from (each D
  // rank's agent counts once, however often it notifies), and the D TP size they name.
  struct Heard {
    int32_t d_tp_size = 0;
    std::vector<std::set<std::string>> per_rank;
  };

  void QueueCachedPrefix(const RequestView& request, std::span<const kv::LogicalBlockId> ids);
  void StagePendingSaves(const std::string* only_request);
  Status StageOne(const PendingSave& save);
  // The kv_transfer_params (and lease) of a finished remote-decode request, offering only the
  // blocks whose bytes are good; an error when policy `fail` and some are not.
  FinishResult OfferBlocks(const RequestView& request,
                           std::span<const kv::LogicalBlockId> block_ids);
  KvTransferParams ParamsFor(const RequestView& request, size_t offered_blocks) const;
  // Leases the blocks for the lease time (counted); their generations, or nullopt (logged)
  // when the table refuses.
  std::optional<std::vector<uint64_t>> GrantLease(const std::string& request_id,
                                                  std::span<const kv::LogicalBlockId> block_ids);
  // How many of `num_blocks` may be offered after a staging failure; sets `error` under `fail`.
  size_t OfferableAfterStagingFailure(const std::string& id, size_t num_blocks, Status* error);
  // One D rank's notification to P rank `rank`; ends the lease once every P rank has heard
  // from all the D ranks that read from it. A second one from the same agent is counted
  // (notifications_duplicate) and changes nothing.
  void NoteNotification(int32_t rank, const transfer::Notification& n, ConnectorOutput* out);
  void EndLease(const std::string& request_id, ConnectorOutput* out);
  // D's release over the side channel: ends the lease, or, with an outside scheduler and the
  // hold not here yet, is remembered (releases_before_hold) so the hold ends when it comes.
  void NoteRelease(std::string request_id, ConnectorOutput* out);
  bool TokenMatches(const std::string& presented) const;
  // A notification for no live lease: with an outside scheduler, its hold may still be on the
  // way (the hold reaches this worker a step after the kv_transfer_params left); remembered
  // until the lease time has passed, at most kMaxEarly of them.
  void RememberEarly(int32_t rank, const std::string& request_id, const transfer::Notification& n);
  // Remembers, for the lease time, that a request's lease ended, so a notification that comes
  // after it (a D that read late, or read a retried request's stale params) is known as late
  // rather than kept for a hold that will never come.
  void NoteEnded(const std::string& request_id);
  void ForgetOld();
  void EndFailedHolds(ConnectorOutput* out);

  ConnectorContext* const ctx_;
  Registration* const reg_;
  const StageFaultHook* const stage_fault_;

  std::vector<PendingSave> pending_saves_;
  std::map<std::string, ComputedRange> computed_;
  // The first token of a request whose staging failed (its blocks from there on hold stale
  // bytes and must never be offered).
  std::map<std::string, int32_t> stage_failed_from_;
  std::map<std::string, Heard> heard_;
  std::vector<std::string> pending_holds_;
  // Outside scheduler: notifications that came before their hold (by P request id), and holds
  // Hold ended at once (early notification, or generations not the promised ones), for Poll.
  struct Early {
    int32_t rank = 0;
    transfer::Notification notification;
    Deadline forget_at;
  };
  static constexpr size_t kMaxEarly = 4096;
  std::map<std::string, Early> early_;
  std::vector<Early> replay_at_poll_;      // early notifications whose hold has come
  std::map<std::string, Deadline> ended_;  // leases ended lately (NoteEnded), at most kMaxEarly
  // Releases that came before their hold (forgotten after the lease time), and holds a release
  // already ended, to end at the next Poll.
  std::map<std::string, Deadline> early_releases_;
  std::vector<std::string> release_at_poll_;
  // Holds to end at the next Poll: granted at other generations than promised, or with bytes
  // whose staging failed.
  std::vector<std::string> hold_failed_;

  // Request ids D released over the side channel (server thread -> engine thread).
  Mutex released_mu_;
  std::vector<std::string> released_ GUARDED_BY(released_mu_);
};

}  // namespace kvferry::connector::internal
