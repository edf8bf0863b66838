#version 450
// 2-D pooling over NCHW planes (P = N*C planes of H x W -> OH x OW), one invocation
// per output element (forward) or per input element (backward: a gather over the windows
// that cover it, so no two invocations write the same element and no atomics are needed,
// also for overlapping windows). OP selects:
//   1 max forward   (+ int64 indices ih*W + iw within the plane, torch's convention)
//   2 max backward  grad_in[i] = sum of grad_out[o] over windows o whose index is i
//   3 avg forward   (count_include_pad / divisor_override as torch, ceil_mode windows clipped)
//   4 avg backward
//   5 adaptive avg forward  (window [floor(o*In/Out), ceil((o+1)*In/Out)))
//   6 adaptive avg backward
// Indices are int64 written as (low, high) uint pairs, so no int64 shader support is needed.
// Tunables (specialization constants): local size (id 0), ITEMS (id 3: elements per invocation).
// Defines: OP; DTYPE (common/storage.glsl; absent: float32): the storage of the input and output
// planes (float32 arithmetic, each output rounded once).
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference_uvec2 : require
#extension GL_EXT_control_flow_attributes : enable
#extension GL_GOOGLE_include_directive : require
#include "common/storage.glsl"

layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;

#ifndef OP
#define OP 1
#endif
layout(constant_id = 3) const uint ITEMS = 1u;

layout(buffer_reference, std430, buffer_reference_align = TVK_ST_ALIGN) readonly buffer RBuf { TVK_ST v[]; };
layout(buffer_reference, std430, buffer_reference_align = TVK_ST_ALIGN) writeonly buffer WBuf { TVK_ST v[]; };
layout(buffer_reference, std430, buffer_reference_align = 8) buffer IBuf { uvec2 v[]; };

layout(push_constant) uniform Params {
    uvec2 src;   // forward: x; backward: grad_out
    uvec2 dst;   // forward: out; backward: grad_in
    uvec2 idx;   // max pooling indices (forward: written if flags & 1; backward: read)
    uint planes, h, w, oh;
    uint ow, kh, kw, sh;
    uint sw, ph, pw, dh;
    uint dw, flags;  // bit 0 write indices, bit 1 count_include_pad, bit 2 divisor_override
    float divisor;
} p;

// avg pooling's divisor for output (y, x), torch's formula
float avg_divisor(uint y, uint x) {
    if ((p.flags & 4u) != 0u) {
        return p.divisor;
    }
    int hs = int(y * p.sh) - int(p.ph), ws = int(x * p.sw) - int(p.pw);
    int he = min(hs + int(p.kh), int(p.h + p.ph)), we = min(ws + int(p.kw), int(p.w + p.pw));
    if ((p.flags & 2u) != 0u) {
        return float((he - hs) * (we - ws));
    }
    hs = max(hs, 0);
    ws = max(ws, 0);
    he = min(he, int(p.h));
    we = min(we, int(p.w));
    return float((he - hs) * (we - ws));
}

uint astart(uint o, uint insz, uint outsz) { return (o * insz) / outsz; }
uint aend(uint o, uint insz, uint outsz) { return ((o + 1) * insz + outsz - 1) / outsz; }

