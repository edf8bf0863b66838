"""convolution / convolution_backward (2-D; 1-D as 2-D with H=1; 3-D as 2-D per kernel depth tap),
plain and transposed, on tvk_kernels.kernels.conv.

A transposed conv is the matching plain conv run backwards, so it needs no kernel of its own:
its weight (IC, OC/G, KH, KW) is that conv's weight (the conv maps the transposed conv's output
back to its input), its forward is the conv's grad-input, its grad-input is the conv's forward
and its grad-weight is the conv's grad-weight with input and grad-output swapped.

float16/bfloat16 convs (autocast's) run on the kernels' 16-bit storage: inputs read and outputs
written in their dtype, float32 arithmetic, no cast copies around the kernels. 3-D convs and
tensors of mixed dtypes compute on float32 copies (_half.float32_compute)."""
from __future__ import annotations

import torch

from tvk_kernels.kernels import conv as conv_kernels

from ..op_registry import register
from .._repeat import mark, offer
from .._tensor import new_tensor
from ._half import HALF, float32_compute
from ._util import DTYPE_NAME, addr, dev
from .copies import contig

aten = torch.ops.aten
_ACT_OPS = {"relu": aten.relu.default}  # compiled mode's epilogues, as separate ops
def _check(op, *ts) -> str:
    """The kernels' storage name of the tensors' one dtype (None entries skipped)."""
    dtypes = {t.dtype for t in ts if t is not None}
    if len(dtypes) != 1 or next(iter(dtypes)) not in DTYPE_NAME:
        raise TypeError(f"TorchVK: {op} takes float32, float16 or bfloat16 tensors of one dtype, not "
                        f"{', '.join(str(t.dtype) for t in ts if t is not None)}")
    return DTYPE_NAME[dtypes.pop()]


def _in_float32(input, *tensors) -> bool:
    """Whether a float16/bfloat16 call computes on float32 copies: a 3-D conv (its taps add up
    through float32 tensors), or tensors of mixed dtypes."""
    if input.dtype not in HALF:
        return False
    return input.dim() == 5 or any(t is not None and t.dtype != input.dtype for t in tensors)


def _check_bias_padding(weight, bias, padding, out_channels):
    """torch's CPU checks that its meta kernel leaves out (a short bias would be read past its end)."""
    if any(p < 0 for p in padding):
        raise RuntimeError("negative padding is not supported")
    if bias is not None and tuple(bias.shape) != (out_channels,):
        raise RuntimeError(f"Given weight of size {list(weight.shape)}, expected bias to be 1-dimensional with "
                           f"{out_channels} elements, but got bias of size {list(bias.shape)} instead")


def _check_transposed(input, weight, bias, padding, stride, dilation, output_padding, groups):
    """torch's CPU checks of a transposed conv that its meta kernel leaves out (a wrong channel
    count would read past the input), with the CPU's messages."""
    if any(p < 0 for p in padding):
        raise RuntimeError("negative padding is not supported")
    if any(p < 0 for p in output_padding):
        raise RuntimeError("negative output_padding is not supported")
    if weight.shape[0] % groups:
        raise RuntimeError(f"Given groups={groups}, expected weight to be divisible by {groups} at dimension 0, but "
                           f"got weight of size [{list(weight.shape)}] instead")
    if input.shape[1] != weight.shape[0]:
        raise RuntimeError(f"Given transposed=1, weight of size {list(weight.shape)}, expected input"
                           f"{list(input.shape)} to have {weight.shape[0]} channels, but got {input.shape[1]} "
                           "channels instead")
    if bias is not None and tuple(bias.shape) != (weight.shape[1] * groups,):
        raise RuntimeError(f"Given transposed=1, weight of size {list(weight.shape)}, expected bias to be "
                           f"1-dimensional with {weight.shape[1] * groups} elements, but got bias of size "
                           f"{list(bias.shape)} instead")
    if any(op >= s and op >= d for op, s, d in zip(output_padding, stride, dilation)):
        # torch words a 1-D conv as 2-D with height 1
        k = len(stride)
        lists = [[0] * (k == 1) + list(output_padding), [1] * (k == 1) + list(stride),
                 [1] * (k == 1) + list(dilation)]
        axes = ("depth", "height", "width")[-max(k, 2):]
        words = [f"{what}_{axis}: {v}" for what, vals in zip(("output_padding", "stride", "dilation"), lists)
                 for axis, v in zip(axes, vals)]
        raise RuntimeError("output padding must be smaller than either stride or dilation, but got " + " ".join(words))


