"""Imported first by the accounting benchmarks: numpy's BLAS (and any OpenMP pool) on one thread.

Their ratios are CPU times of one process (``time.process_time``), which counts every thread: a
BLAS pool left spinning after one side's call (OpenBLAS waits busily for more work) is charged to
whichever side is timed next. One thread for both sides, as ``bench_simulator.py`` runs torch.
Must run before numpy is imported; an explicit setting in the environment wins.
"""

import os

for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")
