// monet-replay: replays an allocation trace (MONET_TRACE, docs/trace.md) through monet's pool
// and prints peak allocated, peak reserved and fragmentation, per device. The replay reserves
// address space only, so a trace from a large GPU replays anywhere.
//
//   monet-replay TRACE [--budget B] [--granularity G] [--json]
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "allocator/caching_allocator.h"
#include "allocator/host_backend.h"
#include "allocator/trace.h"
#include "monet/bytes.h"
#include "monet/errors.h"

namespace {

[[noreturn]] void usage(const std::string& problem) {
  if (!problem.empty()) std::cerr << "monet-replay: " << problem << "\n";
  // Asked for (no problem), the help goes to stdout, to be paged or searched.
  (problem.empty() ? std::cout : std::cerr)
      << "usage: monet-replay TRACE [--budget B] [--granularity G] [--json]\n"
         "  TRACE            a file written with MONET_TRACE=FILE\n"
         "  --budget B       replay under this budget (1GiB, 512MiB...); default: none\n"
         "  --granularity G  commit memory in granules of G (default 2MiB, as CUDA's\n"
         "                   expandable segments do; monet's CPU pool uses 64KiB);\n"
         "                   0 holds segments whole, as cudaMalloc does\n"
         "  --json           print one JSON object per device instead of a table\n";
  std::exit(problem.empty() ? 0 : 2);
}

struct Replay {
  std::unique_ptr<monet::HostBackend> backend;
  std::unique_ptr<monet::CachingAllocator> pool;
  struct Live {
    void* replayed;     // nullptr for an allocation the replay refused: its free is then skipped,
                        // not counted as a free of a block allocated before the trace began
    std::size_t bytes;  // what the allocation asked for
    std::size_t line;   // the trace's line that allocated it
  };
  std::map<std::uintptr_t, Live> live;  // by traced address
  std::uint64_t events = 0;  // the trace's lines for this device, refused and unmatched ones too
  std::uint64_t refused = 0;
  std::uint64_t unmatched_frees = 0;
};

}  // namespace

