"""fp16 GEMM on VK_KHR_cooperative_matrix: matmul's second kernel, a family of its own.

Template: templates/matmul_coopmat.comp (same push constants, strides, epilogue and split-K
partials as matmul.comp; matmul.comp's reduce pass sums the partials). Search space, buckets
and defaults: tuning/matmul_coopmat.json; its tuned configs are looked up like every family's.

matmul() runs it for float16 where the device has the feature and `verified` passed (a small
product checked against numpy); explicit parameters naming SG_M (the tuner, tests) run it too.
Operands arrive checked by matmul(), so `prepare` only picks the config, layout and load widths.
"""
from __future__ import annotations

import itertools
import os
import warnings

from ..env_flags import env_flag
from ..errors import InvalidConfigError, TVKError
from ..runtime.vk import NULL, check, ffi, lib, structure_type
from ..search_space import param_values, search_space
from . import activations
from .launch import Family, family
from .matmul_plan import DTYPES, PUSH, Matmul, contig_choice, load_widths, plan_launch

_warned: set = set()


class CoopMatmul(Family):
    family = "matmul_coopmat"
    template = "matmul_coopmat.comp"

    def __init__(self, device):
        Family.__init__(self, device)
        self.tiled = family(device, Matmul)  # its split-K target and reduce pass
        self.shape = pick_shape(coop_shapes(device))
        self.subgroup = device.facts.subgroup_size
        self.min_size = search_space(self.family).get("min_size", 64)

    params = Matmul.params  # an untuned layout bucket ("large.nt") runs its size bucket's config

    def usable(self, M: int, N: int, K: int) -> bool:
        return min(M, N) >= self.min_size and K >= 16

    def geometry(self, params: dict, a_kmajor: bool = True, b_nmajor: bool = True) -> dict:
        """The tile of a config on this device's matrix shape: WG, BM, BN, BK, shared bytes, subgroup size."""
        c, s = params, self.shape
        bm, bn = c["SG_M"] * c["FM"] * s["M"], c["SG_N"] * c["FN"] * s["N"]
        a_halves = bm * (c["BK"] + c["PAD"]) if a_kmajor else c["BK"] * (bm + c["PAD"])
        b_halves = c["BK"] * (bn + c["PAD"]) if b_nmajor else bn * (c["BK"] + c["PAD"])
        shared = c["STAGES"] * 2 * (a_halves + b_halves) + c["SG_M"] * c["SG_N"] * s["M"] * s["N"] * 4
        return {"WG": c["SG_M"] * c["SG_N"] * self.subgroup, "BM": bm, "BN": bn, "BK": c["BK"], "shared": shared,
                "subgroup": self.subgroup if self.device.facts.subgroup_size_control else None}

    def check_config(self, params: dict) -> dict:
        """The kernel's rules beyond the search space's constraints: known names, positive sizes,
        BK a multiple of the matrix depth, the device's limits in every operand layout."""
        names = search_space(self.family)["params"]
        unknown = [n for n in params if n not in names]
        if unknown:
            raise InvalidConfigError(f"matmul_coopmat: unknown parameter {', '.join(map(repr, unknown))}; the "
                                     f"cooperative-matrix kernel takes {', '.join(names)} (tuning/matmul_coopmat.json)")
        c = dict(params)
        c.setdefault("STAGES", 2)
        for n in ("SG_M", "SG_N", "FM", "FN", "BK", "PAD"):
            if not isinstance(c.get(n), int) or c[n] < (0 if n == "PAD" else 1):
                raise InvalidConfigError(f"coopmat parameter {n}={c.get(n)!r} must be a positive integer")
        if c["BK"] % self.shape["K"]:
            raise InvalidConfigError(f"coopmat BK={c['BK']} is not a multiple of the matrix K={self.shape['K']}")
        if c["PAD"] % 8 or c["BK"] % 8:
            raise InvalidConfigError(f"coopmat PAD={c['PAD']} and BK={c['BK']} must be multiples of 8 (16-byte rows)")
        if c["STAGES"] not in (1, 2):
            raise InvalidConfigError(f"coopmat STAGES={c['STAGES']} must be 1 or 2")
        for a_kmajor, b_nmajor in itertools.product((True, False), repeat=2):
            g = self.geometry(c, a_kmajor, b_nmajor)
            self.device.pipelines.check_limits((g["WG"], 1, 1), shared_bytes=g["shared"], subgroup_size=g["subgroup"],
                                               push_size=PUSH.size)
        return c

    def pipeline(self, params: dict, mode: int, act: str | None, vec_a: int, vec_b: int, a_kmajor: bool,
                 b_nmajor: bool):
        g = self.geometry(params, a_kmajor, b_nmajor)
        s = self.shape
        defines = {"MS": s["M"], "NS": s["N"], "KS": s["K"], "SG_M": params["SG_M"], "SG_N": params["SG_N"],
                   "FM": params["FM"], "FN": params["FN"], "BK": params["BK"], "PAD": params["PAD"],
                   "STAGES": params["STAGES"], "SUBGROUP_SIZE": self.subgroup, "VEC_A": vec_a, "VEC_B": vec_b,
                   "A_KMAJOR": int(a_kmajor), "B_NMAJOR": int(b_nmajor), "DTYPE": DTYPES["float16"][0], "MODE": mode,
                   **activations.act_define(act if mode == 0 else None)}
        return self.variant(defines, g["WG"], PUSH.size, shared_bytes=g["shared"], subgroup_size=g["subgroup"])

    def prepare(self, a_addr: int, b_addr: int, M: int, N: int, K: int, batch: int, sa, sb, sc, act, bucket: str,
                tune_shape: dict, explicit: dict | None = None, split_k=None):
        """The launch (matmul_plan.Prepared) of one fp16 GEMM: the bucket's config (or `explicit` on top),
        split-K by matmul's rule."""
        params = self.resolve(bucket, explicit)
        source = "explicit" if explicit else self.params(bucket)[1]
        a_kmajor = contig_choice(sa[1], sa[2], M, K)
        b_nmajor = contig_choice(sb[1], sb[2], K, N)
        vec_a, vec_b = load_widths(8, a_addr, b_addr, 2, sa, sb, a_kmajor, b_nmajor)
        tile = self.geometry(params, a_kmajor, b_nmajor)
        info = {"kernel": "coopmat", "bucket": bucket, "config_bucket": bucket,
                "params": {n: params[n] for n in search_space(self.family)["params"]}, "source": source}
        return plan_launch(self.tiled, tile, M, N, K, batch, sa, sb, sc, 2, split_k, DTYPES["float16"][0], act,
                           lambda mode: self.pipeline(params, mode, act, vec_a, vec_b, a_kmajor, b_nmajor),
                           info, tune_shape, "matmul_coopmat")

    def verify(self) -> bool:
        """Run a small product with ragged edges and a transposed operand and compare it with numpy."""
        import numpy as np  # lazy: numpy only for this one-time check: importing the kernels loads no numpy

        dev = self.device
        rng = np.random.default_rng(7)
        M, N, K = 77, 70, 93
        a = rng.standard_normal((M, K)).astype(np.float16)
        bt = rng.standard_normal((N, K)).astype(np.float16)  # B given transposed: B[k, n] = bt[n, k]
        bias = rng.standard_normal(N).astype(np.float16)
        ab, bb, biasb = dev.upload(a), dev.upload(bt), dev.upload(bias)
        ob = dev.allocator.alloc(M * N * 2)
        try:
            shape = {"M": M, "N": N, "K": K, "batch": 1, "layout": "nt"}
            sa, sb, sc = (0, K, 1), (0, 1, K), (0, N, 1)
            prep = self.prepare(ab.address, bb.address, M, N, K, 1, sa, sb, sc, None, self.bucket(shape), shape,
                                split_k=1)
            prep.record(dev, ab.address, bb.address, ob.address, biasb.address, 0.5)
            got = dev.download(ob, np.float16, (M, N)).astype(np.float64)
        finally:
            dev.synchronize()
        ref = 0.5 * (a.astype(np.float64) @ bt.astype(np.float64).T) + bias.astype(np.float64)
        err = np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-6)
        for buf in (ab, bb, biasb, ob):
            buf.free()
        if not np.isfinite(err) or err > 5e-3:
            _warn_once(dev, "verify", f"TorchVK: the cooperative-matrix matmul gave wrong results on {dev.facts.name} "
                       f"(relative error {err:.3g} against numpy); it is disabled and the tiled kernel is used.")
            return False
        self.verified_error = float(err)
        return True


