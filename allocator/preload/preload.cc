// libmonet_preload.so: LD_PRELOAD it (or use `monet run`) and an unchanged program allocates
// through monet under MONET_BUDGET.
//
// - CUDA: cudaMalloc, cudaFree and cudaMemGetInfo are interposed. cudaMalloc is served from
//   monet's pool of the current device, within the budget; cudaMemGetInfo reports the budget as
//   the device's total, so that frameworks size their caches to it. The real CUDA runtime is
//   found with dlsym(RTLD_NEXT): this library links no CUDA.
// - LibTorch CPU: it links no LibTorch either. Once the program loads its own c10 (on `import
//   torch`, seen through an interposed dlopen) and that LibTorch has no CUDA, it loads its
//   companion libmonet_preload_torch.so, which links only c10 (and so binds to the process's
//   own) and makes monet's pool LibTorch's CPU allocator. That dlopen finds a library as its
//   caller's would have (the caller's RUNPATH and $ORIGIN: dlopen_as, below).
// - In a program that does neither (/bin/ls), nothing is visible.
#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "allocator/device_pools.h"
#include "common/env.h"
#include "common/log.h"
#include "monet/errors.h"

#ifdef MONET_HAVE_CUDA
#include "allocator/cuda_api.h"
#include "allocator/cuda_backend.h"
#endif

namespace monet::preload {
namespace {

std::atomic<bool> g_torch_hooked{false};
thread_local bool t_in_dlopen = false;

using DlopenFn = void* (*)(const char*, int);

DlopenFn real_dlopen() {
  static DlopenFn fn = reinterpret_cast<DlopenFn>(dlsym(RTLD_NEXT, "dlopen"));
  return fn;
}

// Which LibTorch libraries the process has loaded, by file name.
struct LoadedTorch {
  bool c10 = false;
  bool c10_cuda = false;
};

LoadedTorch loaded_torch() {
  LoadedTorch found;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* f = static_cast<LoadedTorch*>(data);
        const char* path = info->dlpi_name;
        if (path == nullptr) return 0;
        const char* slash = std::strrchr(path, '/');
        const char* name = slash ? slash + 1 : path;
        if (std::strncmp(name, "libc10.so", 9) == 0) f->c10 = true;
        if (std::strncmp(name, "libc10_cuda.so", 14) == 0) f->c10_cuda = true;
        return 0;
      },
      &found);
  return found;
}

// The folder this library was loaded from; the companion lies beside it.
std::string own_folder() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&own_folder), &info) == 0 || info.dli_fname == nullptr) {
    return ".";
  }
  std::string path = info.dli_fname;
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

