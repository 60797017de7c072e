#include "kvferry/kv_offload/disk_tier.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <filesystem>
#include <list>
#include <thread>
#include <tuple>
#include <unordered_map>

#include "kv_offload/block_io.h"
#include "kvferry/common/deadline.h"
#include "kvferry/common/logging.h"
#include "kvferry/common/thread_annotations.h"
#include "kvferry/kv_offload/block_file.h"

namespace kvferry::kv_offload {

namespace fs = std::filesystem;

namespace {

struct Entry {
  uint64_t size = 0;
  std::list<uint64_t>::iterator lru;  // position in State::lru
};

struct Job {
  uint64_t hash = 0;
  std::optional<uint64_t> parent;
  std::vector<int32_t> prefix;
  std::vector<std::byte> payload;
};

using Tier = kv::BlockEvent::Tier;

kv::BlockEvent StoredEvent(uint64_t hash, std::optional<uint64_t> parent,
                           std::span<const int32_t> block_tokens) {
  return {kv::BlockEvent::Kind::kStored,
          {hash},
          parent,
          std::vector<int32_t>(block_tokens.begin(), block_tokens.end()),
          Tier::kDisk};
}

kv::BlockEvent RemovedEvent(uint64_t hash) {
  return {kv::BlockEvent::Kind::kRemoved, {hash}, std::nullopt, {}, Tier::kDisk};
}

std::string HashName(uint64_t hash) { return fmt::format("{:016x}.kvb", hash); }

std::optional<uint64_t> HashOfName(const std::string& name) {
  if (name.size() != 20 || name.substr(16) != ".kvb") return std::nullopt;
  uint64_t hash = 0;
  for (char c : name.substr(0, 16)) {
    const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (digit < 0) return std::nullopt;
    hash = hash << 4 | static_cast<uint64_t>(digit);
  }
  return hash;
}

}  // namespace

struct DiskTier::State {
  DiskTierOptions options;
  std::string directory;

  mutable Mutex mu;
  CondVar work_cv;  // a job was queued, or stop
  CondVar done_cv;  // a job finished
  std::unordered_map<uint64_t, Entry> index GUARDED_BY(mu);
  std::list<uint64_t> lru GUARDED_BY(mu);  // front: least recently used
  std::deque<std::shared_ptr<const Job>> queue GUARDED_BY(mu);
  std::unordered_map<uint64_t, std::shared_ptr<const Job>> pending GUARDED_BY(mu);
  int64_t paused_until_ms GUARDED_BY(mu) = 0;
  bool stop GUARDED_BY(mu) = false;
  DiskTierStats stats GUARDED_BY(mu);
  std::vector<kv::BlockEvent> events GUARDED_BY(mu);
  std::thread writer;

