#version 450
// Depthwise 2-D convolution (NCHW; float32, float16 or bfloat16 storage, float32 arithmetic): one input channel per group, OC = C * mult
// (output channel o reads input channel o / mult), any kernel size, stride, padding, dilation.
// A direct kernel: the implicit GEMM of conv2d.comp has a GEMM of width 1 here and wastes its tiles.
//   DIR 0  forward         one invocation per output element, ITEMS of them WG apart (coalesced along W);
//                          bias (flags & 1) and the ACT epilogue as in conv2d.comp
//   DIR 1  grad wrt input  one invocation per input element: the sum over its channel's mult outputs
//                          and the taps that reach it (stride holes skipped by a divisibility test)
//   DIR 2  grad wrt weight one workgroup per (output channel, TAPS taps, slice of the N*OH*OW positions):
//                          each invocation sums TAPS taps in registers over its positions, then a
//                          shared-memory tree adds the invocations (fixed order: deterministic). With
//                          several slices it writes partials [slice][OC][KH*KW] that conv2d_reduce.comp sums.
// Tunables (specialization constants): WG the local size (constant 0, a power of two for DIR 2's
// tree), ITEMS (DIR 0/1), TAPS (DIR 2, registers per invocation). Defines: DIR; ACT (DIR 0 only);
// DTYPE (common/storage.glsl; absent: float32): the tensors' storage; C_F32 1 (DIR 2): C is float32
// whatever DTYPE (the partials of several slices, which conv2d_reduce.comp sums and rounds).
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference_uvec2 : require
#extension GL_EXT_control_flow_attributes : enable
#extension GL_GOOGLE_include_directive : require
#include "common/storage.glsl"
#include "common/activation.glsl"

layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;

#ifndef DIR
#define DIR 0
#endif
layout(constant_id = 3) const uint WG = 256u;
layout(constant_id = 4) const uint ITEMS = 4u;
layout(constant_id = 5) const uint TAPS = 9u;
#define FAR 0x10000000 // a tap offset that lands outside every image: marks a missing tap

#ifndef C_F32
#define C_F32 0
#endif
layout(buffer_reference, std430, buffer_reference_align = TVK_ST_ALIGN) readonly buffer RBuf { TVK_ST v[]; };
#if C_F32 == 1 || DTYPE == TVK_DT_FLOAT32
layout(buffer_reference, std430, buffer_reference_align = 4) writeonly buffer WBuf { float v[]; };
#define STORE_C(f) (f)
#else
layout(buffer_reference, std430, buffer_reference_align = TVK_ST_ALIGN) writeonly buffer WBuf { TVK_ST v[]; };
#define STORE_C(f) TVK_STORE(f)
#endif

layout(push_constant) uniform Params {
    uvec2 a;     // DIR 0: x       DIR 1: grad_out  DIR 2: grad_out
    uvec2 b;     // DIR 0: weight  DIR 1: weight    DIR 2: x
    uvec2 c;     // DIR 0: out     DIR 1: grad_in   DIR 2: grad_weight (or partials)
    uvec2 bias;  // DIR 0, read when flags & 1
    uint n, ch, h, w;
    uint oc, oh, ow, kh;
    uint kw, sh, sw, ph;
    uint pw, dh, dw, flags;  // flags bit 0: add bias
    uint chunk, splits;      // DIR 2: positions per slice, slice count
} p;

#if DIR == 2
shared float part[TAPS][WG];
#endif

