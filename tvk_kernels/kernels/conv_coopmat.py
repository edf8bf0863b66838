"""fp16 convolution on cooperative matrices: conv2d.comp's COOPMAT form, a family of its own.

The same implicit GEMM, tables, stride phases, split-K and epilogues as conv2d.comp's other forms
(conv.py launches it the same way); the BK slices of A and B are staged in fp16 and multiplied on
16 x 16 x 16 fp16 -> fp32 subgroup matrices (VK_KHR_cooperative_matrix). conv.py routes float16
convolutions here where the device has those matrices, a subgroup size of 16 to 64, and a first-use
check of all three directions against numpy (conv.check_coopmat) passed; explicit parameters naming
FM run it too. TVK_COOPMAT=0 or TVK_COOPMAT_CONV=0 turns the route off (ROUTE_BY_DEFAULT).
TVK_COOPMAT_CONV=emulate[:SUBGROUP] routes float16 here on any device with the template's EMULATE (the
matrix products on scalar code, subgroups of SUBGROUP invocations, 32 by default): how lavapipe's
tests run the rest of this kernel; never a speed path. bfloat16 keeps the fp32-arithmetic kernel.

Search space, buckets and defaults: tuning/conv2d_coopmat.json. A config's tile is BM x BN over a BK
slice; FM x FN matrices a subgroup, so the workgroup is (BM / 16 FM) x (BN / 16 FN) subgroups.
"""
from __future__ import annotations

from .conv_family import PUSH, PUSH_BACKWARD_INPUT, Conv2d, gemm_defines
from .launch import family
from .matmul_coopmat import emulated_subgroup, has_16x16x16
from ..env_flags import env_flag
from ..errors import InvalidConfigError
from ..search_space import search_space

# On: measured on the lent H100 faster than the fp32-arithmetic kernels in 9 of 10 layers' training steps
# (benchmarks/conv_vs_cudnn.py, design note 55); TVK_COOPMAT_CONV=0 turns it off
ROUTE_BY_DEFAULT = True
MIN_SUBGROUP, MAX_SUBGROUP = 16, 64


def emulation() -> int | None:
    """TVK_COOPMAT_CONV=emulate[:SUBGROUP]: the subgroup size to emulate, else None."""
    return emulated_subgroup("TVK_COOPMAT_CONV", (16, 32, 64))


