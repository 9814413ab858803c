#include "allocator/caching_allocator.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <vector>

#include "allocator/size_rules.h"
#include "monet/bytes.h"
#include "monet/errors.h"

namespace monet {
namespace {

constexpr std::size_t kInitialBuckets = 1024;
// Committed by granule: how many free blocks after the best fit a request looks at for one whose
// memory is committed (in replays of training traces, none took more than 64).
constexpr int kCommittedSearch = 64;

}  // namespace

CachingAllocator::CachingAllocator(Backend& backend, Options options)
    : backend_(backend),
      options_(options),
      device_(backend.device_name()),
      buckets_(kInitialBuckets),
      active_(ActiveIndex::bucket_traits(buckets_.data(), buckets_.size())),
      granularity_(backend.granularity()) {
  stats_.device = device_;
  stats_.budget_bytes = options_.budget_bytes;
}

CachingAllocator::~CachingAllocator() {
  active_.clear();
  small_free_.clear();
  large_free_.clear();
  for (auto& [base, segment] : segments_) release_segment(segment);
  for (const PendingEvent& p : pending_) backend_.destroy_event(p.event);
}

void* CachingAllocator::allocate(std::size_t bytes, Stream stream) {
  if (bytes == 0) return nullptr;
  std::lock_guard<std::mutex> lock(mutex_);
  device_refused_ = false;
  if (bytes > size_rules::kMaxRequest) throw_out_of_memory(bytes);
  const std::size_t size = size_rules::block_size(bytes);
  const bool small = size_rules::is_small(size);

  if (!pending_.empty()) process_events(/*wait=*/false);
  // Whether a new segment was taken for the request: without one it is a cache hit, also where
  // the block was freed by an event reserve_segment waited for.
  const std::uint64_t reserves = stats_.segment_reserves;
  Block* block = take_free(small, stream, size);
  if (block == nullptr) {
    block = reserve_segment(small, stream, size);
    if (block == nullptr) throw_out_of_memory(bytes);
  }
  split(block, size);
  block->state = BlockState::kAllocated;  // kept out of the cache's reach while committing
  bool committed = false;
  try {
    committed = commit(block);
  } catch (...) {
    make_free(block);  // a backend's error (a CUDA call that failed): the block goes back cached
    throw;
  }
  if (!committed) {
    make_free(block);
    throw_out_of_memory(bytes);
  }
  if (stats_.segment_reserves == reserves) ++stats_.cache_hits;
  block->requested = bytes;
  if (active_.size() >= buckets_.size()) grow_index();
  active_.insert(*block);

  ++stats_.allocations;
  stats_.allocated_bytes += block->size;
  stats_.requested_bytes += bytes;
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  stats_.peak_requested_bytes = std::max(stats_.peak_requested_bytes, stats_.requested_bytes);
  marks_.on_allocated(stats_.allocated_bytes);
  requested_marks_.on_allocated(stats_.requested_bytes);
  if (options_.trace != nullptr) {
    options_.trace->record(TraceEvent::Op::kAlloc, device_, stream, bytes, block->address);
  }
  return block->address;
}

void CachingAllocator::free(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = active_.find(static_cast<const char*>(ptr));
  if (it == active_.end()) {
    throw std::invalid_argument(fmt::format(
        "monet: free of {} on {}, which this allocator did not hand out or already took back", ptr,
        device_));
  }
  Block* block = &*it;
  // The events first: where the backend cannot record one, the free fails with nothing changed
  // (the block still handed out), rather than leave a block waiting for an event never recorded.
  std::vector<Event> events;
  events.reserve(block->other_streams.size());
  try {
    for (Stream s : block->other_streams) events.push_back(backend_.record_event(s));
  } catch (...) {
    // The recording's error is the one reported; these go back as far as the backend lets.
    for (Event e : events) {
      try {
        backend_.destroy_event(e);
      } catch (...) {
      }
    }
    throw;
  }
  active_.erase(it);

  ++stats_.frees;
  stats_.allocated_bytes -= block->size;
  stats_.requested_bytes -= block->requested;
  if (options_.trace != nullptr) {
    options_.trace->record(TraceEvent::Op::kFree, device_, block->stream, block->requested,
                           block->address);
  }
  block->requested = 0;

  if (block->other_streams.empty()) {
    make_free(block);
    return;
  }
  block->state = BlockState::kPending;
  block->pending_events = static_cast<int>(events.size());
  for (Event e : events) pending_.push_back({e, block});
  block->other_streams.clear();
}

bool CachingAllocator::owns(const void* ptr) {
  std::lock_guard<std::mutex> lock(mutex_);
  return active_.find(static_cast<const char*>(ptr)) != active_.end();
}

bool CachingAllocator::holds(const void* ptr) {
  const char* p = static_cast<const char*>(ptr);
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = segments_.upper_bound(p);
  if (it == segments_.begin()) return false;
  --it;
  return p < it->second.base + it->second.size;
}

void CachingAllocator::record_stream(void* ptr, Stream stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = active_.find(static_cast<const char*>(ptr));
  if (it == active_.end()) {
    throw std::invalid_argument(
        fmt::format("monet: record_stream on {}, which is not allocated on {}", ptr, device_));
  }
  Block& block = *it;
  if (stream == block.stream) return;
  auto& others = block.other_streams;
  if (std::find(others.begin(), others.end(), stream) == others.end()) others.push_back(stream);
}

Block* CachingAllocator::take_free(bool small, Stream stream, std::size_t size) {
  FreeSet& pool = small ? small_free_ : large_free_;
  Block key;
  key.stream = stream;
  key.size = size;
  auto it = pool.lower_bound(key);
  if (it == pool.end() || it->stream != stream) return nullptr;
  // Committed by granule, the best fit may lie on granules given back earlier, and where
  // committing them would pass the budget, others are given back first (on CUDA a wait for the
  // device): a larger free block whose memory is still committed serves without either. Only
  // near a budget (where the granules the block spans, at most two more than its size fills,
  // could pass it): without one, the best fit is committed once and then stays so, where looking
  // past it would look again at every request of its size.
  if (options_.budget_bytes != 0 &&
      stats_.reserved_bytes + size + 2 * granularity_ > options_.budget_bytes &&
      !wholly_committed(*it)) {
    it = least_to_commit(pool, it, size);
  }
  Block* block = &*it;
  pool.erase(it);
  return block;
}

CachingAllocator::FreeSet::iterator CachingAllocator::least_to_commit(FreeSet& pool,
                                                                      FreeSet::iterator best,
                                                                      std::size_t size) const {
  std::size_t least = uncommitted_bytes(*best, size);
  if (stats_.reserved_bytes + least <= options_.budget_bytes) return best;  // it fits
  auto it = best;
  auto c = std::next(best);
  for (int seen = 0; seen < kCommittedSearch && c != pool.end() && c->stream == best->stream;
       ++seen, ++c) {
    const std::size_t u = wholly_committed(*c) ? 0 : uncommitted_bytes(*c, size);
    if (u < least) {
      least = u;
      it = c;
      if (least == 0) break;
    }
  }
  return it;
}

std::size_t CachingAllocator::uncommitted_bytes(const Block& block, std::size_t size) const {
  const Segment& segment = *block.segment;
  const auto offset = static_cast<std::size_t>(block.address - segment.base);
  const std::size_t first = offset / granularity_, end = (offset + size - 1) / granularity_ + 1;
  return (end - first - segment.committed.count(first, end)) * granularity_;
}

Block* CachingAllocator::reserve_segment(bool small, Stream stream, std::size_t size) {
  // The preferred segment is shared by later requests; under a tight budget a segment of exactly
  // the block's size may still fit where the preferred one does not.
  const std::size_t preferred = size_rules::segment_size(size);
  const auto try_both = [&]() -> Block* {
    if (Block* b = try_reserve(small, stream, preferred)) return b;
    return preferred != size ? try_reserve(small, stream, size) : nullptr;
  };
  if (Block* b = try_both()) return b;
  process_events(/*wait=*/true);
  // A pending block may have been the one that fits.
  if (Block* b = take_free(small, stream, size)) return b;
  // Whole segments over a budget: give back only what the budget needs first, so that the cached
  // segments the rest of the step asks for again stay (each one given back is a cudaFree, which
  // waits for the device, and a cudaMalloc when it is wanted again).
  if (granularity_ == 0 && options_.budget_bytes != 0 &&
      stats_.reserved_bytes + size > options_.budget_bytes &&
      release_free_segments(stats_.reserved_bytes + size - options_.budget_bytes) > 0) {
    ++stats_.cache_flushes;
    if (Block* b = try_both()) return b;
  }
  if (release_free_segments() == 0) return nullptr;
  ++stats_.cache_flushes;
  return try_both();
}

Block* CachingAllocator::try_reserve(bool small, Stream stream, std::size_t bytes) {
  // Held whole, a segment counts against the budget at once; committed by granule, it is address
  // space until its blocks are handed out.
  if (granularity_ == 0 && options_.budget_bytes != 0 &&
      stats_.reserved_bytes + bytes > options_.budget_bytes) {
    device_refused_ = false;
    return nullptr;
  }
  if (granularity_ != 0) bytes = size_rules::round_up(bytes, granularity_);
  void* memory = backend_.reserve(bytes);
  if (memory == nullptr) {
    device_refused_ = true;
    return nullptr;
  }
  Block* block = new_block();
  block->address = static_cast<char*>(memory);
  block->size = bytes;
  block->stream = stream;
  block->small = small;
  Segment& segment = segments_[block->address];
  segment.base = block->address;
  segment.size = bytes;
  segment.head = block;
  block->segment = &segment;
  ++stats_.segments;
  ++stats_.segment_reserves;
  if (granularity_ == 0) {
    segment.committed_bytes = bytes;
    stats_.reserved_bytes += bytes;
    stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
    high_water_ = std::max(high_water_, stats_.reserved_bytes);
  } else {
    segment.committed.assign(bytes / granularity_);
    segment.given_back.assign(bytes / granularity_);
  }
  return block;
}

bool CachingAllocator::commit(Block* block) {
  // Held whole, or wholly committed (the steady state of a training loop): nothing to do.
  if (wholly_committed(*block)) return true;
  const std::size_t needed = uncommitted_bytes(*block, block->size);
  if (needed == 0) return true;
  // Give back cached granules before the budget would refuse, and without a budget before the
  // reservation grows past its high-water mark; only then commit new memory. Only as many as the
  // commit needs: a training step at its largest shape passes the mark by a little, and giving
  // back every hole made it fault all of them in again, every step.
  const bool over_budget =
      options_.budget_bytes != 0 && stats_.reserved_bytes + needed > options_.budget_bytes;
  // What is given back here to make room is committed again at once: the backend may keep its
  // memory for that (Backend::hold_decommitted) until this call returns or the device is full.
  std::optional<DecommitHold> hold;
  if (const std::size_t limit = commit_limit(); stats_.reserved_bytes + needed > limit) {
    hold.emplace(*this);
    if (over_budget) process_events(/*wait=*/true);
    if (decommit_free(stats_.reserved_bytes + needed - limit, options_.budget_bytes == 0) > 0 &&
        over_budget) {
      ++stats_.cache_flushes;
    }
  }
  if (options_.budget_bytes != 0 && stats_.reserved_bytes + needed > options_.budget_bytes) {
    if (hold) hold->end();
    device_refused_ = false;
    return false;
  }
  const bool committed = commit_granules(block);
  if (hold) hold->end();  // the device full or not, what was kept and not used goes back now
  if (committed) return true;
  // The device itself is full: give back everything cached, then try once more.
  process_events(/*wait=*/true);
  decommit_all_free();
  release_free_segments();
  return commit_granules(block);
}

std::size_t CachingAllocator::decommit_all_free() {
  DecommitHold hold(*this);
  const std::size_t released = decommit_free();
  hold.end();
  return released;
}

CachingAllocator::DecommitHold::DecommitHold(CachingAllocator& pool) : pool_(pool) {
  if (pool_.granularity_ == 0 || pool_.holding_decommitted_) return;
  pool_.backend_.hold_decommitted(true);
  pool_.holding_decommitted_ = on_ = true;
}

void CachingAllocator::DecommitHold::end() {
  if (!on_) return;
  on_ = false;
  pool_.holding_decommitted_ = false;
  pool_.backend_.hold_decommitted(false);
}

CachingAllocator::DecommitHold::~DecommitHold() {
  try {
    end();
  } catch (...) {
  }
}

bool CachingAllocator::commit_granules(Block* block) {
  Segment& segment = *block->segment;
  const std::size_t first = static_cast<std::size_t>(block->address - segment.base) / granularity_;
  const std::size_t last =
      static_cast<std::size_t>(block->address + block->size - 1 - segment.base) / granularity_;
  // Runs of uncommitted granules, each committed in one call.
  std::size_t g = segment.committed.run_end(first, last + 1, true);
  while (g <= last) {
    const std::size_t end = segment.committed.run_end(g, last + 1, false);
    const std::size_t bytes = (end - g) * granularity_;
    if (!backend_.commit(segment.base + g * granularity_, bytes)) {
      device_refused_ = true;
      return false;
    }
    segment.committed.set(g, end, true);
    // Given back under the mark and wanted again: the mark rises by a quarter as much
    // (commit_limit).
    if (const std::size_t again = segment.given_back.count(g, end); again != 0) {
      segment.given_back.set(g, end, false);
      if (options_.budget_bytes == 0) high_water_ += again * granularity_ / kMarkRise;
    }
    segment.committed_bytes += bytes;
    stats_.reserved_bytes += bytes;
    stats_.committed_bytes_total += bytes;
    // Counted run by run: a later run that fails leaves the peaks above what is reserved.
    stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
    high_water_ = std::max(high_water_, stats_.reserved_bytes);
    g = segment.committed.run_end(end, last + 1, true);
  }
  return true;
}

void CachingAllocator::decommit_range(Segment& segment, std::size_t first, std::size_t last,
                                      bool under_mark, std::size_t* released) {
  // Runs of committed granules, each given back in one call and counted as it is: where a later
  // run's call fails, what the earlier ones gave back is counted given back.
  std::size_t g = segment.committed.run_end(first, last, false);
  while (g < last) {
    const std::size_t end = segment.committed.run_end(g, last, true);
    const std::size_t bytes = (end - g) * granularity_;
    backend_.decommit(segment.base + g * granularity_, bytes);
    segment.committed.set(g, end, false);
    if (under_mark) segment.given_back.set(g, end, true);
    segment.committed_bytes -= bytes;
    stats_.reserved_bytes -= bytes;
    stats_.decommitted_bytes_total += bytes;
    *released += bytes;
    g = segment.committed.run_end(end, last, false);
  }
}

CachingAllocator::CountDecommit::~CountDecommit() {
  if (released > 0) ++pool.stats_.decommits;
}

std::size_t CachingAllocator::decommit_free(std::size_t at_least, bool under_mark) {
  if (granularity_ == 0) return 0;
  std::size_t released = 0;
  // Large holes first, the largest of each stream first (a set is ordered by stream, then size),
  // each from its end: what is given back is then a few long runs, and the holes' starts, which
  // the next best fit reuses, stay committed.
  const CountDecommit count{*this, released};
  for (FreeSet* pool : {&large_free_, &small_free_}) {
    for (auto it = pool->rbegin(); it != pool->rend() && released < at_least; ++it) {
      Segment& segment = *it->segment;
      const auto begin = static_cast<std::size_t>(it->address - segment.base);
      const std::size_t first = (begin + granularity_ - 1) / granularity_;  // wholly inside only
      const std::size_t last = (begin + it->size) / granularity_;
      // The hole's last granules that hold what is still wanted, given back as runs at once.
      const std::size_t wanted = at_least - released;
      const std::size_t granules = wanted / granularity_ + (wanted % granularity_ != 0 ? 1 : 0);
      const std::size_t g = segment.committed.start_of_last(first, last, granules);
      if (g < last) decommit_range(segment, g, last, under_mark, &released);
    }
  }
  return released;
}

void CachingAllocator::release_segment(Segment& segment) {
  if (granularity_ != 0) {
    DecommitHold hold(*this);
    std::size_t released = 0;
    const CountDecommit count{*this, released};
    decommit_range(segment, 0, segment.committed.size(), /*under_mark=*/false, &released);
    hold.end();
  }
  // Counted once the backend has it back: where it refuses, the segment stays the pool's, whole.
  backend_.release(segment.base, segment.size);
  if (granularity_ == 0) stats_.reserved_bytes -= segment.size;
}

void CachingAllocator::split(Block* block, std::size_t size) {
  const std::size_t remaining = block->size - size;
  if (!size_rules::should_split(block->small, remaining)) return;
  Block* rest = new_block();
  rest->address = block->address + size;
  rest->size = remaining;
  rest->stream = block->stream;
  rest->small = block->small;
  rest->segment = block->segment;
  rest->prev = block;
  rest->next = block->next;
  if (block->next != nullptr) block->next->prev = rest;
  block->next = rest;
  block->size = size;
  rest->state = BlockState::kFree;
  pool_of(*rest).insert(*rest);
}

void CachingAllocator::make_free(Block* block) {
  FreeSet& pool = pool_of(*block);
  block->state = BlockState::kFree;
  if (Block* prev = block->prev; prev != nullptr && prev->state == BlockState::kFree) {
    pool.erase(pool.iterator_to(*prev));
    prev->size += block->size;
    prev->next = block->next;
    if (block->next != nullptr) block->next->prev = prev;
    recycle(block);
    block = prev;
  }
  if (Block* next = block->next; next != nullptr && next->state == BlockState::kFree) {
    pool.erase(pool.iterator_to(*next));
    block->size += next->size;
    block->next = next->next;
    if (next->next != nullptr) next->next->prev = block;
    recycle(next);
  }
  pool.insert(*block);
}

void CachingAllocator::process_events(bool wait) {
  // Events complete in the order they were recorded on a stream, not across streams; a finished
  // event behind an unfinished one waits for the next pass, which costs only time.
  while (!pending_.empty()) {
    PendingEvent p = pending_.front();
    if (wait) {
      backend_.wait_event(p.event);
    } else if (!backend_.event_done(p.event)) {
      return;
    }
    pending_.pop_front();
    // The block first: an event the backend fails to destroy leaves no block pending for ever.
    if (--p.block->pending_events == 0) make_free(p.block);
    backend_.destroy_event(p.event);
  }
}

bool CachingAllocator::wholly_free(const Segment& segment) {
  return segment.head->is_segment() && segment.head->state == BlockState::kFree;
}

std::size_t CachingAllocator::release_free_segments() {
  std::size_t released = 0;
  for (auto it = segments_.begin(); it != segments_.end();) {
    if (wholly_free(it->second)) {
      released += it->second.committed_bytes;
      it = release_free_segment(it);
    } else {
      ++it;
    }
  }
  return released;
}

std::size_t CachingAllocator::release_free_segments(std::size_t bytes) {
  std::vector<SegmentMap::iterator> free_segments;
  std::size_t available = 0;
  for (auto it = segments_.begin(); it != segments_.end(); ++it) {
    if (wholly_free(it->second)) {
      free_segments.push_back(it);
      available += it->second.committed_bytes;
    }
  }
  if (available < bytes) return 0;
  const auto held = [](SegmentMap::iterator it) { return it->second.committed_bytes; };
  std::sort(free_segments.begin(), free_segments.end(),
            [&](SegmentMap::iterator a, SegmentMap::iterator b) { return held(a) < held(b); });
  std::vector<SegmentMap::iterator> chosen;
  const auto enough = std::lower_bound(
      free_segments.begin(), free_segments.end(), bytes,
      [&](SegmentMap::iterator it, std::size_t wanted) { return held(it) < wanted; });
  if (enough != free_segments.end()) {
    chosen.push_back(*enough);
  } else {
    std::size_t sum = 0;
    for (auto it = free_segments.rbegin(); it != free_segments.rend() && sum < bytes; ++it) {
      chosen.push_back(*it);
      sum += held(*it);
    }
  }
  std::size_t released = 0;
  for (const SegmentMap::iterator it : chosen) {
    released += held(it);
    release_free_segment(it);
  }
  return released;
}

CachingAllocator::SegmentMap::iterator CachingAllocator::release_free_segment(
    SegmentMap::iterator it) {
  Block* head = it->second.head;
  // Released first: where the backend refuses, the segment and its free block stay as they were.
  release_segment(it->second);
  pool_of(*head).erase(pool_of(*head).iterator_to(*head));
  --stats_.segments;
  ++stats_.segment_releases;
  recycle(head);
  return segments_.erase(it);
}

std::size_t CachingAllocator::release_cached() {
  std::lock_guard<std::mutex> lock(mutex_);
  process_events(/*wait=*/true);
  const std::size_t decommitted = decommit_all_free();
  return decommitted + release_free_segments();
}

void CachingAllocator::throw_out_of_memory(std::size_t requested) {
  ++stats_.out_of_memory;
  const std::size_t largest = largest_free();
  const std::string budget =
      options_.budget_bytes != 0
          ? fmt::format("of a {} budget ({})", format_bytes(options_.budget_bytes),
                        options_.budget_variable)
          : fmt::format("with no budget set, on a device of {}",
                        format_bytes(backend_.total_bytes()));
  std::string why;
  std::string advice = fmt::format("Raise {} or make the batch smaller.", options_.budget_variable);
  if (device_refused_) {
    // The device itself had no room, even after monet gave back its cache: memory held outside
    // monet, or a budget above what the device has. A larger budget cannot help.
    why = options_.budget_bytes != 0
              ? fmt::format(
                    "; the budget has room for it, but the device ({} in all) does not, "
                    "even with monet's cache given back",
                    format_bytes(backend_.total_bytes()))
              : "; the device has no room for it, even with monet's cache given back";
    advice = options_.budget_bytes != 0
                 ? fmt::format(
                       "Free the device memory that other programs hold, or lower {} to "
                       "what the device has free.",
                       options_.budget_variable)
                 : "Free the device memory that other programs hold, or make the batch smaller.";
  } else if (options_.budget_bytes != 0 && requested <= size_rules::kMaxRequest &&
             stats_.allocated_bytes + size_rules::block_size(requested) <= options_.budget_bytes &&
             granularity_ != 0 &&
             stats_.allocated_bytes +
                     size_rules::round_up(size_rules::block_size(requested), granularity_) >
                 options_.budget_bytes) {
    // The request's bytes fit, but not the granules they are committed in: a budget of less room
    // than one granule (a replay at 2 MiB granules under a 1 MiB budget), not memory in pieces.
    why = fmt::format(
        "; the budget has room for its bytes, but not for the {} granules memory is committed in",
        format_bytes(granularity_));
  } else if (options_.budget_bytes != 0 && requested <= size_rules::kMaxRequest &&
             stats_.allocated_bytes + size_rules::block_size(requested) <= options_.budget_bytes) {
    // Under a budget with room for the request, what refused it is how the free memory lies: in
    // holes of segments partly in use, which cannot be given back to make a new one.
    ++stats_.out_of_memory_in_pieces;
    why = fmt::format(
        "; the budget has room for it, but its free memory is in pieces{}",
        granularity_ == 0
            ? " of segments held whole (MONET_CUDA_SEGMENTS=expandable maps memory by granule, "
              "where pieces add up)"
            : "");
  }
  throw OutOfMemoryError(
      fmt::format("monet: out of memory on {}: tried to allocate {}; {} allocated, {} reserved {}, "
                  "largest free block {}{}. {}",
                  device_, format_bytes(requested), format_bytes(stats_.allocated_bytes),
                  format_bytes(stats_.reserved_bytes), budget, format_bytes(largest), why, advice),
      requested, stats_.allocated_bytes, stats_.reserved_bytes, options_.budget_bytes, largest);
}

std::size_t CachingAllocator::largest_free() const {
  std::size_t largest = 0;
  for (const FreeSet* pool : {&small_free_, &large_free_}) {
    for (const Block& b : *pool) {
      if (b.size > largest) largest = std::max(largest, committed_run(b));
    }
  }
  return largest;
}

std::size_t CachingAllocator::committed_run(const Block& block) const {
  if (wholly_committed(block)) return block.size;
  const Segment& segment = *block.segment;
  const auto begin = static_cast<std::size_t>(block.address - segment.base);
  const std::size_t end = begin + block.size;
  const std::size_t last = (end - 1) / granularity_ + 1;
  std::size_t longest = 0;
  for (std::size_t g = begin / granularity_; g < last;) {
    g = segment.committed.run_end(g, last, false);  // the next committed granule
    if (g == last) break;
    const std::size_t run_end = segment.committed.run_end(g, last, true);
    longest = std::max(longest,
                       std::min(end, run_end * granularity_) - std::max(begin, g * granularity_));
    g = run_end;
  }
  return longest;
}

MemoryStats CachingAllocator::stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  MemoryStats s = stats_;
  s.active_blocks = active_.size();
  s.free_blocks = small_free_.size() + large_free_.size();
  s.largest_free_bytes = largest_free();
  return s;
}

