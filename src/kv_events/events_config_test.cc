#include "kvferry/kv_events/events_config.h"

#include <gtest/gtest.h>

namespace kvferry::kv_events {
namespace {

TEST(EventsConfigTest, ReadsVllmsFields) {
  auto o = ParseKvEventsConfig(
      R"({"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://127.0.0.1:0",
          "replay_endpoint": "tcp://127.0.0.1:5558", "buffer_steps": 50, "hwm": 7,
          "max_queue_size": 9, "topic": "kv"})");
  ASSERT_TRUE(o.ok()) << o.status();
  ASSERT_TRUE(o->has_value());
  EXPECT_EQ((*o)->endpoint, "tcp://127.0.0.1:0");
  EXPECT_EQ((*o)->replay_endpoint, "tcp://127.0.0.1:5558");
  EXPECT_EQ((*o)->buffer_steps, 50);
  EXPECT_EQ((*o)->send_hwm, 7);
  EXPECT_EQ((*o)->max_queue, 9);
  EXPECT_EQ((*o)->topic, "kv");
  auto defaults = ParseKvEventsConfig(R"({"enable_kv_cache_events": true})");
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ((*defaults)->endpoint, "tcp://*:5557");
  EXPECT_EQ((*defaults)->replay_endpoint, "");
}

TEST(EventsConfigTest, OffUnlessEnabledWithZmq) {
  EXPECT_FALSE(ParseKvEventsConfig("{}")->has_value());
  EXPECT_FALSE(ParseKvEventsConfig(R"({"enable_kv_cache_events": false})")->has_value());
  EXPECT_FALSE(
      ParseKvEventsConfig(R"({"enable_kv_cache_events": true, "publisher": "null"})")->has_value());
}

TEST(EventsConfigTest, RefusesWhatItDoesNotKnow) {
  for (const char* bad :
       {"not json", "[]", R"({"enable_kv_cache_events": "yes"})", R"({"endpont": "tcp://a:1"})",
        R"({"enable_kv_cache_events": true, "endpoint": "udp://a:1"})",
        R"({"enable_kv_cache_events": true, "endpoint": "tcp://a:99999"})",
        R"({"enable_kv_cache_events": true, "buffer_steps": 0})",
        R"({"enable_kv_cache_events": true, "publisher": "kafka"})"}) {
    EXPECT_EQ(ParseKvEventsConfig(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace kvferry::kv_events
