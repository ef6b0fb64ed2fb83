"""hgsim's live runner: trains a small model over emulated WAN links."""

import os as _os

# One thread per worker, as the simulator's one GPU per worker: OpenBLAS (Debian's torch
# uses the system BLAS) would otherwise start a thread per core in every process. Set before
# anything imports torch.
for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    _os.environ.setdefault(_name, "1")