  std::string PathOf(uint64_t hash) const { return directory + "/" + HashName(hash); }
  void Record(kv::BlockEvent e) REQUIRES(mu) {
    if (options.record_events) events.push_back(std::move(e));
  }
  void Insert(uint64_t hash, uint64_t size) REQUIRES(mu);
  void Erase(uint64_t hash) REQUIRES(mu);
  bool Paused() const REQUIRES(mu) { return SteadyNowMs() < paused_until_ms; }
  void Unqueue(const Job& job) REQUIRES(mu);  // no longer pending (written or dropped)
  void DropQueued() REQUIRES(mu);
  std::vector<uint64_t> MakeRoom(uint64_t size) REQUIRES(mu);
  void Finish(const Job& job, uint64_t size, const Status& written) EXCLUDES(mu);
  void Write(const Job& job) EXCLUDES(mu);
  void WriterLoop() EXCLUDES(mu);
  struct Found;
  std::optional<Found> Inspect(const fs::directory_entry& de, int64_t* corrupt) const;
  Status Scan() EXCLUDES(mu);
  StatusOr<std::vector<std::byte>> ReadChecked(uint64_t hash, std::span<const int32_t> prefix);
};

void DiskTier::State::Insert(uint64_t hash, uint64_t size) {
  lru.push_back(hash);
  index[hash] = Entry{size, std::prev(lru.end())};
  ++stats.files;
  stats.bytes += static_cast<int64_t>(size);
}

void DiskTier::State::Erase(uint64_t hash) {
  auto it = index.find(hash);
  if (it == index.end()) return;
  lru.erase(it->second.lru);
  --stats.files;
  stats.bytes -= static_cast<int64_t>(it->second.size);
  index.erase(it);
  Record(RemovedEvent(hash));
}

void DiskTier::State::Unqueue(const Job& job) {
  pending.erase(job.hash);
  stats.pending_bytes -= static_cast<int64_t>(job.payload.size());
}

void DiskTier::State::DropQueued() {
  for (const auto& job : queue) {
    Unqueue(*job);
    ++stats.dropped;
  }
  queue.clear();
}

// Takes least recently used files out of the index until `size` more bytes fit; the caller
// deletes them. Empty and nothing taken when `size` alone exceeds the capacity.
std::vector<uint64_t> DiskTier::State::MakeRoom(uint64_t size) {
  std::vector<uint64_t> victims;
  const int64_t capacity = static_cast<int64_t>(options.capacity_bytes);
  while (!lru.empty() && stats.bytes + static_cast<int64_t>(size) > capacity) {
    const uint64_t hash = lru.front();
    Erase(hash);
    ++stats.evicted;
    victims.push_back(hash);
  }
  return victims;
}

void DiskTier::State::Finish(const Job& job, uint64_t size, const Status& written) {
  MutexLock lock(&mu);
  Unqueue(job);
  if (written.ok()) {
    Insert(job.hash, size);
    ++stats.stored;
    const size_t bs = static_cast<size_t>(options.block_size);
    Record(StoredEvent(job.hash, job.parent,
                       std::span<const int32_t>(job.prefix).subspan(job.prefix.size() - bs)));
  } else {
    ++stats.write_errors;
    ++stats.dropped;
    paused_until_ms = SteadyNowMs() + options.pause_after_error_ms;
    KVF_LOG_WARN("kv offload: {}; offloading paused for {} ms", written.ToString(),
                 options.pause_after_error_ms);
    DropQueued();
  }
  done_cv.NotifyAll();
}

void DiskTier::State::Write(const Job& job) {
  BlockFileHeader h;
  h.block_size = options.block_size;
  h.num_tokens = static_cast<int32_t>(job.prefix.size());
  h.salt = options.salt;
  h.layout = options.layout;
  h.hash = job.hash;
  h.parent = job.parent;
  h.payload_bytes = job.payload.size();
  const uint64_t size = BlockFileSize(h);
  std::vector<uint64_t> victims;
  {
    MutexLock lock(&mu);
    if (size > options.capacity_bytes) {
      Unqueue(job);
      ++stats.dropped;
      done_cv.NotifyAll();
      return;
    }
    victims = MakeRoom(size);
  }
  for (uint64_t v : victims) ::unlink(PathOf(v).c_str());
  const std::string head = EncodeBlockFileHead(h, job.prefix);
  Finish(job, size,
         WriteFileAtomically(PathOf(job.hash), head, job.payload,
                             BlockFileChecksum(head, job.payload)));
}

void DiskTier::State::WriterLoop() {
  for (;;) {
    std::shared_ptr<const Job> job;
    {
      MutexLock lock(&mu);
      work_cv.WaitFor(&mu, std::chrono::seconds(1),
                      [this]() REQUIRES(mu) { return stop || !queue.empty(); });
      if (queue.empty()) {
        if (stop) return;
        continue;
      }
      job = queue.front();
      queue.pop_front();
    }
    Write(*job);
  }
}

StatusOr<std::vector<std::byte>> DiskTier::State::ReadChecked(uint64_t hash,
                                                              std::span<const int32_t> prefix) {
  KVF_ASSIGN_OR_RETURN(std::vector<std::byte> file, ReadFileStart(PathOf(hash), uint64_t{1} << 40));
  KVF_ASSIGN_OR_RETURN(BlockFileView view, DecodeBlockFile(file));
  const BlockFileHeader& h = view.header;
  if (h.hash != hash || h.salt != options.salt || h.layout != options.layout ||
      h.block_size != options.block_size) {
    return DataLossError("block file " + PathOf(hash) + " is another block's");
  }
  if (!SamePrefix(view, prefix)) return NotFoundError("block file of another prefix");
  return std::vector<std::byte>(view.payload.begin(), view.payload.end());
}

// A block file found in the directory at Open.
struct DiskTier::State::Found {
  fs::file_time_type mtime;
  int32_t num_tokens = 0;
  uint64_t hash = 0;
  uint64_t size = 0;
  kv::BlockEvent event;  // its BlockStored
};

// The file `de` as a block of this tier, or nullopt when it is not one; a damaged file (a header
// or size that is wrong, another salt, layout or hash) is deleted and counts in *corrupt.
std::optional<DiskTier::State::Found> DiskTier::State::Inspect(const fs::directory_entry& de,
                                                               int64_t* corrupt) const {
  std::error_code ec;
  const std::string name = de.path().filename().string();
  if (name.ends_with(".tmp")) {  // a write a crash interrupted
    fs::remove(de.path(), ec);
    return std::nullopt;
  }
  const std::optional<uint64_t> hash = HashOfName(name);
  if (!hash) return std::nullopt;
  // The header, then the prefix's tokens: never the payload.
  auto head = ReadFileStart(de.path().string(), kBlockFileHeadBytes);
  auto header = head.ok() ? DecodeBlockFileHeader(*head) : StatusOr<BlockFileHeader>(head.status());
  const auto size = FileSize(de.path().string());
  if (header.ok()) {
    head = ReadFileStart(de.path().string(), kBlockFileHeadBytes + 4ull * header->num_tokens);
  }
  if (!header.ok() || !size.ok() || !head.ok() || header->hash != *hash ||
      header->salt != options.salt || header->layout != options.layout ||
      header->block_size != options.block_size || *size != BlockFileSize(*header) ||
      head->size() < kBlockFileHeadBytes + 4ull * header->num_tokens) {
    fs::remove(de.path(), ec);
    ++*corrupt;
    return std::nullopt;
  }
  std::vector<int32_t> block(static_cast<size_t>(options.block_size));
  std::memcpy(block.data(),
              head->data() + kBlockFileHeadBytes + 4 * (header->num_tokens - options.block_size),
              block.size() * 4);
  return Found{de.last_write_time(ec), header->num_tokens, *hash, *size,
               StoredEvent(*hash, header->parent, block)};
}

// Indexes the files already in the directory, oldest modification first (the LRU order they
// had, near enough), parents before children in the events.
Status DiskTier::State::Scan() {
  std::vector<Found> found;
  int64_t corrupt = 0;
  std::error_code ec;
  for (const fs::directory_entry& de : fs::directory_iterator(directory, ec)) {
    if (std::optional<Found> f = Inspect(de, &corrupt)) found.push_back(std::move(*f));
  }
  if (ec) return UnavailableError("kv offload: cannot read " + directory + ": " + ec.message());
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) {
    return std::tie(a.mtime, a.num_tokens) < std::tie(b.mtime, b.num_tokens);
  });
  MutexLock lock(&mu);
  stats.corrupt += corrupt;
  for (Found& f : found) Insert(f.hash, f.size);
  std::stable_sort(found.begin(), found.end(),
                   [](const Found& a, const Found& b) { return a.num_tokens < b.num_tokens; });
  for (Found& f : found) Record(std::move(f.event));
  for (uint64_t v : MakeRoom(0)) ::unlink(PathOf(v).c_str());
  return Status::Ok();
}

