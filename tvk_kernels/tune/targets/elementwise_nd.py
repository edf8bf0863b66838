"""The N-d elementwise kernel (kernels/elementwise.py `elementwise`): contiguous and strided paths."""
from __future__ import annotations

import numpy as np

from ...kernels.elementwise import Operand, compute_type, defines, elementwise
from . import Case


class ElementwiseNdTarget:
    """What tvk-tune needs to tune the N-d kernel (see tvk_kernels/tune/targets/): the float32
    maximum of two contiguous arrays (the contiguous path: WG/VEC/ITEMS; maximum, since
    add/sub/mul/div take the binary kernel) and a float32 copy of a transposed [rows, cols]
    matrix (the strided path: ND_WG/ND_ITEMS)."""

    family = "elementwise_nd"
    template = "elementwise_nd.comp"
    suites = {
        "suite": [
            {"n": 4096},
            {"n": 1 << 20},
            {"n": 1 << 24},
            {"rows": 64, "cols": 64, "n": 4096},
            {"rows": 1024, "cols": 1024, "n": 1 << 20},
            {"rows": 4096, "cols": 4096, "n": 1 << 24},
        ],
        "tiny": [
            {"n": 1000},
            {"rows": 30, "cols": 40, "n": 1200},
            {"n": 70_000},
            {"rows": 300, "cols": 250, "n": 75_000},
        ],
    }

    def prepare(self, device, shape, n_inputs=3, seed=0):
        n, transposed = shape["n"], "rows" in shape
        dims = (shape["rows"], shape["cols"]) if transposed else (n,)
        rng = np.random.default_rng(seed)
        host = [[rng.standard_normal(dims, dtype=np.float32) for _ in range(1 if transposed else 2)]
                for _ in range(n_inputs + 1)]
        bufs = [[device.upload(a) for a in arrays] for arrays in host]
        out = device.allocator.alloc(4 * n)
        if transposed:  # out [cols, rows] = the input [rows, cols] read down its columns
            rows, cols = dims
            op, dst = "copy", Operand(out.address, (cols, rows))

            def operands(i):
                return (Operand(bufs[i][0].address, (cols, rows), (1, cols)),)

            def want():
                return host[-1][0].T
        else:
            op, dst = "maximum", Operand(out.address, dims)

            def operands(i):
                return tuple(Operand(b.address, dims) for b in bufs[i])

            def want():
                return np.maximum(*host[-1])

        def run(params, i):
            elementwise(device, op, operands(i), dst, params=params)

        def check(params):
            run(params, -1)  # the set never used for timing
            expected = want()
            got = device.download(out, np.float32, expected.shape)
            return bool(np.array_equal(got, expected)), float(np.max(np.abs(got - expected)))

        return Case(device, shape, run, check, [bufs, out])

    @staticmethod
    def work(shape, params) -> dict:
        n, transposed = shape["n"], "rows" in shape
        wg, per_thread = (params["ND_WG"], params["ND_ITEMS"]) if transposed else \
            (params["WG"], params["VEC"] * params["ITEMS"])
        return {"flops": n, "dram_bytes": (8 if transposed else 12) * n, "lds_bytes": 0,
                "groups": -(-n // (wg * per_thread)), "invocations": wg, "lds_per_group": 0}

    @staticmethod
    def static_defines(params) -> tuple[dict, tuple, int | None]:
        """The contiguous float32 maximum (the static model compiles one kernel per candidate)."""
        kinds = ("float32", "float32")
        kernel = defines("maximum", kinds, "float32", compute_type("maximum", kinds, "float32"), params, params["VEC"])
        return kernel, (params["WG"], 1, 1), None

    @staticmethod
    def kernel_defines(params) -> list[dict]:
        """Kernels one tuned parameter set builds (tune/carry_over.py): a few ops and dtypes (ops whose
        expressions need no helper, so older templates compile them too), contiguous at every vector
        width the alignment fallback takes, and strided over 2 and 6 dims, shapes pushed or in a buffer."""
        cases = [("copy", ("float32",), "float32"), ("add", ("float32", "float32"), "float32"),
                 ("mul", ("float16", "float16"), "float16"), ("add", ("int64", int), "int64"),
                 ("where", ("bool", "float32", "float32"), "float32")]
        vecs = [v for v in (4, 2, 1) if v <= params["VEC"]]
        layouts = [{"vec": v} for v in vecs] + [{"ndim": nd, "meta_buf": mb} for nd in (2, 6) for mb in (False, True)]
        return [defines(op, kinds, out, compute_type(op, kinds, out), params, **layout)
                for op, kinds, out in cases for layout in layouts]


TARGET = ElementwiseNdTarget()
