// EtcdProcess (tests only): a single-member etcd on loopback, in a temporary data directory,
// on two free ports. Stop() and Restart() keep the data (a restarted etcd has the same keys
// and leases); the destructor kills it and removes the directory. Failing to start (no etcd
// binary: scripts/install-deps.sh installs etcd-server) is a test failure, not a skip.
//
// Thread-safety: one controlling thread.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>

#include "cluster/etcd_client.h"
#include "kvferry/common/child_process.h"

namespace kvferry::cluster::testing {

class EtcdProcess {
 public:
  EtcdProcess() {
    char tmpl[] = "/tmp/kvferry-etcd-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    client_port_ = FreePort();
    peer_port_ = FreePort();
    Start();
  }
  ~EtcdProcess() {
    Kill(SIGKILL);
    std::filesystem::remove_all(dir_);
  }

  std::string url() const { return "etcd://127.0.0.1:" + std::to_string(client_port_); }
  EtcdEndpoint endpoint() const { return {"127.0.0.1", client_port_}; }
  int client_port() const { return client_port_; }

  // Until /health answers (up to 30 s); false otherwise.
  bool WaitHealthy() {
    EtcdClient c({endpoint()}, 500);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
      if (c.Health().ok()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }
  void Stop() { Kill(SIGTERM); }
  void Pause() {
    if (etcd_) etcd_->Signal(SIGSTOP);
  }
  void Resume() {
    if (etcd_) etcd_->Signal(SIGCONT);
  }
  void Restart() {
    Stop();
    Start();
  }

 private:
  static int FreePort() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    socklen_t len = sizeof(addr);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    ::close(fd);
    return ntohs(addr.sin_port);
  }

  void Start() {
    const std::string client = "http://127.0.0.1:" + std::to_string(client_port_);
    const std::string peer = "http://127.0.0.1:" + std::to_string(peer_port_);
    const std::string log = dir_ + "/etcd.log";
    const std::string data = dir_ + "/data";
    const std::string initial = "kvferry-test=" + peer;
    StatusOr<ChildProcess> etcd = ChildProcess::Fork([&] {
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::execlp("etcd", "etcd", "--name", "kvferry-test", "--data-dir", data.c_str(),
               "--listen-client-urls", client.c_str(), "--advertise-client-urls", client.c_str(),
               "--listen-peer-urls", peer.c_str(), "--initial-advertise-peer-urls", peer.c_str(),
               "--initial-cluster", initial.c_str(), nullptr);
      return 127;
    });
    ASSERT_TRUE(etcd.ok()) << etcd.status();
    etcd_ = std::move(*etcd);
    ASSERT_TRUE(WaitHealthy()) << "etcd did not start; log: " << log;
  }

  // `sig` to etcd (resumed first, should it be paused), and waits for it to end, however long
  // that takes: Restart must not start a second etcd on the same data directory.
  void Kill(int sig) {
    if (!etcd_) return;
    etcd_->Signal(SIGCONT);
    etcd_->Signal(sig);
    etcd_->Wait();
    etcd_.reset();
  }

  std::string dir_;
  int client_port_ = 0;
  int peer_port_ = 0;
  std::optional<ChildProcess> etcd_;
};

}  // namespace kvferry::cluster::testing
