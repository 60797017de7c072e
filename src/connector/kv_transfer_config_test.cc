#include "kvferry/connector/kv_transfer_config.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace kvferry::connector {
namespace {

TEST(KvTransferConfigTest, DefaultsFromMinimalConfig) {
  auto c = ParseKvTransferConfig(R"({"kv_connector": "FerryConnector", "kv_role": "kv_both"})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->kv_role, KvRole::kBoth);
  EXPECT_EQ(c->kv_load_failure_policy, KvLoadFailurePolicy::kRecompute);
  EXPECT_EQ(c->lease_ms, 30000);
  EXPECT_EQ(c->backend, transfer::BackendKind::kUcx);
  EXPECT_FALSE(c->use_host_buffer());
  EXPECT_TRUE(c->cache_in_agent_memory);
}

TEST(KvTransferConfigTest, ParsesEveryField) {
  auto c = ParseKvTransferConfig(R"({"kv_connector": "FerryConnector",
      "kv_role": "kv_producer", "kv_buffer_device": "cpu", "engine_id": "p0",
      "kv_load_failure_policy": "fail",
      "kv_connector_extra_config": {"side_channel_host": "10.1.2.3", "side_channel_port": 5601,
        "lease_ms": 1500, "handshake_timeout_ms": 200, "transfer_timeout_ms": 900,
        "backend": "loopback", "auth_token": "s3cret", "num_threads": 4,
        "cache_in_agent_memory": false}})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->kv_role, KvRole::kProducer);
  EXPECT_TRUE(c->use_host_buffer());
  EXPECT_EQ(c->engine_id, "p0");
  EXPECT_EQ(c->kv_load_failure_policy, KvLoadFailurePolicy::kFail);
  EXPECT_EQ(c->side_channel_host, "10.1.2.3");
  EXPECT_EQ(c->side_channel_port, 5601);
  EXPECT_EQ(c->lease_ms, 1500);
  EXPECT_EQ(c->handshake_timeout_ms, 200);
  EXPECT_EQ(c->transfer_timeout_ms, 900);
  EXPECT_EQ(c->backend, transfer::BackendKind::kLoopback);
  EXPECT_EQ(c->auth_token, "s3cret");
  EXPECT_FALSE(c->cache_in_agent_memory);
  auto again = ParseKvTransferConfig(ToJson(*c));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, *c);
}

TEST(KvTransferConfigTest, CurveFilesRoundTrip) {
  auto p = ParseKvTransferConfig(R"({"kv_role": "kv_producer", "kv_connector_extra_config": {
      "curve_secret_key_file": "/etc/kvferry/p0.key",
      "curve_client_keys_file": "/etc/kvferry/clients"}})");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->use_curve());
  EXPECT_EQ(p->curve_secret_key_file, "/etc/kvferry/p0.key");
  EXPECT_EQ(p->curve_client_keys_file, "/etc/kvferry/clients");
  auto again = ParseKvTransferConfig(ToJson(*p));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, *p);

  // A consumer does not serve: its own key and the Ps' keys are enough.
  auto d = ParseKvTransferConfig(R"({"kv_role": "kv_consumer", "kv_connector_extra_config": {
      "curve_secret_key_file": "/etc/kvferry/d0.key",
      "curve_server_keys_file": "/etc/kvferry/servers"}})");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->curve_server_keys_file, "/etc/kvferry/servers");
  EXPECT_FALSE(ParseKvTransferConfig(R"({"kv_role": "kv_consumer"})")->use_curve());
}

TEST(KvTransferConfigTest, SocketBackendRoundTrips) {
  auto c = ParseKvTransferConfig(nlohmann::json::parse(
      R"({"kv_connector": "FerryConnector", "kv_connector_extra_config": {"backend": "socket"}})"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->backend, transfer::BackendKind::kSocket);
  EXPECT_EQ(transfer::BackendKindName(c->backend), "socket");
  auto again = ParseKvTransferConfig(ToJson(*c));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->backend, transfer::BackendKind::kSocket);
}

TEST(KvTransferConfigTest, UcxTransportRoundTrips) {
  auto c = ParseKvTransferConfig(nlohmann::json::parse(
      R"({"kv_connector": "FerryConnector", "kv_connector_extra_config": {"ucx_transport": "tcp"}})"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->ucx_transport, transfer::UcxTransport::kTcp);
  auto again = ParseKvTransferConfig(ToJson(*c));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, *c);
}

TEST(KvTransferConfigTest, RejectsBadValuesNamingTheField) {
  struct Case {
    const char* json;
    const char* field;
  };
  const Case cases[] = {
      {R"({"kv_connector": "LMCacheConnector"})", "kv_connector"},
      {R"({"kv_role": "kv_decoder"})", "kv_role"},
      {R"({"kv_load_failure_policy": "retry"})", "kv_load_failure_policy"},
      {R"({"kv_connector_extra_config": {"side_channel_port": 65536}})", "side_channel_port"},
      {R"({"kv_connector_extra_config": {"lease_ms": 0}})", "lease_ms"},
      {R"({"kv_connector_extra_config": {"backend": "rdma"}})", "backend"},
      {R"({"kv_connector_extra_config": {"ucx_transport": "rdma"}})", "ucx_transport"},
      {R"({"kv_connector_extra_config": {"cache_in_agent_memory": "yes"}})",
       "cache_in_agent_memory"},
      {R"({"kv_connector_extra_config": {"transfer_timeout_ms": "5s"}})", "transfer_timeout_ms"},
      {R"({"kv_connector_extra_config": 3})", "kv_connector_extra_config"},
      {R"({"kv_connector_extra_config": {"curve_secret_key_file": 7}})", "curve_secret_key_file"},
      // Key lists without this instance's own key.
      {R"({"kv_connector_extra_config": {"curve_client_keys_file": "/c"}})",
       "curve_client_keys_file"},
      {R"({"kv_connector_extra_config": {"curve_server_keys_file": "/s"}})",
       "curve_server_keys_file"},
      // A serving role with CURVE and nobody to admit.
      {R"({"kv_role": "kv_both", "kv_connector_extra_config": {"curve_secret_key_file": "/k"}})",
       "curve_client_keys_file"},
      {R"({"kv_role": "kv_producer",
           "kv_connector_extra_config": {"curve_secret_key_file": "/k"}})",
       "curve_client_keys_file"},
  };
  for (const Case& c : cases) {
    auto parsed = ParseKvTransferConfig(std::string_view(c.json));
    ASSERT_FALSE(parsed.ok()) << c.json;
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find(c.field), std::string_view::npos)
        << parsed.status() << " should name " << c.field;
  }
  EXPECT_FALSE(ParseKvTransferConfig(std::string_view("{not json")).ok());
}

}  // namespace
}  // namespace kvferry::connector
