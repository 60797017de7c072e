#include "kv_offload/block_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "kvferry/common/unique_handle.h"

namespace kvferry::kv_offload {

namespace {

Status ErrnoError(std::string_view what, const std::string& path, int err) {
  std::string message = std::string(what) + " " + path + ": " + std::strerror(err);
  if (err == ENOENT) return NotFoundError(std::move(message));
  return UnavailableError(std::move(message));
}

Status WriteAll(int fd, const std::byte* data, size_t size, const std::string& path) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("write", path, errno);
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status WriteParts(int fd, std::string_view head, std::span<const std::byte> payload,
                  std::string_view tail, const std::string& path) {
  const auto bytes = [](std::string_view s) {
    return reinterpret_cast<const std::byte*>(s.data());
  };
  KVF_RETURN_IF_ERROR(WriteAll(fd, bytes(head), head.size(), path));
  KVF_RETURN_IF_ERROR(WriteAll(fd, payload.data(), payload.size(), path));
  return WriteAll(fd, bytes(tail), tail.size(), path);
}

}  // namespace

Status WriteFileAtomically(const std::string& path, std::string_view head,
                           std::span<const std::byte> payload, std::string_view tail) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("open", tmp, errno);
  Status s = WriteParts(fd, head, payload, tail, tmp);
  if (::close(fd) != 0 && s.ok()) s = ErrnoError("close", tmp, errno);
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) s = ErrnoError("rename", tmp, errno);
  if (!s.ok()) ::unlink(tmp.c_str());
  return s;
}

StatusOr<std::vector<std::byte>> ReadFileStart(const std::string& path, uint64_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("open", path, errno);
  ScopeExit closer([fd] { ::close(fd); });
  struct stat st {};
  if (::fstat(fd, &st) != 0) return ErrnoError("fstat", path, errno);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  std::vector<std::byte> out(std::min(size, max_bytes));
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError("read", path, errno);
    if (n == 0) break;  // shrank under us: a short read, which the caller's checks refuse
    done += static_cast<size_t>(n);
  }
  out.resize(done);
  return out;
}

StatusOr<uint64_t> FileSize(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return ErrnoError("stat", path, errno);
  return static_cast<uint64_t>(st.st_size);
}

}  // namespace kvferry::kv_offload
