"""Depthwise 2-D convolution (one input channel per group, any channel multiplier): direct kernels.

conv.py's entry functions route here when groups > 1 and in_channels == groups (MobileNet,
EfficientNet, ConvNeXt): the implicit GEMM of conv2d.comp has a GEMM of width 1 there and ran
10x behind cuDNN. templates/conv2d_depthwise.comp, DIR 0/1/2: forward and grad-input one
invocation per element, grad-weight a reduction per (channel, tap) over batch and positions,
split into slices summed by conv.py's conv2d_reduce pass when one slice per channel would leave
the device idle. Search space, buckets, defaults and the split plan: tuning/conv2d_depthwise.json.

The functions take the geometry dict `g` (conv_geometry.geometry) and resolved-or-None params.
"""
from __future__ import annotations

import struct

from . import activations
from .conv_geometry import checked_split_k, geometry, storage_defines
from .launch import Family, family, grid_1d, positive, powers_of_two, record_shape, recording
from .. import benchmark_mode
from ..config import by_class
from ..errors import InvalidConfigError
from ..search_space import search_space

DIRS = {"fwd": 0, "bwd_input": 1, "bwd_weight": 2}
_PUSH = struct.Struct("<4Q18I")  # a, b, c, bias; n ch h w; oc oh ow kh; kw sh sw ph; pw dh dw flags; chunk splits


def is_depthwise(g: dict) -> bool:
    """One input channel per group (conv_geometry.geometry's dict); groups == 1 stays on the GEMM."""
    return g["groups"] > 1 and g["ic"] == g["groups"]


class DepthwiseConv(Family):
    family = "conv2d_depthwise"
    template = "conv2d_depthwise.comp"

    def check_config(self, params: dict) -> dict:
        unknown = sorted(set(params) - set(search_space(self.family)["params"]))
        if unknown:
            raise InvalidConfigError(
                f"{self.family}: unknown parameters {unknown}: a depthwise conv (one input channel per group) runs "
                f"the direct kernels of tuning/{self.family}.json, whose parameters are "
                f"{sorted(search_space(self.family)['params'])}")
        positive(self.family, params, "ITEMS", "TAPS")
        return powers_of_two(self.family, params, "WG")  # grad-weight's tree halves WG

    def pipeline(self, dir_id: int, params: dict, act: str | None = None, dtype: str = "float32",
                 partials: bool = False):
        shared = params["shared_bytes"] if dir_id == 2 else 0
        return self.variant(defines(dir_id, params, act, dtype, partials), params["WG"], _PUSH.size, shared_bytes=shared)

    def resolve_dir(self, direction: str, g: dict, params: dict | None, run) -> dict:
        """The parameters of one direction (bucket names: dir, taps, positions). In benchmark mode,
        `run(params)` (the same call with a candidate) times this exact geometry."""
        shape = bucket_shape(direction, g)
        if recording():
            record_shape(self.family, launch_tune_shape(direction, g))
        if params is None and benchmark_mode.enabled():
            names = search_space(self.family)["params"]
            return self.benchmarked((direction, *sorted(g.items())), shape, lambda p: run({k: p[k] for k in names}))
        return self.resolve(shape, params)


def defines(dir_id: int, params: dict, act: str | None = None, dtype: str = "float32", partials: bool = False) -> dict:
    """The template's defines (WG, ITEMS, TAPS are its specialization constants); ACT only when asked
    for; DTYPE (and C_F32: grad-weight's float32 partials) only for 16-bit storage, as conv.py's."""
    d = {"DIR": dir_id, "WG": params["WG"], "ITEMS": params["ITEMS"], "TAPS": params["TAPS"]}
    if act is not None:
        d.update(activations.act_define(activations.EPILOGUES[act]))
    return {**d, **storage_defines(dtype, partials)}


def bucket_shape(direction: str, g: dict) -> dict:
    return {"dir": direction, "taps": g["kh"] * g["kw"], "positions": g["n"] * g["oh"] * g["ow"]}


def _push(a, b, c, bias, g, flags=0, chunk=0, splits=1) -> bytes:
    return _PUSH.pack(a, b, c, bias, g["n"], g["ic"], g["h"], g["w"], g["oc"], g["oh"], g["ow"], g["kh"],
                      g["kw"], g["sh"], g["sw"], g["ph"], g["pw"], g["dh"], g["dw"], flags, chunk, splits)