StatusOr<std::unique_ptr<DiskTier>> DiskTier::Open(const DiskTierOptions& options) {
  if (options.dir.empty()) return InvalidArgumentError("kv offload: no directory");
  if (options.capacity_bytes == 0) return InvalidArgumentError("kv offload: capacity must be > 0");
  if (options.block_size <= 0) return InvalidArgumentError("kv offload: block_size must be > 0");
  auto state = std::make_unique<State>();
  state->options = options;
  state->directory = fmt::format("{}/{:016x}-{:016x}", options.dir, options.salt, options.layout);
  std::error_code ec;
  fs::create_directories(state->directory, ec);
  if (ec) {
    return UnavailableError("kv offload: cannot create " + state->directory + ": " + ec.message());
  }
  KVF_RETURN_IF_ERROR(state->Scan());
  {
    MutexLock lock(&state->mu);
    state->stats.capacity_bytes = static_cast<int64_t>(options.capacity_bytes);
  }
  State* raw = state.get();
  state->writer = std::thread([raw] { raw->WriterLoop(); });
  return std::unique_ptr<DiskTier>(new DiskTier(std::move(state)));
}

DiskTier::DiskTier(std::unique_ptr<State> state) : state_(std::move(state)) {}

DiskTier::~DiskTier() {
  {
    MutexLock lock(&state_->mu);
    state_->stop = true;
  }
  state_->work_cv.NotifyAll();
  state_->writer.join();
}

