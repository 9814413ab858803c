#include "monet/memory_stats.h"

#include <fmt/format.h>

#include "monet/bytes.h"

namespace monet {

std::string format_stats(const MemoryStats& s) {
  std::string out = fmt::format("memory on {}\n", s.device);
  auto row = [&](const char* name, const std::string& now, const std::string& peak) {
    out += fmt::format("  {:<22} {:>12} {:>12}\n", name, now, peak);
  };
  row("", "now", "peak");
  row("allocated", format_bytes(s.allocated_bytes), format_bytes(s.peak_allocated_bytes));
  row("requested", format_bytes(s.requested_bytes), format_bytes(s.peak_requested_bytes));
  row("reserved", format_bytes(s.reserved_bytes), format_bytes(s.peak_reserved_bytes));
  out += fmt::format("  {:<22} {:>12}\n", "budget",
                     s.budget_bytes != 0 ? format_bytes(s.budget_bytes) : std::string("none"));
  out += fmt::format("  {:<22} {:>11.2f}%\n", "fragmentation", 100.0 * s.fragmentation());
  out +=
      fmt::format("  {:<22} {:>12}  ({} from cache)\n", "allocations", s.allocations, s.cache_hits);
  out += fmt::format("  {:<22} {:>12}\n", "frees", s.frees);
  out += fmt::format("  {:<22} {:>12}  ({} reserved, {} released)\n", "segments", s.segments,
                     s.segment_reserves, s.segment_releases);
  out += fmt::format("  {:<22} {:>12}  ({} free, largest {})\n", "blocks in use", s.active_blocks,
                     s.free_blocks, format_bytes(s.largest_free_bytes));
  out += fmt::format("  {:<22} {:>12}\n", "cache flushes", s.cache_flushes);
  out += fmt::format("  {:<22} {:>12}  ({} with room in the budget, the free memory in pieces)\n",
                     "out of memory", s.out_of_memory, s.out_of_memory_in_pieces);
  if (s.committed_bytes_total != 0) {
    out += fmt::format("  {:<22} {:>12}  ({} given back, {} times)\n", "committed, in all",
                       format_bytes(s.committed_bytes_total),
                       format_bytes(s.decommitted_bytes_total), s.decommits);
  }
  return out;
}

}  // namespace monet
