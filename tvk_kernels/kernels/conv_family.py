"""The conv2d implicit-GEMM family (templates/conv2d.comp): its configs, compiled variants and GEMM
dimensions; conv.py's entry functions launch it, conv_coopmat.py's family extends it.
Search space, constraints, buckets and defaults: tuning/conv2d.json."""
from __future__ import annotations

import struct

from . import activations, dtypes, matmul_packed_f16
from .conv_geometry import geometry, storage_defines
from .launch import Family, positive, record_shape, recording
from .. import benchmark_mode
from ..config import by_class
from ..env_flags import env_flag
from ..errors import InvalidConfigError
from ..search_space import search_space

REDUCE_TEMPLATE = "conv2d_reduce.comp"
DIRS = {"fwd": 0, "bwd_input": 1, "bwd_weight": 2}
PUSH = struct.Struct("<4Q18I")  # a, b, c, bias; n ic h w; oc oh ow groups; kh kw sh sw; ph pw dh dw; kchunk flags
PUSH_BACKWARD_INPUT = struct.Struct("<3Q20I2i3I")  # DIR 1: a, b, c; n ic h w; oc oh ow groups; kh kw; phase; kchunk
REDUCE_PUSH = struct.Struct("<2Q5I")  # src, dst; count A B sa si
_GEMM_KEYS = ("BM", "BN", "BK", "TM", "TN", "PAD")
ACTIVATIONS = activations.EPILOGUES  # forward epilogues: name -> the template's ACT (the activation table's)


def gemm_dims(direction: str, g: dict) -> tuple[int, int, int]:
    icg, ocg = g["ic"] // g["groups"], g["oc"] // g["groups"]
    khw, hw, ohw = g["kh"] * g["kw"], g["h"] * g["w"], g["oh"] * g["ow"]
    if direction == "fwd":
        return g["n"] * ohw, ocg, icg * khw
    if direction == "bwd_input":  # over all stride phases together
        return g["n"] * hw, icg, ocg * khw // (g["sh"] * g["sw"]) or 1
    return ocg, icg * khw, g["n"] * ohw


def gemm_defines(dir_id: int, params: dict, wg: int, act: str | None = None, dtype: str = "float32",
                 partials: bool = False, packed: bool = False) -> dict:
    """The template's defines for one direction and parameter set. ACT and PACKED are absent unless
    asked for, and float32 has no DTYPE or C_F32, so the tuned kernels' SPIR-V stays what was tuned
    (tune/carry_over.py relies on it). FRAG is a specialization constant: 0 for a config tuned
    before it existed. partials: the output is split-K's float32 partial sums; packed: float16 on
    packed fp16 arithmetic (the module docstring)."""
    defines = {"DIR": dir_id, "WG": wg, "FRAG": params.get("FRAG", 0), **{k: params[k] for k in _GEMM_KEYS}}
    if act is not None:
        defines.update(activations.act_define(ACTIVATIONS[act]))
    if packed:
        if dtype != "float16" or params["TN"] % 2:
            raise InvalidConfigError(f"conv2d: packed fp16 arithmetic needs float16 storage and an even TN, not "
                                     f"{dtype} with TN={params['TN']}")
        defines["PACKED"] = 1
    return {**defines, **storage_defines(dtype, partials)}


