// Publisher and Subscriber over real ZeroMQ sockets on loopback.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <zmq.hpp>

#include "kv_events/block_mirror.h"
#include "kvferry/kv_events/publisher.h"
#include "kvferry/kv_events/subscriber.h"

namespace kvferry::kv_events {
namespace {

// Bounds that only a failure reaches (the sanitizer builds run these many times slower).
constexpr int64_t kWaitMs = 20000;
constexpr int64_t kReplayMs = 20000;

std::unique_ptr<Publisher> StartPublisher(int64_t buffer_steps = 100, int32_t send_hwm = 1000) {
  PublisherOptions o;
  o.endpoint = o.replay_endpoint = "tcp://127.0.0.1:0";
  o.buffer_steps = buffer_steps;
  o.send_hwm = send_hwm;
  auto p = Publisher::Start(o);
  EXPECT_TRUE(p.ok()) << p.status();
  return std::move(p).value();
}

std::unique_ptr<Subscriber> Subscribe(const Publisher& p) {
  SubscriberOptions o;
  o.endpoint = p.endpoint();
  o.replay_endpoint = p.replay_endpoint();
  o.replay_timeout_ms = kReplayMs;
  auto s = Subscriber::Connect(o);
  EXPECT_TRUE(s.ok()) << s.status();
  return std::move(s).value();
}

void WaitPublished(const Publisher& p, int64_t n) {
  for (int i = 0; i < 2000 && p.stats().published < n; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(p.stats().published, n);
}

Event Stored(uint64_t hash, std::optional<uint64_t> parent) {
  return BlockStored{{hash}, parent, {static_cast<int32_t>(hash), 1}, 2, "CPU"};
}

SequencedBatch NextOrFail(Subscriber& s) {
  StatusOr<std::optional<SequencedBatch>> b = s.Next(kWaitMs);
  EXPECT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE(b.ok() && b->has_value()) << "no batch within " << kWaitMs << " ms";
  return b.ok() && b->has_value() ? std::move(**b) : SequencedBatch{-1, false, {}};
}

TEST(PubSubTest, BatchesArriveInOrderAfterTheFirstClear) {
  auto p = StartPublisher();
  WaitPublished(*p, 1);
  auto s = Subscribe(*p);
  SequencedBatch first = NextOrFail(*s);
  EXPECT_EQ(first.seq, 0);
  EXPECT_TRUE(first.replayed);
  ASSERT_EQ(first.batch.events.size(), 1u);
  EXPECT_TRUE(std::holds_alternative<AllBlocksCleared>(first.batch.events[0]));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the subscription settles
  for (uint64_t h = 1; h <= 3; ++h) p->Publish({Stored(h, h - 1)});
  for (int64_t seq = 1; seq <= 3; ++seq) {
    SequencedBatch b = NextOrFail(*s);
    EXPECT_EQ(b.seq, seq);
    ASSERT_EQ(b.batch.events.size(), 1u);
    EXPECT_EQ(b.batch.events[0], Stored(seq, seq - 1));
    EXPECT_EQ(b.batch.data_parallel_rank, std::optional<int64_t>(0));
  }
  EXPECT_EQ(s->stats().garbage, 0);
  EXPECT_EQ(s->stats().replay_failures, 0);
}

TEST(PubSubTest, ALateSubscriberGetsASnapshotWhenTheBufferIsShort) {
  auto p = StartPublisher(/*buffer_steps=*/2);
  p->Publish({Stored(1, std::nullopt)});
  p->Publish({Stored(2, 1)});
  p->Publish({BlockRemoved{{1}, "CPU"}});
  p->Publish({Stored(3, 2)});
  WaitPublished(*p, 5);
  auto s = Subscribe(*p);
  SequencedBatch snap = NextOrFail(*s);
  EXPECT_EQ(snap.seq, 4);
  EXPECT_TRUE(snap.replayed);
  EXPECT_EQ(snap.batch.events,
            (std::vector<Event>{AllBlocksCleared{}, Stored(2, 1), Stored(3, 2)}));
  EXPECT_EQ(p->stats().snapshots, 1);
  EXPECT_EQ(p->stats().blocks_held, 2);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  p->Publish({Stored(4, 3)});
  EXPECT_EQ(NextOrFail(*s).seq, 5);
}

TEST(PubSubTest, GapsAreFilledByReplayInOrder) {
  // A tiny send high-water mark makes the PUB socket drop most of a burst; the subscriber
  // must still return every batch, in order, through replays.
  auto p = StartPublisher(/*buffer_steps=*/10000, /*send_hwm=*/10);
  auto s = Subscribe(*p);
  EXPECT_EQ(NextOrFail(*s).seq, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  constexpr int kBatches = 2000;
  for (int i = 1; i <= kBatches; ++i) p->Publish({Stored(i, i - 1)});
  for (int64_t seq = 1; seq <= kBatches; ++seq) {
    SequencedBatch b = NextOrFail(*s);
    ASSERT_EQ(b.seq, seq);
    ASSERT_EQ(b.batch.events[0], Stored(seq, seq - 1));
  }
  EXPECT_EQ(s->stats().replay_failures, 0);
}

TEST(PubSubTest, ARestartedPublisherIsSeenAsOne) {
  auto p = StartPublisher();
  const std::string endpoint = p->endpoint();
  const std::string replay = p->replay_endpoint();
  auto s = Subscribe(*p);
  EXPECT_EQ(NextOrFail(*s).seq, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  for (uint64_t h = 1; h <= 5; ++h) p->Publish({Stored(h, std::nullopt)});
  for (int64_t seq = 1; seq <= 5; ++seq) EXPECT_EQ(NextOrFail(*s).seq, seq);
  p->Stop();
  p.reset();
  PublisherOptions o;
  o.endpoint = endpoint;
  o.replay_endpoint = replay;
  auto again = Publisher::Start(o);
  ASSERT_TRUE(again.ok()) << again.status();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // SUB reconnects
  (*again)->Publish({Stored(9, std::nullopt)});
  (*again)->Publish({Stored(10, 9)});
  // The new incarnation's batches came live (seq 0, 1, 2) or as a snapshot (a catch-up replay
  // from seq 6 finds a publisher that never got that far): either way the stream starts over
  // with a clear and ends holding what the new publisher holds.
  SequencedBatch b = NextOrFail(*s);
  ASSERT_FALSE(b.batch.events.empty());
  EXPECT_TRUE(std::holds_alternative<AllBlocksCleared>(b.batch.events[0]));
  BlockMirror seen;
  for (const Event& e : b.batch.events) seen.Apply(e);
  while (b.seq >= 0 && b.seq < 2) {
    b = NextOrFail(*s);
    for (const Event& e : b.batch.events) seen.Apply(e);
  }
  EXPECT_EQ(b.seq, 2);
  EXPECT_EQ(seen.Snapshot(),
            (std::vector<Event>{AllBlocksCleared{}, Stored(9, std::nullopt), Stored(10, 9)}));
  EXPECT_EQ(s->stats().restarts, 1);
}

TEST(PubSubTest, GarbageIsCountedAndSkipped) {
  // A hostile publisher: a raw PUB socket sending frames that are not events.
  zmq::context_t ctx(1);
  zmq::socket_t pub(ctx, zmq::socket_type::pub);
  pub.set(zmq::sockopt::linger, 0);
  pub.bind("tcp://127.0.0.1:*");
  const std::string endpoint = pub.get(zmq::sockopt::last_endpoint);
  SubscriberOptions o;
  o.endpoint = endpoint;
  auto s = Subscriber::Connect(o);
  ASSERT_TRUE(s.ok()) << s.status();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  pub.send(zmq::str_buffer("only one frame"), zmq::send_flags::none);
  pub.send(zmq::str_buffer(""), zmq::send_flags::sndmore);
  pub.send(zmq::str_buffer("short"), zmq::send_flags::sndmore);
  pub.send(zmq::str_buffer("x"), zmq::send_flags::none);
  const std::string seq0 = EncodeSeq(0);
  pub.send(zmq::str_buffer(""), zmq::send_flags::sndmore);
  pub.send(zmq::buffer(seq0), zmq::send_flags::sndmore);
  pub.send(zmq::str_buffer("\xc1 not msgpack"), zmq::send_flags::none);
  const std::string seq1 = EncodeSeq(1);
  const std::string good = EncodeEventBatch(EventBatch{1, {AllBlocksCleared{}}, 0});
  pub.send(zmq::str_buffer(""), zmq::send_flags::sndmore);
  pub.send(zmq::buffer(seq1), zmq::send_flags::sndmore);
  pub.send(zmq::buffer(good), zmq::send_flags::none);
  SequencedBatch b = NextOrFail(**s);
  EXPECT_EQ(b.seq, 1);
  EXPECT_EQ((*s)->stats().garbage, 3);
}

TEST(PubSubTest, BadReplayRequestsAreCountedAndTheStreamGoesOn) {
  auto p = StartPublisher();
  zmq::context_t ctx(1);
  zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  dealer.connect(p->replay_endpoint());
  dealer.send(zmq::str_buffer("no delimiter"), zmq::send_flags::none);
  dealer.send(zmq::str_buffer(""), zmq::send_flags::sndmore);
  dealer.send(zmq::str_buffer("7bytes!"), zmq::send_flags::none);
  for (int i = 0; i < 500 && p->stats().bad_replay_requests < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(p->stats().bad_replay_requests, 2);
  auto s = Subscribe(*p);
  EXPECT_EQ(NextOrFail(*s).seq, 0);
}

}  // namespace
}  // namespace kvferry::kv_events