void hook_torch_if_loaded() {
  if (g_torch_hooked.load(std::memory_order_acquire)) return;
  const LoadedTorch torch = loaded_torch();
  if (!torch.c10) return;
  if (g_torch_hooked.exchange(true)) return;
  if (torch.c10_cuda) {
    // A CUDA LibTorch allocates device memory through cudaMalloc, which is interposed here; its
    // CPU tensors stay with LibTorch's own allocator.
    log(LogLevel::kInfo, "CUDA LibTorch found: device memory goes through monet via cudaMalloc");
    return;
  }
  const std::string companion = own_folder() + "/libmonet_preload_torch.so";
  void* handle = real_dlopen()(companion.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (handle == nullptr) {
    log(LogLevel::kError, "cannot load {}: {}; CPU tensors will not go through monet", companion,
        dlerror());
    return;
  }
  using InstallFn = void (*)();
  auto install = reinterpret_cast<InstallFn>(dlsym(handle, "monet_preload_install_cpu"));
  if (install == nullptr) {
    log(LogLevel::kError, "{} lacks monet_preload_install_cpu", companion);
    return;
  }
  install();
  log(LogLevel::kInfo, "LibTorch CPU tensors now go through monet");
}

// This library's own entry in the loader's list.
link_map* own_link_map() {
  static link_map* const map = [] {
    Dl_info info{};
    link_map* found = nullptr;
    if (dladdr1(reinterpret_cast<void*>(&own_folder), &info, reinterpret_cast<void**>(&found),
                RTLD_DL_LINKMAP) == 0) {
      return static_cast<link_map*>(nullptr);
    }
    return found;
  }();
  return map;
}

// The folders the loader searches, in order, for a file name without a slash that the object
// `map` dlopens (its RPATH, LD_LIBRARY_PATH, its RUNPATH, the system's), without ld.so.cache.
std::vector<std::string> search_folders(link_map* map) {
  Dl_serinfo size{};
  if (dlinfo(map, RTLD_DI_SERINFOSIZE, &size) != 0) return {};
  std::vector<std::max_align_t> buffer(size.dls_size / sizeof(std::max_align_t) + 1);
  auto* info = reinterpret_cast<Dl_serinfo*>(buffer.data());
  info->dls_size = size.dls_size;
  info->dls_cnt = size.dls_cnt;
  if (dlinfo(map, RTLD_DI_SERINFO, info) != 0) return {};
  std::vector<std::string> folders;
  for (unsigned i = 0; i < info->dls_cnt; ++i) folders.emplace_back(info->dls_serpath[i].dls_name);
  return folders;
}

// `file` with $ORIGIN and ${ORIGIN} replaced by the folder of the object `map`. The main program's
// folder is that of /proc/self/exe: glibc keeps no origin for it until one has been expanded, and
// RTLD_DI_ORIGIN then copies from nothing.
std::string expand_origin(const char* file, link_map* map) {
  std::string out = file;
  if (out.find("ORIGIN") == std::string::npos) return out;
  char origin[PATH_MAX + 1] = {};
  if (map->l_name == nullptr || map->l_name[0] == '\0') {
    const ssize_t n = readlink("/proc/self/exe", origin, PATH_MAX);
    if (n <= 0) return out;
    origin[n] = '\0';
    char* slash = std::strrchr(origin, '/');
    if (slash == nullptr) return out;
    *(slash == origin ? slash + 1 : slash) = '\0';
  } else if (dlinfo(map, RTLD_DI_ORIGIN, origin) != 0) {
    return out;
  }
  for (const char* token : {"${ORIGIN}", "$ORIGIN"}) {
    for (std::size_t at = out.find(token); at != std::string::npos; at = out.find(token, at)) {
      out.replace(at, std::strlen(token), origin);
      at += std::strlen(origin);
    }
  }
  return out;
}

// dlopen(file, mode) as the code at `caller` would have it. glibc resolves a name without a slash,
// and a $ORIGIN in one, from the object that called dlopen (found by the return address), and
// this library's interposer is that object to the real dlopen: a pip-installed cuDNN, whose
// RUNPATH is $ORIGIN, would not find the sub-libraries it loads by name beside it. So the folders
// the caller's object searches before ld.so.cache that this library does not (its RPATH or
// RUNPATH, in the loader's order among the LD_LIBRARY_PATH folders) are tried here first, a
// $ORIGIN is the caller's folder, and the rest (loaded objects by name, the cache, the system's
// folders: the same from both) is the real dlopen's. What this leaves apart from the loader's own
// search: a library found in the caller's folders is opened by its path, so a later dlopen of its
// bare name from elsewhere finds it only by its SONAME; the folders' glibc-hwcaps subfolders are
// not tried; and the fallback searches this library's folders, which may hold what the caller's
// would not find.
void* dlopen_as(const void* caller, const char* file, int mode) {
  if (file == nullptr || (mode & RTLD_NOLOAD) != 0) return real_dlopen()(file, mode);
  Dl_info info{};
  link_map* map = nullptr;
  if (dladdr1(caller, &info, reinterpret_cast<void**>(&map), RTLD_DL_LINKMAP) == 0 ||
      map == nullptr || map == own_link_map()) {
    return real_dlopen()(file, mode);
  }
  if (std::strchr(file, '$') != nullptr) {
    const std::string expanded = expand_origin(file, map);
    if (expanded.find('/') != std::string::npos) return real_dlopen()(expanded.c_str(), mode);
  }
  if (std::strchr(file, '/') != nullptr) return real_dlopen()(file, mode);
  // An object of that name already loaded is what dlopen gives, from any caller: this handle,
  // which holds it (closing it and opening again would let another thread unload it between).
  if (void* loaded = real_dlopen()(file, mode | RTLD_NOLOAD)) return loaded;
  const std::vector<std::string> theirs = search_folders(map);
  // This library's, the same for the process's life (LD_LIBRARY_PATH is read at its start).
  static const std::vector<std::string> ours =
      own_link_map() ? search_folders(own_link_map()) : std::vector<std::string>();
  std::size_t end = 0;  // past the last folder of theirs that is not ours
  for (std::size_t i = 0; i < theirs.size(); ++i) {
    if (std::find(ours.begin(), ours.end(), theirs[i]) == ours.end()) end = i + 1;
  }
  // A file the loader cannot take (another ELF class, unreadable) is passed over for the next
  // folder, as the loader's own search does.
  for (std::size_t i = 0; i < end; ++i) {
    const std::string path = theirs[i] + "/" + file;
    if (access(path.c_str(), F_OK) != 0) continue;
    if (void* handle = real_dlopen()(path.c_str(), mode)) return handle;
  }
  return real_dlopen()(file, mode);
}

// Checks the MONET_* variables and arranges the report at exit, once: when this library is loaded,
// or at the first CUDA call if that comes first (a library's constructor may allocate before
// this library's constructor has run). A malformed variable ends the program with its message.
void ready() {
  static std::once_flag once;
  std::call_once(once, [] {
    try {
      pools::validate_environment();
    } catch (const ConfigError& e) {
      write_log_line(e.what());
      _exit(2);
    }
    pools::report_at_exit(/*by_default=*/true);
  });
}

#ifdef MONET_HAVE_CUDA
// The handle of a CUDA runtime (libcudart.so*) the process has loaded, or nullptr.
void* loaded_cuda_runtime() {
  std::string path;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        const char* name = info->dlpi_name;
        if (name == nullptr) return 0;
        const char* slash = std::strrchr(name, '/');
        if (std::strncmp(slash ? slash + 1 : name, "libcudart.so", 12) != 0) return 0;
        *static_cast<std::string*>(data) = name;
        return 1;
      },
      &path);
  return path.empty() ? nullptr : real_dlopen()(path.c_str(), RTLD_LAZY | RTLD_NOLOAD);
}

