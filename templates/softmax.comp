#version 450
// softmax / log_softmax along one dim of a contiguous tensor viewed as [outer, n, inner],
// forward (BWD == 0) and backward (BWD == 1). A row is one (outer, inner) position: its n
// elements are `inner` apart. T threads reduce one row (T, WG powers of two, p.tlog =
// log2(T), WG / T rows per workgroup):
//   COLS == 0: the T threads of a row are adjacent (inner == 1, the last-dim fast path);
//              cross-thread steps may use subgroup arithmetic (SUBGROUP; where T covers whole
//              subgroups of this dispatch, else shared memory);
//   COLS == 1: adjacent threads own adjacent rows (inner > 1: coalesced), shared memory.
// Forward: one pass for the row max and the rescaled sum of exp (online), one to write.
//   softmax:      y = exp(x - max) / sum
//   log_softmax:  y = x - max - log(sum)
// Backward (y = the forward output, g = grad of y):
//   softmax:      dx = y * (g - sum(g * y))
//   log_softmax:  dx = g - exp(y) * sum(g)
// REGS (a define, set where n <= T * ITEMS): the row stays in registers between the passes, so
// x (backward: y and g) is read once and the forward takes one exp an element.
// Tunables (specialization constants): local size (id 0, = WG), ITEMS (id 3: unrolled loads);
// COLS (id 4) and LOG (id 5: log_softmax) are specialization constants too.
// Defines: BWD, SUBGROUP (tunable; a define: it enables the subgroup extensions).
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference_uvec2 : require
#extension GL_EXT_control_flow_attributes : enable
#ifndef SUBGROUP
#define SUBGROUP 0
#endif
#if SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_GOOGLE_include_directive : require
#include "common/subgroup.glsl"
#endif

layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;

layout(constant_id = 3) const uint ITEMS = 1u;
layout(constant_id = 4) const bool COLS = false;
layout(constant_id = 5) const bool LOG = false;
#ifndef BWD
#define BWD 0
#endif
#ifndef REGS
#define REGS 0
#endif

#define NEG_INF (-uintBitsToFloat(0x7F800000u))
#define POS_INF uintBitsToFloat(0x7F800000u)

layout(buffer_reference, std430, buffer_reference_align = 4) buffer FBuf { float v[]; };

layout(push_constant) uniform Params {
    uvec2 x;    // forward input
    uvec2 y;    // forward output; backward: the forward output
    uvec2 g;    // backward: grad of y
    uvec2 dx;   // backward: grad of x
    uint rows;  // outer * inner
    uint n;     // length of the softmax dim
    uint inner; // elements after it (its stride)
    uint tlog;  // log2(threads per row)
} p;

const uint WG = gl_WorkGroupSize.x;
#define T (1u << p.tlog)
#define G (WG >> p.tlog)  // rows per workgroup
shared float sv[gl_WorkGroupSize.x];

#define SLOT0 (COLS ? ol : ol * T)
#define OTHER(s) (COLS ? l + (s) * G : l + (s))

// reduce v over the T threads of a row; every thread of the row gets the result.
// Called in uniform control flow by the whole workgroup.
#define SEG_REDUCE(NAME, COMB, SGOP, IDENT)                                          \
float NAME(float v, uint l, uint t, uint ol) {                                        \
    if (T == 1) return v;                                                             \
    SG_PART(SGOP, IDENT)                                                              \
    barrier();                                                                        \
    sv[l] = v;                                                                        \
    barrier();                                                                        \
    for (uint s = T / 2; s > 0; s >>= 1) {                                            \
        if (t < s) { v = COMB(v, sv[OTHER(s)]); sv[l] = v; }                           \
        barrier();                                                                    \
    }                                                                                 \
    return sv[SLOT0];                                                                 \
}

#if SUBGROUP
// subgroup op, then rounds of (one value per subgroup -> shared -> subgroup op); broadcast
#define SG_PART(SGOP, IDENT)                                                          \
    const uint SG = TVK_SUBGROUP_WIDTH;                                             \
    if (!COLS && T >= SG) {  /* a subgroup wider than T would mix rows */             \
        v = SGOP(v);                                                                  \
        uint cnt = T / SG;                                                            \
        if (cnt == 1) return v;                                                       \
        while (cnt > 1) {                                                             \
            barrier();                                                                \
            if (gl_SubgroupInvocationID == 0 && t / SG < cnt) sv[ol * T + t / SG] = v; \
            barrier();                                                                \
            v = t < cnt ? sv[ol * T + t] : IDENT;                                     \
            v = SGOP(v);                                                              \
            cnt = (cnt + SG - 1) / SG;                                                \
        }                                                                             \
        barrier();                                                                    \
        if (t == 0) sv[ol * T] = v;                                                   \
        barrier();                                                                    \
        return sv[ol * T];                                                            \
    }
#else
#define SG_PART(SGOP, IDENT)
#endif

float add_(float a, float b) { return a + b; }
float max_(float a, float b) { return max(a, b); }
SEG_REDUCE(seg_sum, add_, subgroupAdd, 0.0)
SEG_REDUCE(seg_max, max_, subgroupMax, NEG_INF)

