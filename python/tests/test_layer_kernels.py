"""hgsim.layer_kernels: the compute model's kernels of one layer, as validation/kernels.py
reads them. Shapes, FLOPs and bytes are checked against the layer's algebra written out
here; times against the model's closed forms on a small case (kernels/kernel_costs.yaml:
a memory-bound class = its first l2_resident bytes at l2_efficiency x HBM, the rest at
efficiency x HBM, + overhead)."""
import pytest

import hgsim

LLAMA_7B = dict(hidden=4096, heads=32, kv_heads=32, ffn_hidden=11008)


def by_role(kernels):
    out = {}
    for k in kernels:
        out.setdefault(k["role"], k)
    return out


def test_forward_roles_in_the_order_the_layer_runs():
    ks = hgsim.layer_kernels("a100", tokens=128, tp=1, precision="fp16", **LLAMA_7B)
    assert [k["role"] for k in ks] == [
        "input_norm", "qkv_proj", "rope", "attention", "out_proj", "attn_residual",
        "post_norm", "up_proj", "act", "down_proj", "mlp_residual"]


def test_gemm_shapes_are_sharded_over_tp():
    tp, t, h, f = 4, 256, 4096, 11008
    r = by_role(hgsim.layer_kernels("h100", tokens=t, tp=tp, precision="fp16", **LLAMA_7B))
    assert r["qkv_proj"]["shape"] == [t, 3 * h / tp, h]
    assert r["out_proj"]["shape"] == [t, h, h / tp]
    assert r["up_proj"]["shape"] == [t, 2 * f / tp, h]
    assert r["down_proj"]["shape"] == [t, h, f / tp]
    assert r["up_proj"]["flops"] == 2 * t * (2 * f / tp) * h
    # fp16 operands: X, W and Y once each.
    assert r["down_proj"]["bytes"] == 2 * (t * f / tp + f / tp * h + t * h)


def test_residual_add_is_bytes_at_its_class_rates_plus_overhead():
    # A100-80GB-SXM: 2039 GB/s (kernels/gpus.yaml); ampere: l2_resident 20 MB, add
    # {efficiency 0.827, l2_efficiency 1.495, overhead 1.9 us} (kernels/kernel_costs.yaml).
    # add reads two tensors, writes one.
    t, h = 4096, 4096
    add = by_role(hgsim.layer_kernels("a100", tokens=t, precision="fp16",
                                      **LLAMA_7B))["attn_residual"]
    assert add["bytes"] == 3 * 2 * t * h
    rest = 3 * 2 * t * h - 20e6
    assert add["seconds"] == pytest.approx(
        20e6 / (1.495 * 2039e9) + rest / (0.827 * 2039e9) + 1.9e-6, rel=1e-9)


def test_backward_has_two_gemms_per_linear():
    ks = hgsim.layer_kernels("a100", tokens=64, precision="fp16", phase="backward", **LLAMA_7B)
    gemms = [k["role"] for k in ks if k["op"].startswith("gemm")]
    assert gemms == ["down_proj"] * 2 + ["up_proj"] * 2 + ["out_proj"] * 2 + ["qkv_proj"] * 2


def test_in_a_training_step_hopper_gemms_run_at_their_in_step_share():
    # hopper: gemm_in_step 0.90, gemm_overhead 4.0 us (kernels/kernel_costs.yaml): the GEMM's
    # math is stretched, its fixed cost and the memory-bound kernels are not.
    args = dict(tokens=8192, precision="bf16", **LLAMA_7B)
    step = by_role(hgsim.layer_kernels("h100", **args))
    alone = by_role(hgsim.layer_kernels("h100", timing="isolated", **args))
    assert step["up_proj"]["seconds"] - 4e-6 == pytest.approx(
        (alone["up_proj"]["seconds"] - 4e-6) / 0.90, rel=1e-9)
    assert step["input_norm"]["seconds"] == alone["input_norm"]["seconds"]


@pytest.mark.parametrize("kwargs, message", [
    (dict(timing="sometimes"), "timing is"),
    (dict(gpu="no-such-gpu"), "unknown GPU"),
    (dict(norm="batchnorm"), "unknown norm"),
    (dict(phase="sideways"), "phase is"),
    (dict(tokens=0), "must be positive"),
])
def test_bad_arguments_are_one_clear_error(kwargs, message):
    args = dict(gpu="a100", tokens=8, **LLAMA_7B)
    args.update(kwargs)
    gpu = args.pop("gpu")
    with pytest.raises(hgsim.Error, match=message):
        hgsim.layer_kernels(gpu, **args)
