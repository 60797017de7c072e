// MakeUpstreamClient (proxy-internal): the one place an httplib client toward P or D is made,
// so every leg gets the same TLS verification and API key.
//
// Thread-safety: a free function; each client is used by one thread at a time.
#pragma once

#include <memory>

#include "kvferry/proxy/upstream.h"

namespace httplib {
class Client;
}

namespace kvferry::proxy {

// A client for `url`: TLS with the server's certificate verified (against access.ca_file, or
// the system's CAs) when url.https, and `Authorization: Bearer access.api_key` on every request
// when the key is set.
std::unique_ptr<httplib::Client> MakeUpstreamClient(const UpstreamUrl& url,
                                                    const UpstreamAccess& access);

}  // namespace kvferry::proxy