void main() {
    const uint l = gl_LocalInvocationID.x;
    const uint ol = COLS ? l % G : l / T, t = COLS ? l / G : l % T;
    const uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    const uint r = group * G + ol;
    const bool live = r < p.rows;
    const uint n = p.n, st = p.inner;
    const uint base = (r / st) * n * st + (r % st);

#if REGS && BWD == 0
    // ------------------------------------------------ forward, the row in registers
    FBuf X = FBuf(p.x), Y = FBuf(p.y);
    float xv[ITEMS];
    float m = NEG_INF;
    [[unroll]] for (uint i = 0; i < ITEMS; ++i) {
        const uint kk = t + i * T;
        xv[i] = NEG_INF;
        if (live && kk < n) {
            float v = X.v[base + kk * st];
            if ((floatBitsToUint(v) & 0x7FFFFFFFu) > 0x7F800000u) v = POS_INF;  // NaN: see the loop form below
            xv[i] = v;
            m = max(m, v);
        }
    }
    const float M = seg_max(m, l, t, ol);
    const bool nan_row = M == POS_INF || M == NEG_INF;
    float s = 0.0;
    [[unroll]] for (uint i = 0; i < ITEMS; ++i) {
        const float e = xv[i] == NEG_INF || nan_row ? 0.0 : exp(xv[i] - M);
        s += e;
        if (!LOG) xv[i] = e;  // log_softmax keeps x
    }
    const float S = seg_sum(s, l, t, ol);
    if (live) {
        const float shift = LOG ? M + log(S) : 0.0;
        [[unroll]] for (uint i = 0; i < ITEMS; ++i) {
            const uint kk = t + i * T;
            if (kk < n) {
                const uint off = base + kk * st;
                if (nan_row) Y.v[off] = uintBitsToFloat(0x7FC00000u);
                else if (LOG) Y.v[off] = xv[i] - shift;
                else Y.v[off] = xv[i] / S;
            }
        }
    }
#elif REGS
    // ------------------------------------------------ backward, the row in registers
    FBuf Yb = FBuf(p.y), Gb = FBuf(p.g), D = FBuf(p.dx);
    float yv[ITEMS], gv[ITEMS];
    float acc = 0.0;
    [[unroll]] for (uint i = 0; i < ITEMS; ++i) {
        const uint kk = t + i * T;
        yv[i] = 0.0;
        gv[i] = 0.0;
        if (live && kk < n) {
            const uint off = base + kk * st;
            yv[i] = Yb.v[off];
            gv[i] = Gb.v[off];
            acc += LOG ? gv[i] : gv[i] * yv[i];
        }
    }
    const float S = seg_sum(acc, l, t, ol);
    if (live) {
        [[unroll]] for (uint i = 0; i < ITEMS; ++i) {
            const uint kk = t + i * T;
            if (kk < n) D.v[base + kk * st] = LOG ? gv[i] - exp(yv[i]) * S : yv[i] * (gv[i] - S);
        }
    }
#elif BWD == 0
    FBuf X = FBuf(p.x), Y = FBuf(p.y);
    float m = NEG_INF, s = 0.0;
    if (live) {
        // item 0 is in range by the loop's own test: said here, as the driver unrolls ITEMS only
        // after specialization and would test it again (glslc, unrolling a define, saw it itself)
        for (uint k = t; k < n; k += T * ITEMS) {
            [[unroll]] for (uint i = 0; i < ITEMS; ++i) {
                uint kk = k + i * T;
                if (i == 0u || kk < n) {
                    float v = X.v[base + kk * st];
                    if ((floatBitsToUint(v) & 0x7FFFFFFFu) > 0x7F800000u) v = POS_INF;  // NaN: see below
                    if (v > m) {
                        s = s * exp(m - v) + 1.0;
                        m = v;
                    } else if (v != NEG_INF) {
                        s += exp(v - m);  // NaN stays NaN
                    }
                }
            }
        }
    }
    const float M = seg_max(m, l, t, ol);
    const float S = seg_sum(m == NEG_INF ? 0.0 : s * exp(m - M), l, t, ol);
    // a row holding NaN or +inf, or only -inf, is NaN throughout, as torch's: said outright, as
    // drivers that assume no NaN (NVIDIA's) let max() and exp() drop it (NaN was read as +inf above)
    const bool nan_row = M == POS_INF || M == NEG_INF;
    if (live) {
        const float shift = LOG ? M + log(S) : 0.0;
        for (uint k = t; k < n; k += T * ITEMS) {
            [[unroll]] for (uint i = 0; i < ITEMS; ++i) {
                uint kk = k + i * T;
                if (i == 0u || kk < n) {
                    uint off = base + kk * st;
                    if (nan_row) Y.v[off] = uintBitsToFloat(0x7FC00000u);
                    else if (LOG) Y.v[off] = X.v[off] - shift;
                    else Y.v[off] = exp(X.v[off] - M) / S;
                }
            }
        }
    }
#else
    FBuf Yb = FBuf(p.y), Gb = FBuf(p.g), D = FBuf(p.dx);
    float acc = 0.0;
    if (live) {
        for (uint k = t; k < n; k += T * ITEMS) {
            [[unroll]] for (uint i = 0; i < ITEMS; ++i) {
                uint kk = k + i * T;
                if (i == 0u || kk < n) {
                    uint off = base + kk * st;
                    if (LOG) acc += Gb.v[off];
                    else acc += Gb.v[off] * Yb.v[off];
                }
            }
        }
    }
    const float S = seg_sum(acc, l, t, ol);
    if (live) {
        for (uint k = t; k < n; k += T * ITEMS) {
            [[unroll]] for (uint i = 0; i < ITEMS; ++i) {
                uint kk = k + i * T;
                if (i == 0u || kk < n) {
                    uint off = base + kk * st;
                    if (LOG) D.v[off] = Gb.v[off] - exp(Yb.v[off]) * S;
                    else D.v[off] = Yb.v[off] * (Gb.v[off] - S);
                }
            }
        }
    }
#endif
}