def _warn_once(dev, what: str, message: str):
    key = (dev.index, what)
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, RuntimeWarning, stacklevel=5)


def verified(device) -> CoopMatmul | None:
    """The device's cooperative-matrix kernel once it passed its check against numpy, else None
    (no feature, no fp16 x fp16 -> fp32 matrix shape, or a wrong result: then the tiled kernel runs)."""
    if not env_flag("TVK_COOPMAT", default=True):  # cooperative matrices off: the tiled kernel runs
        return None
    fam = family(device, Matmul)
    if fam.coop is None:
        if getattr(device.stream, "dry", False):  # a dry run discards its self-check: decide on a real run
            return None
        fam.coop = False
        enabled = "VK_KHR_cooperative_matrix" in getattr(device, "extensions", ())
        if device.facts.features.get("cooperative_matrix") and enabled:
            try:
                runner = family(device, CoopMatmul)
                if runner.shape is not None and runner.verify():
                    fam.coop = runner
            except (TVKError, OSError) as e:
                _warn_once(device, str(e), f"TorchVK: the cooperative-matrix matmul is disabled on "
                           f"{device.facts.name}: {e}. The tiled kernel is used instead.")
    return fam.coop or None


def candidates(device) -> list[dict]:
    """Parameter sets of tuning/matmul_coopmat.json that fit `device`; [] without a verified kernel.
    Pass one as `params=` with dtype="float16" to run it."""
    coop = verified(device)
    return [] if coop is None else fitting_params(coop)


