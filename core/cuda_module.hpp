// The CUDA module: every CUDA source of hgsim (kernels/*.cu, compress/*.cu) is built into
// one shared library, libhgsim_cuda.so, the only thing that links the CUDA runtime, cuBLAS
// and cuBLASLt. The hgsim binaries and the Python module do not link it: they load it on
// the first call that needs a GPU, so that a command that uses none does not pay CUDA's
// start-up (mapping the libraries, cuBLASLt's static initialisation: about 0.2 s).
//
// Each plain C++17 interface to CUDA code (kernels/cuda_runtime_query.hpp,
// kernels/ops_cuda.hpp, compress/codec_cuda_body.hpp) declares, beside its functions, a
// table of pointers to them that the module exports under one C name; the main libraries
// define the interface's functions as forwarders through that table, and when the module
// cannot be loaded they fail the way a build without CUDA does, with the reason from here.
//
// Where the module is looked for: the file named by the environment variable
// HGSIM_CUDA_MODULE when it is set, otherwise beside the binary or Python extension that
// contains this code, then in lib/ one and two folders up (the build tree puts it in
// <build>/lib; the binaries are <build>/apps/hgsim, <build>/tests/..., the extension
// <build>/python/hgsim/_hgsim*.so).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace hgsim::core {

// Whether this build made the CUDA module (nvcc was found when it was configured).
bool cuda_module_built();

// The address of the exported function `symbol` of the CUDA module, which is loaded on
// the first call (once per process, thread-safe); nullptr when it cannot be, with `why`
// saying why (no CUDA in this build, the module not found, dlopen's or dlsym's error).
void* cuda_module_symbol(const char* symbol, std::string& why);

// The table of an interface (a struct whose first members are `int version` and
// `std::size_t size`, with static members kVersion and kSymbol), which the module exports
// as `extern "C" const Table* <kSymbol>()`; checked against this build's layout and
// resolved once. nullptr with `why` when the module or the table cannot be had.
template <class Table>
const Table* cuda_module_table(std::string& why) {
  struct Resolved {
    const Table* table = nullptr;
    std::string why;
  };
  static const Resolved resolved = [] {
    Resolved r;
    void* address = cuda_module_symbol(Table::kSymbol, r.why);
    if (!address) return r;
    const Table* table = reinterpret_cast<const Table* (*)()>(address)();
    if (table && table->version == Table::kVersion && table->size == sizeof(Table))
      r.table = table;
    else
      r.why = std::string("the CUDA module's ") + Table::kSymbol +
              " is from another version of hgsim (rebuild it with the binaries)";
    return r;
  }();
  if (!resolved.table) why = resolved.why;
  return resolved.table;
}

namespace detail {

// Where the module is looked for, in order (see the top of this file): `env` alone when it
// is set and not empty, else the candidates beside `binary` (the file that holds this
// code).
std::vector<std::string> cuda_module_candidates(const std::string& binary, const char* env);

// Loads the module as the first call does, uncached: the first candidate that exists is
// opened (never unloaded). nullptr with `why` when none exists or it cannot be opened
// (dlerror's text). `env` stands for HGSIM_CUDA_MODULE; for the loader and its tests.
void* load_cuda_module(const char* env, std::string& why);

}  // namespace detail

}  // namespace hgsim::core