void CachingAllocator::reset_peaks() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
  stats_.peak_requested_bytes = stats_.requested_bytes;
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
}

Mark CachingAllocator::mark() {
  std::lock_guard<std::mutex> lock(mutex_);
  requested_marks_.mark(stats_.requested_bytes);
  Mark m = marks_.mark(stats_.allocated_bytes);
  m.requested_bytes = stats_.requested_bytes;
  return m;
}

std::size_t CachingAllocator::peak_since(const Mark& m) {
  std::lock_guard<std::mutex> lock(mutex_);
  return marks_.peak_since(m);
}

std::size_t CachingAllocator::peak_requested_since(const Mark& m) {
  std::lock_guard<std::mutex> lock(mutex_);
  return requested_marks_.peak_since(m);
}

void CachingAllocator::clear_marks() {
  std::lock_guard<std::mutex> lock(mutex_);
  marks_.clear();
  requested_marks_.clear();
}

void CachingAllocator::lock_for_fork() { mutex_.lock(); }
void CachingAllocator::unlock_after_fork() { mutex_.unlock(); }

std::size_t CachingAllocator::budget_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return options_.budget_bytes;
}

void CachingAllocator::set_budget_bytes(std::size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  options_.budget_bytes = bytes;
  stats_.budget_bytes = bytes;
  // A lower budget takes effect at once as far as cached memory allows.
  if (bytes != 0 && stats_.reserved_bytes > bytes) {
    process_events(/*wait=*/true);
    decommit_all_free();
    release_free_segments();
  }
}

