// monet's caching allocator for one device: the pool logic, the budget, statistics, marks and the
// trace. It gets memory only through a Backend, so it is tested on host memory and runs on CUDA
// unchanged.
//
// Requests round up to 512 bytes and are served best-fit from cached free blocks of the same
// stream (small and large pools kept apart, see size_rules.h); a block larger than needed is split
// and a freed block merges with free neighbours. When nothing cached fits, a new segment is
// reserved, provided reserved bytes stay within the budget; if they would not, every fully free
// segment is released first. Only then does the request fail, with an OutOfMemoryError whose
// message has the numbers that matter.
//
// Over a backend that commits memory granule by granule (Backend::granularity()), reserved bytes
// are committed bytes: a block's granules are committed when it is handed out and stay committed
// while it is cached; the granules lying wholly inside free blocks are given back before the
// reservation would rise above its high-water mark (which rises by a quarter of what is given back
// so and wanted again: commit_limit()), and under budget pressure. Shapes that change from batch to
// batch then leave holes that cost address space, not memory.
//
// A block used on streams besides its own (record_stream) is reused only after events recorded on
// those streams at free time have completed.
//
// Thread-safe: one mutex guards everything.
#pragma once

#include <boost/intrusive/set.hpp>
#include <boost/intrusive/unordered_set.hpp>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "allocator/backend.h"
#include "allocator/block.h"
#include "allocator/peak_marks.h"
#include "allocator/trace.h"
#include "monet/memory_stats.h"

namespace monet {

class CachingAllocator {
 public:
  struct Options {
    std::size_t budget_bytes = 0;  // cap on reserved bytes; 0: no cap
    TraceWriter* trace = nullptr;  // where to record allocations and frees; not owned
    // The knob the budget came from, which an out-of-memory message tells the user to change.
    const char* budget_variable = "MONET_BUDGET";
  };

  // `backend` must outlive the allocator.
  CachingAllocator(Backend& backend, Options options);
  ~CachingAllocator();  // releases every segment; blocks still allocated are lost with them
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // Returns at least `bytes` bytes, 512-byte aligned, for use on `stream`. A request of 0 bytes
  // returns nullptr. Throws OutOfMemoryError when the budget or the device cannot hold it, and for
  // a request above size_rules::kMaxRequest (2^62 bytes, more than any address space).
  void* allocate(std::size_t bytes, Stream stream = 0);

  // Gives back a pointer from allocate(); nullptr is ignored. Throws std::invalid_argument for a
  // pointer this allocator did not hand out (or already took back).
  void free(void* ptr);

  // True when `ptr` is the start of a block this allocator handed out and has not taken back.
  bool owns(const void* ptr);
  // True when `ptr` lies in memory this allocator holds from its backend, in use or cached: a
  // pointer that is so and not owned() is one freed already (or never handed out), which must not
  // reach the backend's own free.
  bool holds(const void* ptr);

  // The block at `ptr` is also used on `stream`: when it is freed, it is reused only once the work
  // queued on `stream` by then has finished.
  void record_stream(void* ptr, Stream stream);

  // Releases every cached segment that holds no allocated block. Returns the bytes released.
  std::size_t release_cached();

  MemoryStats stats();
  // Sets the peaks to the current values.
  void reset_peaks();

  // Opens an interval for peak_since() and peak_requested_since(). Marks are cheap (one word
  // each) and cleared with clear_marks(); they never touch the statistics' peaks.
  Mark mark();
  // The most bytes allocated (rounded block sizes) at any moment since `m`.
  std::size_t peak_since(const Mark& m);
  // The most bytes requested (exact tensor sizes) at any moment since `m`.
  std::size_t peak_requested_since(const Mark& m);
  void clear_marks();

  std::size_t budget_bytes() const;
  void set_budget_bytes(std::size_t bytes);
  const std::string& device_name() const { return device_; }
  // The device's whole memory, bytes (the host's physical memory for the CPU pool): what a
  // budget written as a share ("60%") is a share of.
  std::size_t device_total_bytes() const { return backend_.total_bytes(); }

  // Taken before fork() and let go after it, in the parent and in the child (pools:: registers
  // both with pthread_atfork): the child has only the thread that forked, so a lock another
  // thread held at that moment would stay held in the child for ever.
  void lock_for_fork();
  void unlock_after_fork();

  // Checks every invariant of the pool: blocks tile their segments exactly, no two free
  // neighbours are left unmerged, every free block is in its free set and every allocated one in
  // the index, 512-byte alignment, and the statistics agree with the blocks. Returns a list of
  // violations, empty when all hold. O(blocks); for tests and debugging.
  std::vector<std::string> check_invariants();

 private:
  using FreeSet =
      bi::multiset<Block, bi::compare<BlockOrder>,
                   bi::member_hook<Block, decltype(Block::free_hook), &Block::free_hook>>;
  using ActiveIndex =
      bi::unordered_set<Block, bi::key_of_value<BlockAddress>, bi::hash<AddressHash>,
                        bi::power_2_buckets<true>,
                        bi::member_hook<Block, decltype(Block::active_hook), &Block::active_hook>>;

  using SegmentMap = std::map<const char*, Segment>;  // by base address

  struct PendingEvent {
    Event event;
    Block* block;
  };