// The CUDA runtime after this library, looked up on first use (the program loads it after us),
// or nullptr where none is found. A runtime loaded into a scope of its own (dlopen RTLD_LOCAL: a
// Python extension module that links libcudart) is out of RTLD_NEXT's reach, though its callers
// reach these interposers: it is then asked by its handle. Looked up again until found.
const CudaApi* real_cuda() {
  static std::atomic<const CudaApi*> found{nullptr};
  if (const CudaApi* api = found.load(std::memory_order_acquire)) return api;
  static std::mutex mutex;
  const std::lock_guard<std::mutex> lock(mutex);
  if (const CudaApi* api = found.load(std::memory_order_relaxed)) return api;
  static CudaApi api;
#define MONET_NEXT(member, function) look_up(api.member, handle, #function);
  void* handle = RTLD_NEXT;
  MONET_CUDA_API(MONET_NEXT)
  if (!api.complete() && (handle = loaded_cuda_runtime()) != nullptr) {
    MONET_CUDA_API(MONET_NEXT)
  }
#undef MONET_NEXT
  if (!api.complete()) return nullptr;
  found.store(&api, std::memory_order_release);
  return &api;
}

// What the interposers answer where no CUDA runtime is found to pass a call on to.
cudaError_t no_runtime(const char* function) {
  log(LogLevel::kError, "{}: no CUDA runtime found in this process to pass the call on to",
      function);
  return cudaErrorInitializationError;
}

// Writes why an interposed call failed, since its caller sees only the code: once where calls
// fail the same way again and again (a sticky error fails every call).
void report_failure(const std::string& line) {
  static std::mutex mutex;
  static std::string last;
  std::lock_guard<std::mutex> lock(mutex);
  if (line == last) return;
  last = line;
  log(LogLevel::kError, "{}", line);
}

// Runs an interposer's work and answers as CUDA would: no exception leaves a CUDA function, since
// a C program's frames cannot pass one on. Out of budget is cudaErrorMemoryAllocation, so that a
// framework frees its cache and tries again; a CUDA call that failed under monet answers with its
// own error (an earlier kernel's sticky error shows as itself, not as a want of memory); a setting
// the device cannot serve (MONET_CUDA_SEGMENTS=expandable without the driver's virtual memory API)
// is cudaErrorNotSupported.
template <typename Work>
cudaError_t answer(const char* function, Work&& work) {
  cudaError_t code = cudaErrorUnknown;
  try {
    return work();
  } catch (const OutOfMemoryError& e) {
    // The framework raises its own out-of-memory error; this line tells the user which budget
    // refused.
    log(LogLevel::kWarn, "{}", e.what());
    return cudaErrorMemoryAllocation;
  } catch (const CudaCallError& e) {
    code = e.code;
    report_failure(fmt::format("{} ({} returns error {})", e.what(), function, int{code}));
  } catch (const std::exception& e) {
    code = cudaErrorNotSupported;
    report_failure(fmt::format("{} ({} returns error {})", e.what(), function, int{code}));
  } catch (...) {
    report_failure(fmt::format("{} failed in monet for a reason it cannot name (returns error {})",
                               function, int{code}));
  }
  return code;
}

// The pool of the current device, or nullptr when monet cannot serve it.
CachingAllocator* current_pool(const CudaApi& real) {
  ready();
  static std::once_flag once;
  std::call_once(once, [&] { pools::set_cuda_api(&real); });
  int device = 0;
  if (real.get_device(&device) != cudaSuccess) return nullptr;
  if (device < 0 || device >= pools::cuda_devices()) return nullptr;
  return &pools::cuda(device);
}

