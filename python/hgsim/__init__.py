"""hgsim from Python: scenarios, plans, the simulator, the planner and the codecs.

Every function calls the code the ``hgsim`` command calls, so results are the same as the
command line's (``simulate`` returns exactly the ``hgsim run --json`` object).

Scenario and plan arguments are a path (``str`` or ``os.PathLike``) to a YAML/JSON file, or
a dict (the canonical form ``hgsim check --json`` prints, or anything the scenario language
accepts; relative paths in a dict, such as WAN traces, are relative to the working
directory). Problems raise :class:`Error` (a ``ValueError``) whose message lists every
problem with its ``file:line:column`` or key path; warnings become Python warnings.

Codec arguments are a name (``"int8"``) or a dict exactly as in a scenario
(``{"codec": "topk", "ratio": 0.01}``). Arrays are NumPy arrays or CPU torch tensors
(float32, float16, or torch.bfloat16); contiguous ones are read and written in place,
without copies; a non-contiguous input is copied once; a non-contiguous ``out`` is refused.
Codec problems raise :class:`CodecError` (a subclass of :class:`Error`).

Build: ``cmake --preset release && cmake --build --preset release``, then
``PYTHONPATH=build/release/python /usr/bin/python3 -c "import hgsim"``.
"""

from . import _hgsim
from ._hgsim import CodecError, Error, TensorCodec

__all__ = [
    "Error", "CodecError", "load_scenario", "load_plan", "resolve", "simulate", "plan",
    "codecs", "encoded_bytes", "encode", "decode", "TensorCodec", "parse_quantity",
    "outer_sync_events", "fragment_layers", "layer_kernels", "export_chakra",
]


def parse_quantity(text, kind):
    """A quantity as a scenario writes it (``"10Gbps"``, ``"25MB"``, ``"15ms"``) in its base
    unit: bytes, bytes per second or seconds (``kind`` = ``"bytes"``, ``"bandwidth"``,
    ``"duration"``). The parser the scenario loader uses; Error for a bad quantity."""
    return _hgsim.parse_quantity(text, kind)


def load_scenario(src):
    """The scenario ``src`` (path or dict), checked, in its canonical JSON form (a dict).

    A scenario with a sweep gives its first point, as ``hgsim check --json`` does.
    Raises Error with every problem found.
    """
    return _hgsim.load_scenario(src)


def load_plan(src, scenario=None):
    """The plan ``src`` (path or dict) in its JSON form (``plan_to_json``).

    With ``scenario``, the plan is also checked against it (clusters, GPUs, layers, batch).
    """
    return _hgsim.load_plan(src, scenario)


def resolve(scenario, plan=None):
    """What a run of ``scenario`` with ``plan`` uses, as a dict: the one resolved plan that
    the simulator, the planner and the live runner read (sim/resolved_plan.hpp).

    ``scenario``: the canonical scenario (as written); ``model``: the resolved model (name,
    layers, hidden, heads, kv_heads, vocab, ffn_hidden, activation, norm, max_positions,
    tied_embeddings, bias, dropout); ``plan``: the given plan, else the scenario's strategy,
    else the planner's best when the strategy is ``auto``; ``choices``: the plan's effective
    ``recompute``, ``sequence_parallel`` and ``precision``; ``compression``: the effective
    codecs ``{"wan_activations": {"codec": ..., params}, "wan_gradients": {...}}`` with every
    parameter (each is a valid codec argument); ``ranks``: one per GPU in placement order
    (rank, pipeline, replica, stage, dp, tp, cluster, node, index, device); ``stages``: per
    pipeline per stage its cluster, tp, dp and ``layers`` ([first, count] per model chunk);
    ``segments``: runs of layers held by the same stages (first_layer, layers, holders,
    holder_chunks, parameters, members, rings, buckets, bucket_bytes, first_bucket);
    ``reshard``: per pipeline per stage boundary the pieces [from_slice, to_slice, begin,
    end, units] of the activation tensor; ``gpus_used``, ``gpus_available``.
    """
    return _hgsim.resolve(scenario, plan)


def simulate(scenario, plan=None, *, profiles=None, layer_profile=None, fidelity=None,
             trace=None, trace_filter=None, allow_oom=False, chakra=None, reprice=False):
    """One simulated iteration: exactly the object ``hgsim run --json`` prints.

    profiles: measured op profile files (``hgsim profile``), default kernels/profiles/;
    layer_profile: an ``hgsim-layer-profile/1`` file that costs every device's compute
    (``hgsim run --layer-profile``); fidelity: "full", "folded" or "auto"; trace: write a
    Chrome trace there; trace_filter: what it keeps ("cluster=NAME,stage=N,kind=KIND", as
    ``hgsim run --trace-filter``); allow_oom: simulate a plan that does not fit in GPU memory.
    chakra: a Chakra trace prefix (PREFIX.<rank>.et) to simulate on the scenario's GPUs and
    links instead of a plan: what ``hgsim run --chakra PREFIX --json`` prints (docs/chakra.md);
    a scenario with ``workload: {chakra: PREFIX}`` simulates its trace without it. reprice:
    price the trace's compute nodes that carry num_ops by the kernel model (``--reprice``).
    The simulator runs in a child process, with the GIL released.
    """
    return _hgsim.simulate(scenario, plan, profiles=profiles, layer_profile=layer_profile,
                           fidelity=fidelity, trace=trace, trace_filter=trace_filter,
                           allow_oom=allow_oom, chakra=chakra, reprice=reprice)


