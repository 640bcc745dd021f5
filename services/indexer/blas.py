"""One BLAS thread per indexer process.

numpy's OpenBLAS splits a matrix-vector product over threads once the matrix is large enough (here from about
1,300 rows of 384 floats: a turn memory of 1,300 turns, or a small code index), and its idle threads then
spin-wait for the next call. Measured on the 2-core machine, one ``vectors @ query`` took 0.2 ms of CPU below that
size and 10.4 ms above it, nearly all of it spinning, taken from the services that share the cores: a loop's
indexer went from 15 to 78 ms of CPU per iteration between its 1,000th and 2,000th iteration. Single-threaded,
the same product costs 0.3 ms at 2,000 rows and 0.9 ms at 6,000. The embedder (ONNX) keeps its own pool, which
does not spin (``embeddings.py``).
"""

from __future__ import annotations

import functools

__all__ = ["one_blas_thread"]


@functools.cache  # once per process: the limit is the process's
def one_blas_thread() -> None:
    """Limit the BLAS libraries loaded in this process (numpy's) to one thread."""
    import numpy  # noqa: F401  # loads the BLAS library that the limit applies to
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1, user_api="blas")
