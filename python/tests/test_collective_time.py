"""hgsim._hgsim.collective_time, the closed form validation/kernel_collectives.py prices vidur's
NCCL tables with: a node whose GPUs share fewer NICs than they are (nics_per_node), held to
its closed form on a small case and to a committed row of kernels/measured/nccl/."""
import csv
import os
import pathlib

import pytest

from hgsim import _hgsim

ROOT = pathlib.Path(os.environ.get("HGSIM_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))

MIB = 1 << 20
A100 = "A100-80GB-SXM"
# NCCL's protocol latencies and kernel fixed cost at 0: the channel rings alone.
NO_NCCL = dict(nccl_latency_scale=0.0, nccl_fixed_cost_2_ranks=0.0, nccl_fixed_cost_8_ranks=0.0)


def test_shared_nic_all_reduce_is_the_nodes_out_bytes_over_one_nic():
    # 2 nodes x 2 A100: 2 channels of 4 members, each leaving both nodes once. With one NIC
    # a node each channel's NIC hop gets half of it, and the NIC-bound step is chunk / (B/2)
    # with chunk = S / (channels x members): 6 steps x S/8 / (B/2) = 1.5 S / B, the bytes a
    # ring sends out of a node, 2(n-1)/n S, over the one NIC (the NIC-bound step hides the
    # hops' latencies). NCCL's latencies and fixed cost are set to 0 (as a calibration would):
    # every protocol adds nothing, Simple runs.
    size, nic = 64 * MIB, 6e9
    t = _hgsim.collective_time("all_reduce", A100, 4, 2, float(size), nic_bandwidth="6GB/s",
                               nvlink_latency="1us", nic_latency="2us", nics_per_node=1, **NO_NCCL)
    assert t == pytest.approx(1.5 * size / nic, rel=1e-9)


def test_one_nic_per_gpu_halves_the_bandwidth_term():
    size = 64.0 * MIB
    kw = dict(nic_bandwidth="6GB/s", **NO_NCCL)
    shared = _hgsim.collective_time("all_reduce", A100, 4, 2, size, nics_per_node=1, **kw)
    own = _hgsim.collective_time("all_reduce", A100, 4, 2, size, **kw)
    same = _hgsim.collective_time("all_reduce", A100, 4, 2, size, nics_per_node=2, **kw)
    assert own == same
    assert shared == pytest.approx(2 * own, rel=1e-9)


def test_shared_nic_matches_vidurs_four_rank_two_node_row():
    # kernels/measured/nccl/vidur_a100_dgx_all_reduce.csv (microsoft/vidur 7d47513, MIT):
    # (4 ranks, 2 a node) at 16 MiB took 4.228 ms. The NIC's both-ways rate from the same
    # table's (2, 1) rows: 64 MiB in 11.439 ms and 32 MiB in 5.751 ms, slope 5.90 GB/s.
    with open(ROOT / "kernels" / "measured" / "nccl" / "vidur_a100_dgx_all_reduce.csv") as f:
        rows = {(int(r["ranks"]), int(r["ranks_per_node"]), int(r["size_bytes"])):
                float(r["median_ms"]) * 1e-3 for r in csv.DictReader(f)}
    nic = 32 * MIB / (rows[(2, 1, 64 * MIB)] - rows[(2, 1, 32 * MIB)])
    t = _hgsim.collective_time("all_reduce", A100, 4, 2, 16.0 * MIB,
                               nic_bandwidth="%.6gGB/s" % (nic / 1e9), nics_per_node=1)
    assert t == pytest.approx(rows[(4, 2, 16 * MIB)], rel=0.10)


def test_more_nics_than_gpus_is_refused():
    with pytest.raises(Exception, match="nics_per_node"):
        _hgsim.collective_time("all_reduce", A100, 4, 2, 1.0 * MIB, nics_per_node=3)