def _as2d(input, weight, stride, padding, dilation):
    """conv1d -> conv2d with a height of 1."""
    if input.dim() == 3:
        return (input.unsqueeze(2), weight.unsqueeze(2), [1] + list(stride), [0] + list(padding),
                [1] + list(dilation), True)
    return input, weight, list(stride), list(padding), list(dilation), False


def _pad(padding):
    padding = list(padding)
    return padding * 2 if len(padding) == 1 else padding


@register(aten.convolution.default)
def convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups, act=None):
    """aten.convolution; act="relu" (compiled mode's fusion only) applies ReLU in the same kernel."""
    run = _convolution_in_float32 if _in_float32(input, weight, bias) else _convolution
    return run(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups, act=act)


def _convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups, act=None):
    dtype = _check("aten.convolution", input, weight, bias)
    if act is not None and (transposed or input.dim() == 5):  # only the 2-D kernel has the epilogue
        out = convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
        return _ACT_OPS[act](out)
    if transposed:
        _check_transposed(input, weight, bias, padding, stride, dilation, output_padding, groups)
    if input.dim() == 5:
        return _conv3d(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
    if input.dim() not in (3, 4):
        raise NotImplementedError(f"TorchVK: aten.convolution supports 1-D, 2-D and 3-D convolutions, got a "
                                  f"{input.dim()}-D input")
    if transposed:
        return _transposed(input, weight, bias, stride, padding, dilation, output_padding, groups, dtype)
    _check_bias_padding(weight, bias, padding, weight.shape[0])
    x, w, stride, padding, dilation, one_d = _as2d(input, weight, stride, padding, dilation)
    x, w = contig(x), contig(w)
    b = contig(bias) if bias is not None else None
    d, pad, x_shape, w_shape, out_dtype = dev(input), _pad(padding), tuple(x.shape), tuple(w.shape), input.dtype
    shape = conv_kernels.conv2d_output_shape(x_shape, w_shape, stride, pad, dilation, groups)

    def run(operands):  # also what a repeat of this call records (torchvk/_repeat.py)
        x, w, b = operands
        out = new_tensor(shape, out_dtype, d)
        conv_kernels.conv2d_forward(d, addr(x), addr(w), addr(b) if b is not None else 0, addr(out), x_shape, w_shape,
                                    stride, pad, dilation, groups, act=act, dtype=dtype)
        return out

    begun = mark()
    out = run((x, w, b))
    if one_d:
        return out.squeeze(2)
    offer(begun, out, (x, w, b), run)  # kept where no copy came before (contiguous input, weight and bias)
    return out


_convolution_in_float32 = float32_compute(_convolution)


@register(aten.convolution_backward.default)
def convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
                         output_padding, groups, output_mask):
    run = _convolution_backward_in_float32 if _in_float32(input, grad_output, weight) else _convolution_backward
    return run(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed, output_padding, groups,
               output_mask)


def _convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
                          output_padding, groups, output_mask):
    dtype = _check("aten.convolution_backward", grad_output, input, weight)
    if input.dim() == 5:
        return _conv3d_backward(grad_output, input, weight, stride, padding, dilation, transposed, output_padding,
                                groups, output_mask)
    if transposed:
        return _transposed_backward(grad_output, input, weight, stride, padding, dilation, groups, output_mask, dtype)
    one_d = input.dim() == 3
    g = grad_output.unsqueeze(2) if one_d else grad_output
    x, w, stride, padding, dilation, _ = _as2d(input, weight, stride, padding, dilation)
    g, x, w = contig(g), contig(x), contig(w)
    d, out_dtype, mask = dev(input), input.dtype, tuple(output_mask)
    geo = (tuple(x.shape), tuple(w.shape), stride, _pad(padding), dilation, groups)

    def run(operands):  # also what a repeat of this call records (torchvk/_repeat.py)
        g, x, w = operands
        gi = new_tensor(geo[0], out_dtype, d) if mask[0] else None
        gw = new_tensor(geo[1], out_dtype, d) if mask[1] else None
        if gi is not None:
            conv_kernels.conv2d_backward_input(d, addr(g), addr(w), addr(gi), *geo, dtype=dtype)
        if gw is not None:
            conv_kernels.conv2d_backward_weight(d, addr(g), addr(x), addr(gw), *geo, dtype=dtype)
        return gi, gw, _grad_bias(g, dtype) if mask[2] else None

    begun = mark()
    result = run((g, x, w))
    if one_d:
        gi, gw, gb = result
        return gi.squeeze(2) if gi is not None else None, gw.squeeze(2) if gw is not None else None, gb
    offer(begun, result, (g, x, w), run)  # kept where no copy came before (contiguous grad, input and weight)
    return result


