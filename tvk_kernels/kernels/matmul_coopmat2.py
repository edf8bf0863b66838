"""fp16 and bf16 GEMMs on workgroup-scope cooperative matrices (VK_NV_cooperative_matrix2): matmul's third kernel.

Template: templates/matmul_coopmat2.comp (matmul.comp's push constants, strides, epilogue and
split-K partials; matmul.comp's reduce pass sums the partials). Search space, buckets and
defaults: tuning/matmul_coopmat2.json. The workgroup owns one BM x BN accumulator and loads
BK slices through tensor layouts; the driver tiles the work over its subgroups and stages the
loads in shared memory, which the subgroup-scope kernel (matmul_coopmat.py) does by hand.

matmul() runs it where the device has the features (runtime/vk_newer.py), the template compiled
(GL_NV_cooperative_matrix2 needs glslang 15) and `verify` passed for the dtype: every bf16 GEMM it
can take (the alternative is the tiled kernel); fp16 GEMMs the subgroup-scope kernel does not take (a side under its min_size, no such kernel), and on those
both take where tuning/matmul_coopmat2.json's "over_subgroup_scope" holds (batched or narrow
products, where the A/B measured it faster; large ones it measured slower). Operands and output
need a unit stride in one dimension (a transposed view is one). Explicit parameters naming WGS
(the tuner, tests) run it too.
"""
from __future__ import annotations

from ..env_flags import env_flag
from ..errors import InvalidConfigError, TVKError
from ..host_storage import from_storage, to_storage
from ..search_space import evaluate, search_space
from . import activations
from .launch import Family, family
from .matmul_coopmat import _warn_once, fitting_params
from .matmul_plan import DTYPES, PUSH, Matmul, plan_launch

# VK_COMPONENT_TYPE_*_KHR of the storage dtypes, VK_COMPONENT_TYPE_FLOAT32_KHR, VK_SCOPE_WORKGROUP_KHR
_COMPONENT = {"float16": 0, "bfloat16": 1000141000}
_FLOAT32, _WORKGROUP = 1, 2
PARAMS = ("BM", "BN", "BK", "WGS")


def granules_of(props: dict, dtype: str, features: dict) -> list[dict]:
    """The workgroup-scope shapes for dtype x dtype -> fp32 (non-saturating) among a device's coopmat2
    properties (DeviceFacts.coopmat2): the granularity of M, N and K, and the workgroup size, per entry of
    VkCooperativeMatrixFlexibleDimensionsPropertiesNV. bf16 also needs VK_KHR_shader_bfloat16's matrices."""
    if dtype == "bfloat16" and not features.get("bfloat16_cooperative_matrix"):
        return []
    c = _COMPONENT[dtype]
    return [g for g in props.get("flexible", [])
            if (g["AType"], g["BType"], g["CType"], g["ResultType"]) == (c, c, _FLOAT32, _FLOAT32)
            and g["scope"] == _WORKGROUP and not g["saturatingAccumulation"]]


def unit_major(s_outer: int, s_inner: int, n_outer: int, n_inner: int):
    """True: read along the inner dimension (unit stride there), False: along the outer one, None: neither."""
    if s_inner == 1 or n_inner == 1:
        return True
    if s_outer == 1 or n_outer == 1:
        return False
    return None


