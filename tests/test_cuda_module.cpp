// The CUDA module's loader (core/cuda_module.hpp): where it looks, what it says when the
// module cannot be loaded, and that every CUDA interface then fails with that reason the
// way a build without CUDA does. The last test runs for real in a CPU-only build, and in a
// CUDA build under ctest's cuda_module.absent (HGSIM_CUDA_MODULE naming a missing file).
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "compress/codec.hpp"
#include "compress/codec_cuda_body.hpp"
#include "compress/codec_spec.hpp"
#include "core/cuda_module.hpp"
#include "kernels/cuda_devices.hpp"
#include "kernels/cuda_runtime_query.hpp"
#include "kernels/ops_cuda.hpp"

namespace {

namespace fs = std::filesystem;
using hgsim::core::cuda_module_built;
using hgsim::core::detail::cuda_module_candidates;
using hgsim::core::detail::load_cuda_module;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

const std::string kNoCudaBuild = "nvcc was not found";

TEST(CudaModule, LooksBesideTheBinaryThenInLibOneAndTwoFoldersUp) {
  if (!cuda_module_built()) {
    EXPECT_TRUE(cuda_module_candidates("/x/build/apps/hgsim", nullptr).empty());
    return;
  }
  const std::vector<std::string> apps = cuda_module_candidates("/x/build/apps/hgsim", nullptr);
  ASSERT_EQ(apps.size(), 3u);
  const std::string name = fs::path(apps[0]).filename().string();
  EXPECT_EQ(name, "libhgsim_cuda.so");
  EXPECT_EQ(apps[0], "/x/build/apps/" + name);
  EXPECT_EQ(apps[1], "/x/build/lib/" + name);  // <build>/lib: where the build puts it
  EXPECT_EQ(apps[2], "/x/lib/" + name);
  // The Python extension is two folders below the build: <build>/python/hgsim/_hgsim.so.
  EXPECT_EQ(cuda_module_candidates("/x/build/python/hgsim/_hgsim.so", nullptr)[2],
            "/x/build/lib/" + name);
  // HGSIM_CUDA_MODULE alone when it is set; empty counts as unset.
  EXPECT_EQ(cuda_module_candidates("/x/build/apps/hgsim", "/elsewhere/m.so"),
            std::vector<std::string>{"/elsewhere/m.so"});
  EXPECT_EQ(cuda_module_candidates("/x/build/apps/hgsim", ""), apps);
}

TEST(CudaModule, AMissingModuleSaysWhereAndWhyWithDlopensError) {
  const std::string path = "/nonexistent-hgsim-dir/libhgsim_cuda.so";
  std::string why;
  EXPECT_EQ(load_cuda_module(path.c_str(), why), nullptr);
  if (!cuda_module_built()) {
    EXPECT_TRUE(contains(why, kNoCudaBuild)) << why;
    return;
  }
  EXPECT_TRUE(contains(why, "HGSIM_CUDA_MODULE")) << why;
  EXPECT_TRUE(contains(why, path + ": cannot open shared object file: No such file or directory"))
      << why;
}

TEST(CudaModule, AFileThatIsNotAModuleSaysSo) {
  if (!cuda_module_built()) GTEST_SKIP() << "no CUDA module in this build";
  const fs::path file =
      fs::temp_directory_path() / ("hgsim_not_a_module_" + std::to_string(::getpid()) + ".so");
  std::ofstream(file) << "not an ELF shared object, just text long enough to have a header\n";
  std::string why;
  EXPECT_EQ(load_cuda_module(file.c_str(), why), nullptr);
  fs::remove(file);
  EXPECT_TRUE(contains(why, file.string() + ": ")) << why;
  EXPECT_FALSE(contains(why, "No such file")) << why;  // it exists: dlopen's own reason
}

// The module this build made, found beside the test binary: its three tables resolve with
// this build's layout (the symbols of kernels/ and compress/ headers match the .cu files).
TEST(CudaModule, TheBuildsModuleExportsEveryTable) {
  if (!cuda_module_built()) GTEST_SKIP() << "no CUDA module in this build";
  if (const char* env = std::getenv("HGSIM_CUDA_MODULE"))
    GTEST_SKIP() << "HGSIM_CUDA_MODULE=" << env;
  std::string why;
  if (!load_cuda_module(nullptr, why)) GTEST_SKIP() << why;  // e.g. no libcudart here
  EXPECT_NE(hgsim::core::cuda_module_table<hgsim::kernels::detail::CudaDevicesTable>(why), nullptr)
      << why;
  EXPECT_NE(hgsim::core::cuda_module_table<hgsim::kernels::gpu::OpsCudaTable>(why), nullptr) << why;
  EXPECT_NE(hgsim::core::cuda_module_table<hgsim::compress::cuda::CodecCudaTable>(why), nullptr)
      << why;
  std::string none;
  EXPECT_EQ(hgsim::core::cuda_module_symbol("hgsim_no_such_table", none), nullptr);
  EXPECT_TRUE(contains(none, "hgsim_no_such_table")) << none;
}

// Without the module every CUDA interface fails, as in a build without CUDA, and each says
// the loader's reason: no device listed, no codec with a CUDA kernel, every op an error.
TEST(CudaModule, WithoutTheModuleEveryCallFailsWithTheReason) {
  std::string expected;
  if (cuda_module_built()) {
    const char* env = std::getenv("HGSIM_CUDA_MODULE");
    if (!env || fs::exists(env))
      GTEST_SKIP() << "the module can be loaded (ctest runs this "
                      "as cuda_module.absent)";
    expected = std::string(env) + ": cannot open shared object file";
  } else {
    expected = kNoCudaBuild;
  }
  std::string why;
  EXPECT_TRUE(hgsim::kernels::local_cuda_devices(&why).empty());
  EXPECT_TRUE(contains(why, expected)) << why;

  std::string error;
  hgsim::kernels::gpu::CudaDeviceInfo info;
  EXPECT_FALSE(hgsim::kernels::gpu::cuda_device_info(&info, &error));
  EXPECT_TRUE(contains(error, expected)) << error;
  hgsim::kernels::gpu::CudaTiming timing;
  error.clear();
  EXPECT_FALSE(hgsim::kernels::gpu::cuda_time_op("gemm", {64, 64, 64}, "fp32", 5, &timing, &error));
  EXPECT_TRUE(contains(error, expected)) << error;

  namespace compress = hgsim::compress;
  why.clear();
  EXPECT_FALSE(compress::cuda_available(&why));
  EXPECT_TRUE(contains(why, expected)) << why;
  std::vector<float> x(16, 1.0f);
  for (const std::string& name : compress::codec_names()) {
    const compress::CodecSpec spec = compress::default_spec(*compress::codec_kind(name));
    EXPECT_FALSE(compress::cuda_supports(spec.kind)) << name;
    std::vector<std::byte> out(
        compress::encoded_bytes(spec, compress::Shape{4, 4}, compress::DType::fp32));
    EXPECT_THROW(compress::encode_cuda(spec, compress::Shape{4, 4}, std::span<const float>(x), out),
                 compress::CodecError)
        << name;
  }
  compress::cuda::BodyParams params;
  params.count = 16;
  std::vector<float> y(16);
  error.clear();
  EXPECT_FALSE(compress::cuda::decode_body_host(params, x.data(), 64, y.data(), error));
  EXPECT_TRUE(contains(error, expected)) << error;
}

}  // namespace
