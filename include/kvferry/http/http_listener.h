// Starting an httplib::Server (plain, or the SSLServer of tls_server.h) on its own thread, shared
// by `kvferry serve` (OpenAiServer) and `kvferry proxy` (ProxyServer).
//
// Thread-safety: call from the thread that owns `http` and `thread`; `http` must outlive the
// listener thread (the caller stops `http` and joins `thread`).
#pragma once

#include <httplib.h>

#include <string>
#include <thread>

#include "kvferry/common/status.h"

namespace kvferry::http {

// Binds `http` to host:port (port 0: any free port), starts listen_after_bind() on `*thread`, and
// returns the bound port once the listener runs (within 5 s). Unavailable when the address
// cannot be bound; Internal when the listener does not start.
StatusOr<int> StartHttpListener(httplib::Server& http, const std::string& host, int port,
                                std::thread* thread);

}  // namespace kvferry::http