class Conv2dCoopmat(Conv2d):
    family = "conv2d_coopmat"
    template = "conv2d.comp"

    def __init__(self, device):
        Conv2d.__init__(self, device)
        self._checked: dict = {}  # (emulated, subgroup size) -> the first-use check's verdict
        self.emulate_as(emulation())

    def emulate_as(self, emulate: int | None):
        """Run the EMULATE form at this subgroup size (None: the device's matrices at its own size)."""
        self.emulate = emulate
        self.subgroup = emulate or self.device.facts.subgroup_size
        self._resolved.clear()  # checked against the workgroup this size gives

    def geometry(self, params: dict) -> tuple[int, int]:
        """(workgroup size, shared bytes) of a config, as the template declares them."""
        c = params
        wg = (c["BM"] // (16 * c["FM"])) * (c["BN"] // (16 * c["FN"])) * self.subgroup
        tiles = 2 * c["BK"] * (c["BM"] + c["PAD"] + c["BN"] + c["PAD"])
        tables = 12 * max(c["BM"], c["BN"]) + 32 * c["BK"]  # ktab holds two tiles' entries
        return wg, tiles + tables + 4 * 256 * (wg // self.subgroup)

    def check_config(self, params: dict) -> dict:
        names = search_space(self.family)["params"]
        unknown = [n for n in params if n not in names]
        if unknown:
            raise InvalidConfigError(f"conv2d_coopmat: unknown parameter {', '.join(map(repr, unknown))}; the "
                                     f"cooperative-matrix conv takes {', '.join(names)} (tuning/conv2d_coopmat.json)")
        c = dict(params)
        for name in ("BM", "BN", "BK", "FM", "FN"):
            if not isinstance(c.get(name), int) or c[name] < 1:
                raise InvalidConfigError(f"conv2d_coopmat: {name}={c.get(name)!r} must be a positive integer")
        if c["BM"] % (16 * c["FM"]) or c["BN"] % (16 * c["FN"]) or c["BK"] % 16 or c["PAD"] % 8:
            raise InvalidConfigError(f"conv2d_coopmat: BM={c['BM']} must be a multiple of 16 FM, BN={c['BN']} of "
                                     f"16 FN, BK={c['BK']} of 16 and PAD={c['PAD']} of 8 (16-byte shared rows)")
        wg, shared = self.geometry(c)
        self.device.pipelines.check_limits((wg, 1, 1), shared_bytes=shared, subgroup_size=self.required_subgroup(),
                                           push_size=PUSH.size)
        return c

    def required_subgroup(self) -> int | None:
        return self.subgroup if not self.emulate and self.device.facts.subgroup_size_control else None

    def gemm_pipeline(self, dir_id: int, params: dict, act: str | None = None, dtype: str = "float16",
                      partials: bool = False):
        if dtype != "float16":
            raise InvalidConfigError(f"conv2d_coopmat: cooperative matrices take float16 storage, not {dtype}")
        wg, shared = self.geometry(params)
        tile = {"BM": params["BM"], "BN": params["BN"], "BK": params["BK"], "TM": params["FM"], "TN": params["FN"],
                "PAD": params["PAD"]}
        defines = {**gemm_defines(dir_id, tile, wg, act, dtype, partials), "COOPMAT": 1,
                   "SUBGROUP_SIZE": self.subgroup, "EMULATE": int(bool(self.emulate))}
        push_size = PUSH_BACKWARD_INPUT.size if dir_id == 1 else PUSH.size
        return self.variant(defines, wg, push_size, shared_bytes=shared, subgroup_size=self.required_subgroup())

    def reduce_pipeline(self, per_thread: bool, wg: int, act: str | None = None, dtype: str = "float32"):
        return family(self.device, Conv2d).reduce_pipeline(per_thread, wg, act, dtype)

    def reduce_wg(self) -> int:
        return family(self.device, Conv2d).reduce_wg()

    def routed(self, check) -> bool:
        """Whether float16 convs run here: emulated, or 16 x 16 x 16 fp16 -> fp32 subgroup matrices, a
        subgroup size of 16 to 64, and `check(device)` (conv.py's three directions against numpy) passed
        (once; a wrong result turns the route off with a warning)."""
        key, sub = (self.emulate, self.subgroup), self.subgroup
        verdict = self._checked.get(key)
        if verdict is None and getattr(self.device.stream, "dry", False):
            return False  # a dry run (a compiled program's first) discards the check's kernels: decide on a real run
        if verdict is None:
            verdict = bool(self.emulate) or (has_16x16x16(self.device) and MIN_SUBGROUP <= sub <= MAX_SUBGROUP
                                             and sub & (sub - 1) == 0)
            self._checked[key] = verdict  # the check below runs convs, which ask again: no recursion
            if verdict:
                verdict = self._checked[key] = bool(check(self.device))
        return verdict


def gemm_family(device, dtype: str, params: dict | None, check, M: int, N: int) -> Conv2d:
    """The family a conv GEMM (M x N outputs per group) of this storage runs on: this one for float16 where
    explicit parameters name FM, or (params None) where the route is on, both sides are at least min_size
    (tuning/conv2d_coopmat.json: a 3-channel grad-input would compute 16-wide matrices of mostly zeros) and
    `routed(check)`; else conv2d's."""
    if dtype != "float16":
        return family(device, Conv2d)
    emulate = emulation()
    if params is not None and "FM" not in params:
        return family(device, Conv2d)
    if params is None and min(M, N) < search_space(Conv2dCoopmat.family).get("min_size", 16):
        return family(device, Conv2d)
    if params is None and emulate is None and not (
            env_flag("TVK_COOPMAT", default=True) and env_flag("TVK_COOPMAT_CONV", default=ROUTE_BY_DEFAULT)
            and "VK_KHR_cooperative_matrix" in device.facts.extensions):
        return family(device, Conv2d)
    fam = family(device, Conv2dCoopmat)
    if fam.emulate != emulate:
        fam.emulate_as(emulate)
    return fam if params is not None or fam.routed(check) else family(device, Conv2d)
