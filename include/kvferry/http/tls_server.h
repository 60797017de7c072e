// The listening object of an HTTP front end: a plain httplib::Server, or an httplib::SSLServer
// when a certificate and its key are given (`--ssl-certfile` / `--ssl-keyfile`, as vLLM spells
// them; docs/deploy.md, "TLS"). Either is started with StartHttpListener (http_listener.h), so
// both get the same backlog and SO_REUSEADDR.
//
// The TLS server speaks TLS 1.2 or later, without compression or renegotiation, and does not ask
// clients for certificates. A plain-HTTP client gets no answer: the handshake fails and the
// connection is closed.
//
// Thread-safety: call from the thread that sets up the server.
#pragma once

#include <httplib.h>

#include <memory>
#include <string>

#include "kvferry/common/status.h"

namespace kvferry::http {

struct TlsServerFiles {
  std::string cert_file;  // PEM: the server certificate, then any intermediates
  std::string key_file;   // PEM: its private key, unencrypted
  bool enabled() const { return !cert_file.empty() || !key_file.empty(); }
};

// InvalidArgument, naming the flag and OpenSSL's reason, when only one file is given, a file
// cannot be read or parsed, the key is encrypted, or the key does not belong to the certificate.
StatusOr<std::unique_ptr<httplib::Server>> MakeHttpServer(const TlsServerFiles& tls);

}  // namespace kvferry::http