def _elementwise(device, fam, dir_id, params, total, push, label, act=None, dtype="float32"):
    groups = -(-total // (params["WG"] * params["ITEMS"]))
    device.stream.dispatch(fam.pipeline(dir_id, params, act, dtype),
                           grid_1d(groups, device.facts.max_workgroup_count[0]), push, label)


def forward(device, g, x, w, bias, out, params, act, run, dtype="float32"):
    """out = act(depthwise conv(x, w) + bias); addresses are ints (bias 0: none); dtype: their storage."""
    fam = family(device, DepthwiseConv)
    prm = fam.resolve_dir("fwd", g, params, run)
    _elementwise(device, fam, 0, prm, g["n"] * g["oc"] * g["oh"] * g["ow"], _push(x, w, out, bias, g, 1 if bias else 0),
                 "conv2d_depthwise_fwd" + (f"_{act}" if act else ""), act, dtype)


def backward_input(device, g, grad_out, w, grad_in, params, run, dtype="float32"):
    fam = family(device, DepthwiseConv)
    prm = fam.resolve_dir("bwd_input", g, params, run)
    _elementwise(device, fam, 1, prm, g["n"] * g["ic"] * g["h"] * g["w"], _push(grad_out, w, grad_in, 0, g),
                 "conv2d_depthwise_bwd_input", dtype=dtype)


def split_plan(device, g: dict, taps_per_group: int, split_k=None) -> tuple[int, int]:
    """(slices, positions per slice) of grad-weight's N*OH*OW reduction: enough workgroups to fill the
    device (tuning/conv2d_depthwise.json "split"), each slice long enough to be worth a partial sum."""
    positions = g["n"] * g["oh"] * g["ow"]
    if positions == 0:  # an empty batch: one slice of nothing writes zeros
        return 1, 0
    units = g["oc"] * -(-g["kh"] * g["kw"] // taps_per_group)
    if split_k is not None:
        splits = checked_split_k(split_k)
    else:
        cfg, facts = search_space(DepthwiseConv.family).get("split", {}), device.facts
        target = by_class(cfg.get("target_groups"), facts, 256)
        min_pos = by_class(cfg.get("min_positions_per_split"), facts, 2048)
        splits = min(-(-target // units), cfg.get("max_splits", 256), positions // max(min_pos, 1))
    numel = g["oc"] * g["kh"] * g["kw"]
    splits = max(1, min(splits, positions, ((1 << 31) - 1) // numel))
    chunk = -(-positions // splits)
    return -(-positions // chunk), chunk


def backward_weight(device, g, grad_out, x, params, run, split_k=None, dtype="float32"):
    """(splits, launch): launch(c) writes grad-weight's `splits` partial sums of OC*KH*KW values to c
    (grad-weight itself, in `dtype`, when splits == 1; float32 partials otherwise), which conv.py's
    conv2d_reduce pass then adds up."""
    fam = family(device, DepthwiseConv)
    prm = fam.resolve_dir("bwd_weight", g, params, run)
    splits, chunk = split_plan(device, g, prm["TAPS"], split_k)
    units = g["oc"] * -(-g["kh"] * g["kw"] // prm["TAPS"])
    pipe = fam.pipeline(2, prm, dtype=dtype, partials=splits > 1)
    grid = grid_1d(units * splits, device.facts.max_workgroup_count[0])

    def launch(c):
        device.stream.dispatch(pipe, grid, _push(grad_out, x, c, 0, g, 0, chunk, splits), "conv2d_depthwise_bwd_weight")

    return splits, launch


# ------------------------------------------------------------------ tuner shapes (tvk-tune --model records them)
def tune_shape(direction: str, x, w, stride=1, padding=0, dilation=1, groups=1) -> dict:
    """A tuner shape: the conv geometry plus the bucket names (dir, taps, positions)."""
    g, _ = geometry(x, w, stride, padding, dilation, groups)
    if not is_depthwise(g):
        raise ValueError(f"conv2d_depthwise: x {tuple(x)}, w {tuple(w)}, groups={groups} is not depthwise")
    return {**bucket_shape(direction, g), "x": list(x), "w": list(w), "stride": stride, "padding": padding,
            "dilation": dilation, "groups": groups}


def launch_tune_shape(direction: str, g: dict) -> dict:
    """tune_shape of a launch's geometry (tvk-tune --model); a cut output (out_hw) tunes the uncut conv."""
    def one(a, b):
        return a if a == b else [a, b]

    return tune_shape(direction, [g["n"], g["ic"], g["h"], g["w"]], [g["oc"], 1, g["kh"], g["kw"]],
                      one(g["sh"], g["sw"]), one(g["ph"], g["pw"]), one(g["dh"], g["dw"]), g["groups"])
