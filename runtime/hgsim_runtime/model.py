"""The GPT-style causal language model the live runner trains, split the way a plan splits it.

A decoder-only transformer (learned positions, pre-LayerNorm blocks, GELU MLP, biases,
untied LM head) over byte-level tokens (vocabulary 256). Megatron-LM's tensor parallelism:
the QKV and first MLP matrices are split by columns, the attention output and second MLP
matrices by rows, with one all-reduce after each row-parallel matrix in the forward pass and
one before each column-parallel matrix in the backward pass (the `f` and `g` operators of
Shoeybi et al. 2019). The embedding, the final norm and the LM head are not split: every
tensor-parallel rank of the first and last stage holds them whole and computes them alike.

Weights are a function of (seed, layer index) only, generated whole and then sliced for the
rank's tensor-parallel shard, so every plan starts from the same model and the loss curves of
different plans and codecs can be compared step by step.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F


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
        return ctx.tp.all_reduce(grad.contiguous(), "tp all-reduce (backward)"), None


class _ReduceFromTensorParallel(torch.autograd.Function):
    """All-reduce forward; identity backward (Megatron's `g`)."""

    @staticmethod
    def forward(ctx, x, tp):
        return tp.all_reduce(x.contiguous(), "tp all-reduce")

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class TensorParallel:
    """The tensor-parallel group of one rank; tp == 1 makes both operators the identity.

    `on_collective(seconds)` is told how long each all-reduce took, for the trace.
    """

    def __init__(self, rank: int = 0, size: int = 1, group=None, collectives: bool = True):
        self.rank, self.size, self.group = rank, size, group
        # False: a shard computed alone (the layer profiler), its collectives left out.
        self.collectives = collectives and size > 1
        self.recorder = None  # a trace.Recorder that gets a span per all-reduce

    def copy_in(self, x):
        return _CopyToTensorParallel.apply(x, self) if self.collectives else x

    def reduce_out(self, x):
        return _ReduceFromTensorParallel.apply(x, self) if self.collectives else x

    def all_reduce(self, x, label):
        start = time.clock_gettime(time.CLOCK_MONOTONIC)
        dist.all_reduce(x, group=self.group)
        if self.recorder is not None:
            end = time.clock_gettime(time.CLOCK_MONOTONIC)
            self.recorder.span(label, "tp_comm", 1, start, end)
        return x


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
    """One transformer layer, holding this rank's tensor-parallel shard."""

    def __init__(self, cfg: GptConfig, layer: int, seed: int, tp: TensorParallel):
        super().__init__()
        h, f, t = cfg.hidden, cfg.ffn_hidden, tp.size
        if cfg.heads % t or f % t:
            raise ValueError(f"heads ({cfg.heads}) and ffn_hidden ({f}) must divide by tp={t}")
        self.tp, self.heads = tp, cfg.heads // t
        self.head_dim = h // cfg.heads
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

    def forward(self, x):
        b, s, _ = x.shape
        y = self.tp.copy_in(self.ln1(x))
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
    """Final norm, LM head and the summed cross-entropy of next-byte prediction."""

    def __init__(self, cfg: GptConfig, seed: int):
        super().__init__()
        g = _generator(seed, 2)
        self.norm = torch.nn.LayerNorm(cfg.hidden)
        self.weight = torch.nn.Parameter(_normal((cfg.vocab, cfg.hidden), 0.02, g))

    def forward(self, x, targets):
        logits = F.linear(self.norm(x), self.weight)
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="sum")


class StageModule(torch.nn.Module):
    """What one rank of one pipeline stage holds: its layers, plus the embedding on the first
    stage and the head on the last."""

    def __init__(self, cfg: GptConfig, first_layer: int, layers: int, first: bool, last: bool,
                 seed: int, tp: TensorParallel):
        super().__init__()
        self.first_layer, self.first, self.last = first_layer, first, last
        self.embedding = Embedding(cfg, seed) if first else None
        self.blocks = torch.nn.ModuleList(
            Block(cfg, first_layer + i, seed, tp) for i in range(layers))
        self.head = Head(cfg, seed) if last else None

    def forward(self, x, targets=None):
        if self.embedding is not None:
            x = self.embedding(x)
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
