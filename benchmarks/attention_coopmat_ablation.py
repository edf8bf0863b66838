"""Where the forward of attention on cooperative matrices spends its GPU time (a diagnostic, prints only): the
forward kernel timed whole and with one part of its step loop taken out at a time (the results are wrong then;
only the time counts), at one shape and config.

    python benchmarks/attention_coopmat_ablation.py [--shape 8,8,1024,64] [--causal] [--br 64 --bc 64]
    python benchmarks/attention_coopmat_ablation.py --backward [--bbr 64 --bbc 32] [--hsplit 2]   (the backward whole)

Each variant is the template's text with lines removed, written next to it under its own name and built once.
"""
import argparse
import json

# (name, [(text, replacement), ...]): each replacement applies to the first occurrence (the forward comes first)
QK = ("        ROWS_BY_TILE_T(sS, KEPT_Q, sK)\n        SG_SYNC();\n        float s[CPT];", "        SG_SYNC();\n        float s[CPT];")
PV = ("        HALVES_BY_TILE(o, sP, sVt, 0u, HB)\n", "")
LOADS = [("        PUT_TILE(sK, kr, p.k, kbase, krs, j0, p.lk)\n        PUT_TILE_T(sVt, vr, p.v, vbase, vrs, j0, p.lk)\n", ""),
         ("            FETCH_TILE(kr, p.k, kbase, krs, j0 + BC, p.lk)\n            FETCH_TILE(vr, p.v, vbase, vrs, j0 + BC, p.lk)\n", "")]
SOFTMAX = [("s[c] = masked(sS[r * SST + col] * p.scale, b, h, i, j0 + col);", "s[c] = sS[r * SST + col] * p.scale;"),
           ("float pr = s[c] == NEG_INF ? 0.0 : exp(s[c] - m);", "float pr = s[c];")]
RESCALE = ("if (any_row(mx > m + TAU)) {", "if (false) {")
VARIANTS = [
    ("whole", []),
    ("no q k^T", [QK]),
    ("no P v", [PV]),
    ("no K/V loads", LOADS),
    ("no exp or mask", SOFTMAX),
    ("no rescale", [RESCALE]),
    ("loads only", [QK, PV] + SOFTMAX),
    ("products only", LOADS + SOFTMAX),
    ("neither products nor loads", [QK, PV] + LOADS + SOFTMAX),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="8,8,1024,64", help="batch,heads,length,head")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--br", type=int, default=None)
    ap.add_argument("--bc", type=int, default=None)
    ap.add_argument("--bbr", type=int, default=None)
    ap.add_argument("--bbc", type=int, default=None)
    ap.add_argument("--hsplit", type=int, default=None, help="dK/dV's workgroups per key block along the head dim")
    ap.add_argument("--backward", action="store_true", help="time the backward (dQ, dK/dV and delta) whole")
    args = ap.parse_args()
    import numpy as np
    from tvk_kernels import config, get_device
    from tvk_kernels.paths import data_dir
    from tvk_kernels.kernels import attention, attention_coopmat
    from tvk_kernels.kernels.launch import family
    from torchvk.experiments.kernels import _gpu

    device = get_device(0)
    b, h, n, d = (int(x) for x in args.shape.split(","))
    given = {name: value for name, value in (("BR", args.br), ("BC", args.bc), ("BBR", args.bbr), ("BBC", args.bbc),
                                             ("HSPLIT", args.hsplit)) if value}
    if given:  # this config in place of the device's
        resolve = attention_coopmat.CoopAttention.resolve
        attention_coopmat.CoopAttention.resolve = lambda self, shape, params=None: {**resolve(self, shape, params), **given}
    rng = np.random.default_rng(0)
    q, k, v, o, g, dq, dk, dv = (device.upload(rng.standard_normal((b, h, n, d)).astype(np.float16)) for _ in range(8))
    lse, delta = device.allocator.alloc(4 * b * h * n), device.allocator.alloc(4 * b * h * n)
    kw = {"dtype": "float16", "scale": d ** -0.5, "causal": args.causal}

    def forward():
        attention.attention_forward(device, q, k, v, o, lse, shape, **kw)

    def backward():
        attention.attention_backward(device, q, k, v, o, g, lse, dq, dk, dv, shape, delta=delta, **kw)
    shape = (b, h, h, n, n, d)
    flops = 4 * b * h * n * n * d * (0.5 if args.causal else 1.0)
    templates = data_dir("templates")
    source = (templates / "attention_coopmat.comp").read_text()
    if args.backward:
        forward()
        flops *= 2.5  # dQ's three products and dK/dV's four against the forward's two
    for i, (name, edits) in enumerate(VARIANTS[:1] if args.backward else VARIANTS):
        text = source
        for old, new in edits:
            if old not in text:
                raise SystemExit(f"{name}: the template no longer has {old!r}")
            text = text.replace(old, new, 1)
        template = f"attention_coopmat_ablation{i}.comp"
        (templates / template).write_text(text)
        try:
            attention_coopmat.CoopAttention.template = template
            family(device, attention_coopmat.CoopAttention)._pipelines.clear()  # its memo keys on the defines alone
            config.reload()  # kept launches go with the template
            seconds = _gpu(device, backward if args.backward else forward)
        finally:  # the templates folder keeps no variant, even after Ctrl-C
            (templates / template).unlink()
        print(json.dumps({"variant": ("backward " if args.backward else "forward ") + name, "shape": args.shape,
                          "causal": args.causal, **given, "ms": round(seconds * 1e3, 4),
                          "tflops": round(flops / seconds / 1e12, 2)}), flush=True)


if __name__ == "__main__":
    main()
