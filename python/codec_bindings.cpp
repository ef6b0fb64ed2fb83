// The codecs: codecs, encoded_bytes, encode, decode, TensorCodec.
//
// Arrays cross without copies: a C-contiguous NumPy array or CPU torch tensor is read (and
// `out` written) where it lies, through its data pointer; torch is never linked, only its
// Python attributes are used (data_ptr, numel, dtype, device, is_contiguous). A
// non-contiguous input is made contiguous once; a non-contiguous `out` is refused, as it
// could not be filled in place. Encoding and decoding run with the GIL released.
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include "compress/codec.hpp"
#include "compress/codec_cost.hpp"
#include "compress/codec_spec.hpp"
#include "core/limits.hpp"
#include "python/bindings.hpp"

namespace hgsim::python {
namespace {

using compress::CodecError;
using compress::DType;

std::string type_name(py::handle object) {
  return core::excerpt(text_of(object.get_type().attr("__name__")));
}

compress::CodecSpec codec_spec(py::handle codec) {
  if (!py::isinstance<py::str>(codec) && !py::isinstance<py::dict>(codec))
    throw CodecError(
        "a codec is a name ('int8') or a dict ({'codec': 'topk', 'ratio': 0.01}), "
        "not " +
        type_name(codec));
  core::Diagnostics diags;
  auto spec = compress::parse_codec_spec(core::from_json(to_json(codec)), "codec", diags);
  if (!spec) throw CodecError(message_of(diags));
  return *spec;
}

DType dtype_of_name(const std::string& name) {
  if (name == "fp32" || name == "float32") return DType::fp32;
  if (name == "fp16" || name == "float16") return DType::fp16;
  if (name == "bf16" || name == "bfloat16") return DType::bf16;
  throw CodecError("dtype '" + core::excerpt(name) + "': expected 'fp32', 'fp16' or 'bf16'");
}

compress::Shape shape_of(py::handle shape) {
  compress::Shape out;
  if (py::isinstance<py::int_>(shape)) return {shape.cast<std::int64_t>()};
  try {
    for (py::handle d : shape) out.push_back(d.cast<std::int64_t>());
  } catch (const py::error_already_set&) {
    throw CodecError("a shape is a sequence of integers, not " + type_name(shape));
  } catch (const py::cast_error&) {
    throw CodecError("a shape is a sequence of integers");
  }
  compress::element_count(out);  // CodecError for a negative or too large shape
  return out;
}

// A tensor (not an encoded buffer) of more elements than one encoded buffer may hold
// (HGSIM_MAX_CODEC_ELEMENTS) is refused before anything is copied or allocated for it: a broadcast
// view of one float claims terabytes that numpy would try to make contiguous.
void check_elements(std::uint64_t count, const char* what) {
  const auto limit = static_cast<std::uint64_t>(core::limits().codec_elements);
  if (count <= limit) return;
  throw CodecError(std::string(what) + " has " + std::to_string(count) +
                   " elements, more than one encoded buffer may hold; " +
                   core::limit_hint("HGSIM_MAX_CODEC_ELEMENTS", static_cast<double>(limit)));
}

// An array's memory as the codecs see it. `owner` keeps the memory alive: the caller's
// object itself, or the one contiguous copy made of a non-contiguous input.
struct View {
  void* data = nullptr;
  std::size_t count = 0;
  std::string dtype;  // "fp32", "fp16", "bf16", "uint8"
  compress::Shape shape;
  bool writable = true;
  py::object owner;