bool DiskTier::Contains(uint64_t hash) const {
  MutexLock lock(&state_->mu);
  return state_->index.count(hash) != 0 || state_->pending.count(hash) != 0;
}

bool DiskTier::Put(uint64_t hash, std::optional<uint64_t> parent,
                   std::span<const int32_t> prefix_tokens, std::vector<std::byte> payload) {
  State& s = *state_;
  MutexLock lock(&s.mu);
  if (s.index.count(hash) != 0 || s.pending.count(hash) != 0) return false;
  const int64_t bytes = static_cast<int64_t>(payload.size());
  if (s.Paused() ||
      s.stats.pending_bytes + bytes > static_cast<int64_t>(s.options.max_pending_bytes)) {
    ++s.stats.dropped;
    return false;
  }
  auto job = std::make_shared<Job>();
  job->hash = hash;
  job->parent = parent;
  job->prefix.assign(prefix_tokens.begin(), prefix_tokens.end());
  job->payload = std::move(payload);
  s.pending[hash] = job;
  s.queue.push_back(std::move(job));
  s.stats.pending_bytes += bytes;
  s.work_cv.NotifyOne();
  return true;
}

StatusOr<std::vector<std::byte>> DiskTier::Get(uint64_t hash,
                                               std::span<const int32_t> prefix_tokens) {
  State& s = *state_;
  {
    MutexLock lock(&s.mu);
    auto p = s.pending.find(hash);
    if (p != s.pending.end()) {
      const Job& job = *p->second;
      if (!std::equal(job.prefix.begin(), job.prefix.end(), prefix_tokens.begin(),
                      prefix_tokens.end())) {
        return NotFoundError("queued block of another prefix");
      }
      ++s.stats.loaded;
      return job.payload;
    }
    auto it = s.index.find(hash);
    if (it == s.index.end()) return NotFoundError("block not on disk");
    s.lru.splice(s.lru.end(), s.lru, it->second.lru);
  }
  StatusOr<std::vector<std::byte>> payload = s.ReadChecked(hash, prefix_tokens);
  MutexLock lock(&s.mu);
  if (payload.ok()) {
    ++s.stats.loaded;
  } else if (payload.status().code() == StatusCode::kDataLoss) {
    KVF_LOG_WARN("kv offload: {}; deleted, counted as a miss", payload.status().ToString());
    ::unlink(s.PathOf(hash).c_str());
    s.Erase(hash);
    ++s.stats.corrupt;
  } else if (payload.status().code() == StatusCode::kNotFound && s.index.count(hash) != 0 &&
             !FileSize(s.PathOf(hash)).ok()) {
    s.Erase(hash);  // deleted behind our back
  }
  return payload;
}

bool DiskTier::Flush(int64_t timeout_ms) {
  State& s = *state_;
  MutexLock lock(&s.mu);
  return s.done_cv.WaitFor(&s.mu, std::chrono::milliseconds(timeout_ms),
                           [&s]() REQUIRES(s.mu) { return s.pending.empty(); });
}

std::vector<kv::BlockEvent> DiskTier::TakeEvents() {
  MutexLock lock(&state_->mu);
  std::vector<kv::BlockEvent> out = std::move(state_->events);
  state_->events.clear();
  return out;
}

DiskTierStats DiskTier::Stats() const {
  MutexLock lock(&state_->mu);
  DiskTierStats out = state_->stats;
  out.paused = state_->Paused();
  return out;
}

const std::string& DiskTier::directory() const { return state_->directory; }

}  // namespace kvferry::kv_offload