// The device whose pool answers `ask` for `ptr` (owns: handed it out; holds: holds its memory, in
// use or cached), or -1 where none does. Every pool made so far is asked, whichever device is
// current: CUDA frees memory with another device current, and so does PyTorch when it empties its
// cache. No pool is made for asking.
int device_whose_pool(bool (CachingAllocator::*ask)(const void*), const void* ptr) {
  for (int d = 0; d < pools::cuda_devices(); ++d) {
    CachingAllocator* pool = pools::cuda_if_made(d);
    if (pool != nullptr && (pool->*ask)(ptr)) return d;
  }
  return -1;
}
#endif

}  // namespace

__attribute__((constructor)) void on_load() {
  ready();
  // A program linked against LibTorch has c10 already.
  hook_torch_if_loaded();
}

}  // namespace monet::preload

extern "C" {

__attribute__((visibility("default"))) void* dlopen(const char* file, int mode) {
  void* handle = monet::preload::dlopen_as(__builtin_return_address(0), file, mode);
  if (handle != nullptr && !monet::preload::t_in_dlopen &&
      !monet::preload::g_torch_hooked.load(std::memory_order_relaxed)) {
    monet::preload::t_in_dlopen = true;
    monet::preload::hook_torch_if_loaded();
    monet::preload::t_in_dlopen = false;
  }
  return handle;
}

#ifdef MONET_HAVE_CUDA
__attribute__((visibility("default"))) cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  using namespace monet;
  const CudaApi* real = preload::real_cuda();
  if (real == nullptr) return preload::no_runtime("cudaMalloc");
  if (ptr == nullptr) return cudaErrorInvalidValue;  // as CUDA answers it
  return preload::answer("cudaMalloc", [&] {
    *ptr = nullptr;
    CachingAllocator* pool = preload::current_pool(*real);
    if (pool == nullptr) return real->malloc(ptr, bytes);
    *ptr = pool->allocate(bytes);
    return cudaSuccess;
  });
}

__attribute__((visibility("default"))) cudaError_t cudaFree(void* ptr) {
  using namespace monet;
  const CudaApi* real = preload::real_cuda();
  if (real == nullptr) return preload::no_runtime("cudaFree");
  // cudaFree(nullptr) is how programs create the CUDA context: pass it on.
  if (ptr == nullptr) return real->free(ptr);
  return preload::answer("cudaFree", [&] {
    const int device = preload::device_whose_pool(&CachingAllocator::owns, ptr);
    if (device < 0) {
      // Memory of monet's that is not handed out: freed twice. The real cudaFree would give back
      // monet's whole segment, which it hands out again; CUDA answers such a free so.
      const int holder = preload::device_whose_pool(&CachingAllocator::holds, ptr);
      if (holder < 0) return real->free(ptr);
      preload::report_failure(fmt::format(
          "monet: cudaFree of {} on cuda:{}, which monet did not hand out or already took back "
          "(a pointer freed twice?); returns error {}",
          ptr, holder, int{cudaErrorInvalidValue}));
      return cudaErrorInvalidValue;
    }
    // cudaFree waits for the device, and callers rely on it: kernels still using the block must
    // finish before monet hands it out again. The block's device, not the current one; where it
    // cannot be made current, the block stays allocated and the error is the answer.
    cudaError_t status = cudaSuccess;
    {
      DeviceScope scope(*real, device);
      if (scope.status() != cudaSuccess) return scope.status();
      status = real->device_synchronize();
    }
    pools::cuda(device).free(ptr);
    return status;
  });
}

__attribute__((visibility("default"))) cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  using namespace monet;
  const CudaApi* real = preload::real_cuda();
  if (real == nullptr) return preload::no_runtime("cudaMemGetInfo");
  return preload::answer("cudaMemGetInfo", [&] {
    const cudaError_t status = real->mem_get_info(free, total);
    if (status != cudaSuccess) return status;
    CachingAllocator* pool = preload::current_pool(*real);
    if (pool == nullptr) return status;
    const MemoryStats s = pool->stats();
    if (s.budget_bytes == 0) return status;
    // Free: monet's cached blocks, plus what the budget still allows where the device has it.
    const size_t cached = s.reserved_bytes - s.allocated_bytes;
    const size_t budget_left = s.budget_bytes - s.reserved_bytes;
    *free = cached + (budget_left < *free ? budget_left : *free);
    *total = s.budget_bytes;
    return status;
  });
}
#endif

}  // extern "C"