_convolution_backward_in_float32 = float32_compute(_convolution_backward)


def _grad_bias(g, dtype: str):
    """The bias gradient: grad_output (N, C, H, W) summed over all but C, in grad_output's dtype."""
    if dtype != "float32":  # the conv reduce writes float32: torch's sum rounds to the 16-bit dtype
        return aten.sum.dim_IntList(g, [0, 2, 3])
    gb = new_tensor([g.shape[1]], torch.float32, dev(g))
    conv_kernels.conv2d_backward_bias(dev(g), addr(g), addr(gb), tuple(g.shape))
    return gb


def _transposed(input, weight, bias, stride, padding, dilation, output_padding, groups, dtype):
    """conv_transpose: the grad-input of the conv from its output (N, OC, OH, OW) to `input`."""
    x, w, stride, padding, dilation, one_d = _as2d(input, weight, stride, padding, dilation)
    output_padding = ([0] if one_d else []) + list(output_padding)
    x, w = contig(x), contig(w)
    n, _, h, wd = x.shape
    oh, ow = ((size - 1) * s - 2 * p + d * (k - 1) + op + 1 for size, s, p, d, k, op in
              zip((h, wd), stride, _pad(padding), dilation, w.shape[2:], output_padding))
    shape = (n, w.shape[1] * groups, oh, ow)
    out = new_tensor(shape, input.dtype, dev(input))
    conv_kernels.conv2d_backward_input(dev(input), addr(x), addr(w), addr(out), shape, tuple(w.shape), stride, _pad(padding),
                             dilation, groups, out_hw=(h, wd), dtype=dtype)
    if bias is not None:
        out = aten.add.Tensor(out, bias.view(1, -1, 1, 1))
    return out.squeeze(2) if one_d else out


def _transposed_backward(grad_output, input, weight, stride, padding, dilation, groups, output_mask, dtype):
    one_d = input.dim() == 3
    g = grad_output.unsqueeze(2) if one_d else grad_output
    x, w, stride, padding, dilation, _ = _as2d(input, weight, stride, padding, dilation)
    g, x, w = contig(g), contig(x), contig(w)
    d = dev(input)
    hw = tuple(x.shape[2:])  # the conv's output size (output_padding may leave the shapes one row more)
    gi = new_tensor(x.shape, input.dtype, d) if output_mask[0] else None
    gw = new_tensor(w.shape, input.dtype, d) if output_mask[1] else None
    if gi is not None:
        conv_kernels.conv2d_forward(d, addr(g), addr(w), 0, addr(gi), tuple(g.shape), tuple(w.shape), stride, _pad(padding),
                          dilation, groups, out_hw=hw, dtype=dtype)
    if gw is not None:
        conv_kernels.conv2d_backward_weight(d, addr(x), addr(g), addr(gw), tuple(g.shape), tuple(w.shape), stride,
                                  _pad(padding), dilation, groups, out_hw=hw, dtype=dtype)
    gb = _grad_bias(g, dtype) if output_mask[2] else None
    if one_d:
        gi = gi.squeeze(2) if gi is not None else None
        gw = gw.squeeze(2) if gw is not None else None
    return gi, gw, gb


# ------------------------------------------------------------------ 3-D, as 2-D convs per kernel depth tap
# Tap kd of a conv3d joins input depth kd*dd + j*sd (of the depth-padded input) with output depth j:
# a 2-D conv (or transposed conv, or their backwards) of those depth slices, batched over (n, j),
# with the weight's kd slice. Each direction is a sum over the KD taps.

def _taps(x5, kd, dd, sd, count):
    """Depth slices kd*dd + j*sd (j < count) of x5 (N, C, D, H, W) as a (N*count, C, H, W) batch."""
    start = kd * dd
    s = x5[:, :, start:start + sd * (count - 1) + 1:sd]
    return contig(s.permute(0, 2, 1, 3, 4)).view(-1, *x5.shape[1:2], *x5.shape[3:])


