// UCX helpers for the UCX backend: RAII handle types, the one function that translates UCX
// status codes into kvferry Status, and lane logging.
//
// Thread-safety: stateless helpers; the handles follow the UCX object's own rules (the backend
// touches its worker only from its progress thread).
#pragma once

#include <ucp/api/ucp.h>

#include <string>
#include <string_view>

#include "kvferry/common/status.h"
#include "kvferry/common/unique_handle.h"

namespace kvferry::transfer::ucx {

using UcpConfig = UniqueHandle<ucp_config_t, ucp_config_release>;
using UcpContext = UniqueHandle<ucp_context, ucp_cleanup>;
using UcpWorker = UniqueHandle<ucp_worker, ucp_worker_destroy>;
using UcpRkey = UniqueHandle<ucp_rkey, ucp_rkey_destroy>;

// The only place UCX errors become kvferry errors. `what` names the failed operation.
Status FromUcs(ucs_status_t status, std::string_view what);

// ucp_ep_print_info's lines that describe lanes, joined with "; ".
std::string DescribeLanes(ucp_ep_h ep);

// Host identity used to tell "same host" peers: hostname + kernel boot id.
std::string HostIdentity();

// True if process `pid` on this host is gone or a zombie.
bool ProcessIsDead(int64_t pid);

}  // namespace kvferry::transfer::ucx