def fitting_params(fam: Family) -> list[dict]:
    """Every parameter set of a family's search space that `fam.validate` accepts on its device."""
    values = param_values(search_space(fam.family))
    out = []
    for combo in itertools.product(*values.values()):
        cfg = dict(zip(values, combo))
        try:
            fam.validate(cfg)
        except InvalidConfigError:
            continue
        out.append(cfg)
    return out


def coop_shapes(device) -> list[dict]:
    """The device's VkCooperativeMatrixPropertiesKHR entries (empty where the extension is missing)."""
    if "VK_KHR_cooperative_matrix" not in device.facts.extensions:
        return []
    ptr = lib.vkGetInstanceProcAddr(device.instance.handle, b"vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR")
    if ptr == NULL:
        return []
    fn = ffi.cast("PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR", ptr)
    count = ffi.new("uint32_t*")
    check(fn(device.physical.handle, count, NULL), "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR")
    n = count[0]
    if not n:
        return []
    props = ffi.new("VkCooperativeMatrixPropertiesKHR[]", n)
    stype = structure_type("VkCooperativeMatrixPropertiesKHR")
    for i in range(n):
        props[i].sType = stype
        props[i].pNext = NULL
    check(fn(device.physical.handle, count, props), "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR")
    names = {lib.VK_COMPONENT_TYPE_FLOAT16_KHR: "float16", lib.VK_COMPONENT_TYPE_FLOAT32_KHR: "float32"}
    bf16 = getattr(lib, "VK_COMPONENT_TYPE_BFLOAT16_KHR", None)
    if bf16 is not None:
        names[bf16] = "bfloat16"
    out = []
    for i in range(count[0]):
        p = props[i]
        out.append({"M": p.MSize, "N": p.NSize, "K": p.KSize, "A": names.get(p.AType, int(p.AType)),
                    "B": names.get(p.BType, int(p.BType)), "C": names.get(p.CType, int(p.CType)),
                    "result": names.get(p.ResultType, int(p.ResultType)), "saturating": bool(p.saturatingAccumulation),
                    "scope": "subgroup" if p.scope == lib.VK_SCOPE_SUBGROUP_KHR else int(p.scope)})
    return out


def emulated_subgroup(variable: str, allowed: tuple) -> int | None:
    """A cooperative-matrix route's `variable`=emulate[:SUBGROUP] (its template's scalar emulation, how lavapipe's
    tests run it): the subgroup size to emulate (32 by default, one of `allowed`), else None."""
    value = os.environ.get(variable, "")
    if not value.startswith("emulate"):
        return None
    size = int(value.partition(":")[2] or 32)
    if size not in allowed:
        sizes = ", ".join(map(str, allowed[:-1])) + f" or {allowed[-1]}"
        raise ValueError(f"{variable}={value}: the emulated subgroup size must be {sizes}")
    return size


def agrees(device, what: str, got: dict, want: dict, tolerance: float, fallback: str) -> bool:
    """A route's first-use check: whether every result in `got` is within `tolerance` of its float64 reference in
    `want`, relative to the reference's largest magnitude; if not, a warning (once) that `what` on cooperative
    matrices is disabled and `fallback` is used."""
    import numpy as np  # lazy: numpy only for these one-time checks: importing the kernels loads no numpy

    errors = {name: float(np.abs(got[name] - want[name]).max() / max(np.abs(want[name]).max(), 1e-6))
              for name in want}
    if all(np.isfinite(e) and e <= tolerance for e in errors.values()):
        return True
    _warn_once(device, what, f"TorchVK: {what} on cooperative matrices gave wrong results on {device.facts.name} "
               f"(relative errors {errors} against numpy); it is disabled and {fallback} are used.")
    return False


def has_16x16x16(device) -> bool:
    """Whether the device has 16 x 16 x 16 fp16 x fp16 -> fp32 matrices at subgroup scope (what the fused
    attention and conv kernels on cooperative matrices are written for)."""
    return any((s["M"], s["N"], s["K"]) == (16, 16, 16) and s["A"] == s["B"] == "float16"
               and s["C"] == s["result"] == "float32" and s["scope"] == "subgroup" and not s["saturating"]
               for s in coop_shapes(device))


def pick_shape(shapes: list[dict]):
    """The matrix shape the kernel uses: fp16 x fp16 -> fp32, subgroup scope; 16x16x16 first
    (every vendor that has one), then the largest M*N."""
    fits = [s for s in shapes if s["A"] == "float16" and s["B"] == "float16" and s["C"] == "float32"
            and s["result"] == "float32" and s["scope"] == "subgroup" and not s["saturating"]]
    if not fits:
        return None
    fits.sort(key=lambda s: ((s["M"], s["N"], s["K"]) != (16, 16, 16), -s["M"] * s["N"], -s["K"]))
    return fits[0]
