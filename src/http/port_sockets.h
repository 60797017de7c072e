// The connected sockets of this process on one local TCP port: the connections a listener on
// that port accepted. Internal to src/http (connection_threads, request_deadline), which cut a
// connection httplib owns with shutdown(2) — httplib keeps the descriptor and closes it.
//
// Thread-safety: none needed (reads /proc/self/fd; the descriptors may close meanwhile, which a
// caller sees as a failed call on them).
#pragma once

#include <functional>
#include <string>

namespace kvferry::http {

// Calls `fn(fd)` for every socket descriptor of this process whose local port is `port`.
void ForEachSocketOnPort(int port, const std::function<void(int fd)>& fn);

// "address port" of `fd`'s peer, the address as httplib writes Request::remote_addr
// (getnameinfo, numeric); "" when `fd` is not connected (a listening socket).
std::string PeerKey(int fd);
// The same key for a request httplib parsed.
std::string PeerKey(const std::string& remote_addr, int remote_port);

}  // namespace kvferry::http