void main() {
    const uint tid = gl_LocalInvocationID.x;
    const uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    const uint mult = p.oc / p.ch;
    const uint hw = p.h * p.w, ohw = p.oh * p.ow, khw = p.kh * p.kw;
    RBuf A = RBuf(p.a), B = RBuf(p.b);
    WBuf C = WBuf(p.c);
#if DIR == 0
    RBuf Bias = RBuf(p.bias);
    const uint total = p.n * p.oc * ohw;
    [[unroll]] for (uint i = 0; i < ITEMS; ++i) {
        uint idx = (group * ITEMS + i) * WG + tid;
        if (idx < total) {
            uint x = idx % p.ow, t = idx / p.ow;
            uint y = t % p.oh;
            t /= p.oh;
            uint o = t % p.oc, nn = t / p.oc;
            uint plane = (nn * p.ch + o / mult) * hw, wbase = o * khw;
            int y0 = int(y * p.sh) - int(p.ph), x0 = int(x * p.sw) - int(p.pw);
            float acc = 0.0;
            for (uint ky = 0; ky < p.kh; ++ky) {
                int iy = y0 + int(ky * p.dh);
                if (uint(iy) < p.h) {
                    uint row = plane + uint(iy) * p.w;
                    for (uint kx = 0; kx < p.kw; ++kx) {
                        int ix = x0 + int(kx * p.dw);
                        if (uint(ix) < p.w) {
                            acc = fma(TVK_LOAD(A.v[row + uint(ix)]), TVK_LOAD(B.v[wbase + ky * p.kw + kx]), acc);
                        }
                    }
                }
            }
            if ((p.flags & 1u) != 0u) {
                acc += TVK_LOAD(Bias.v[o]);
            }
            C.v[idx] = STORE_C(activation(acc));
        }
    }
#elif DIR == 1
    const uint total = p.n * p.ch * hw;
    [[unroll]] for (uint i = 0; i < ITEMS; ++i) {
        uint idx = (group * ITEMS + i) * WG + tid;
        if (idx < total) {
            uint x = idx % p.w, t = idx / p.w;
            uint y = t % p.h;
            t /= p.h;
            uint c = t % p.ch, nn = t / p.ch;
            int ty0 = int(y + p.ph), tx0 = int(x + p.pw);  // output pixel * stride + tap offset
            float acc = 0.0;
            for (uint m = 0; m < mult; ++m) {
                uint o = c * mult + m;
                uint plane = (nn * p.oc + o) * ohw, wbase = o * khw;
                for (uint ky = 0; ky < p.kh; ++ky) {
                    int ty = ty0 - int(ky * p.dh);
                    if (ty < 0) {
                        break;  // later taps reach further up
                    }
                    uint oy = uint(ty) / p.sh;
                    if (oy * p.sh != uint(ty) || oy >= p.oh) {
                        continue;
                    }
                    for (uint kx = 0; kx < p.kw; ++kx) {
                        int tx = tx0 - int(kx * p.dw);
                        if (tx < 0) {
                            break;
                        }
                        uint ox = uint(tx) / p.sw;
                        if (ox * p.sw == uint(tx) && ox < p.ow) {
                            acc = fma(TVK_LOAD(A.v[plane + oy * p.ow + ox]), TVK_LOAD(B.v[wbase + ky * p.kw + kx]), acc);
                        }
                    }
                }
            }
            C.v[idx] = STORE_C(acc);
        }
    }
#else
    const uint chunks = (khw + TAPS - 1) / TAPS;
    const uint units = p.oc * chunks;
    if (group >= units * p.splits) {
        return;  // the whole workgroup: grid_1d rounding
    }
    const uint unit = group % units, split = group / units;
    const uint o = unit / chunks, t0 = (unit - o * chunks) * TAPS;
    const uint c = o / mult;
    const uint positions = p.n * ohw;
    const uint p0 = split * p.chunk, p1 = min(positions, p0 + p.chunk);

    int dy[TAPS], dx[TAPS];
    float acc[TAPS];
    [[unroll]] for (uint j = 0; j < TAPS; ++j) {
        uint t = t0 + j;
        uint ky = t / p.kw, kx = t - ky * p.kw;
        dy[j] = t < khw ? int(ky * p.dh) : FAR;
        dx[j] = int(kx * p.dw);
        acc[j] = 0.0;
    }
    for (uint pos = p0 + tid; pos < p1; pos += WG) {
        uint nn = pos / ohw, r = pos - nn * ohw;
        uint y = r / p.ow, x = r - y * p.ow;
        float g = TVK_LOAD(A.v[(nn * p.oc + o) * ohw + r]);
        uint plane = (nn * p.ch + c) * hw;
        int y0 = int(y * p.sh) - int(p.ph), x0 = int(x * p.sw) - int(p.pw);
        [[unroll]] for (uint j = 0; j < TAPS; ++j) {
            int iy = y0 + dy[j], ix = x0 + dx[j];
            if (uint(iy) < p.h && uint(ix) < p.w) {
                acc[j] = fma(g, TVK_LOAD(B.v[plane + uint(iy) * p.w + uint(ix)]), acc[j]);
            }
        }
    }
    [[unroll]] for (uint j = 0; j < TAPS; ++j) {
        part[j][tid] = acc[j];
    }
    barrier();
    for (uint off = WG / 2; off > 0; off >>= 1) {
        if (tid < off) {
            [[unroll]] for (uint j = 0; j < TAPS; ++j) {
                part[j][tid] += part[j][tid + off];
            }
        }
        barrier();
    }
    if (tid < TAPS && t0 + tid < khw) {
        C.v[(split * p.oc + o) * khw + t0 + tid] = STORE_C(part[tid][0]);
    }
#endif
}