def export_chakra(scenario, prefix, plan=None, *, profiles=None, layer_profile=None):
    """Simulate one iteration at full fidelity and write it as MLCommons Chakra ET, one file
    per GPU (``PREFIX.<rank>.et``, what ASTRA-sim reads): ``hgsim run --fidelity full
    --export-chakra PREFIX``. Returns the simulation's result (the ``hgsim run --json``
    object); docs/chakra.md says what the files hold."""
    return _hgsim.simulate(scenario, plan, profiles=profiles, layer_profile=layer_profile,
                           fidelity="full", export_chakra=prefix)


def plan(scenario, *, time_budget_s=60.0, verify=3, baselines=False, no_compression=False):
    """Search a plan for ``scenario``: what ``hgsim plan --json`` prints, as a dict.

    When no plan fits, ``best`` is None and ``why_not`` says why (as the command prints).
    The keyword arguments are the command's --time-budget, --verify, --baselines and
    --no-compression.
    """
    return _hgsim.plan(scenario, time_budget_s=time_budget_s, verify=verify,
                       baselines=baselines, no_compression=no_compression)


def outer_sync_events(iterations, inner_steps, fragments=1, overlap_steps=1):
    """The simulator's DiLoCo schedule over ``iterations`` iterations (sim/iterations.hpp):
    one dict per fragment all-reduce, in the order they start, ``{"fragment", "start_after",
    "applies_after"}``: the fragment's pseudo-gradient is taken once ``start_after``
    iterations have finished and its update applies once ``applies_after`` have (blocking
    DiLoCo: the same; Streaming DiLoCo: ``overlap_steps`` later)."""
    return _hgsim.outer_sync_events(iterations, inner_steps, fragments, overlap_steps)


def fragment_layers(layers, fragment, fragments):
    """Layers ``(first, end)`` of Streaming DiLoCo fragment ``fragment`` of ``fragments``
    (the simulator's rule; the embeddings go with fragment 0, the final norm and head with
    the last)."""
    return _hgsim.fragment_layers(layers, fragment, fragments)


def layer_kernels(gpu, *, hidden, heads, kv_heads, ffn_hidden, tokens, tp=1, sequences=1,
                  activation="swiglu", norm="rmsnorm", rotary=True, precision="bf16",
                  phase="forward", timing="in_step"):
    """The kernels one GPU of a tensor-parallel group of ``tp`` runs for one transformer
    layer (no biases, no dropout) at ``tokens`` tokens split into ``sequences`` sequences,
    in the order the layer runs them: one dict per op with ``op``, ``role`` (what it is in
    the layer: ``"qkv_proj"``, ``"input_norm"``, ...), ``shape``, ``flops``, ``bytes``,
    ``kernels`` and ``seconds``, the compute model's time for it (the simulator's and the
    planner's, without host dispatch). ``phase`` is ``"forward"`` or ``"backward"``;
    ``timing`` is ``"in_step"`` (inside a training step, as the simulator prices them) or
    ``"isolated"`` (each kernel timed alone, as inference kernel tables measure them)."""
    return _hgsim.layer_kernels(gpu, hidden=hidden, heads=heads, kv_heads=kv_heads,
                                ffn_hidden=ffn_hidden, tokens=tokens, tp=tp,
                                sequences=sequences, activation=activation, norm=norm,
                                rotary=rotary, precision=precision, phase=phase,
                                timing=timing)


def codecs():
    """The codec catalog: one dict per codec with ``name``, ``parameters`` (the keys it
    accepts), ``defaults`` (its default spec, a valid codec argument), ``error_feedback``
    (by default), ``description`` and ``cuda`` (whether a CUDA kernel exists)."""
    return _hgsim.codecs()


def encoded_bytes(codec, shape, dtype="fp32"):
    """Exact size in bytes of the encoding of a tensor of ``shape`` in ``dtype``
    ("fp32", "fp16" or "bf16"), header included: ``len(encode(codec, x))``."""
    return _hgsim.encoded_bytes(codec, shape, dtype)


def encode(codec, array, seed=0):
    """Encodes ``array`` (NumPy float32/float16 or CPU torch float32/float16/bfloat16) into a
    new NumPy uint8 array. Stateless: error feedback and warm start need TensorCodec.
    ``seed`` drives the random parts (random-k, stochastic rounding, PowerSGD's first Q)."""
    return _hgsim.encode(codec, array, seed)


def decode(buffer, out=None):
    """Decodes ``buffer`` (NumPy uint8, bytes, or a CPU torch uint8 tensor).

    With ``out`` (a contiguous NumPy array or CPU torch tensor of the encoded element count,
    float32, or float16/bfloat16) the values are written into it in place and ``out`` is
    returned; otherwise a new 1-D float32 NumPy array. A damaged buffer raises CodecError.
    """
    return _hgsim.decode(buffer, out)