  FreeSet& pool_of(const Block& b) { return b.small ? small_free_ : large_free_; }
  Block* take_free(bool small, Stream stream, std::size_t size);
  // Whether every byte of the segment `block` lies in is committed: always where segments are held
  // whole, and the steady state of a training loop where they are committed by granule.
  static bool wholly_committed(const Block& block) {
    return block.segment->committed_bytes == block.segment->size;
  }
  // Committed by granule, the reservation past which cached granules are given back before more
  // are committed. Under a budget, the budget: it is what the job may hold, and each giving back
  // costs a wait for the device on CUDA (and page faults on the host) when the memory is wanted
  // again. Without one, the high-water mark, which keeps the reservation tight. It rises by a
  // quarter (1 / kMarkRise) of what is committed again after it was given back to stay under it:
  // a training loop whose steps touch more granules than their peak in use then holds them all
  // after a few steps, rather than giving back and faulting in the same memory every step (the
  // CNN of tests/predictor/real_models_test.cc, 51 MiB a step at its largest shape), while shapes
  // that change from step to step, whose holes are wanted again only now and then, keep the
  // reservation near the peak in use (a quarter: 3.9% fragmentation on the README's trace; the
  // whole of it: 8.6%; none: 1.4%).
  static constexpr std::size_t kMarkRise = 4;
  std::size_t commit_limit() const {
    return options_.budget_bytes != 0 ? options_.budget_bytes : high_water_;
  }
  // Of `best` (the best fit for `size` bytes) and the 64 free blocks after it on its stream, the
  // one whose first `size` bytes need the fewest granules committed; `best` where committing its
  // granules would not pass the budget.
  FreeSet::iterator least_to_commit(FreeSet& pool, FreeSet::iterator best, std::size_t size) const;
  // Bytes of the granules under the first `size` bytes of `block` that are not committed.
  std::size_t uncommitted_bytes(const Block& block, std::size_t size) const;
  Block* reserve_segment(bool small, Stream stream, std::size_t size);
  Block* try_reserve(bool small, Stream stream, std::size_t segment);
  bool commit(Block* block);
  bool commit_granules(Block* block);
  // Gives back the committed granules lying wholly inside free blocks, at least `at_least` bytes
  // of them where there are that many (all by default). Returns the bytes given back. With
  // `under_mark`, they are given back to stay under the high-water mark, and recorded as such
  // (Segment::given_back).
  std::size_t decommit_free(std::size_t at_least = SIZE_MAX, bool under_mark = false);
  // decommit_free() of every such granule, inside one DecommitHold (below): one wait on CUDA.
  std::size_t decommit_all_free();
  // Gives back the committed granules of [first, last) in `segment`, run by run, each counted as
  // it goes (and added to `*released`): a backend error partway leaves the statistics as the
  // backend left the granules.
  void decommit_range(Segment& segment, std::size_t first, std::size_t last, bool under_mark,
                      std::size_t* released);
  // Counts one give-back (stats_.decommits, one wait for the device) when it goes out of scope
  // with `released` above 0, whether the give-back ended or a backend error cut it short.
  struct CountDecommit {
    CachingAllocator& pool;
    const std::size_t& released;
    ~CountDecommit();
  };
  void release_segment(Segment& segment);
  // From its making until end() (or its end of scope), the backend may keep what decommit() gives
  // back (Backend::hold_decommitted): on CUDA the first decommit waits for the device and the rest
  // do not, so that each give-back stats_.decommits counts is one wait, however many runs it has.
  // One made while another holds does nothing.
  class DecommitHold {
   public:
    explicit DecommitHold(CachingAllocator& pool);
    DecommitHold(const DecommitHold&) = delete;
    DecommitHold& operator=(const DecommitHold&) = delete;
    ~DecommitHold();  // reached holding only while an exception leaves: that error is reported
    void end();

   private:
    CachingAllocator& pool_;
    bool on_ = false;
  };
  void split(Block* block, std::size_t size);
  void make_free(Block* block);
  void process_events(bool wait);
  std::size_t release_free_segments();
  // Gives back cached whole segments of at least `bytes` in all, as few as it can: the smallest
  // one that is large enough alone, else the largest ones until they are enough (what PyTorch's
  // pool does before it empties its cache). Returns the bytes released, 0 when the free segments
  // together are not enough (then none is released).
  std::size_t release_free_segments(std::size_t bytes);
  // Gives the wholly free segment at `it` back to the device; returns the entry after it.
  SegmentMap::iterator release_free_segment(SegmentMap::iterator it);
  // Whether no block of `segment` is in use or pending: its head spans it and is free.
  static bool wholly_free(const Segment& segment);
  [[noreturn]] void throw_out_of_memory(std::size_t requested);
  // The most contiguous bytes a cached free block holds with memory behind them: a request up to
  // that size needs nothing new from the device. Address space alone does not count.
  std::size_t largest_free() const;
  // The longest run of committed bytes inside `block`; its size where segments are held whole.
  std::size_t committed_run(const Block& block) const;
  Block* new_block();
  void recycle(Block* block);
  void grow_index();

  Backend& backend_;
  Options options_;
  const std::string device_;
  mutable std::mutex mutex_;

  FreeSet small_free_;
  FreeSet large_free_;
  std::vector<ActiveIndex::bucket_type> buckets_;
  ActiveIndex active_;
  const std::size_t granularity_;  // the backend's; 0: segments held whole
  SegmentMap segments_;            // by base address; nodes stay put
  // The most bytes ever reserved, raised by a quarter of what was given back under it and wanted
  // again (commit_limit).
  std::size_t high_water_ = 0;
  std::deque<PendingEvent> pending_;
  // Whether the last refusal while serving the request in progress was the device's (reserve or
  // commit found no room), not the budget's: the out-of-memory message says which, and what to do.
  bool device_refused_ = false;
  bool holding_decommitted_ = false;  // a DecommitHold is on

  std::deque<Block> block_storage_;  // owns every Block; addresses stay stable
  std::vector<Block*> spare_blocks_;

  MemoryStats stats_;
  PeakMarks marks_;            // over allocated bytes
  PeakMarks requested_marks_;  // over requested bytes; same ids as marks_
};

}  // namespace monet
