#include "kvferry/http/tls_server.h"

#include <openssl/err.h>
#include <openssl/ssl.h>

namespace kvferry::http {
namespace {

// OpenSSL's reasons for the last failure on this thread, oldest first.
std::string OpenSslErrors() {
  std::string out;
  while (const unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? "unknown OpenSSL error" : out;
}

// OpenSSL's default would prompt on the terminal for an encrypted key's passphrase; a service
// has none. Refusing makes loading the key fail with a reason instead.
int NoPassphrase(char*, int, int, void*) { return 0; }

// Configures `ctx` (owned by the SSLServer) for `tls`; on failure fills `*error`.
bool SetUpContext(SSL_CTX& ctx, const TlsServerFiles& tls, std::string* error) {
  ERR_clear_error();
  SSL_CTX_set_min_proto_version(&ctx, TLS1_2_VERSION);
  SSL_CTX_set_options(&ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
  SSL_CTX_set_default_passwd_cb(&ctx, NoPassphrase);
  if (SSL_CTX_use_certificate_chain_file(&ctx, tls.cert_file.c_str()) != 1) {
    *error = "--ssl-certfile " + tls.cert_file + ": " + OpenSslErrors();
    return false;
  }
  if (SSL_CTX_use_PrivateKey_file(&ctx, tls.key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
    *error = "--ssl-keyfile " + tls.key_file + ": " + OpenSslErrors() +
             " (expected: the certificate's private key, PEM, unencrypted)";
    return false;
  }
  if (SSL_CTX_check_private_key(&ctx) != 1) {
    *error = "--ssl-keyfile " + tls.key_file + " is not the key of --ssl-certfile " +
             tls.cert_file + ": " + OpenSslErrors();
    return false;
  }
  return true;
}

}  // namespace

StatusOr<std::unique_ptr<httplib::Server>> MakeHttpServer(const TlsServerFiles& tls) {
  if (!tls.enabled()) return std::make_unique<httplib::Server>();
  if (tls.cert_file.empty()) return InvalidArgumentError("--ssl-keyfile needs --ssl-certfile");
  if (tls.key_file.empty()) return InvalidArgumentError("--ssl-certfile needs --ssl-keyfile");
  std::string error;
  auto server = std::make_unique<httplib::SSLServer>(
      [&tls, &error](SSL_CTX& ctx) { return SetUpContext(ctx, tls, &error); });
  if (!server->is_valid()) {
    return InvalidArgumentError(error.empty() ? "TLS: cannot create an SSL context" : error);
  }
  return std::unique_ptr<httplib::Server>(std::move(server));
}

}  // namespace kvferry::http