def _add_taps(acc5, kd, dd, sd, batch):
    """acc5[:, :, kd*dd + j*sd] += the (N*count, C, H, W) batch's slice j."""
    n, c = acc5.shape[:2]
    count = batch.shape[0] // n
    start = kd * dd
    view = acc5[:, :, start:start + sd * (count - 1) + 1:sd]
    view.add_(batch.view(n, count, c, *batch.shape[2:]).permute(0, 2, 1, 3, 4))


def _from_batch(batch, n):
    """(N*D, C, H, W) -> (N, C, D, H, W)."""
    return contig(batch.view(n, -1, *batch.shape[1:]).permute(0, 2, 1, 3, 4))


def _depth_padded(x5, pd):
    if pd == 0:
        return x5
    shape = (x5.shape[0], x5.shape[1], x5.shape[2] + 2 * pd, *x5.shape[3:])
    out = torch.zeros(shape, dtype=torch.float32, device=x5.device)
    out[:, :, pd:pd + x5.shape[2]] = x5
    return out


def _conv3d(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    (sd, *s2), (pd, *p2), (dd, *d2) = stride, padding, dilation
    n, kdepth = input.shape[0], weight.shape[2]
    if not transposed:
        _check_bias_padding(weight, bias, padding, weight.shape[0])
        xp = _depth_padded(input, pd)
        od = (xp.shape[2] - dd * (kdepth - 1) - 1) // sd + 1
        acc = None
        for kd in range(kdepth):
            part = convolution(_taps(xp, kd, dd, sd, od), weight[:, :, kd], bias if kd == 0 else None, s2, p2, d2,
                               False, [0, 0], groups)
            acc = part if acc is None else acc.add_(part)
        return _from_batch(acc, n)
    depth = (input.shape[2] - 1) * sd - 2 * pd + dd * (kdepth - 1) + output_padding[0] + 1
    x_batch = _taps(input, 0, 1, 1, input.shape[2])
    acc = None
    for kd in range(kdepth):
        part = convolution(x_batch, weight[:, :, kd], None, s2, p2, d2, True, output_padding[1:], groups)
        if acc is None:
            acc = torch.zeros((n, part.shape[1], depth + 2 * pd, *part.shape[2:]), dtype=torch.float32,
                              device=input.device)
        _add_taps(acc, kd, dd, sd, part)
    out = acc[:, :, pd:pd + depth]
    out = out + bias.view(1, -1, 1, 1, 1) if bias is not None else contig(out)
    return out


def _conv3d_backward(grad_output, input, weight, stride, padding, dilation, transposed, output_padding, groups,
                     output_mask):
    (sd, *s2), (pd, *p2), (dd, *d2) = stride, padding, dilation
    n, kdepth = input.shape[0], weight.shape[2]
    mask = [output_mask[0], output_mask[1], False]
    # the padded-depth tensor (input of a conv, output of a transposed conv) and the other one as a batch
    padded = _depth_padded(grad_output if transposed else input, pd)
    plain = input if transposed else grad_output
    plain_batch = _taps(plain, 0, 1, 1, plain.shape[2])
    gi = gw = None
    if output_mask[0] and not transposed:
        gi = torch.zeros(padded.shape, dtype=torch.float32, device=input.device)
    if output_mask[1]:
        gw = torch.empty(weight.shape, dtype=torch.float32, device=input.device)
    for kd in range(kdepth):
        taps = _taps(padded, kd, dd, sd, plain.shape[2])
        go, x = (taps, plain_batch) if transposed else (plain_batch, taps)
        g_in, g_w, _ = convolution_backward(go, x, contig(weight[:, :, kd]), None, s2, p2, d2, transposed,
                                            output_padding[1:], groups, mask)
        if g_in is not None and transposed:
            gi = g_in if gi is None else gi.add_(g_in)
        elif g_in is not None:
            _add_taps(gi, kd, dd, sd, g_in)
        if g_w is not None:
            gw[:, :, kd] = g_w
    if gi is not None:
        gi = _from_batch(gi, n) if transposed else contig(gi[:, :, pd:pd + input.shape[2]])
    gb = aten.sum.dim_IntList(grad_output, [0, 2, 3, 4]) if output_mask[2] else None
    return gi, gw, gb
