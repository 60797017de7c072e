// ConnectionThreads: every connection up to the cap runs at once; past it they wait in order and
// are counted; shutdown runs what waits; and, behind a real httplib::Server, clients that hold
// their connections with half a request do not keep a normal request from its answer.
#include "kvferry/http/connection_threads.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "kvferry/http/http_listener.h"
#include "testing/raw_client.h"

namespace kvferry::http {
namespace {

// A gate the tasks wait on until the test opens it.
class Gate {
 public:
  void Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    ++waiting_;
    cv_.notify_all();
    cv_.wait(lock, [this] { return open_; });
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  bool AwaitWaiting(int n) {  // true once n tasks wait at the gate (within 10 s)
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return waiting_ >= n; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int waiting_ = 0;
  bool open_ = false;
};

TEST(ConnectionThreadsTest, EveryConnectionUpToTheCapRunsAtOnce) {
  ConnectionThreads q(64);
  Gate gate;
  for (int i = 0; i < 40; ++i) q.enqueue([&] { gate.Wait(); });
  ASSERT_TRUE(gate.AwaitWaiting(40)) << "not every connection got its own thread";
  EXPECT_EQ(q.load().open, 40);
  EXPECT_EQ(q.load().waiting, 0);
  EXPECT_EQ(q.load().waited_total, 0);
  gate.Open();
  q.shutdown();
  EXPECT_EQ(q.load().open, 0);
  EXPECT_EQ(q.load().threads, 0);
}

TEST(ConnectionThreadsTest, PastTheCapConnectionsWaitInOrderAndAreCounted) {
  // A cap of one, so that what waits also runs one at a time: the order it ran in is the order
  // it was taken in.
  ConnectionThreads q(1);
  Gate gate;
  std::mutex mu;
  std::vector<int> order;
  q.enqueue([&] { gate.Wait(); });
  ASSERT_TRUE(gate.AwaitWaiting(1));
  for (int i = 0; i < 3; ++i) {
    q.enqueue([&, i] {
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(i);
    });
  }
  EXPECT_EQ(q.load().waiting, 3);
  EXPECT_EQ(q.load().waited_total, 3);
  EXPECT_EQ(q.load().threads, 1);
  gate.Open();
  q.shutdown();  // runs what waits before it returns
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2}));
}

TEST(ConnectionThreadsTest, ShutdownRunsWhatWaitsAndJoins) {
  std::atomic<int> ran{0};
  {
    Gate gate;  // declared first: it must outlive the threads the destructor below joins
    ConnectionThreads q(1);
    q.enqueue([&] { gate.Wait(); });
    ASSERT_TRUE(gate.AwaitWaiting(1));
    for (int i = 0; i < 5; ++i) q.enqueue([&] { ++ran; });
    gate.Open();
  }  // the destructor shuts down
  EXPECT_EQ(ran.load(), 5);
}

using testing::SendAll;

// More clients than httplib's ThreadPool of 8 would serve hold their connections with half a
// request, sending one more header line a second (so no read timeout closes them); a normal
// request on another connection is answered while they still hold theirs.
TEST(ConnectionThreadsTest, HalfRequestsDoNotDelayANormalOne) {
  httplib::Server server;
  server.new_task_queue = [] { return new ConnectionThreads(64); };
  server.Get("/ping", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("pong", "text/plain");
  });
  std::thread listener;
  auto port = StartHttpListener(server, "127.0.0.1", 0, &listener);
  ASSERT_TRUE(port.ok()) << port.status();
  std::vector<int> idle;
  for (int i = 0; i < 24; ++i) {
    const int fd = testing::ConnectLoopback(*port);
    ASSERT_GE(fd, 0);
    SendAll(fd, "POST /ping HTTP/1.1\r\nHost: x\r\n");
    idle.push_back(fd);
  }
  std::atomic<bool> stop{false};
  std::thread trickle([&] {
    while (!stop) {
      for (int fd : idle) SendAll(fd, "X-Slow: 1\r\n");
      for (int i = 0; i < 10 && !stop; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
  });
  httplib::Client client("127.0.0.1", *port);
  client.set_read_timeout(std::chrono::seconds(30));
  auto res = client.Get("/ping");
  ASSERT_TRUE(res) << "no answer while half requests hold their connections: "
                   << httplib::to_string(res.error());
  EXPECT_EQ(res->body, "pong");
  stop = true;
  trickle.join();
  for (int fd : idle) ::close(fd);
  server.stop();
  listener.join();
}

// Stopping the server does not wait on clients that hold their connections: they are cut
// after the grace (before, stop() waited for as long as they trickled).
TEST(ConnectionThreadsTest, StopCutsConnectionsClientsHold) {
  auto threads = std::make_shared<ConnectionThreads>(64);
  httplib::Server server;
  server.new_task_queue = [threads] { return ConnectionThreads::Handle(threads); };
  std::thread listener;
  auto port = StartHttpListener(server, "127.0.0.1", 0, &listener);
  ASSERT_TRUE(port.ok()) << port.status();
  threads->SetListenPort(*port);
  std::vector<int> held;
  for (int i = 0; i < 8; ++i) {
    const int fd = testing::ConnectLoopback(*port);
    ASSERT_GE(fd, 0);
    SendAll(fd, i % 2 == 0 ? "POST /x HTTP/1.1\r\nHost: x\r\n" : "");
    held.push_back(fd);
  }
  std::atomic<bool> stop{false};
  std::thread trickle([&] {
    while (!stop) {
      for (int fd : held) SendAll(fd, "X-Slow: 1\r\n");
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  });
  for (int i = 0; i < 100 && threads->load().open < 8; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(threads->load().open, 8);
  server.stop();
  listener.join();  // returns: shutdown() cut the held connections
  EXPECT_EQ(threads->load().open, 0);
  stop = true;
  trickle.join();
  for (int fd : held) ::close(fd);
}

}  // namespace
}  // namespace kvferry::http
