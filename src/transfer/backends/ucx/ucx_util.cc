#include "transfer/backends/ucx/ucx_util.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace kvferry::transfer::ucx {

Status FromUcs(ucs_status_t status, std::string_view what) {
  if (status == UCS_OK || status == UCS_INPROGRESS) return Status::Ok();
  std::string msg = std::string(what) + ": " + ucs_status_string(status);
  switch (status) {
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_REJECTED:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_IO_ERROR:
    case UCS_ERR_SOME_CONNECTS_FAILED:
      return UnavailableError(msg);
    case UCS_ERR_TIMED_OUT:
      return DeadlineExceededError(msg);
    case UCS_ERR_CANCELED:
      return AbortedError(msg);
    case UCS_ERR_NO_MEMORY:
    case UCS_ERR_NO_RESOURCE:
    case UCS_ERR_EXCEEDS_LIMIT:
    case UCS_ERR_BUSY:
      return ResourceExhaustedError(msg);
    case UCS_ERR_INVALID_PARAM:
    case UCS_ERR_INVALID_ADDR:
    case UCS_ERR_MESSAGE_TRUNCATED:
      return InvalidArgumentError(msg);
    case UCS_ERR_NO_ELEM:
      return NotFoundError(msg);
    case UCS_ERR_UNSUPPORTED:
    case UCS_ERR_NO_DEVICE:
      return UnimplementedError(msg);
    default:
      return UnavailableError(msg);
  }
}

std::string DescribeLanes(ucp_ep_h ep) {
  char* buf = nullptr;
  size_t len = 0;
  FILE* f = open_memstream(&buf, &len);
  if (f == nullptr) return "?";
  ucp_ep_print_info(ep, f);
  std::fclose(f);
  std::istringstream in(std::string(buf, len));
  std::free(buf);
  std::string out, line;
  while (std::getline(in, line)) {
    auto pos = line.find("lane[");
    if (pos == std::string::npos) continue;
    if (!out.empty()) out += "; ";
    std::string l = line.substr(pos);
    while (!l.empty() && (l.back() == ' ' || l.back() == '#')) l.pop_back();
    out += l;
  }
  return out.empty() ? "no lanes" : out;
}

std::string HostIdentity() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  std::string boot;
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::getline(f, boot);
  return std::string(host) + "/" + boot;
}

bool ProcessIsDead(int64_t pid) {
  if (pid <= 0) return false;
  if (kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return true;
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  if (!f) return true;
  std::string stat;
  std::getline(f, stat);
  auto rp = stat.rfind(')');
  if (rp == std::string::npos || rp + 2 >= stat.size()) return false;
  char state = stat[rp + 2];
  return state == 'Z' || state == 'X';
}

}  // namespace kvferry::transfer::ucx
