"""Interleaved A/B on one device (diagnostic; it decided two thresholds, see design note 29):

    python benchmarks/ab_tile_fit_split_k.py [gemm] [conv] [coop] [prefetch] [frag] [convfrag] [stages] [coop2] [coop2bf16]
                                             [packed]
    (writes ab2.json to $OUT or /tmp)

gemm: the GEMM sweep with matmul's tile fit on and off (tuning/matmul.json tile_fit order
emptied), conv: the conv sweep with the forward's and grad-input's split-K planned and forced
to 1; coop: the fp16 sweep rows the cooperative-matrix kernel takes, run by it with split-K
(the rule), by it without (split_k=1), and by the tiled kernel with split-K (the fallback that
split-K replaced); prefetch: the GEMM sweep's tiled rows with each config's PREFETCH forced to
0 and to 1; frag: the same with FRAG (runs of 4 rows and columns; FRAG 1 raises PAD to a multiple
of 4) over squares, the real models' heaviest GEMMs and the sweep, fp32, rows whose TM and TN are
multiples of 4; convfrag: conv2d's FRAG alike over the conv sweep and the real models' heaviest conv
layers, every direction; stages: the tiled GEMM's STAGES 1 against 2 (double-buffered shared memory)
over squares and the real models' 12 heaviest GEMMs, fp32; coop2: fp16 on the workgroup-scope cooperative-matrix
kernel (VK_NV_cooperative_matrix2) against the subgroup-scope one, at its defaults and several tiles; coop2bf16:
bf16 on it against the tiled kernel; packed: with cooperative matrices off (TVK_COOPMAT=0, the stand-in for RDNA1),
fp16 GEMMs on the packed-fp16 kernel (its defaults and several tiles) against fp16 on the tiled kernel (what
ran before it) and fp32 on the tiled kernel (the rate it must beat). Each row measured twice per mode in alternating order, the better kept, so clock drift
does not favour a mode; torch CUDA's times from the sweeps' own peers. The H200 run at 0f03d26
is benchmarks/results/h200/ab/0f03d26-tile-fit-split-k.json.
"""
import json, math, os, sys, time
import torchvk  # noqa
import torch
from tvk_kernels.runtime import get_device
from tvk_kernels.search_space import search_space
from tvk_kernels.kernels import matmul as matmul_kernels, matmul_plan
from torchvk.experiments import gemm_sweep, conv_sweep

dev = get_device(0)
a = torch.randn(4096, 4096, device="tvk")
t = time.time()
while time.time() - t < 8:
    (a @ a).sum().item()
del a
fit = search_space("matmul")["tile_fit"]
ORDER = list(fit["order"])
out = {"gemm": [], "conv": [], "coop": [], "prefetch": [], "frag": [], "convfrag": [], "stages": [], "coop2": [],
       "coop2bf16": [], "packed": []}


def geomean(xs):
    return math.exp(sum(map(math.log, xs)) / len(xs))


def alternating_best(g, dt, modes):
    """The GEMM timed in every mode (name -> a function that sets it up), twice, the second time in
    reverse order so clock drift favours none; the better result of each mode."""
    res = {}
    for rep in range(2):
        for name in (list(modes) if rep == 0 else list(modes)[::-1]):
            modes[name]()
            matmul_kernels.family(dev, matmul_kernels.Matmul).forget_plans()
            r = gemm_sweep._tvk_one(dev, g, dt, 10, False)
            if name not in res or r["tvk_s"] < res[name]["tvk_s"]:
                res[name] = r
    return res