std::vector<std::string> CachingAllocator::check_invariants() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::string> problems;
  auto report = [&](std::string what) { problems.push_back(std::move(what)); };

  std::size_t reserved = 0, allocated = 0, requested = 0, free_count = 0, active_count = 0;
  for (const auto& [base, segment] : segments_) {
    const Block* head = segment.head;
    if (head->address != base || head->prev != nullptr || segment.base != base) {
      report(fmt::format("segment {} does not start with its first block", fmt::ptr(base)));
    }
    if (granularity_ != 0) {
      const std::size_t committed = segment.committed.count();
      if (committed * granularity_ != segment.committed_bytes) {
        report(fmt::format("segment {} counts {} committed bytes but {} granules are",
                           fmt::ptr(base), segment.committed_bytes, committed));
      }
    } else if (segment.committed_bytes != segment.size) {
      report(fmt::format("segment {} held whole counts {} of {} bytes", fmt::ptr(base),
                         segment.committed_bytes, segment.size));
    }
    reserved += segment.committed_bytes;
    const char* expected = base;
    for (const Block* b = head; b != nullptr; b = b->next) {
      if (b->address != expected) {
        report(fmt::format("block {} should start at {} (gap or overlap)", fmt::ptr(b->address),
                           fmt::ptr(expected)));
      }
      if (b->segment != &segment)
        report(fmt::format("block {} names another segment", fmt::ptr(b->address)));
      if (b->next != nullptr && b->next->prev != b) {
        report(fmt::format("block {}: next->prev does not point back", fmt::ptr(b->address)));
      }
      if (reinterpret_cast<std::uintptr_t>(b->address) % size_rules::kMinBlock != 0 ||
          b->size % size_rules::kMinBlock != 0 || b->size == 0) {
        report(fmt::format("block {} of {} bytes is not 512-byte aligned", fmt::ptr(b->address),
                           b->size));
      }
      if (b->small != head->small || b->stream != head->stream) {
        report(fmt::format("block {} differs from its segment in pool or stream",
                           fmt::ptr(b->address)));
      }
      switch (b->state) {
        case BlockState::kFree:
          ++free_count;
          if (!b->free_hook.is_linked()) {
            report(fmt::format("free block {} not in a free set", fmt::ptr(b->address)));
          }
          if (b->next != nullptr && b->next->state == BlockState::kFree) {
            report(fmt::format("free blocks {} and {} are neighbours, unmerged",
                               fmt::ptr(b->address), fmt::ptr(b->next->address)));
          }
          break;
        case BlockState::kAllocated: {
          ++active_count;
          allocated += b->size;
          requested += b->requested;
          if (b->requested > b->size) {
            report(fmt::format("block {} is smaller than asked", fmt::ptr(b->address)));
          }
          if (!b->active_hook.is_linked()) {
            report(fmt::format("allocated block {} not indexed", fmt::ptr(b->address)));
          }
          if (granularity_ != 0) {
            if (uncommitted_bytes(*b, b->size) != 0) {
              report(fmt::format("allocated block {} lies on an uncommitted granule",
                                 fmt::ptr(b->address)));
            }
          }
          break;
        }
        case BlockState::kPending:
          if (b->pending_events <= 0) {
            report(fmt::format("pending block {} has no events", fmt::ptr(b->address)));
          }
          break;
      }
      expected = b->address + b->size;
    }
    if (expected != base + segment.size) {
      report(fmt::format("blocks of segment {} cover {} of its {} bytes", fmt::ptr(base),
                         expected - base, segment.size));
    }
  }
  if (free_count != small_free_.size() + large_free_.size()) {
    report(fmt::format("{} free blocks in segments but {} in free sets", free_count,
                       small_free_.size() + large_free_.size()));
  }
  if (active_count != active_.size()) {
    report(fmt::format("{} allocated blocks in segments but {} indexed", active_count,
                       active_.size()));
  }
  if (reserved != stats_.reserved_bytes) {
    report(fmt::format("segments hold {} bytes but stats say {} reserved", reserved,
                       stats_.reserved_bytes));
  }
  if (allocated != stats_.allocated_bytes || requested != stats_.requested_bytes) {
    report(fmt::format("blocks hold {}/{} bytes allocated/requested but stats say {}/{}", allocated,
                       requested, stats_.allocated_bytes, stats_.requested_bytes));
  }
  if (segments_.size() != stats_.segments) {
    report(fmt::format("{} segments but stats say {}", segments_.size(), stats_.segments));
  }
  if (options_.budget_bytes != 0 && stats_.reserved_bytes > options_.budget_bytes) {
    report(fmt::format("{} bytes reserved over a budget of {}", stats_.reserved_bytes,
                       options_.budget_bytes));
  }
  if (stats_.peak_allocated_bytes < stats_.allocated_bytes ||
      stats_.peak_reserved_bytes < stats_.reserved_bytes) {
    report("a peak is below its current value");
  }
  return problems;
}

Block* CachingAllocator::new_block() {
  if (spare_blocks_.empty()) {
    block_storage_.emplace_back();
    return &block_storage_.back();
  }
  Block* b = spare_blocks_.back();
  spare_blocks_.pop_back();
  return b;
}

void CachingAllocator::recycle(Block* block) {
  block->address = nullptr;
  block->size = 0;
  block->requested = 0;
  block->prev = block->next = nullptr;
  block->state = BlockState::kFree;
  block->pending_events = 0;
  block->other_streams.clear();
  spare_blocks_.push_back(block);
}

void CachingAllocator::grow_index() {
  std::vector<ActiveIndex::bucket_type> bigger(buckets_.size() * 2);
  active_.rehash(ActiveIndex::bucket_traits(bigger.data(), bigger.size()));
  buckets_.swap(bigger);
}

}  // namespace monet
