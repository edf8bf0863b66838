"""fp16 GEMMs on packed fp16 arithmetic (f16vec2 FMAs) for GPUs without cooperative matrices: matmul's fourth kernel.

Template: templates/matmul_packed_f16.comp (matmul.comp's push constants, strides, epilogue and
split-K partials; matmul.comp's reduce pass sums the partials). Search space, buckets, defaults
and the device types it is routed on: tuning/matmul_packed_f16.json.

RDNA1 (our first target) and most Intel GPUs run two fp16 FMAs per instruction, twice their fp32
rate (the H200 does not: its fp16 FMA peak through Vulkan is its fp32 one; design note 41). The
kernel multiplies in fp16, sums CHAIN products per fp16 partial and folds the partials into fp32
accumulators; outputs whose partials overflowed are recomputed in fp32 (the template states the
error bound). matmul() runs it for fp16 GEMMs that no verified cooperative-matrix kernel takes, on
the device types the tuning file lists, where its "over_tiled" holds, once `verify` passed, unless
TVK_PACKED_F16=0; explicit parameters naming CHAIN (the tuner, tests) run it on any device with
shaderFloat16.
"""
from __future__ import annotations

from ..env_flags import env_flag
from ..errors import InvalidConfigError, TVKError
from ..search_space import evaluate, search_space
from . import activations
from .launch import Family, family
from .matmul_coopmat import _warn_once
from .matmul_plan import DTYPES, PUSH, Matmul, contig_choice, fit_tile, load_widths, plan_launch

FP16 = DTYPES["float16"][0]


def defines(params: dict, *, mode: int = 0, act: str | None = None, a_kmajor: bool = True, b_nmajor: bool = True,
            vec_a: int | None = None, vec_b: int | None = None) -> dict:
    """The kernel's defines for a config: the one set the runtime, the tuner and the RDNA1 check compile.
    vec_a/vec_b: the load widths chosen for the operands (default: the config's VEC)."""
    return {"BM": params["BM"], "BN": params["BN"], "BK": params["BK"], "TM": params["TM"], "TN": params["TN"],
            "VEC_A": params["VEC"] if vec_a is None else vec_a, "VEC_B": params["VEC"] if vec_b is None else vec_b,
            "A_KMAJOR": int(a_kmajor), "B_NMAJOR": int(b_nmajor), "PAD": params["PAD"], "CHAIN": params["CHAIN"],
            "MODE": mode, **activations.act_define(act if mode == 0 else None)}


