// The compute model one kernel at a time: layer_kernels prices the ops of one layer as
// the simulator and the planner do (kernels::layer_ops, kernels::KernelModel::op_time),
// for scripts that hold the model to kernel-level measurements (validation/kernels.py).
#include <pybind11/stl.h>

#include "kernels/compute_model.hpp"
#include "kernels/gpu_catalog.hpp"
#include "kernels/layer_ops.hpp"
#include "python/bindings.hpp"

namespace hgsim::python {
namespace {

template <class E>
E choice_of(const std::string& text, const char* what, std::initializer_list<E> values) {
  std::string valid;
  for (E v : values) {
    if (core::to_string(v) == text) return v;
    valid += (valid.empty() ? "" : ", ") + core::to_string(v);
  }
  throw Error("layer_kernels: unknown " + std::string(what) + " '" + core::excerpt(text) +
              "' (valid: " + valid + ")");
}

py::list layer_kernels(const std::string& gpu_name, int hidden, int heads, int kv_heads,
                       int ffn_hidden, double tokens, int tp, double sequences,
                       const std::string& activation, const std::string& norm, bool rotary,
                       const std::string& precision, const std::string& phase,
                       const std::string& timing) {
  const kernels::GpuSpec* gpu = kernels::find_gpu(gpu_name);
  if (gpu == nullptr) throw Error("layer_kernels: unknown GPU '" + core::excerpt(gpu_name) + "'");
  if (hidden <= 0 || heads <= 0 || kv_heads <= 0 || ffn_hidden <= 0 || tp <= 0 ||
      hidden % heads != 0 || heads % kv_heads != 0)
    throw Error(
        "layer_kernels: need positive hidden, heads, kv_heads, ffn_hidden and tp, "
        "heads dividing hidden and kv_heads dividing heads");
  if (!(tokens > 0) || !(sequences > 0))
    throw Error("layer_kernels: tokens and sequences must be positive");
  if (phase != "forward" && phase != "backward")
    throw Error("layer_kernels: phase is 'forward' or 'backward', not '" + core::excerpt(phase) +
                "'");
  if (timing != "in_step" && timing != "isolated")
    throw Error("layer_kernels: timing is 'in_step' or 'isolated', not '" + core::excerpt(timing) +
                "'");
  const auto when = timing == "in_step" ? kernels::KernelModel::Timing::in_step
                                        : kernels::KernelModel::Timing::isolated;
  core::ModelConfig model;
  model.hidden = hidden;
  model.heads = heads;
  model.kv_heads = kv_heads;
  model.ffn_hidden = ffn_hidden;
  model.activation =
      choice_of(activation, "activation", {core::Activation::gelu, core::Activation::swiglu});
  model.norm = choice_of(norm, "norm", {core::Norm::layernorm, core::Norm::rmsnorm});
  model.max_positions = rotary ? 0 : 1;
  model.bias = false;
  model.dropout = false;
  kernels::LayerShape shape;
  shape.model = &model;
  shape.sequences = sequences;
  shape.seq_len = static_cast<int>(tokens / sequences);
  shape.tp = tp;
  shape.precision = choice_of(
      precision, "precision",
      {core::Precision::fp16, core::Precision::bf16, core::Precision::fp8, core::Precision::fp32});
  if (shape.seq_len * sequences != tokens)
    throw Error("layer_kernels: tokens must be a whole number of tokens per sequence");
  const kernels::PhaseOps ops = kernels::layer_ops(shape);
  const kernels::KernelModel model_of_time;
  py::list out;
  for (const kernels::OpCall& op : phase == "forward" ? ops.forward : ops.backward) {
    py::dict d;
    d["op"] = op.op;
    d["role"] = op.role;
    d["shape"] = op.shape;
    d["flops"] = op.flops;
    d["bytes"] = op.bytes;
    d["kernels"] = op.kernels;
    d["seconds"] = model_of_time.op_time(*gpu, op, shape.precision, when).value();
    out.append(d);
  }
  return out;
}

}  // namespace

void bind_kernels(py::module_& m) {
  m.def("layer_kernels", &layer_kernels, py::arg("gpu"), py::kw_only(), py::arg("hidden"),
        py::arg("heads"), py::arg("kv_heads"), py::arg("ffn_hidden"), py::arg("tokens"),
        py::arg("tp") = 1, py::arg("sequences") = 1, py::arg("activation") = "swiglu",
        py::arg("norm") = "rmsnorm", py::arg("rotary") = true, py::arg("precision") = "bf16",
        py::arg("phase") = "forward", py::arg("timing") = "in_step",
        "The kernels one GPU of a tensor-parallel group of `tp` runs for one layer (no bias, "
        "no dropout) at `tokens` tokens in `sequences` sequences: [{op, role, shape, flops, "
        "bytes, kernels, seconds}], seconds from the compute model (KernelModel::op_time, "
        "without host dispatch), in the order the layer runs them; timing 'in_step' prices "
        "them inside a training step, 'isolated' each timed alone (as inference tables "
        "measure them).");
}

}  // namespace hgsim::python