class CoopMatmul2(Family):
    family = "matmul_coopmat2"
    template = "matmul_coopmat2.comp"

    def __init__(self, device):
        Family.__init__(self, device)
        self.tiled = family(device, Matmul)  # its split-K target and reduce pass
        self.props = device.facts.coopmat2
        self.granules = {dt: granules_of(self.props, dt, device.facts.features) for dt in _COMPONENT}
        self.min_size = search_space(self.family).get("min_size", 16)
        self.verified_error: dict = {}  # dtype -> the relative error `verify` measured

    params = Matmul.params  # an untuned layout bucket ("large.nt") runs its size bucket's config

    def majors(self, M: int, N: int, K: int, sa, sb, sc):
        """(A along K, B along N, C along N) for these strides, or None where an operand has no unit stride."""
        found = (unit_major(sa[1], sa[2], M, K), unit_major(sb[1], sb[2], K, N), unit_major(sc[1], sc[2], M, N))
        return None if None in found else found

    def usable(self, M: int, N: int, K: int, sa, sb, sc) -> bool:
        return min(M, N) >= self.min_size and K >= 16 and self.majors(M, N, K, sa, sb, sc) is not None

    def preferred(self, M: int, N: int, K: int, batch: int) -> bool:
        """Whether this kernel beats the subgroup-scope one on a GEMM both can run (tuning/matmul_coopmat2.json
        "over_subgroup_scope", from their measured A/B)."""
        rule = search_space(self.family)["over_subgroup_scope"]
        return bool(evaluate(rule, {"M": M, "N": N, "K": K, "batch": batch}))

    def check_config(self, params: dict) -> dict:
        """Known names; BM, BN, BK multiples of the granularities of a workgroup-scope shape listed for
        WGS invocations (for every dtype the device has such shapes for: a config serves each), within the
        device's largest dimension and workgroup."""
        unknown = [n for n in params if n not in PARAMS]
        if unknown:
            raise InvalidConfigError(f"matmul_coopmat2: unknown parameter {', '.join(map(repr, unknown))}; the "
                                     f"workgroup-scope kernel takes {', '.join(PARAMS)} (tuning/matmul_coopmat2.json)")
        c = dict(params)
        for n in PARAMS:
            if not isinstance(c.get(n), int) or c[n] < 1:
                raise InvalidConfigError(f"matmul_coopmat2 parameter {n}={c.get(n)!r} must be a positive integer")
        for dtype, granules in self.granules.items():
            if dtype != "float16" and not granules:  # a dtype the device has no shapes for constrains nothing
                continue
            fits = [g for g in granules if g["workgroupInvocations"] == c["WGS"] and c["BM"] % g["MGranularity"] == 0
                    and c["BN"] % g["NGranularity"] == 0 and c["BK"] % g["KGranularity"] == 0]
            if not fits:
                listed = ", ".join(f'{g["MGranularity"]}x{g["NGranularity"]}x{g["KGranularity"]} at '
                                   f'{g["workgroupInvocations"]}' for g in granules) or "none"
                raise InvalidConfigError(f"matmul_coopmat2 {c}: {self.device.facts.name} has no workgroup-scope "
                                         f"{dtype} matrix of that tile and workgroup (granularities M x N x K at "
                                         f"invocations: {listed})")
        largest, widest = self.props.get("max_dimension", 0), self.props.get("max_workgroup_size", 0)
        if max(c["BM"], c["BN"], c["BK"]) > largest or c["WGS"] > widest:
            raise InvalidConfigError(f"matmul_coopmat2 {c}: over the device's largest matrix dimension "
                                     f"{largest} or workgroup {widest}")
        self.device.pipelines.check_limits((c["WGS"], 1, 1), push_size=PUSH.size)
        return c

    def pipeline(self, params: dict, mode: int, act: str | None, majors: tuple, aligned: bool, dtype: str):
        defines = {"BM": params["BM"], "BN": params["BN"], "BK": params["BK"], "A_KMAJOR": int(majors[0]),
                   "B_NMAJOR": int(majors[1]), "C_NMAJOR": int(majors[2]), "ALIGNED": int(aligned),
                   "DTYPE": DTYPES[dtype][0], "MODE": mode, **activations.act_define(act if mode == 0 else None)}
        return self.variant(defines, params["WGS"], PUSH.size)

    def prepare(self, a_addr: int, b_addr: int, M: int, N: int, K: int, batch: int, sa, sb, sc, act, bucket: str,
                tune_shape: dict, explicit: dict | None = None, split_k=None, dtype: str = "float16"):
        """The launch (matmul_plan.Prepared) of one fp16 or bf16 GEMM: the bucket's config (or `explicit` on
        top), split-K by matmul's rule. The operands' strides must pass `usable`."""
        params = self.resolve(bucket, explicit)
        source = "explicit" if explicit else self.params(bucket)[1]
        majors = self.majors(M, N, K, sa, sb, sc)
        if majors is None:
            raise InvalidConfigError("matmul_coopmat2 reads operands along a unit stride; "
                                     f"strides A {sa}, B {sb}, C {sc} have none in some operand")
        a_row = sa[1] if majors[0] else sa[2]
        b_row = sb[1] if majors[1] else sb[2]
        aligned = a_row % 8 == 0 and b_row % 8 == 0
        tile = {"WG": params["WGS"], "BM": params["BM"], "BN": params["BN"], "BK": params["BK"]}
        info = {"kernel": "coopmat2", "bucket": bucket, "config_bucket": bucket,
                "params": {n: params[n] for n in PARAMS}, "source": source}
        return plan_launch(self.tiled, tile, M, N, K, batch, sa, sb, sc, 2, split_k, DTYPES[dtype][0], act,
                           lambda mode: self.pipeline(params, mode, act, majors, aligned, dtype),
                           info, tune_shape, self.family)

    def verify(self, dtype: str) -> bool:
        """Products of `dtype` with ragged edges against numpy: A read along M, B along K, a bias and alpha;
        a transposed output; split-K over a batch of 2. An error over the dtype's accuracy disables the kernel
        for it."""
        import numpy as np  # lazy: numpy only for this one-time check: importing the kernels loads no numpy

        dev = self.device
        rng = np.random.default_rng(11)
        worst = 0.0
        for M, N, K, batch, a_t, b_t, c_t, splits in ((77, 70, 93, 1, True, False, False, 1),
                                                      (45, 83, 130, 1, False, True, True, 1),
                                                      (66, 50, 300, 2, False, False, False, 2)):
            a = to_storage(rng.standard_normal((batch, K, M) if a_t else (batch, M, K)), dtype)
            b = to_storage(rng.standard_normal((batch, N, K) if b_t else (batch, K, N)), dtype)
            bias = to_storage(rng.standard_normal(N), dtype)
            sa = (M * K, 1, M) if a_t else (M * K, K, 1)
            sb = (K * N, 1, K) if b_t else (K * N, N, 1)
            sc = (M * N, 1, M) if c_t else (M * N, N, 1)
            ab, bb, biasb = dev.upload(a), dev.upload(b), dev.upload(bias)
            ob = dev.allocator.alloc(batch * M * N * 2)
            try:
                layout = ("t" if a_t else "n") + ("t" if b_t else "n")
                shape = {"M": M, "N": N, "K": K, "batch": batch, "layout": layout}
                prep = self.prepare(ab.address, bb.address, M, N, K, batch, sa, sb, sc, None, self.bucket(shape), shape,
                                    split_k=splits, dtype=dtype)
                prep.record(dev, ab.address, bb.address, ob.address, biasb.address, 0.5)
                got = from_storage(dev.download(ob, a.dtype, (batch, N, M) if c_t else (batch, M, N)), dtype)
            finally:
                dev.synchronize()
                for buf in (ab, bb, biasb, ob):
                    buf.free()
            A, B = from_storage(a, dtype), from_storage(b, dtype)
            A, B = (np.swapaxes(A, 1, 2) if a_t else A), (np.swapaxes(B, 1, 2) if b_t else B)
            ref = 0.5 * (A @ B) + from_storage(bias, dtype)
            got = np.swapaxes(got, 1, 2) if c_t else got
            err = np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-6)
            worst = max(worst, err if np.isfinite(err) else np.inf)
        if worst > _TOLERANCE[dtype]:
            _warn_once(dev, "verify2" + dtype, f"TorchVK: the workgroup-scope cooperative-matrix matmul gave wrong "
                       f"{dtype} results on {dev.facts.name} (relative error {worst:.3g} against numpy); it is "
                       "disabled for that dtype and the kernel before it is used.")
            return False
        self.verified_error[dtype] = float(worst)
        return True


