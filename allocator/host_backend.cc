#include "allocator/host_backend.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

namespace monet {

std::size_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_size = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return 0;
  return static_cast<std::size_t>(pages) * static_cast<std::size_t>(page_size);
}

HostBackend::HostBackend() : HostBackend(Options{}) {}

HostBackend::HostBackend(Options options) : options_(options) {}

std::size_t HostBackend::total_bytes() const {
  return options_.capacity_bytes != 0 ? options_.capacity_bytes : physical_memory_bytes();
}

bool HostBackend::take(std::size_t bytes) {
  if (options_.capacity_bytes != 0 && held_bytes_ + bytes > options_.capacity_bytes) return false;
  held_bytes_ += bytes;
  return true;
}

void* HostBackend::reserve(std::size_t bytes) {
  if (options_.granularity == 0 && !take(bytes)) return nullptr;
  const int protection = options_.backed ? PROT_READ | PROT_WRITE : PROT_NONE;
  int flags = MAP_PRIVATE | MAP_ANONYMOUS;
  if (!options_.backed) flags |= MAP_NORESERVE;
  void* p = ::mmap(nullptr, bytes, protection, flags, -1, 0);
  if (p == MAP_FAILED) {
    if (options_.granularity == 0) held_bytes_ -= bytes;
    if (errno == ENOMEM) return nullptr;
    throw std::runtime_error(std::string("monet: mmap of a host segment failed: ") +
                             std::strerror(errno));
  }
  return p;
}

void HostBackend::release(void* segment, std::size_t bytes) {
  ::munmap(segment, bytes);
  if (options_.granularity == 0) held_bytes_ -= bytes;
}

// Linux backs anonymous pages on first touch, so committing is bookkeeping against the capacity;
// decommitting returns the pages to the system at once.
bool HostBackend::commit(void*, std::size_t bytes) { return take(bytes); }

void HostBackend::decommit(void* ptr, std::size_t bytes) {
  if (options_.backed) ::madvise(ptr, bytes, MADV_DONTNEED);
  held_bytes_ -= bytes;
}

}  // namespace monet
