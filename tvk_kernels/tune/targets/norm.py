"""Layer norm and batch norm (kernels/norm.py), forward and backward."""
from __future__ import annotations

import numpy as np

from ...kernels.launch import pow2ceil
from ...kernels.norm import (BN_APPLY, BN_BWD, BN_COMBINE, BN_FWD, BN_PART_BWD, BN_PART_FWD, LN_BWD,
                             LN_BWD_FUSED, LN_FWD, LN_GWB, _bn_chunks, batch_norm, batch_norm_backward, defines,
                             fused_ln_backward_plan, layer_norm, layer_norm_backward, ln_column_split)
from ...kernels.reduce import required_subgroup_size
from . import Case


class NormTarget:
    """What tvk-tune needs to tune the norm family (see tvk_kernels/tune/targets/): layer
    norm forward + backward over a [rows, cols] tensor ("ln"), or batch norm training
    forward + backward over (N, C, HW) ("bn")."""

    family = "norm"
    template = "norm.comp"
    suites = {
        "suite": [
            {"kind": "ln", "rows": 4096, "cols": 1024, "n": 4194304},
            {"kind": "ln", "rows": 16384, "cols": 64, "n": 1048576},
            {"kind": "ln", "rows": 64, "cols": 512, "n": 32768},
            {"kind": "bn", "N": 32, "C": 64, "HW": 1024, "n": 2097152},
            {"kind": "bn", "N": 256, "C": 512, "HW": 1, "n": 131072},
        ],
        "tiny": [
            {"kind": "ln", "rows": 7, "cols": 1000, "n": 7000},
            {"kind": "bn", "N": 4, "C": 3, "HW": 127, "n": 1524},
        ],
    }

    def prepare(self, device, shape, n_inputs=3, seed=0):
        ln = shape.get("kind", "ln") == "ln"
        dims = (shape["rows"], shape["cols"]) if ln else (shape["N"], shape["C"], shape["HW"])
        rows, n = (dims[0], dims[1]) if ln else (dims[1], dims[0] * dims[2])
        width = dims[1]  # LN: weight per column; BN: per channel
        rng = np.random.default_rng(seed)
        host = [rng.standard_normal(dims, dtype=np.float32) for _ in range(n_inputs + 1)]
        bufs = [device.upload(a) for a in host]
        grad = device.upload(rng.standard_normal(dims, dtype=np.float32))
        w = device.upload(rng.standard_normal(width, dtype=np.float32))
        alloc = device.allocator.alloc
        y, dx = alloc(4 * rows * n), alloc(4 * rows * n)
        stats, pgrads = alloc(8 * rows), alloc(8 * width)

        def run(params, i):
            x = bufs[i].address
            if ln:
                layer_norm(device, x, y.address, dims, 1, w.address, 0, 1e-5, stats.address, stats.address + 4 * rows,
                           params=params)
                layer_norm_backward(device, grad.address, x, stats.address, stats.address + 4 * rows, dims, 1,
                                    w.address, dx.address, pgrads.address, pgrads.address + 4 * width, params=params)
            else:
                batch_norm(device, x, y.address, dims, w.address, 0, training=True, save_mean_addr=stats.address,
                           save_invstd_addr=stats.address + 4 * rows, params=params)
                batch_norm_backward(device, grad.address, x, dims, stats.address, stats.address + 4 * rows, w.address,
                                    dx.address, pgrads.address, pgrads.address + 4 * width, params=params)

        def check(params):
            run(params, -1)
            got = device.download(y, np.float32, dims).astype(np.float64)
            x = host[-1].astype(np.float64)
            wv = device.download(w, np.float32, (width,)).astype(np.float64)
            axes = (1,) if ln else (0, 2)
            xhat = (x - x.mean(axes, keepdims=True)) / np.sqrt(x.var(axes, keepdims=True) + 1e-5)
            want = xhat * (wv if ln else wv[None, :, None])
            err = np.abs(got - want)
            return bool(np.all(err <= 2e-5 * np.abs(want).max() + 1e-6)), float(err.max())

        return Case(device, shape, run, check, [bufs, grad, w, y, dx, stats, pgrads])

    @staticmethod
    def work(shape, params) -> list[dict]:
        """The launches of one forward + backward, as the runtime plans them (cost_model.py predicts
        each with the layer norm forward's statistics): layer norm's row kernels, then its weight and
        bias sums over the rows (split into chunks by TARGET_GROUPS / SPLIT_ROWS, finished by two reduce
        passes), or, where a row fits the registers, the fused backward and the two reduce passes; batch norm's row kernels, or where it splits, per-chunk partials, a per-channel combine
        and an elementwise pass, each way."""
        ln = shape.get("kind", "ln") == "ln"
        rows, n = (shape["rows"], shape["cols"]) if ln else (shape["C"], shape["N"] * shape["HW"])
        wg, items = params["WG"], params["ITEMS"]

        def launch(flops, dram_bytes, groups, lds_bytes_per_thread=32):
            return {"flops": flops, "dram_bytes": dram_bytes, "lds_bytes": groups * wg * lds_bytes_per_thread,
                    "groups": max(groups, 1), "invocations": wg, "lds_per_group": 4 * wg}

        t = min(wg, pow2ceil(-(-n // items)))
        row_groups = -(-rows // (wg // t))
        fused = ln and fused_ln_backward_plan(params, rows, n)
        if fused:  # forward x -> y (8 bytes an element), backward grad, x -> grad_in and column partials (12)
            _, _, _, groups = fused
            out = [launch(8 * rows * n, 8 * rows * n, row_groups),
                   launch(12 * rows * n, 12 * rows * n + 8 * groups * n, groups, 8)]
            if groups > 1:
                out += [launch(groups * n, 4 * groups * n + 4 * n, -(-n // wg), 8)] * 2
            return out
        if ln:  # forward x -> y, backward grad, x -> grad_in: 20 bytes an element
            _, col_groups, nsplit, _ = ln_column_split(params, rows, n)
            out = [launch(16 * rows * n, 20 * rows * n, row_groups),
                   launch(4 * rows * n, 8 * rows * n + 8 * nsplit * n, col_groups * nsplit, 8)]
            if nsplit > 1:  # grad_weight and grad_bias: a column sum of the chunks' partials each
                out += [launch(nsplit * n, 4 * nsplit * n + 4 * n, -(-n // wg), 8)] * 2
            return out
        split = _bn_chunks(params, rows, n)
        if split is None:  # a workgroup per channel, each way: statistics, then the output (36 bytes an element)
            return [launch(20 * rows * n, 36 * rows * n, row_groups)]
        nsplit, _ = split
        apply_groups = -(-rows * n // (wg * items))
        combine = launch(8 * rows * nsplit, 8 * rows * nsplit + 16 * rows, -(-rows // wg), 8)
        return [launch(3 * rows * n, 4 * rows * n, rows * nsplit), combine,  # forward: partials,
                launch(2 * rows * n, 8 * rows * n, apply_groups, 0),           # normalize x -> y
                launch(4 * rows * n, 8 * rows * n, rows * nsplit), combine,   # backward: partials,
                launch(4 * rows * n, 12 * rows * n, apply_groups, 0)]         # grad_in

    @staticmethod
    def static_defines(params) -> tuple[dict, tuple, int | None]:
        """The layer norm forward (the suite's common kernel)."""
        return (defines(LN_FWD, params["ITEMS"], params["SUBGROUP"]), (params["WG"], 1, 1),
                required_subgroup_size(params))

    @staticmethod
    def kernel_defines(params) -> list[dict]:
        """The kernels one tuned parameter set builds (tune/carry_over.py): every phase as the
        runtime builds it, the batch-norm writes with and without the fused ReLU."""
        items, sub = params["ITEMS"], params["SUBGROUP"]
        rows = [defines(phase, items, sub)
                for phase in (LN_FWD, LN_BWD, LN_BWD_FUSED, BN_FWD, BN_BWD, BN_PART_FWD, BN_PART_BWD)]
        fixed = [defines(LN_GWB, items, False), defines(BN_COMBINE, 1, False), defines(BN_APPLY, items, False)]
        relu = [defines(BN_FWD, items, sub, relu=True), defines(BN_APPLY, items, False, relu=True)]
        return rows + fixed + relu


TARGET = NormTarget()
