#include "kvferry/formats/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "kvferry/common/unique_handle.h"

namespace kvferry::formats {

namespace {

Status OsError(const std::string& what, const std::string& path, int err) {
  std::string message = what + " '" + path + "': " + std::strerror(err);
  return err == ENOENT ? NotFoundError(std::move(message))
                       : InvalidArgumentError(std::move(message));
}

}  // namespace

StatusOr<MappedFile> MappedFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return OsError("cannot open", path, errno);
  // The mapping stays valid after the descriptor is closed.
  ScopeExit close_fd([fd] { ::close(fd); });
  struct stat st;
  if (::fstat(fd, &st) != 0) return OsError("cannot stat", path, errno);
  if (!S_ISREG(st.st_mode)) return InvalidArgumentError("'" + path + "' is not a regular file");
  const size_t size = static_cast<size_t>(st.st_size);
  if (size == 0) return MappedFile(path, nullptr, 0);  // mmap refuses length 0
  void* addr = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (addr == MAP_FAILED) return OsError("cannot map", path, errno);
  return MappedFile(path, addr, size);
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      addr_(std::exchange(other.addr_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    Unmap();
    path_ = std::move(other.path_);
    addr_ = std::exchange(other.addr_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

MappedFile::~MappedFile() { Unmap(); }

void MappedFile::Unmap() {
  if (addr_ != nullptr) ::munmap(addr_, size_);
  addr_ = nullptr;
  size_ = 0;
}

}  // namespace kvferry::formats