  compress::ConstTensor input() const {
    compress::ConstTensor t;
    t.data = data;
    t.count = count;
    t.dtype = dtype_of_name(dtype);
    return t;
  }
  compress::MutableTensor output() const {
    compress::MutableTensor t;
    t.data = data;
    t.count = count;
    t.dtype = dtype_of_name(dtype);
    return t;
  }
};

enum class Use { input, output };

// A real torch.Tensor only: an object that merely has data_ptr(), numel() and the rest
// could name any address. torch is never imported here: a tensor means it already is.
bool is_torch_tensor(py::handle object) {
  const py::dict modules = py::module_::import("sys").attr("modules");
  if (!modules.contains("torch")) return false;
  const py::object torch = modules["torch"];
  if (!py::hasattr(torch, "Tensor")) return false;
  return PyObject_IsInstance(object.ptr(), torch.attr("Tensor").ptr()) == 1;
}

View torch_view(py::handle tensor, Use use, const char* what) {
  const std::string device = text_of(tensor.attr("device").attr("type"));
  if (device != "cpu")
    throw CodecError(std::string(what) + " is a torch tensor on '" + core::excerpt(device) +
                     "': the codecs take CPU tensors (call .cpu())");
  static const std::map<std::string, std::string> dtypes{{"torch.float32", "fp32"},
                                                         {"torch.float16", "fp16"},
                                                         {"torch.bfloat16", "bf16"},
                                                         {"torch.uint8", "uint8"}};
  const std::string dtype = text_of(tensor.attr("dtype"));
  const auto found = dtypes.find(dtype);
  if (found == dtypes.end())
    throw CodecError(std::string(what) + " has dtype " + core::excerpt(dtype) +
                     "; expected torch.float32, torch.float16 or torch.bfloat16 (torch.uint8 "
                     "for an encoded buffer)");
  if (found->second != "uint8") check_elements(tensor.attr("numel")().cast<std::uint64_t>(), what);
  py::object owner = py::reinterpret_borrow<py::object>(tensor);
  if (!owner.attr("is_contiguous")().cast<bool>()) {
    if (use == Use::output)
      throw CodecError(std::string(what) +
                       " is not contiguous: it cannot be filled in place (pass a contiguous "
                       "tensor, or none to get a new array)");
    owner = owner.attr("contiguous")();
  }
  View v;
  v.data = reinterpret_cast<void*>(owner.attr("data_ptr")().cast<std::uintptr_t>());
  v.count = owner.attr("numel")().cast<std::size_t>();
  v.dtype = found->second;
  for (py::handle d : owner.attr("shape")) v.shape.push_back(d.cast<std::int64_t>());
  v.owner = owner;
  return v;
}

View numpy_view(py::array array, Use use, const char* what) {
  const py::dtype dt = array.dtype();
  const char kind = dt.kind();
  const std::string order = py::str(dt.attr("byteorder"));
  std::string dtype;
  if (kind == 'f' && dt.itemsize() == 4) dtype = "fp32";
  if (kind == 'f' && dt.itemsize() == 2) dtype = "fp16";
  if (kind == 'u' && dt.itemsize() == 1) dtype = "uint8";
  if (dtype.empty() || order == ">")
    throw CodecError(std::string(what) + " has dtype " + core::excerpt(text_of(dt.attr("name"))) +
                     "; expected float32 or float16 (uint8 for an encoded buffer), native byte "
                     "order (convert with .astype(numpy.float32))");
  if (dtype != "uint8") check_elements(static_cast<std::uint64_t>(array.size()), what);
  if (!(array.flags() & py::array::c_style)) {
    if (use == Use::output)
      throw CodecError(std::string(what) +
                       " is not C-contiguous: it cannot be filled in place (pass a contiguous "
                       "array, or none to get a new array)");
    array = py::module_::import("numpy").attr("ascontiguousarray")(array);
  }
  if (use == Use::output && !array.writeable())
    throw CodecError(std::string(what) + " is read-only: it cannot be filled in place");
  View v;
  v.data = const_cast<void*>(array.data());
  v.count = static_cast<std::size_t>(array.size());
  v.dtype = dtype;
  for (py::ssize_t i = 0; i < array.ndim(); ++i) v.shape.push_back(array.shape(i));
  v.owner = array;
  return v;
}

// A NumPy array or a CPU torch tensor; for encoded buffers also bytes, bytearray and
// memoryview (read through numpy.frombuffer, without a copy).
View view_of(py::handle object, Use use, const char* what, bool buffer = false) {
  if (is_torch_tensor(object)) {
    try {
      return torch_view(object, use, what);
    } catch (const py::error_already_set& e) {  // a tensor subclass whose methods raise
      throw CodecError(std::string(what) + ": " + e.what());
    } catch (const py::cast_error& e) {
      throw CodecError(std::string(what) + ": " + e.what());
    }
  }
  if (py::isinstance<py::array>(object))
    return numpy_view(py::reinterpret_borrow<py::array>(object), use, what);
  if (buffer && (py::isinstance<py::bytes>(object) || py::isinstance<py::bytearray>(object) ||
                 py::isinstance<py::memoryview>(object))) {
    try {
      auto array = py::module_::import("numpy").attr("frombuffer")(object, "uint8");
      return numpy_view(array, use, what);
    } catch (const py::error_already_set& e) {
      throw CodecError(std::string(what) + ": " + e.what());
    }
  }
  throw CodecError(std::string(what) + " is a " + type_name(object) + "; expected a numpy array" +
                   (buffer ? ", bytes" : "") + " or a CPU torch tensor");
}

View input_view(py::handle array) {
  View v = view_of(array, Use::input, "the array");
  if (v.dtype == "uint8")
    throw CodecError("the array has dtype uint8; encode takes float32, float16 or bfloat16");
  return v;
}

std::span<std::byte> bytes_of(py::array_t<std::uint8_t>& array) {
  return {reinterpret_cast<std::byte*>(array.mutable_data()),
          static_cast<std::size_t>(array.size())};
}

py::list codecs() {
  py::list out;
  for (const std::string& name : compress::codec_names()) {
    const auto spec = compress::default_spec(*compress::codec_kind(name));
    core::Json entry{{"name", name},
                     {"parameters", compress::codec_parameters(spec.kind)},
                     {"defaults", compress::codec_to_json(spec)},
                     {"error_feedback", spec.error_feedback},
                     {"description", compress::describe(spec)},
                     {"cuda", compress::cuda_supports(spec.kind)}};
    out.append(from_json(entry));
  }
  return out;
}

std::size_t encoded_bytes(py::handle codec, py::handle shape, const std::string& dtype) {
  return compress::encoded_bytes(codec_spec(codec), shape_of(shape), dtype_of_name(dtype));
}

// The shape a WAN transfer of `elements` values is coded in (compress::wan_codec_shape), for
// the live runner, which pads the last row as the simulator counts it.
std::vector<std::int64_t> codec_shape(std::int64_t elements, std::int64_t columns) {
  if (elements < 1) throw CodecError("codec_shape: elements must be at least 1");
  if (columns < 1) throw CodecError("codec_shape: columns must be at least 1");
  return compress::wan_codec_shape(static_cast<double>(elements), columns);
}

py::array_t<std::uint8_t> encode(py::handle codec, py::handle array, std::uint64_t seed) {
  const auto spec = codec_spec(codec);
  const View v = input_view(array);
  const auto input = v.input();
  py::array_t<std::uint8_t> out(
      static_cast<py::ssize_t>(compress::encoded_bytes(spec, v.shape, input.dtype)));
  const auto bytes = bytes_of(out);
  {
    py::gil_scoped_release release;
    compress::encode(spec, v.shape, input, bytes, seed);
  }
  return out;
}

py::object decode(py::handle buffer, py::handle out) {
  const View b = view_of(buffer, Use::input, "the buffer", true);
  if (b.dtype != "uint8")
    throw CodecError("the buffer has dtype " + b.dtype + "; an encoded buffer is uint8");
  std::span<const std::byte> bytes(static_cast<const std::byte*>(b.data), b.count);
  std::vector<std::byte> aligned;  // decode reads 4-byte aligned buffers; a slice may not be
  if (reinterpret_cast<std::uintptr_t>(b.data) % 4 != 0) {
    aligned.assign(bytes.begin(), bytes.end());
    bytes = aligned;
  }
  const compress::EncodedInfo info = compress::inspect(bytes);
  py::object result;
  compress::MutableTensor target;
  if (out.is_none()) {
    py::array_t<float> fresh(static_cast<py::ssize_t>(info.count));
    target = compress::MutableTensor(std::span<float>(fresh.mutable_data(), info.count));
    result = fresh;
  } else {
    const View o = view_of(out, Use::output, "out");
    if (o.dtype == "uint8") throw CodecError("out has dtype uint8; decode writes float32");
    if (o.count != info.count)
      throw CodecError("out has " + std::to_string(o.count) + " elements; the buffer holds " +
                       std::to_string(info.count));
    target = o.output();
    result = py::reinterpret_borrow<py::object>(out);
  }
  {
    py::gil_scoped_release release;
    compress::decode(bytes, target);
  }
  return result;
}

// TensorCodec with its arguments checked and one encode at a time.
class PyTensorCodec {
 public:
  PyTensorCodec(py::handle codec, py::handle shape, const std::string& dtype)
      : dtype_name_(dtype == "float32"    ? "fp32"
                    : dtype == "float16"  ? "fp16"
                    : dtype == "bfloat16" ? "bf16"
                                          : dtype),
        shape_(shape_of(shape)),
        count_(compress::element_count(shape_)),
        codec_(codec_spec(codec), shape_, dtype_of_name(dtype)) {}

