#include "core/cuda_module.hpp"

#include <dlfcn.h>
#include <link.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <system_error>

namespace hgsim::core {

namespace {

namespace fs = std::filesystem;

#ifdef HGSIM_CUDA_MODULE_FILE
constexpr const char* kModuleFile = HGSIM_CUDA_MODULE_FILE;
#else
constexpr const char* kModuleFile = nullptr;
#endif

// The file this code was linked into: the Python extension when it was loaded as one (its
// path from the dynamic loader), otherwise the executable (/proc/self/exe: argv[0], which
// dladdr reports for it, may be a bare name or relative to another folder).
std::string this_binary() {
  Dl_info info{};
  link_map* map = nullptr;
  std::string path = "/proc/self/exe";
  if (dladdr1(reinterpret_cast<void*>(&this_binary), &info, reinterpret_cast<void**>(&map),
              RTLD_DL_LINKMAP) != 0 &&
      map && map->l_name && map->l_name[0] != '\0')
    path = map->l_name;
  std::error_code ec;
  const fs::path resolved = fs::canonical(path, ec);
  return ec ? path : resolved.string();
}

struct Loaded {
  void* handle = nullptr;
  std::string why;
};

const Loaded& loaded() {
  static const Loaded module = [] {
    Loaded l;
    l.handle = detail::load_cuda_module(std::getenv("HGSIM_CUDA_MODULE"), l.why);
    return l;
  }();
  return module;
}

}  // namespace

bool cuda_module_built() {
  return kModuleFile != nullptr;
}

void* cuda_module_symbol(const char* symbol, std::string& why) {
  const Loaded& module = loaded();
  if (!module.handle) {
    why = module.why;
    return nullptr;
  }
  dlerror();
  void* address = dlsym(module.handle, symbol);
  if (!address) {
    const char* error = dlerror();
    why = std::string("the CUDA module has no ") + symbol + ": " + (error ? error : "null");
  }
  return address;
}

namespace detail {

std::vector<std::string> cuda_module_candidates(const std::string& binary, const char* env) {
  if (env && env[0] != '\0') return {env};
  if (!kModuleFile) return {};
  const fs::path dir = fs::path(binary).parent_path();
  return {(dir / kModuleFile).string(), (dir.parent_path() / "lib" / kModuleFile).string(),
          (dir.parent_path().parent_path() / "lib" / kModuleFile).string()};
}

void* load_cuda_module(const char* env, std::string& why) {
  if (!cuda_module_built()) {
    why = "this build has no CUDA sources (nvcc was not found when it was configured)";
    return nullptr;
  }
  // dlopen's error for each candidate; those of files that exist come first (a module
  // that is there but cannot load, e.g. without libcudart, says more than a missing one).
  std::string present, missing;
  std::vector<std::string> tried;
  for (const std::string& path : cuda_module_candidates(this_binary(), env)) {
    if (std::find(tried.begin(), tried.end(), path) != tried.end()) continue;
    tried.push_back(path);
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle) return handle;
    const char* error = dlerror();
    std::error_code ec;
    std::string& list = fs::exists(path, ec) ? present : missing;
    list += (list.empty() ? "" : "; ") + std::string(error ? error : path + ": unknown error");
  }
  const std::string errors = present.empty() ? missing : present;
  if (env && env[0] != '\0')
    why = "cannot load the CUDA module that HGSIM_CUDA_MODULE names (" + errors + ")";
  else
    why = "cannot load the CUDA module (" + errors + "); it is built into <build>/lib with " +
          "the binaries: set HGSIM_CUDA_MODULE to its path if it was moved";
  return nullptr;
}

}  // namespace detail

}  // namespace hgsim::core