parts = sys.argv[1:] or ["gemm", "conv"]
if "gemm" in parts:
    gemms = gemm_sweep.sample()
    dts = ["float32", "float16"]
    cuda, _ = gemm_sweep.cuda_times(gemms, dts, 10) or (None, None)
    i = 0
    for g in gemms:
        for dt in dts:
            res = alternating_best(g, dt, {"fit": lambda: fit.update(order=ORDER),
                                           "nofit": lambda: fit.update(order=[])})
            c = cuda[i] if cuda else None
            i += 1
            row = {"label": gemm_sweep._label(g), "dtype": dt, "cuda_s": c}
            for name, r in res.items():
                row[name] = {"s": r["tvk_s"], "x": r["tvk_s"] / c if c else None, "kernel": r["kernel"],
                             "splits": r["splits"], "tile": (r["params"] or {}).get("BM"), "tn": (r["params"] or {}).get("BN")}
            out["gemm"].append(row)
            print(f'{row["label"]:32s} {dt:8s} nofit {row["nofit"]["x"]:.2f} fit {row["fit"]["x"]:.2f} '
                  f'{row["fit"]["kernel"]} {row["fit"]["tile"]}x{row["fit"]["tn"]} s{row["fit"]["splits"]} | '
                  f'{row["nofit"]["kernel"]} {row["nofit"]["tile"]}x{row["nofit"]["tn"]} s{row["nofit"]["splits"]}', flush=True)
    fit["order"] = ORDER
    for dt in dts:
        for name in ("nofit", "fit"):
            xs = [r[name]["x"] for r in out["gemm"] if r["dtype"] == dt and r[name]["x"]]
            print("GEMM", dt, name, "geomean", round(geomean(xs), 3),
                  "over2x", sum(x > 2 for x in xs), flush=True)
if "conv" in parts:
    from tvk_kernels.kernels import conv, conv_family
    import functools
    fwd0, bi0 = conv.conv2d_forward, conv.conv2d_backward_input
    layers = conv_sweep.LAYERS
    cuda, _ = conv_sweep.cuda_times(layers, 10) or (None, None)
    DIRS = ["fwd", "bwd_input", "bwd_weight"]
    def setmode(on):
        conv.conv2d_forward = fwd0 if on else functools.partial(fwd0, split_k=1)
        conv.conv2d_backward_input = bi0 if on else functools.partial(bi0, split_k=1)
    for li, L in enumerate(layers):
        res = {}
        for rep in range(2):
            for name in (("split", "nosplit") if rep == 0 else ("nosplit", "split")):
                setmode(name == "split")
                r = conv_sweep._tvk_one(dev, L, 10, False)
                for d, (t, e) in r.items():
                    key = (name, d)
                    if key not in res or t < res[key]:
                        res[key] = t
        for di, d in enumerate(DIRS):
            c = cuda[li * 3 + di] if cuda else None
            row = {"label": conv_sweep.label(L), "direction": d, "cudnn_s": c, "split": res[("split", d)] / c,
                   "nosplit": res[("nosplit", d)] / c}
            out["conv"].append(row)
            if d != "bwd_weight":
                print(f'{row["label"]:48s} {d:10s} nosplit {row["nosplit"]:.2f} split {row["split"]:.2f}', flush=True)
    setmode(True)
    for name in ("nosplit", "split"):
        xs = [r[name] for r in out["conv"]]
        print("CONV", name, "geomean", round(geomean(xs), 3), "over2x",
              sum(x > 2 for x in xs), flush=True)