int main(int argc, char** argv) {
  std::string path;
  std::string budget_text;
  std::string granularity_text = "2MiB";
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--json") {
      json = true;
    } else if (arg == "--budget") {
      if (i + 1 >= argc) usage("--budget needs a value");
      budget_text = argv[++i];
    } else if (arg == "--granularity") {
      if (i + 1 >= argc) usage("--granularity needs a value");
      granularity_text = argv[++i];
    } else if (arg == "--help" || arg == "-h") {
      usage("");
    } else if (!arg.empty() && arg[0] == '-') {
      usage("unknown option " + arg);
    } else if (path.empty()) {
      path = arg;
    } else {
      usage("one trace at a time");
    }
  }
  if (path.empty()) usage("no trace given");

  std::size_t budget = 0;
  std::size_t granularity = 0;
  std::vector<monet::TraceEvent> events;
  try {
    if (!budget_text.empty()) budget = monet::parse_budget(budget_text, 0, "--budget");
    granularity = monet::parse_size(granularity_text, "--granularity");
  } catch (const monet::ConfigError& e) {
    usage(e.what());
  }
  if (granularity != 0 && ((granularity & (granularity - 1)) != 0 || granularity < 512 ||
                           granularity > (std::size_t{1} << 30))) {
    usage("--granularity must be 0 or a power of two from 512 bytes to 1GiB (CUDA's is 2MiB)");
  }
  try {
    // A folder opens as a file and reads as nothing: an empty trace.
    if (std::filesystem::is_directory(path)) usage(path + " is a folder, not a trace");
    std::ifstream in(path, std::ios::binary);
    if (!in) usage("cannot open " + path);
    // A last line cut short by a job that stopped while writing it is left out: the events
    // before it still replay.
    std::string cut;
    events = monet::read_trace(in, &cut);
    if (!cut.empty()) {
      std::cerr << "monet-replay: " << path << ": the last line, '" << cut
                << "', is cut short (the traced job stopped while writing it); it is left out\n";
    }
  } catch (const std::exception& e) {
    std::cerr << "monet-replay: " << path << ": " << e.what() << "\n";
    return 2;
  }

  std::map<std::string, Replay> devices;
  for (const monet::TraceEvent& e : events) {
    Replay& r = devices[e.device];
    ++r.events;
    if (!r.pool) {
      monet::HostBackend::Options options;
      options.backed = false;  // address space only: the replay never touches the blocks
      options.granularity = granularity;
      r.backend = std::make_unique<monet::HostBackend>(options);
      r.pool = std::make_unique<monet::CachingAllocator>(
          *r.backend, monet::CachingAllocator::Options{budget, nullptr});
    }
    // A pool hands out no address twice at once and a free repeats its allocation's size: a
    // trace where either fails is damaged (lines lost, or two traces run together), and replaying
    // it would hold a block forever or free the wrong one.
    auto damaged = [&](const std::string& what) {
      std::cerr << "monet-replay: " << path << ": trace line " << e.line << ": " << what
                << "; the trace is damaged (lines lost, or two traces joined) and is not "
                   "replayed\n";
      return 2;
    };
    if (e.op == monet::TraceEvent::Op::kAlloc) {
      if (auto it = r.live.find(e.address); it != r.live.end()) {
        return damaged(fmt::format(
            "it allocates 0x{:x} on {}, which line {} allocated and no line has freed since",
            e.address, e.device, it->second.line));
      }
      void* replayed = nullptr;
      try {
        replayed = r.pool->allocate(e.bytes, e.stream);
      } catch (const monet::OutOfMemoryError&) {
        ++r.refused;
      }
      r.live.emplace(e.address, Replay::Live{replayed, e.bytes, e.line});
    } else {
      auto it = r.live.find(e.address);
      if (it == r.live.end()) {
        ++r.unmatched_frees;  // allocated before tracing began
        continue;
      }
      if (it->second.bytes != e.bytes) {
        return damaged(
            fmt::format("it frees 0x{:x} on {} as {} bytes, which line {} allocated as {}",
                        e.address, e.device, e.bytes, it->second.line, it->second.bytes));
      }
      if (it->second.replayed != nullptr) r.pool->free(it->second.replayed);
      r.live.erase(it);
    }
  }

  if (devices.empty() && !json) fmt::print("{}: no allocations or frees to replay\n", path);
  nlohmann::json out = nlohmann::json::array();
  for (auto& [device, r] : devices) {
    const monet::MemoryStats s = r.pool->stats();
    if (json) {
      out.push_back({{"device", device},
                     {"events", r.events},
                     {"peak_allocated_bytes", s.peak_allocated_bytes},
                     {"peak_requested_bytes", s.peak_requested_bytes},
                     {"peak_reserved_bytes", s.peak_reserved_bytes},
                     {"fragmentation", s.fragmentation()},
                     {"budget_bytes", budget},
                     {"granularity_bytes", granularity},
                     {"refused", r.refused},
                     {"refused_in_pieces", s.out_of_memory_in_pieces},
                     {"segment_reserves", s.segment_reserves},
                     {"segment_releases", s.segment_releases},
                     {"cache_flushes", s.cache_flushes},
                     {"committed_bytes", s.committed_bytes_total},
                     {"decommitted_bytes", s.decommitted_bytes_total},
                     {"decommits", s.decommits},
                     {"unmatched_frees", r.unmatched_frees}});
      continue;
    }
    fmt::print("{}: {} allocations, {} frees, {}\n", device, s.allocations, s.frees,
               granularity != 0 ? fmt::format("memory committed in {} granules",
                                              monet::format_bytes(granularity))
                                : std::string("segments held whole"));
    fmt::print("  peak allocated  {:>12}\n", monet::format_bytes(s.peak_allocated_bytes));
    fmt::print("  peak requested  {:>12}\n", monet::format_bytes(s.peak_requested_bytes));
    fmt::print("  peak reserved   {:>12}\n", monet::format_bytes(s.peak_reserved_bytes));
    fmt::print("  fragmentation   {:>11.2f}%\n", 100.0 * s.fragmentation());
    if (budget != 0 || r.refused != 0) {
      fmt::print(
          "  refused         {:>12}  ({} with room in the budget: the free memory in pieces)\n",
          r.refused, s.out_of_memory_in_pieces);
    }
    // What holding the memory costs a device: each segment taken is a cudaMalloc, each given back
    // a cudaFree, which waits for the device.
    fmt::print("  segments taken  {:>12}  ({} given back, in {} cache flushes)\n",
               s.segment_reserves, s.segment_releases, s.cache_flushes);
    // Committed by granule, each time granules go back is on CUDA a wait for the device.
    if (granularity != 0) {
      fmt::print("  committed       {:>12}  ({} given back, {} times)\n",
                 monet::format_bytes(s.committed_bytes_total),
                 monet::format_bytes(s.decommitted_bytes_total), s.decommits);
    }
    if (r.unmatched_frees != 0) {
      fmt::print("  frees of blocks allocated before the trace began: {}\n", r.unmatched_frees);
    }
  }
  if (json) std::cout << out.dump(2) << "\n";
  return 0;
}