# ------------------------------------------------------------------ the family
class Conv2d(Family):
    family = "conv2d"
    template = "conv2d.comp"

    def check_config(self, params: dict) -> dict:
        return positive(self.family, params, "BM", "BN", "BK", "TM", "TN")  # a tile of 0 keeps the constraints

    def gemm_pipeline(self, dir_id: int, params: dict, act: str | None = None, dtype: str = "float32",
                      partials: bool = False):
        """`params` as resolve gives them (WG and shared_bytes included)."""
        push_size = PUSH_BACKWARD_INPUT.size if dir_id == 1 else PUSH.size
        defines = gemm_defines(dir_id, params, params["WG"], act, dtype, partials, self.packed(params, dtype))
        return self.variant(defines, params["WG"], push_size, shared_bytes=params["shared_bytes"])

    def packed(self, params: dict, dtype: str) -> bool:
        """Whether a GEMM of this config and storage runs on packed fp16 arithmetic (module docstring):
        TVK_PACKED_CONV=1, float16, an even TN (columns multiply in pairs), no cooperative matrices on
        the device (TVK_COOPMAT=0 counts as none: the H200's stand-in for RDNA1), and matmul's
        packed-fp16 kernel verified here (a GPU with shaderFloat16, TVK_PACKED_F16 not 0)."""
        if dtype != "float16" or params["TN"] % 2 or not env_flag("TVK_PACKED_CONV", default=False):
            return False
        if self.device.facts.features.get("cooperative_matrix") and env_flag("TVK_COOPMAT", default=True):
            return False
        return matmul_packed_f16.verified(self.device) is not None

    def reduce_pipeline(self, per_thread: bool, wg: int, act: str | None = None, dtype: str = "float32"):
        """act: the forward's epilogue activation, applied to each finished sum (split-K); dtype: the
        storage the sums are written in."""
        defines = {"PER_THREAD": int(per_thread)}
        if act is not None:
            defines.update(activations.act_define(ACTIVATIONS[act]))
        return self.variant({**defines, **dtypes.storage_define(dtype)}, wg, REDUCE_PUSH.size,
                            shared_bytes=0 if per_thread else 4 * wg, template=REDUCE_TEMPLATE)

    def reduce_wg(self) -> int:
        """conv2d_reduce.comp's local size (tuning/conv2d.json "reduce"), within the device's limit."""
        facts = self.device.facts
        wg = by_class(search_space(self.family).get("reduce", {}).get("WG"), facts, 256)
        if wg < 1 or wg & (wg - 1):  # a tree reduction
            raise InvalidConfigError(f"conv2d: the reduce WG={wg} of tuning/conv2d.json must be a power of two")
        return min(wg, 1 << (min(facts.max_workgroup_invocations, facts.max_workgroup_size[0]).bit_length() - 1))

    def resolve_gemm(self, direction: str, g: dict, params: dict | None, run=None) -> dict:
        """The parameters of one direction's GEMM: its bucket (tuning/conv2d.json names dir, M, N, K).
        In benchmark mode, `run(params)` (the same call with a candidate) times this exact geometry."""
        M, N, K = gemm_dims(direction, g)
        shape = {"dir": direction, "M": M, "N": N, "K": K}
        if recording():
            record_shape(self.family, launch_tune_shape(direction, g))
        if params is None and run is not None and benchmark_mode.enabled():
            names = search_space(self.family)["params"]
            return self.benchmarked((direction, *sorted(g.items())), shape,
                                    lambda p: run({k: p[k] for k in names}))
        return self.resolve(shape, params)


# ------------------------------------------------------------------ tuner shapes (tvk-tune --model records them)
def tune_shape(direction: str, x, w, stride=1, padding=0, dilation=1, groups=1) -> dict:
    """A tuner shape: the conv geometry plus the bucket names (dir, M, N, K)."""
    g, _ = geometry(x, w, stride, padding, dilation, groups)
    M, N, K = gemm_dims(direction, g)
    return {"dir": direction, "M": M, "N": N, "K": K, "x": list(x), "w": list(w), "stride": stride,
            "padding": padding, "dilation": dilation, "groups": groups}


def launch_tune_shape(direction: str, g: dict) -> dict:
    """tune_shape of a launch's geometry (tvk-tune --model). A transposed conv's cut output
    (out_hw) is not kept: the uncut conv, one output row or column more, is tuned for it."""
    def one(a, b):  # an int where both axes agree, as the suites write it
        return a if a == b else [a, b]

    return tune_shape(direction, [g["n"], g["ic"], g["h"], g["w"]], [g["oc"], g["ic"] // g["groups"], g["kh"], g["kw"]],
                      one(g["sh"], g["sw"]), one(g["ph"], g["pw"]), one(g["dh"], g["dw"]), g["groups"])