  py::array_t<std::uint8_t> encode(py::handle array) {
    const View v = input_view(array);
    if (v.count != count_)
      throw CodecError("TensorCodec for " + std::to_string(count_) + " elements: the array has " +
                       std::to_string(v.count));
    if (v.dtype != dtype_name_)
      throw CodecError("TensorCodec for " + dtype_name_ + ": the array is " + v.dtype);
    py::array_t<std::uint8_t> out(static_cast<py::ssize_t>(codec_.encoded_bytes()));
    const auto bytes = bytes_of(out);
    const auto input = v.input();
    {
      py::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(mutex_);
      codec_.encode(input, bytes);
    }
    return out;
  }

  std::size_t encoded_bytes() const { return codec_.encoded_bytes(); }
  std::uint64_t step() {
    std::lock_guard<std::mutex> lock(mutex_);
    return codec_.step();
  }
  py::array_t<float> residual() {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto r = codec_.residual();
    py::array_t<float> out(static_cast<py::ssize_t>(r.size()));
    if (!r.empty()) std::memcpy(out.mutable_data(), r.data(), r.size() * sizeof(float));
    return out;
  }
  py::object spec() const { return from_json(compress::codec_to_json(codec_.spec())); }
  py::tuple shape() const { return py::cast(shape_); }
  const std::string& dtype() const { return dtype_name_; }

