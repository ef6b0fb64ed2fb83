"""The GPT-style causal language model the live runner trains, split the way a plan splits it.

A decoder-only transformer (learned positions, pre-LayerNorm blocks, GELU MLP, biases,
untied LM head) over byte-level tokens (vocabulary 256). Megatron-LM's tensor parallelism:
the QKV and first MLP matrices are split by columns, the attention output and second MLP
matrices by rows, with one all-reduce after each row-parallel matrix in the forward pass and
one before each column-parallel matrix in the backward pass (the `f` and `g` operators of
Shoeybi et al. 2019). The embedding, the final norm and the LM head are not split: every
tensor-parallel rank of the first and last stage holds them whole and computes them alike.

With sequence parallelism (Korthikanti et al. 2022, section 4.2.2; `sequence_parallel: true`)
the LayerNorms, the residual adds and the row-parallel biases run on the rank's 1/tp of the
tokens: `g` becomes an all-gather of the tokens before each column-parallel matrix
(reduce-scatter backward) and `g-bar` after each row-parallel matrix a reduce-scatter
(all-gather backward), the same bytes as the all-reduces they replace. The rank's tokens are
its consecutive 1/tp of its sequences' tokens in (sequence, position) order: the stage
boundary's tp slice of the resolved plan's reshard pieces (sim/resolved_plan.hpp), so a
stage sends and receives its own slice and nothing is gathered at the boundary. With one
sequence per dp rank that is Megatron's slice of the sequence; with several it may hold whole
sequences, which changes nothing computed (norms, adds and biases act token by token). The
first stage computes the embedding whole and keeps its tokens (all-gather of the gradient
backward); the last stage runs the final norm on its tokens and all-gathers them before the
LM head, which every rank computes whole as without sequence parallelism (Megatron also
gathers before its head). The parameters every rank holds whole but now sees 1/tp of the
tokens of (norms, row-parallel biases) get their gradients all-reduced across tp after the
backward, as Megatron's finalize_model_grads does.

Every collective inside a stage is a textbook ring (comm.py, the simulator's ring_all_reduce,
ring_reduce_scatter, ring_all_gather) over point-to-point messages, recorded as one
"tp_comm" span with the bytes this rank sent.

Weights are a function of (seed, layer index) only, generated whole and then sliced for the
rank's tensor-parallel shard, so every plan starts from the same model and the loss curves of
different plans and codecs can be compared step by step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from . import comm


@dataclass(frozen=True)
class GptConfig:
    layers: int
    hidden: int
    heads: int
    ffn_hidden: int
    seq_len: int
    vocab: int = 256

    @classmethod
    def of_job(cls, job: dict) -> "GptConfig":
        """The model of a live job (hgsim_runtime.live `job_from`)."""
        m = job["model"]
        return cls(layers=m["layers"], hidden=m["hidden"], heads=m["heads"],
                   ffn_hidden=m["ffn_hidden"], seq_len=job["seq_len"], vocab=m["vocab"])

    def layer_parameters(self, tp: int = 1) -> int:
        """Parameters of one layer's tensor-parallel shard (norms and row-parallel biases are
        held whole by every rank)."""
        h, f = self.hidden, self.ffn_hidden
        return (3 * h * h + 3 * h + h * h + 2 * h * f + f) // tp + h + h + 4 * h

    def segment_parameters(self, first_layer: int, layers: int, tp: int = 1) -> int:
        """Parameters a tp rank holds of layers [first_layer, first_layer + layers), with the
        embedding when the segment starts the model and the final norm and head when it ends
        it (what StageModule.segment_parameters returns)."""
        n = layers * self.layer_parameters(tp)
        if first_layer == 0:
            n += self.vocab * self.hidden + self.seq_len * self.hidden
        if first_layer + layers == self.layers:
            n += 2 * self.hidden + self.vocab * self.hidden
        return n


class _CopyToTensorParallel(torch.autograd.Function):
    """Identity forward; all-reduce of the input gradient backward (Megatron's `f`)."""

    @staticmethod
    def forward(ctx, x, tp):
        ctx.tp = tp
        return x

    @staticmethod
    def backward(ctx, grad):
        return ctx.tp.all_reduce(grad, "tp all-reduce (backward)"), None


class _ReduceFromTensorParallel(torch.autograd.Function):
    """All-reduce forward; identity backward (Megatron's `g`)."""

    @staticmethod
    def forward(ctx, x, tp):
        return tp.all_reduce(x, "tp all-reduce")

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class _GatherFromSequenceParallel(torch.autograd.Function):
    """All-gather of the tokens forward; reduce-scatter of their gradient backward (sequence
    parallelism's `g`, before a column-parallel matrix)."""

    @staticmethod
    def forward(ctx, x, tp):
        ctx.tp = tp
        return tp.all_gather(x, "tp all-gather")

    @staticmethod
    def backward(ctx, grad):
        return ctx.tp.reduce_scatter(grad, "tp reduce-scatter (backward)"), None


class _ReduceScatterToSequenceParallel(torch.autograd.Function):
    """Reduce-scatter of the tokens forward; all-gather of their gradient backward (sequence
    parallelism's `g-bar`, after a row-parallel matrix)."""

    @staticmethod
    def forward(ctx, x, tp):
        ctx.tp, ctx.shape = tp, x.shape
        return tp.reduce_scatter(x, "tp reduce-scatter")

    @staticmethod
    def backward(ctx, grad):
        return ctx.tp.all_gather(grad, "tp all-gather (backward)").view(ctx.shape), None


class _ScatterToSequenceParallel(torch.autograd.Function):
    """The rank's tokens forward; all-gather of their gradient backward: the embedding's
    output, computed whole by every rank, entering the sequence-parallel region (Megatron's
    scatter_to_sequence_parallel_region). The gathered gradient keeps the embedding's
    gradients equal on every rank."""

    @staticmethod
    def forward(ctx, x, tp):
        ctx.tp, ctx.shape = tp, x.shape
        return tp.own_tokens(x)

    @staticmethod
    def backward(ctx, grad):
        return ctx.tp.all_gather(grad, "sp all-gather (backward, embedding)").view(ctx.shape), None


class _GatherToReplicated(torch.autograd.Function):
    """All-gather of the tokens forward; the rank's tokens of the gradient backward: the final
    norm's output leaving the sequence-parallel region for the LM head, which every rank holds
    whole and computes alike, so every rank's gradient of the gathered tokens is the same
    whole gradient and needs no collective (Megatron's gather_from_sequence_parallel_region
    with tensor_parallel_output_grad=False)."""

    @staticmethod
    def forward(ctx, x, tp):
        ctx.tp = tp
        return tp.all_gather(x, "sp all-gather (before the head)")

    @staticmethod
    def backward(ctx, grad):
        return ctx.tp.own_tokens(grad), None


class TensorParallel:
    """The tensor-parallel group of one rank; tp == 1 makes every operator the identity.

    `wire` (comm.Wire) carries the collectives over `members` (global ranks in tp order);
    `recorder` (trace.Recorder) gets one "tp_comm" span per collective with the bytes sent.
    With `sequence_parallel` the residual stream between blocks is the rank's tokens, shape
    (tokens / tp, hidden), else the whole (sequences, seq_len, hidden).
    """

    def __init__(self, rank: int = 0, size: int = 1, wire=None, members=None,
                 sequence_parallel: bool = False, collectives: bool = True):
        self.rank, self.size, self.wire, self.members = rank, size, wire, members
        # False: a shard computed alone (the layer profiler), its collectives left out.
        self.collectives = collectives and size > 1
        if self.collectives and (wire is None or members is None or len(members) != size):
            raise ValueError(f"tensor parallelism over {size} ranks needs a wire and its "
                             f"{size} members in tp order (got {members})")
        self.splits_sequence = sequence_parallel and self.collectives
        self.recorder = None  # a trace.Recorder that gets a span per collective
        self.calls = 0  # collectives so far: every rank of the group counts alike (tags)

    # ---- the operators (what a Block, the embedding and the head call) ----------------------

    def copy_in(self, x):
        """Before a column-parallel matrix: `f`, or with sequence parallelism `g`."""
        if not self.collectives:
            return x
        if self.splits_sequence:
            return _GatherFromSequenceParallel.apply(x, self)
        return _CopyToTensorParallel.apply(x, self)

    def reduce_out(self, x):
        """After a row-parallel matrix: `g`, or with sequence parallelism `g-bar`."""
        if not self.collectives:
            return x
        if self.splits_sequence:
            return _ReduceScatterToSequenceParallel.apply(x, self)
        return _ReduceFromTensorParallel.apply(x, self)

    def scatter_tokens(self, x):
        """The embedding's output into the sequence-parallel region (identity without)."""
        return _ScatterToSequenceParallel.apply(x, self) if self.splits_sequence else x

    def gather_tokens(self, x):
        """The final norm's output out of the sequence-parallel region (identity without)."""
        return _GatherToReplicated.apply(x, self) if self.splits_sequence else x

    # ---- the collectives: comm.py's rings over this group ------------------------------------

    def token_pieces(self, tokens: int, hidden: int) -> list[tuple[int, int]]:
        """[start, end) of each rank's tokens (in values of the flattened tensor)."""
        if tokens % self.size:
            raise ValueError(f"sequence parallelism: {tokens} tokens do not split into "
                             f"tp={self.size} equal slices (tp must divide seq_len)")
        return [(a * hidden, b * hidden) for a, b in comm.intervals(tokens, self.size)]

    def own_tokens(self, x):
        """This rank's tokens of x (..., hidden), as (tokens / tp, hidden)."""
        hidden = x.shape[-1]
        a, b = self.token_pieces(x.numel() // hidden, hidden)[self.rank]
        return x.reshape(-1)[a:b].view(-1, hidden).clone()

    def all_reduce(self, x, label):
        buffer = x.reshape(-1).clone()
        self._run(label, lambda tag: comm.ring_all_reduce(self.wire, buffer, self.members, tag,
                                                          label, label))
        return buffer.view(x.shape)

    def reduce_scatter(self, x, label):
        """x (..., hidden), this rank's partial sums of every token -> the sums of its own
        tokens, (tokens / tp, hidden)."""
        hidden = x.shape[-1]
        buffer = x.reshape(-1).clone()
        pieces = self.token_pieces(buffer.numel() // hidden, hidden)
        self._run(label, lambda tag: comm.ring_reduce_scatter(self.wire, buffer, self.members,
                                                              pieces, tag, label, label))
        a, b = pieces[self.rank]
        return buffer[a:b].view(-1, hidden)

    def all_gather(self, x, label):
        """x (tokens / tp, hidden), this rank's tokens -> every rank's, (tokens, hidden)."""
        hidden = x.shape[-1]
        mine = x.reshape(-1)
        buffer = torch.empty(mine.numel() * self.size)
        pieces = self.token_pieces(buffer.numel() // hidden, hidden)
        a, b = pieces[self.rank]
        buffer[a:b] = mine
        self._run(label, lambda tag: comm.ring_all_gather(self.wire, buffer, self.members,
                                                          pieces, tag, label, label))
        return buffer.view(-1, hidden)

    def _run(self, label, ring):
        """Runs one ring with this call's tags; one span with the bytes it sent."""
        self.calls += 1
        activity = self.wire.activity
        doing = activity.what
        start, sent = comm.now(), self.wire.sent_bytes
        ring(comm.TAG_TENSOR_PARALLEL * comm.TAG_KIND + (self.calls % 900) * 1000)
        if self.recorder is not None:
            self.recorder.span(label, "tp_comm", 1, start, comm.now(),
                               {"bytes": self.wire.sent_bytes - sent})
        activity.set(doing)  # back to the pass the collective was part of (the watchdog)


def _generator(seed: int, *key: int) -> torch.Generator:
    g = torch.Generator()
    value = seed
    for k in key:
        value = (value * 1000003 + k + 1) % (2**63 - 1)
    g.manual_seed(value)
    return g


def _normal(shape, std, g):
    return torch.randn(*shape, generator=g) * std


class Block(torch.nn.Module):
    """One transformer layer, holding this rank's tensor-parallel shard. With sequence
    parallelism its norms and row-parallel biases act on the rank's tokens only: they are
    marked `sequence_parallel` (as Megatron marks them), for the all-reduce of their gradients
    across tp (StageModule.reduce_sequence_parallel_gradients)."""

    def __init__(self, cfg: GptConfig, layer: int, seed: int, tp: TensorParallel):
        super().__init__()
        h, f, t = cfg.hidden, cfg.ffn_hidden, tp.size
        if cfg.heads % t or f % t:
            raise ValueError(f"heads ({cfg.heads}) and ffn_hidden ({f}) must divide by tp={t}")
        self.tp, self.heads = tp, cfg.heads // t
        self.head_dim, self.hidden, self.seq_len = h // cfg.heads, h, cfg.seq_len
        g = _generator(seed, 1, layer)
        std, out_std = 0.02, 0.02 / math.sqrt(2 * cfg.layers)
        qkv = _normal((3 * h, h), std, g)  # rows: q, k, v, each heads x head_dim
        proj = _normal((h, h), out_std, g)
        fc1 = _normal((f, h), std, g)
        fc2 = _normal((h, f), out_std, g)
        r = tp.rank
        q_rows = slice(r * h // t, (r + 1) * h // t)
        qkv_shard = torch.cat([qkv[i * h : (i + 1) * h][q_rows] for i in range(3)])
        self.ln1 = torch.nn.LayerNorm(h)
        self.qkv_w = torch.nn.Parameter(qkv_shard.contiguous())
        self.qkv_b = torch.nn.Parameter(torch.zeros(3 * h // t))
        self.proj_w = torch.nn.Parameter(proj[:, q_rows].contiguous())
        self.proj_b = torch.nn.Parameter(torch.zeros(h))
        self.ln2 = torch.nn.LayerNorm(h)
        f_rows = slice(r * f // t, (r + 1) * f // t)
        self.fc1_w = torch.nn.Parameter(fc1[f_rows].contiguous())
        self.fc1_b = torch.nn.Parameter(torch.zeros(f // t))
        self.fc2_w = torch.nn.Parameter(fc2[:, f_rows].contiguous())
        self.fc2_b = torch.nn.Parameter(torch.zeros(h))
        for p in (self.ln1.weight, self.ln1.bias, self.proj_b, self.ln2.weight, self.ln2.bias,
                  self.fc2_b):
            p.sequence_parallel = tp.splits_sequence

    def forward(self, x):
        """x: (sequences, seq_len, hidden), or with sequence parallelism the rank's tokens
        (tokens / tp, hidden); returns the same shape."""
        s = self.seq_len
        y = self.tp.copy_in(self.ln1(x)).view(-1, s, self.hidden)  # whole sequences
        b = y.shape[0]
        q, k, v = F.linear(y, self.qkv_w, self.qkv_b).split(self.heads * self.head_dim, dim=-1)
        q, k, v = (z.view(b, s, self.heads, self.head_dim).transpose(1, 2) for z in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim)
        causal = torch.ones(s, s, dtype=torch.bool).triu(1)
        attn = scores.masked_fill(causal, float("-inf")).softmax(dim=-1) @ v
        attn = attn.transpose(1, 2).reshape(b, s, self.heads * self.head_dim)
        x = x + self.tp.reduce_out(F.linear(attn, self.proj_w)) + self.proj_b
        y = self.tp.copy_in(self.ln2(x))
        y = F.linear(F.gelu(F.linear(y, self.fc1_w, self.fc1_b)), self.fc2_w)
        return x + self.tp.reduce_out(y) + self.fc2_b


class Embedding(torch.nn.Module):
    def __init__(self, cfg: GptConfig, seed: int):
        super().__init__()
        g = _generator(seed, 0)
        self.tokens = torch.nn.Parameter(_normal((cfg.vocab, cfg.hidden), 0.02, g))
        self.positions = torch.nn.Parameter(_normal((cfg.seq_len, cfg.hidden), 0.01, g))

    def forward(self, tokens):
        return self.tokens[tokens] + self.positions[: tokens.shape[1]]


class Head(torch.nn.Module):
    """Final norm, LM head and the summed cross-entropy of next-byte prediction. With sequence
    parallelism the norm acts on the rank's tokens, which are then all-gathered: every rank
    computes the head and the loss whole, as without."""

    def __init__(self, cfg: GptConfig, seed: int, tp: TensorParallel | None = None):
        super().__init__()
        g = _generator(seed, 2)
        self.tp = tp or TensorParallel()
        self.norm = torch.nn.LayerNorm(cfg.hidden)
        self.weight = torch.nn.Parameter(_normal((cfg.vocab, cfg.hidden), 0.02, g))
        for p in self.norm.parameters():
            p.sequence_parallel = self.tp.splits_sequence

    def forward(self, x, targets):
        logits = F.linear(self.tp.gather_tokens(self.norm(x)), self.weight)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.flatten(),
                               reduction="sum")


class StageModule(torch.nn.Module):
    """What one rank of one pipeline stage holds: its layers, plus the embedding on the first
    stage and the head on the last. With sequence parallelism it takes and gives the rank's
    tokens (the first stage takes the token ids of its sequences whole, the last stage gives
    the loss)."""

    def __init__(self, cfg: GptConfig, first_layer: int, layers: int, first: bool, last: bool,
                 seed: int, tp: TensorParallel):
        super().__init__()
        self.first_layer, self.first, self.last, self.tp = first_layer, first, last, tp
        self.embedding = Embedding(cfg, seed) if first else None
        self.blocks = torch.nn.ModuleList(
            Block(cfg, first_layer + i, seed, tp) for i in range(layers))
        self.head = Head(cfg, seed, tp) if last else None

    def forward(self, x, targets=None):
        if self.embedding is not None:
            x = self.tp.scatter_tokens(self.embedding(x))
        for block in self.blocks:
            x = block(x)
        if self.head is not None:
            return self.head(x, targets)
        return x

    def segment_parameters(self, first_layer: int, layers: int) -> list[torch.nn.Parameter]:
        """The parameters of model layers [first_layer, first_layer + layers) held here, with
        the embedding when the segment starts the model and the head when it ends it."""
        params = []
        if self.embedding is not None and first_layer == 0:
            params += list(self.embedding.parameters())
        for i, block in enumerate(self.blocks):
            if first_layer <= self.first_layer + i < first_layer + layers:
                params += list(block.parameters())
        if self.head is not None and first_layer + layers == self.first_layer + len(self.blocks):
            params += list(self.head.parameters())
        return params

    def reduce_sequence_parallel_gradients(self):
        """With sequence parallelism, after the last backward of a step: the gradients of the
        parameters every tp rank holds whole but computed on its tokens only (norms,
        row-parallel biases) summed across tp, in one all-reduce (Megatron's
        finalize_model_grads). Without, nothing to do."""
        params = [p for p in self.parameters() if getattr(p, "sequence_parallel", False)]
        if not params or not self.tp.splits_sequence:
            return
        flat = torch.cat([p.grad.reshape(-1) for p in params])
        flat = self.tp.all_reduce(flat, "sp all-reduce (norm and bias gradients)")
        at = 0
        for p in params:
            n = p.grad.numel()
            p.grad.copy_(flat[at: at + n].view_as(p.grad))
            at += n