if "coop" in parts:
    from tvk_kernels.kernels import matmul_coopmat as coopmat
    coop = coopmat.verified(dev)
    plan0, usable0 = coopmat.plan_launch, coopmat.CoopMatmul.usable

    def unsplit(fam, tile, M, N, K, batch, sa, sb, sc, esize, split_k, *rest):
        return plan0(fam, tile, M, N, K, batch, sa, sb, sc, esize, 1, *rest)

    PATCHES = {"split": (plan0, usable0), "nosplit": (unsplit, usable0), "tiled": (plan0, lambda self, M, N, K: False)}

    def patched(name):
        def setup():
            coopmat.plan_launch, coopmat.CoopMatmul.usable = PATCHES[name]
        return setup

    MODES = {name: patched(name) for name in PATCHES}
    gemms = [g for g in gemm_sweep.sample() if coop is not None and coop.usable(g["M"], g["N"], g["K"])]
    cuda, _ = gemm_sweep.cuda_times(gemms, ["float16"], 10) or (None, None)
    for i, g in enumerate(gemms):
        res = alternating_best(g, "float16", MODES)
        MODES["split"]()
        c = cuda[i] if cuda else None
        row = {"label": gemm_sweep._label(g), "dtype": "float16", "cuda_s": c}
        for name, r in res.items():
            row[name] = {"s": r["tvk_s"], "x": r["tvk_s"] / c if c else None, "kernel": r["kernel"],
                         "splits": r["splits"]}
        out["coop"].append(row)
        print(f'{row["label"]:32s} ' + " ".join(f'{n} {row[n]["x"]:.2f} ({row[n]["kernel"]} s{row[n]["splits"]})'
                                               for n in MODES), flush=True)
    for name in MODES:
        xs = [r[name]["x"] for r in out["coop"] if r[name]["x"]]
        if xs:
            print("COOP", name, "geomean", round(geomean(xs), 3), "over2x",
                  sum(x > 2 for x in xs), flush=True)
def forced_define_ab(part, name, legal, gemms, dts, setting=None):
    """Each GEMM's tiled config with the parameter `name` forced to 0 and to 1 (1 only where legal(params);
    setting(params, value): the config at that value, default just the parameter set), interleaved; rows
    the tiled kernel does not run, or whose config cannot take 1, are left out."""
    defines0 = matmul_plan.defines  # the tiled family (matmul_plan.Matmul.gemm) builds its kernels with it
    setting = setting or (lambda params, value: dict(params, **{name: value}))

    def forced(value):
        return lambda params, **kw: defines0(setting(params, value if legal(params) else 0), **kw)

    cuda, _ = gemm_sweep.cuda_times(gemms, dts, 10) or (None, None)
    i = 0
    for g in gemms:
        for dt in dts:
            res = alternating_best(g, dt, {"off": lambda: setattr(matmul_plan, "defines", forced(0)),
                                           "on": lambda: setattr(matmul_plan, "defines", forced(1))})
            matmul_plan.defines = defines0
            c = cuda[i] if cuda else None
            i += 1
            if res["on"]["kernel"] != "tiled" or not legal(res["on"]["params"]):
                continue
            row = {"label": gemm_sweep._label(g), "dtype": dt, "cuda_s": c, "bucket": res["on"]["config_bucket"],
                   "splits": res["on"]["splits"], "params": res["on"]["params"]}
            for mode, r in res.items():
                row[mode] = {"s": r["tvk_s"], "x": r["tvk_s"] / c if c else None,
                             "tflops": 2 * g["batch"] * g["M"] * g["N"] * g["K"] / r["tvk_s"] / 1e12}
            out[part].append(row)
            print(f'{row["label"]:32s} {dt:8s} {row["bucket"]:10s} s{row["splits"]} off {row["off"]["x"]:.2f} '
                  f'on {row["on"]["x"]:.2f} ({row["off"]["tflops"]:.1f} -> {row["on"]["tflops"]:.1f} TFLOP/s)',
                  flush=True)
    for dt in dts:
        for mode in ("off", "on"):
            xs = [r[mode]["x"] for r in out[part] if r["dtype"] == dt and r[mode]["x"]]
            if xs:
                print(name, dt, mode, "geomean tvk/cuBLAS", round(geomean(xs), 3), "over2x", sum(x > 2 for x in xs),
                      flush=True)
    by_bucket = {}
    for r in out[part]:
        by_bucket.setdefault(r["bucket"], []).append(r["on"]["s"] / r["off"]["s"])
    for b, xs in sorted(by_bucket.items()):
        print(name, "bucket", b, "on/off time geomean", round(geomean(xs), 3), "rows", len(xs), flush=True)


def frag_fits(params):
    """Whether a config's tile can take FRAG 1 (runs of 4 rows and columns), PAD aside (with_frag raises it)."""
    return params["TM"] % 4 == 0 and params["TN"] % 4 == 0


