// The caching allocator under any sequence of allocations, frees, streams, releases and budgets,
// on address space only (an unbacked host backend): live blocks never overlap and are 512-byte
// aligned, the bytes requested are the sum of the live requests, reserved bytes never pass the
// budget, and everything comes back.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <map>
#include <utility>

#include "allocator/caching_allocator.h"
#include "allocator/host_backend.h"
#include "monet/errors.h"

namespace {

void check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "pool_fuzz: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  monet::HostBackend::Options backend_options;
  backend_options.backed = false;
  backend_options.granularity =
      (data[0] & 1) != 0 ? (std::size_t{2} << 20) : ((data[0] & 2) != 0 ? 65536 : 0);
  backend_options.capacity_bytes = (data[0] & 4) != 0 ? (std::size_t{1} << 30) : 0;
  monet::HostBackend backend(backend_options);
  monet::CachingAllocator::Options options;
  options.budget_bytes = (data[0] & 8) != 0 ? (std::size_t{data[1]} << 22) : 0;
  monet::CachingAllocator pool(backend, options);

  std::map<std::uintptr_t, std::size_t> live;  // address -> bytes requested
  std::size_t requested = 0;
  std::size_t i = 2;
  const auto next = [&](int bytes) {
    std::uint64_t v = 0;
    for (int k = 0; k < bytes && i < size; ++k) v = v << 8 | data[i++];
    return v;
  };
  const auto check_stats = [&] {
    const monet::MemoryStats s = pool.stats();
    check(s.requested_bytes == requested, "requested bytes are not the live requests' sum");
    check(s.allocated_bytes >= s.requested_bytes, "fewer bytes allocated than requested");
    check(options.budget_bytes == 0 || s.reserved_bytes <= options.budget_bytes,
          "reserved bytes above the budget");
  };
  while (i < size) {
    const unsigned op = next(1) % 8;
    if (op <= 3) {
      const std::uint64_t kind = next(1);
      std::size_t bytes = 0;
      switch (kind % 4) {
        case 0:
          bytes = next(1);
          break;
        case 1:
          bytes = next(2) * 8;
          break;
        case 2:
          bytes = next(3) * 16;
          break;
        default:
          bytes = next(1) << (next(1) % 31);
          break;  // up to 255 GiB
      }
      void* p = nullptr;
      try {
        p = pool.allocate(bytes, static_cast<monet::Stream>(kind >> 7));
      } catch (const monet::OutOfMemoryError&) {
        continue;
      }
      if (bytes == 0) {
        check(p == nullptr, "a request of 0 bytes returned memory");
        continue;
      }
      const auto at = reinterpret_cast<std::uintptr_t>(p);
      check(p != nullptr && at % 512 == 0, "a block is not 512-byte aligned");
      const auto after = live.lower_bound(at);
      check(after == live.end() || at + bytes <= after->first, "a block overlaps the next");
      check(after == live.begin() || std::prev(after)->first + std::prev(after)->second <= at,
            "a block overlaps the one before");
      live[at] = bytes;
      requested += bytes;
    } else if (op <= 5) {
      if (live.empty()) continue;
      auto it = live.begin();
      std::advance(it, static_cast<std::ptrdiff_t>(next(1) % live.size()));
      if (op == 5 && (next(1) & 1) != 0) pool.record_stream(reinterpret_cast<void*>(it->first), 1);
      pool.free(reinterpret_cast<void*>(it->first));
      requested -= it->second;
      live.erase(it);
    } else if (op == 6) {
      pool.release_cached();
    } else {
      check_stats();
    }
  }
  check_stats();
  for (const auto& block : live) pool.free(reinterpret_cast<void*>(block.first));
  check(pool.stats().allocated_bytes == 0, "bytes still allocated after every free");
  pool.release_cached();
  check(pool.stats().reserved_bytes == 0, "bytes still reserved after every free and release");
  return 0;
}