# the verification's bound: fp32 accumulation, one rounding of the result to the storage dtype
_TOLERANCE = {"float16": 5e-3, "bfloat16": 2e-2}


def verified(device, dtype: str = "float16") -> CoopMatmul2 | None:
    """The device's workgroup-scope kernel once it compiled and passed its check against numpy for `dtype`
    (float16 or bfloat16), else None (no VK_NV_cooperative_matrix2 features, no shape of that dtype at
    workgroup scope, no glslang 15, a wrong result)."""
    if not env_flag("TVK_COOPMAT", default=True):  # cooperative matrices off: the kernels before them run
        return None
    fam = family(device, Matmul)
    found = fam.coop2.get(dtype)
    if found is None:
        if getattr(device.stream, "dry", False):  # a dry run discards its self-check: decide on a real run
            return None
        found = fam.coop2[dtype] = False
        if device.facts.features.get("cooperative_matrix2") and "VK_NV_cooperative_matrix2" in device.extensions:
            try:
                runner = family(device, CoopMatmul2)
                if runner.granules.get(dtype) and runner.verify(dtype):
                    found = fam.coop2[dtype] = runner
            except (TVKError, OSError) as e:
                # one warning per kind of failure: fp16's and bf16's checks fail alike without a new enough compiler
                _warn_once(device, "coopmat2 " + type(e).__name__,
                           f"TorchVK: the workgroup-scope cooperative-matrix matmul is disabled for "
                           f"{dtype} on {device.facts.name}: {e}. The kernel before it is used instead.")
    return found or None


def candidates(device) -> list[dict]:
    """Parameter sets of tuning/matmul_coopmat2.json that fit `device`; [] without a verified kernel.
    Pass one as `params=` with dtype="float16" to run it."""
    coop = verified(device)
    return [] if coop is None else fitting_params(coop)
