// MappedFile: a whole file mapped read-only into memory (open, fstat, mmap; munmap when the
// object dies). The readers point their tensor views into it, so weights are paged in from the
// page cache on first touch and never copied.
//
// Move-only; the mapping's address does not change when the object moves. An empty file maps
// to an empty span.
//
// Thread-safety: immutable; bytes() may be read from any thread.
#pragma once

#include <cstddef>
#include <span>
#include <string>

#include "kvferry/common/status.h"

namespace kvferry::formats {

class MappedFile {
 public:
  // NotFound when the path does not exist; InvalidArgument when it is not a regular file or
  // cannot be opened or mapped. Every error names the path.
  static StatusOr<MappedFile> Open(const std::string& path);

  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  std::span<const std::byte> bytes() const { return {static_cast<const std::byte*>(addr_), size_}; }
  const std::string& path() const { return path_; }

 private:
  MappedFile(std::string path, void* addr, size_t size)
      : path_(std::move(path)), addr_(addr), size_(size) {}
  void Unmap();

  std::string path_;
  void* addr_ = nullptr;  // null for an empty file
  size_t size_ = 0;
};

}  // namespace kvferry::formats