def with_frag(params, value):
    """params at FRAG `value`; FRAG 1 with PAD raised to the next multiple of 4 where it is none."""
    return dict(params, FRAG=value, PAD=-(-params["PAD"] // 4) * 4) if value else dict(params, FRAG=0)


if "prefetch" in parts:
    forced_define_ab("prefetch", "PREFETCH", lambda params: True, gemm_sweep.sample(), ["float32", "float16"])
if "frag" in parts:
    # the sweep (no shape in the tuning suites), the real models' heaviest GEMMs, and squares
    from torchvk.experiments import model_shapes
    from tvk_kernels.tune import model_suites
    squares = [{"M": n, "N": n, "K": n, "batch": 1, "layout": "nn", "bcast_b": False} for n in (1024, 2048, 4096)]
    real = [{k: g[k] for k in ("M", "N", "K", "batch", "layout", "bcast_b")}
            for g in model_shapes.gemms(model_suites.load())]
    forced_define_ab("frag", "FRAG", frag_fits, squares + real + gemm_sweep.sample(), ["float32"], with_frag)
if "stages" in parts:
    # STAGES 2 (double-buffered shared memory, one barrier per K slice) over squares and the real models'
    # 12 heaviest GEMMs, fp32, every tiled config
    from torchvk.experiments import model_shapes
    from tvk_kernels.tune import model_suites
    squares = [{"M": n, "N": n, "K": n, "batch": 1, "layout": "nn", "bcast_b": False} for n in (1024, 2048, 4096)]
    real = [{k: g[k] for k in ("M", "N", "K", "batch", "layout", "bcast_b")}
            for g in model_shapes.gemms(model_suites.load())[:12]]
    forced_define_ab("stages", "STAGES", lambda p: True, squares + real, ["float32"],
                     lambda params, value: dict(params, STAGES=2 if value else 1))
if "convfrag" in parts:
    # the conv sweep and the real models' heaviest conv layers, each direction's config as tuned against
    # FRAG 1 (PAD raised to 4 where needed) where its TM and TN allow, else the row is left out
    from tvk_kernels import config
    from tvk_kernels.kernels import conv, conv_family
    from torchvk.experiments import model_shapes
    from tvk_kernels.tune import model_suites
    gemm_defines0 = conv_family.gemm_defines
    used = []  # the FRAG of each kernel built since the last reset

    def conv_forced(value):
        def build(dir_id, params, wg, act=None):
            fits = frag_fits(params)
            used.append(fits)
            return gemm_defines0(dir_id, with_frag(params, value) if fits else params, wg, act)
        return build

    layers = conv_sweep.LAYERS + model_shapes.conv_layers(model_suites.load())
    cuda, _ = conv_sweep.cuda_times(layers, 10) or (None, None)
    DIRS = ["fwd", "bwd_input", "bwd_weight"]
    for li, L in enumerate(layers):
        res, fits = {}, {}
        for rep in range(2):
            for mode in (("off", "on") if rep == 0 else ("on", "off")):
                conv_family.gemm_defines = conv_forced(int(mode == "on"))
                config.reload()  # drops the kept plans and kept calls built at the other FRAG
                used.clear()
                r = conv_sweep._tvk_one(dev, L, 10, False)
                for d, (t, e) in r.items():
                    if (mode, d) not in res or t < res[(mode, d)]:
                        res[(mode, d)] = t
                fits[mode] = any(used)
        conv_family.gemm_defines = gemm_defines0
        for di, d in enumerate(DIRS):
            c = cuda[li * 3 + di] if cuda else None
            row = {"label": conv_sweep.label(L), "direction": d, "cudnn_s": c, "frag_applied": fits["on"],
                   "off_s": res[("off", d)],
                   "on_s": res[("on", d)], "off": res[("off", d)] / c if c else None,
                   "on": res[("on", d)] / c if c else None}
            out["convfrag"].append(row)
            print(f'{row["label"]:48s} {d:10s} off {row["off_s"] * 1e6:.1f} us, on {row["on_s"] * 1e6:.1f} us, '
                  f'cuDNN {c * 1e6 if c else float("nan"):.1f} us', flush=True)
    for mode in ("off", "on"):
        xs = [r[mode] for r in out["convfrag"] if r[mode]]
        if xs:
            print("CONVFRAG", mode, "geomean tvk/cuDNN", round(geomean(xs), 3), "over2x", sum(x > 2 for x in xs), flush=True)
    xs = [r["on_s"] / r["off_s"] for r in out["convfrag"] if r["frag_applied"]]
    if xs:
        print("CONVFRAG on/off time geomean", round(geomean(xs), 3), "rows where a kernel took FRAG 1", len(xs),
              flush=True)
if "coop2" in parts or "coop2bf16" in parts:
    # fp16: "default" is matmul's choice (the workgroup-scope kernel, VK_NV_cooperative_matrix2, where its
    # over_subgroup_scope rule or the subgroup-scope kernel's limits send a GEMM), "subgroup" the same without
    # it; the tile modes force the workgroup-scope kernel at a tile on every GEMM it can run. Squares and the
    # real models' 12 heaviest GEMMs in every mode, the sweep (no shape in any tuning suite) in the first two
    from tvk_kernels import config
    from tvk_kernels.kernels import matmul_coopmat2 as coopmat2
    from torchvk.experiments import model_shapes
    from tvk_kernels.tune import model_suites
    verified0, params0, preferred0 = coopmat2.verified, coopmat2.CoopMatmul2.params, coopmat2.CoopMatmul2.preferred
    coop2 = verified0(dev)
    coop2_bf16 = verified0(dev, "bfloat16")
    print("coopmat2:", f"verified, errors {coop2.verified_error}" if coop2 else "not available", "bf16:",
          "verified" if coop2_bf16 else "not available", dev.facts.features.get("bfloat16_cooperative_matrix"),
          flush=True)
    TILE_NAMES = ("BM", "BN", "BK", "WGS")
    TILES = [(128, 128, 32, 256), (128, 256, 32, 256), (256, 128, 32, 256), (128, 128, 64, 256), (64, 64, 32, 128),
             (64, 128, 32, 128)]

    def coop2_mode(tile):
        def setup():
            config.reload()  # drops kept plans and resolved configs
            coopmat2.verified = verified0 if tile != "subgroup" else (lambda device, dtype="float16": None)
            if tile in ("subgroup", "default"):
                coopmat2.CoopMatmul2.params, coopmat2.CoopMatmul2.preferred = params0, preferred0
            else:
                cfg = dict(zip(TILE_NAMES, tile))
                coopmat2.CoopMatmul2.params = lambda self, bucket="*": (cfg, "ab")
                coopmat2.CoopMatmul2.preferred = lambda self, M, N, K, batch: True
        return setup

    def coop2_rows(gemms, modes, dtype="float16", part="coop2"):
        cuda, _ = gemm_sweep.cuda_times(gemms, [dtype], 10) or (None, None)
        for i, g in enumerate(gemms):
            try:
                res = alternating_best(g, dtype, modes)
            except Exception as e:  # a tile the driver refuses: say so, keep measuring the rest
                print(f'{gemm_sweep._label(g):34s} FAILED: {type(e).__name__}: {e}', flush=True)
                modes["default"]()
                continue
            modes["default"]()
            c = cuda[i] if cuda else None
            flop = 2 * g["batch"] * g["M"] * g["N"] * g["K"]
            row = {"label": gemm_sweep._label(g), "dtype": dtype, "cuda_s": c,
                   "cuda_tflops": flop / c / 1e12 if c else None}
            for name, r in res.items():
                row[name] = {"s": r["tvk_s"], "x": r["tvk_s"] / c if c else None, "kernel": r["kernel"],
                             "splits": r["splits"], "rel_err": r["rel_err"], "params": r["params"],
                             "tflops": flop / r["tvk_s"] / 1e12}
            out[part].append(row)
            print(f'{row["label"]:34s} cuBLAS {row["cuda_tflops"] or 0:6.1f} TF | ' + " ".join(
                f'{n} {row[n]["tflops"]:6.1f} TF {row[n]["kernel"]} s{row[n]["splits"]} e{row[n]["rel_err"]:.1g}'
                for n in modes), flush=True)

    out["coop2"], out["coop2bf16"] = [], []
    if "coop2bf16" in parts and coop2_bf16 is not None:
        # bf16: the workgroup-scope kernel ("default") against the tiled kernel it replaces (fp32 arithmetic on
        # bf16 storage), over squares, the real models' 12 heaviest GEMMs and the sweep
        squares = [{"M": n, "N": n, "K": n, "batch": 1, "layout": "nn", "bcast_b": False} for n in (1024, 2048, 4096)]
        real = [{k: g[k] for k in ("M", "N", "K", "batch", "layout", "bcast_b")}
                for g in model_shapes.gemms(model_suites.load())[:12]]
        coop2_rows(squares + real + gemm_sweep.sample(), {"tiled": coop2_mode("subgroup"),
                                                          "default": coop2_mode("default")}, "bfloat16", "coop2bf16")
        coopmat2.verified = verified0
        xs = {m: [r[m]["x"] for r in out["coop2bf16"] if r[m]["x"]] for m in ("tiled", "default")}
        for m, v in xs.items():
            if v:
                print("COOP2BF16", m, "geomean tvk/cuBLAS time", round(geomean(v), 3), "rows", len(v), "worst",
                      round(max(v), 2), flush=True)
    if coop2 is not None and "coop2" in parts:
        squares = [{"M": n, "N": n, "K": n, "batch": 1, "layout": "nn", "bcast_b": False} for n in (1024, 2048, 4096)]
        real = [{k: g[k] for k in ("M", "N", "K", "batch", "layout", "bcast_b")}
                for g in model_shapes.gemms(model_suites.load())[:12]]
        valid = []
        for t in TILES:
            try:
                coop2.validate(dict(zip(TILE_NAMES, t)))
                valid.append(t)
            except Exception as e:
                print("tile", t, "refused:", e, flush=True)
        TILES = valid
        modes = {"subgroup": coop2_mode("subgroup"), "default": coop2_mode("default"),
                 **{"x".join(map(str, t)): coop2_mode(t) for t in TILES}}
        coop2_rows(squares + real, modes)
        coop2_rows(gemm_sweep.sample(), {"subgroup": coop2_mode("subgroup"), "default": coop2_mode("default")})
        coopmat2.verified, coopmat2.CoopMatmul2.params, coopmat2.CoopMatmul2.preferred = verified0, params0, preferred0
        for name in ["subgroup", "default"] + ["x".join(map(str, t)) for t in TILES]:
            xs = [r[name]["x"] for r in out["coop2"] if name in r and r[name]["x"]]
            if xs:
                print("COOP2", name, "geomean tvk/cuBLAS time", round(geomean(xs), 3), "rows", len(xs),
                      "worst", round(max(xs), 2), flush=True)
if "packed" in parts:
    # cooperative matrices off for the whole part: fp16 GEMMs go where a GPU without them sends them
    from tvk_kernels import config
    from tvk_kernels.kernels import matmul_packed_f16 as packed_f16
    from torchvk.experiments import model_shapes
    from tvk_kernels.tune import model_suites
    os.environ["TVK_COOPMAT"] = "0"
    packed_verified0, packed_params0 = packed_f16.verified, packed_f16.PackedMatmul.params
    runner = packed_verified0(dev)
    print("packed fp16:", f"verified, error {runner.verified_error:.3g} of sum |ab|" if runner else "not available",
          flush=True)
    PACKED_NAMES = ("BM", "BN", "BK", "TM", "TN", "VEC", "PAD", "CHAIN")
    PACKED_TILES = [(64, 64, 16, 4, 4, 4, 4, 16), (128, 64, 32, 8, 4, 4, 4, 16), (128, 32, 16, 8, 4, 4, 4, 16),
                    (64, 128, 16, 4, 8, 4, 4, 16)]

    def packed_mode(tile):
        def setup():
            config.reload()  # drops kept plans and resolved configs
            matmul_kernels.family(dev, matmul_kernels.Matmul).packed = None
            packed_f16.verified = (lambda device: None) if tile in ("fp32", "tiled16") else packed_verified0
            if tile in ("fp32", "tiled16", "default"):
                packed_f16.PackedMatmul.params = packed_params0
            else:
                cfg = dict(zip(PACKED_NAMES, tile))
                packed_f16.PackedMatmul.params = lambda self, bucket="*": (cfg, "ab")
        return setup

    if runner is not None:
        squares = [{"M": n, "N": n, "K": n, "batch": 1, "layout": "nn", "bcast_b": False} for n in (1024, 2048, 4096)]
        real = [{k: g[k] for k in ("M", "N", "K", "batch", "layout", "bcast_b")}
                for g in model_shapes.gemms(model_suites.load())[:12]]
        modes = {"fp32": packed_mode("fp32"), "tiled16": packed_mode("tiled16"), "default": packed_mode("default"),
                 **{"x".join(map(str, t)): packed_mode(t) for t in PACKED_TILES}}
        for gemms, names in ((squares + real, list(modes)), (gemm_sweep.sample(), ["fp32", "tiled16", "default"])):
            cuda, _ = gemm_sweep.cuda_times(gemms, ["float32", "float16"], 10) or (None, None)
            for i, g in enumerate(gemms):
                res = {}
                for rep in range(2):  # every mode twice, the second pass in reverse order; the better kept
                    for name in (names if rep == 0 else names[::-1]):
                        modes[name]()
                        dtype = "float32" if name == "fp32" else "float16"
                        try:
                            r = gemm_sweep._tvk_one(dev, g, dtype, 10, False)
                        except Exception as e:  # a tile this GEMM cannot take: say so, keep measuring
                            print(gemm_sweep._label(g), name, "FAILED:", type(e).__name__, e, flush=True)
                            continue
                        if name not in res or r["tvk_s"] < res[name]["tvk_s"]:
                            res[name] = r
                modes["default"]()
                flop = 2 * g["batch"] * g["M"] * g["N"] * g["K"]
                row = {"label": gemm_sweep._label(g), "cuda_fp32_s": cuda[2 * i] if cuda else None,
                       "cuda_fp16_s": cuda[2 * i + 1] if cuda else None}
                for name, r in res.items():
                    row[name] = {"s": r["tvk_s"], "kernel": r["kernel"], "splits": r["splits"],
                                 "rel_err": r["rel_err"], "params": r["params"], "tflops": flop / r["tvk_s"] / 1e12}
                out["packed"].append(row)
                print(f'{row["label"]:34s} ' + " ".join(f'{n} {row[n]["tflops"]:5.1f} TF {row[n]["kernel"]}'
                                                       for n in names if n in row), flush=True)
        packed_f16.verified, packed_f16.PackedMatmul.params = packed_verified0, packed_params0
        for name in modes:
            pairs = [(r["fp32"]["s"], r[name]["s"]) for r in out["packed"] if name in r and "fp32" in r]
            if pairs and name != "fp32":
                print("PACKED", name, "geomean rate over fp32 tiled", round(geomean([f / x for f, x in pairs]), 3),
                      "rows", len(pairs), flush=True)
    os.environ.pop("TVK_COOPMAT")
out["environment"] = {"device": dev.facts.name, "driver": dev.facts.driver_info, "torch": torch.__version__,
                      "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "commit": os.environ.get("TVK_COMMIT", ""),
                      "parts": parts}
json.dump(out, open(os.path.join(os.environ.get("OUT", "/tmp"), "ab2.json"), "w"))