void main() {
    const uint wg = gl_WorkGroupSize.x;
    const uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    const uint ohw = p.oh * p.ow, hw = p.h * p.w;
#if OP == 1 || OP == 3 || OP == 5
    const uint total = p.planes * ohw;
#else
    const uint total = p.planes * hw;
#endif
    RBuf S = RBuf(p.src);
    WBuf D = WBuf(p.dst);
    [[unroll]] for (uint it = 0; it < ITEMS; ++it) {
        const uint e = (group * ITEMS + it) * wg + gl_LocalInvocationID.x;
        if (e >= total) {
            break;
        }
#if OP == 1 || OP == 3 || OP == 5
        const uint pl = e / ohw, r = e - pl * ohw;
        const uint y = r / p.ow, x = r - y * p.ow;
        const uint base = pl * hw;
#if OP == 1
        const int hs = int(y * p.sh) - int(p.ph), ws = int(x * p.sw) - int(p.pw);
        float best = uintBitsToFloat(0xff800000u);  // -inf
        int bi = -1;
        for (uint i = 0; i < p.kh; ++i) {
            int iy = hs + int(i * p.dh);
            if (uint(iy) >= p.h) {
                continue;
            }
            for (uint j = 0; j < p.kw; ++j) {
                int ix = ws + int(j * p.dw);
                if (uint(ix) >= p.w) {
                    continue;
                }
                int ii = iy * int(p.w) + ix;
                float v = TVK_LOAD(S.v[base + uint(ii)]);
                if (bi < 0) {
                    bi = ii;  // torch starts at the window's first in-image tap
                }
                if (v > best || isnan(v)) {  // torch's rule: NaN propagates (the last NaN's index)
                    best = v;
                    bi = ii;
                }
            }
        }
        D.v[e] = TVK_STORE(best);
        if ((p.flags & 1u) != 0u) {
            IBuf I = IBuf(p.idx);
            I.v[e] = uvec2(uint(max(bi, 0)), 0u);
        }
#elif OP == 3
        const int hs = int(y * p.sh) - int(p.ph), ws = int(x * p.sw) - int(p.pw);
        const int h0 = max(hs, 0), w0 = max(ws, 0);
        const int h1 = min(hs + int(p.kh), int(p.h)), w1 = min(ws + int(p.kw), int(p.w));
        float s = 0.0;
        for (int iy = h0; iy < h1; ++iy) {
            for (int ix = w0; ix < w1; ++ix) {
                s += TVK_LOAD(S.v[base + uint(iy * int(p.w) + ix)]);
            }
        }
        D.v[e] = TVK_STORE(s / avg_divisor(y, x));
#else
        const uint h0 = astart(y, p.h, p.oh), h1 = aend(y, p.h, p.oh);
        const uint w0 = astart(x, p.w, p.ow), w1 = aend(x, p.w, p.ow);
        float s = 0.0;
        for (uint iy = h0; iy < h1; ++iy) {
            for (uint ix = w0; ix < w1; ++ix) {
                s += TVK_LOAD(S.v[base + iy * p.w + ix]);
            }
        }
        D.v[e] = TVK_STORE(s / float((h1 - h0) * (w1 - w0)));
#endif
#else  // backward: e is an input element
        const uint pl = e / hw, r = e - pl * hw;
        const uint iy = r / p.w, ix = r - iy * p.w;
        const uint obase = pl * ohw;
        float s = 0.0;
#if OP == 2 || OP == 4
        // outputs y whose window covers row iy: y*sh - ph + i*dh == iy for some i < kh
        const int ty = int(iy + p.ph), tx = int(ix + p.pw);
        const int ey = int((p.kh - 1) * p.dh), ex = int((p.kw - 1) * p.dw);
        const uint y0 = uint(max(ty - ey + int(p.sh) - 1, 0)) / p.sh, y1 = min(uint(ty) / p.sh + 1, p.oh);
        const uint x0 = uint(max(tx - ex + int(p.sw) - 1, 0)) / p.sw, x1 = min(uint(tx) / p.sw + 1, p.ow);
#if OP == 2
        IBuf I = IBuf(p.idx);
        for (uint y = y0; y < y1; ++y) {
            for (uint x = x0; x < x1; ++x) {
                uint o = obase + y * p.ow + x;
                if (I.v[o].x == r) {
                    s += TVK_LOAD(S.v[o]);
                }
            }
        }
#else
        for (uint y = y0; y < y1; ++y) {
            uint oy = uint(ty) - y * p.sh;  // offset of iy inside window y
            if (oy % p.dh != 0u) {
                continue;
            }
            for (uint x = x0; x < x1; ++x) {
                uint ox = uint(tx) - x * p.sw;
                if (ox % p.dw != 0u) {
                    continue;
                }
                s += TVK_LOAD(S.v[obase + y * p.ow + x]) / avg_divisor(y, x);
            }
        }
#endif
#else  // OP == 6: outputs y with start(y) <= iy < end(y)
        const uint y0 = (iy * p.oh) / p.h, y1 = min(((iy + 1) * p.oh + p.h - 1) / p.h, p.oh);
        const uint x0 = (ix * p.ow) / p.w, x1 = min(((ix + 1) * p.ow + p.w - 1) / p.w, p.ow);
        for (uint y = y0; y < y1; ++y) {
            uint h0 = astart(y, p.h, p.oh), h1 = aend(y, p.h, p.oh);
            if (iy < h0 || iy >= h1) {
                continue;
            }
            for (uint x = x0; x < x1; ++x) {
                uint w0 = astart(x, p.w, p.ow), w1 = aend(x, p.w, p.ow);
                if (ix < w0 || ix >= w1) {
                    continue;
                }
                s += TVK_LOAD(S.v[obase + y * p.ow + x]) / float((h1 - h0) * (w1 - w0));
            }
        }
#endif
        D.v[e] = TVK_STORE(s);
#endif
    }
}
