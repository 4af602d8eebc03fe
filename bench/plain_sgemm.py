"""The plain sub-group SGEMM: what the runtime makes of straightforward OpenCL C, as a reference for xegemm.

One sub-group of 16 work-items computes a 4 x 64 tile of C: each work-item keeps 4 x 4 float accumulators,
and per k reads four elements of B (its lanes' columns) and four of A (uniform over the sub-group, so the
runtime broadcasts them).  No local memory, no k-blocking: a few dozen lines anyone would write.  Of the
register tiles tried on the 2-core Xeon (8 x 1, 16 x 1, 8 x 2, 4 x 4 per work-item) 4 x 4 was fastest at
520x496x264 and 1024^3, so the reference is the strongest of them.
It runs on the same device and through the same runtime path as the xegemm kernels
(:mod:`xegemm.runtime.program`) and is timed by the same profiling events.
"""

from __future__ import annotations

import ctypes

import numpy as np

from xegemm.library.build_flags import STANDARD
from xegemm.runtime.program import build_program, from_device, launch, to_device

TM, TN, SG = 4, 4, 16
SOURCE = f"""
__attribute__((reqd_work_group_size({SG}, 1, 1))) __attribute__((intel_reqd_sub_group_size({SG})))
__kernel void plain_sgemm(__global const float *A, __global const float *B, __global float *C,
                          const int M, const int N, const int K) {{
    const int lane = get_sub_group_local_id();
    const int n0 = get_group_id(0) * {SG * TN}, m0 = get_group_id(1) * {TM};
    const long batch = get_group_id(2);
    A += batch * M * K; B += batch * K * N; C += batch * M * N;
    float acc[{TM}][{TN}];
    for (int i = 0; i < {TM}; ++i) for (int j = 0; j < {TN}; ++j) acc[i][j] = 0.0f;
    for (int k = 0; k < K; ++k) {{
        float b[{TN}];
        for (int j = 0; j < {TN}; ++j) {{
            const int n = n0 + j * {SG} + lane;
            b[j] = n < N ? B[(long)k * N + n] : 0.0f;
        }}
        for (int i = 0; i < {TM}; ++i) {{
            const float a = m0 + i < M ? A[(long)(m0 + i) * K + k] : 0.0f;
            for (int j = 0; j < {TN}; ++j) acc[i][j] = fma(a, b[j], acc[i][j]);
        }}
    }}
    for (int i = 0; i < {TM}; ++i)
        for (int j = 0; j < {TN}; ++j) {{
            const int m = m0 + i, n = n0 + j * {SG} + lane;
            if (m < M && n < N) C[(long)m * N + n] = acc[i][j];
        }}
}}
"""
OPTIONS = STANDARD     # as xegemm builds its portable kernels


class PlainSgemm:
    """C = A B (float32, row-major, batched) with :data:`SOURCE` on a queue of :func:`make_queue`."""

    def __init__(self, queue, a: np.ndarray, b: np.ndarray):
        a3, b3 = (np.ascontiguousarray(x.reshape((-1, *x.shape[-2:])), dtype=np.float32) for x in (a, b))
        self.batch, self.m, self.k = a3.shape
        self.n = b3.shape[2]
        self.queue, self._shape = queue, (*a.shape[:-1], self.n)
        self.kernel = build_program(queue, SOURCE, OPTIONS).get_sycl_kernel("plain_sgemm")
        self._c = to_device(queue, np.zeros((self.batch, self.m, self.n), np.float32))
        self._args = [to_device(queue, a3), to_device(queue, b3), self._c,
                      ctypes.c_int(self.m), ctypes.c_int(self.n), ctypes.c_int(self.k)]
        self._global = (-(-self.n // (SG * TN)) * SG, -(-self.m // TM), self.batch)

    def submit(self):
        """Launch once; the profiling event."""
        return launch(self.queue, self.kernel, self._args, self._global, (SG, 1, 1))

    def result(self) -> np.ndarray:
        """C as computed by the last launch."""
        return from_device(self._c, np.float32, self._shape)
