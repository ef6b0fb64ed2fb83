"""hgsim's live runner: trains a small model over emulated WAN links."""

import os as _os

# One thread per worker, as the simulator's one GPU per worker: OpenBLAS (Debian's torch
# uses the system BLAS) would otherwise start a thread per core in every process. Set before
# anything imports torch.
for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    _os.environ.setdefault(_name, "1")

# A caching allocator, as GPU runtimes have: glibc would return every freed tensor above the
# (adaptive) mmap threshold to the kernel and fault the pages in again on the next
# allocation. With it the workers' layer times match the profiler's (measured: live compute
# 15-28% above the profile without it, within 3% with it).
for _name in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"):
    _os.environ.setdefault(_name, str(32 << 20))  # glibc refuses more than 32 MiB