class PackedMatmul(Family):
    family = "matmul_packed_f16"
    template = "matmul_packed_f16.comp"

    def __init__(self, device):
        Family.__init__(self, device)
        self.tiled = family(device, Matmul)  # its split-K target and reduce pass
        self.verified_error = None  # the relative error `verify` measured

    params = Matmul.params  # an untuned layout bucket ("large.nt") runs its size bucket's config

    def routed(self) -> bool:
        """Whether matmul() sends this device's fp16 GEMMs here (`routes`)."""
        return routes(self.device.facts)

    def preferred(self, M: int, N: int, K: int, batch: int) -> bool:
        """Whether this kernel beats the tiled one on an fp16 GEMM (tuning/matmul_packed_f16.json "over_tiled",
        from their measured A/B)."""
        return bool(evaluate(search_space(self.family)["over_tiled"], {"M": M, "N": N, "K": K, "batch": batch}))

    def check_config(self, params: dict) -> dict:
        names = search_space(self.family)["params"]
        unknown = [n for n in params if n not in names]
        if unknown:
            raise InvalidConfigError(f"matmul_packed_f16: unknown parameter {', '.join(map(repr, unknown))}; the "
                                     f"packed-fp16 kernel takes {', '.join(names)} (tuning/matmul_packed_f16.json)")
        for n in ("BM", "BN", "BK", "TM", "TN", "VEC", "CHAIN"):
            if params[n] < 1:
                raise InvalidConfigError(f"matmul_packed_f16 parameter {n}={params[n]} must be a positive integer")
        if params["TM"] % 4 or params["TN"] % 4 or params["PAD"] % 4 or params["BK"] % 4:
            raise InvalidConfigError(f"matmul_packed_f16 {params}: TM, TN, PAD and BK must be multiples of 4 (runs "
                                     "of 4 halves)")
        if params["VEC"] not in (1, 2, 4):
            raise InvalidConfigError(f"matmul_packed_f16 VEC={params['VEC']} must be 1, 2 or 4 halves")
        return params

    def pipeline(self, params: dict, mode: int, act, a_kmajor: bool, b_nmajor: bool, vec_a: int, vec_b: int):
        d = defines(params, mode=mode, act=act, a_kmajor=a_kmajor, b_nmajor=b_nmajor, vec_a=vec_a, vec_b=vec_b)
        return self.variant(d, params["WG"], PUSH.size, shared_bytes=params["shared_bytes"])

    def prepare(self, a_addr: int, b_addr: int, M: int, N: int, K: int, batch: int, sa, sb, sc, act, bucket: str,
                tune_shape: dict, explicit: dict | None = None, split_k=None):
        """The launch (matmul_plan.Prepared) of one fp16 GEMM: the bucket's config (or `explicit` on top),
        split-K by matmul's rule."""
        if explicit:
            params, source, config_bucket = self.resolve(bucket, explicit), "explicit", bucket
        else:  # the tiled kernel's tile fit over this family's bucket configs
            params, config_bucket = fit_tile(self, self.tiled, bucket, M, N, K, batch, split_k)
            source = self.params(config_bucket)[1]
        a_kmajor = contig_choice(sa[1], sa[2], M, K)
        b_nmajor = contig_choice(sb[1], sb[2], K, N)
        vec_a, vec_b = load_widths(params["VEC"], a_addr, b_addr, 2, sa, sb, a_kmajor, b_nmajor)
        info = {"kernel": "packed_f16", "bucket": bucket, "config_bucket": config_bucket,
                "params": {n: params[n] for n in search_space(self.family)["params"]}, "source": source}
        return plan_launch(self.tiled, params, M, N, K, batch, sa, sb, sc, 2, split_k, FP16, act,
                           lambda mode: self.pipeline(params, mode, act, a_kmajor, b_nmajor, vec_a, vec_b),
                           info, tune_shape, self.family)

    def verify(self) -> bool:
        """Products with ragged edges, both operands transposed, a bias and alpha, split-K over a batch, and
        products past fp16's range, against numpy; an error over the stated bound disables the kernel."""
        import numpy as np  # lazy: numpy only for this one-time check: importing the kernels loads no numpy

        dev = self.device
        rng = np.random.default_rng(5)
        worst = 0.0
        for M, N, K, batch, a_t, b_t, splits, scale in ((77, 70, 93, 1, False, False, 1, 1.0),
                                                        (45, 83, 130, 2, True, True, 2, 1.0),
                                                        (40, 36, 50, 1, False, True, 1, 300.0)):
            a = (scale * rng.standard_normal((batch, K, M) if a_t else (batch, M, K))).astype(np.float16)
            b = (scale * rng.standard_normal((batch, N, K) if b_t else (batch, K, N))).astype(np.float16)
            bias = rng.standard_normal(N).astype(np.float16)
            sa = (M * K, 1, M) if a_t else (M * K, K, 1)
            sb = (K * N, 1, K) if b_t else (K * N, N, 1)
            ab, bb, biasb = dev.upload(a), dev.upload(b), dev.upload(bias)
            ob = dev.allocator.alloc(batch * M * N * 2)
            try:
                shape = {"M": M, "N": N, "K": K, "batch": batch, "layout": ("t" if a_t else "n") + ("t" if b_t else "n")}
                prep = self.prepare(ab.address, bb.address, M, N, K, batch, sa, sb, (M * N, N, 1), None,
                                    self.bucket(shape), shape, split_k=splits)
                prep.record(dev, ab.address, bb.address, ob.address, biasb.address, 1.0 / scale)
                got = dev.download(ob, np.float16, (batch, M, N)).astype(np.float64)
            finally:
                dev.synchronize()
                for buf in (ab, bb, biasb, ob):
                    buf.free()
            A, B = a.astype(np.float64), b.astype(np.float64)
            A, B = (np.swapaxes(A, 1, 2) if a_t else A), (np.swapaxes(B, 1, 2) if b_t else B)
            ref = (A @ B) / scale + bias.astype(np.float64)
            magnitude = (np.abs(A) @ np.abs(B)) / scale + np.abs(bias.astype(np.float64))
            err = np.abs(got - ref) / magnitude  # against sum |a b|: the bound's own measure
            worst = max(worst, float(err.max()) if np.isfinite(err).all() else np.inf)
        bound = error_bound(max(search_space(self.family)["params"]["CHAIN"]["values"]))
        if worst > bound:
            _warn_once(dev, "verify_packed", f"TorchVK: the packed-fp16 matmul gave wrong results on {dev.facts.name} "
                       f"(error {worst:.3g} of sum |a b|, bound {bound:.3g}); it is disabled and the tiled kernel "
                       "is used.")
            return False
        self.verified_error = worst
        return True


def routes(facts) -> bool:
    """Whether matmul() sends fp16 GEMMs of a device with these facts here: fp16 arithmetic, and a device type
    of tuning/matmul_packed_f16.json's device_types (TVK_PACKED_F16=0 aside)."""
    return bool(facts.features.get("shader_float16")) and facts.device_type in search_space(
        PackedMatmul.family)["device_types"]


def error_bound(chain: int) -> float:
    """The template's bound on |C - exact| / sum_k |a_k b_k|: CHAIN fp16 roundings per partial, one of the
    result to fp16 (u = 2^-11), and fp32's share over the rest of the sum."""
    return (chain + 1) * 2.0 ** -11 + 2.0 ** -20


def verified(device) -> PackedMatmul | None:
    """The device's packed-fp16 kernel where matmul() routes fp16 GEMMs to it (a GPU device type with
    shaderFloat16, TVK_PACKED_F16 not 0) and its check against numpy passed; else None."""
    if not env_flag("TVK_PACKED_F16", default=True):  # fp32-accumulating fp16 GEMMs asked for: the tiled kernel
        return None
    fam = family(device, Matmul)
    if fam.packed is None:
        if getattr(device.stream, "dry", False):  # a dry run discards its self-check: decide on a real run
            return None
        fam.packed = False
        runner = family(device, PackedMatmul)
        try:
            if runner.routed() and runner.verify():
                fam.packed = runner
        except (TVKError, OSError) as e:
            _warn_once(device, "packed " + type(e).__name__, f"TorchVK: the packed-fp16 matmul is disabled on "
                       f"{device.facts.name}: {e}. The tiled kernel is used instead.")
    return fam.packed or None