 private:
  std::string dtype_name_;
  compress::Shape shape_;
  std::uint64_t count_;
  compress::TensorCodec codec_;
  std::mutex mutex_;
};

}  // namespace

void bind_codecs(py::module_& m) {
  m.def("codecs", &codecs,
        "The codec catalog: name, parameters, defaults, error_feedback, description, cuda.");
  m.def("encoded_bytes", &encoded_bytes, py::arg("codec"), py::arg("shape"),
        py::arg("dtype") = "fp32", "Exact size in bytes of the encoding of a tensor.");
  m.def("codec_shape", &codec_shape, py::arg("elements"), py::arg("columns"),
        "The shape a WAN transfer of `elements` values is coded in, as the simulator codes it: "
        "[ceil(elements / columns), columns], the last row zero-padded.");
  m.def("encode", &encode, py::arg("codec"), py::arg("array"), py::arg("seed") = 0,
        "Encodes a numpy array or CPU torch tensor (fp32/fp16/bf16); a numpy uint8 buffer.");
  m.def("decode", &decode, py::arg("buffer"), py::arg("out") = py::none(),
        "Decodes a buffer into `out` (filled in place and returned) or a new float32 array.");
  py::class_<PyTensorCodec>(m, "TensorCodec",
                            "A codec bound to one tensor across steps: error feedback and warm "
                            "start state.")
      .def(py::init<py::handle, py::handle, const std::string&>(), py::arg("codec"),
           py::arg("shape"), py::arg("dtype") = "fp32")
      .def("encode", &PyTensorCodec::encode, py::arg("array"),
           "Encodes array (+ residual) and updates the state; a numpy uint8 buffer.")
      .def_property_readonly("encoded_bytes", &PyTensorCodec::encoded_bytes)
      .def_property_readonly("step", &PyTensorCodec::step)
      .def_property_readonly("residual", &PyTensorCodec::residual,
                             "A copy of what error feedback has not sent yet (empty without).")
      .def_property_readonly("spec", &PyTensorCodec::spec,
                             "The effective codec for this shape, every parameter.")
      .def_property_readonly("shape", &PyTensorCodec::shape)
      .def_property_readonly("dtype", &PyTensorCodec::dtype);
}

}  // namespace hgsim::python
