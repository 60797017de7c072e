#include "formats/file_write.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "kvferry/common/unique_handle.h"

namespace kvferry::formats::internal {

Status WriteFileReplacing(const std::string& path,
                          const std::function<void(const ByteSink&)>& emit) {
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  bool renamed = false;
  ScopeExit remove_tmp([&] {
    if (!renamed) std::remove(tmp.c_str());
  });
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return InvalidArgumentError("cannot create '" + tmp + "': " + std::strerror(errno));
    emit([&out](std::span<const std::byte> bytes) {
      out.write(reinterpret_cast<const char*>(bytes.data()),
                static_cast<std::streamsize>(bytes.size()));
    });
    out.close();
    if (!out) return InvalidArgumentError("short write to '" + tmp + "'");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return InvalidArgumentError("cannot rename '" + tmp + "' to '" + path +
                                "': " + std::strerror(errno));
  }
  renamed = true;
  return Status::Ok();
}

}  // namespace kvferry::formats::internal
