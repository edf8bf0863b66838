#version 450
// General elementwise kernel: out = OP(a, b, c) with per-operand dtypes and a compute type.
//
// Two modes (host picks, see tvk_kernels/kernels/elementwise.py):
//   CONTIG=1  every tensor is dense and same-shape: element i of each tensor is at index i;
//             VEC elements per load (host checks every address is VEC*elemsize aligned),
//             ITEMS vector loads per thread, scalar tail done by group 0.
//   CONTIG=0  strided N-d: NDIM (1..6) collapsed dims; shape[1..NDIM-1] then per tensor slot
//             NDIM strides (elements), in push constants (META_BUF=0) or, when that does not
//             fit the 128-byte push block, in a small device buffer (META_BUF=1).
// Defines from the host:
//   NT              tensor inputs (0..3); tensor slot NT is the output
//   DT0 DT1 DT2 DTO storage dtype codes: 0 float32, 1 float16, 2 int64, 3 int32, 4 bool (uint8)
//   CT_KIND         compute type: 0 float, 1 int, 2 int64_t
//   NS              scalars in push constants, of the compute type, read as S(k)
//   IN_A IN_B IN_C  what the op sees as a, b, c: x0/x1/x2 (tensor slot values) or S(k)
//   OP_EXPR         a CT-valued expression in a, b, c, S(k)
//   USE_F16 USE_I64 USE_U8 enable the storage extensions
// Push block: uvec2 ptr[NT+1]; [uvec2 meta ptr]; CT s[NS]; uint n; [uint meta[NMETA]].
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference_uvec2 : require
#extension GL_EXT_control_flow_attributes : enable
#if USE_F16
#extension GL_EXT_shader_16bit_storage : require
#endif
#if USE_I64
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#endif
#if USE_U8
#extension GL_EXT_shader_8bit_storage : require
#endif

layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;

#ifndef CONTIG
#define CONTIG 0
#endif
#ifndef VEC
#define VEC 1
#endif
#ifndef ITEMS
#define ITEMS 1
#endif
#ifndef NDIM
#define NDIM 1
#endif
#ifndef META_BUF
#define META_BUF 0
#endif
#ifndef NS
#define NS 0
#endif
#ifndef NT
#define NT 1
#endif
#ifndef DTO
#define DTO 0
#endif
#ifndef CT_KIND
#define CT_KIND 0
#endif
#ifndef IN_A
#define IN_A CT(0)
#endif
#ifndef IN_B
#define IN_B CT(0)
#endif
#ifndef IN_C
#define IN_C CT(0)
#endif
#ifndef OP_EXPR
#define OP_EXPR (a)
#endif
#if CONTIG == 0
#undef VEC
#define VEC 1
#endif

#if CT_KIND == 0
#define CT float
#elif CT_KIND == 1
#define CT int
#else
#define CT int64_t
#endif

// ---------------------------------------------------------------- dtype tables
#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
// storage scalar type, storage vector prefix, wide (32/64-bit) scalar, wide vector prefix, bytes
#define ST_0 float
#define ST_1 float16_t
#define ST_2 int64_t
#define ST_3 int
#define ST_4 uint8_t
#define SV_0 vec
#define SV_1 f16vec
#define SV_2 i64vec
#define SV_3 ivec
#define SV_4 u8vec
#define W_0 float
#define W_1 float
#define W_2 int64_t
#define W_3 int
#define W_4 uint
#define WV_0 vec
#define WV_1 vec
#define WV_2 i64vec
#define WV_3 ivec
#define WV_4 uvec
#define ES_0 4
#define ES_1 2
#define ES_2 8
#define ES_3 4
#define ES_4 1
// compute value -> wide value of the storage type (bool: nonzero -> 1)
#define TOW_0(r) float(r)
#define TOW_1(r) float(r)
#define TOW_2(r) int64_t(r)
#define TOW_3(r) int(r)
#define TOW_4(r) ((r) != CT(0) ? 1u : 0u)

#define STYPE(dt) CAT(ST_, dt)
#define WTYPE(dt) CAT(W_, dt)
#define ESIZE(dt) CAT(ES_, dt)
#define TOW(dt, r) CAT(TOW_, dt)(r)
#if VEC == 1
#define VSTYPE(dt) CAT(ST_, dt)
#define VWTYPE(dt) CAT(W_, dt)
#define VCOMP(v, j) v
#else
#define VSTYPE(dt) CAT(CAT(SV_, dt), VEC)
#define VWTYPE(dt) CAT(CAT(WV_, dt), VEC)
#define VCOMP(v, j) v[j]
#endif

// --------------------------------------------------------------- push block
#define NMETA ((NDIM - 1) + (NT + 1) * NDIM)
layout(push_constant) uniform Params {
    uvec2 ptr[NT + 1];
#if CONTIG == 0 && META_BUF
    uvec2 meta;
#endif
#if NS > 0
    CT s[NS];
#endif
    uint n;
#if CONTIG == 0 && !META_BUF
    uint meta[NMETA];
#endif
} p;
#define S(k) p.s[k]

// --------------------------------------------------------------- buffers
#if NT > 0
layout(buffer_reference, std430, buffer_reference_align = ESIZE(DT0)) readonly buffer SBuf0 { STYPE(DT0) v[]; };
#endif
#if NT > 1
layout(buffer_reference, std430, buffer_reference_align = ESIZE(DT1)) readonly buffer SBuf1 { STYPE(DT1) v[]; };
#endif
#if NT > 2
layout(buffer_reference, std430, buffer_reference_align = ESIZE(DT2)) readonly buffer SBuf2 { STYPE(DT2) v[]; };
#endif
layout(buffer_reference, std430, buffer_reference_align = ESIZE(DTO)) writeonly buffer SBufO { STYPE(DTO) v[]; };
#if VEC > 1
#if NT > 0
layout(buffer_reference, std430, buffer_reference_align = ESIZE(DT0) * VEC) readonly buffer VBuf0 { VSTYPE(DT0) v[]; };
#endif
#if NT > 1
layout(buffer_reference, std430, buffer_reference_align = ESIZE(DT1) * VEC) readonly buffer VBuf1 { VSTYPE(DT1) v[]; };
#endif
#if NT > 2
layout(buffer_reference, std430, buffer_reference_align = ESIZE(DT2) * VEC) readonly buffer VBuf2 { VSTYPE(DT2) v[]; };
#endif
layout(buffer_reference, std430, buffer_reference_align = ESIZE(DTO) * VEC) writeonly buffer VBufO { VSTYPE(DTO) v[]; };
#endif
#if CONTIG == 0 && META_BUF
layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer MetaBuf { uint v[]; };
#endif

// --------------------------------------------------------------- op helpers
#define TVK_INF uintBitsToFloat(0x7f800000u)
#define TVK_NAN uintBitsToFloat(0x7fc00000u)
#define B2CT(e) ((e) ? CT(1) : CT(0))

// erfc(z) for z >= 0: Chebyshev-fitted form, fractional error < 1.2e-7 for all z >= 0.
float tvk_erfc_pos(float z) {
    float t = 1.0 / (1.0 + 0.5 * z);
    float r = -1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (-0.18628806
            + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277))))))));
    return t * exp(r - z * z);
}
// standard normal CDF, accurate in both tails
float tvk_ncdf(float x) {
    float h = 0.5 * tvk_erfc_pos(abs(x) * 0.70710678118654752);
    return x >= 0.0 ? 1.0 - h : h;
}
float tvk_sigmoid(float x) { return 1.0 / (1.0 + exp(-x)); }
float tvk_tanh(float x) { return abs(x) > 15.0 ? sign(x) : tanh(x); }  // no inf/inf for large |x|
float tvk_gelu_tanh(float x) {
    float inner = 0.7978845608028654 * (x + 0.044715 * x * x * x);
    return 0.5 * x * (1.0 + tvk_tanh(inner));
}
float tvk_gelu_grad(float x) {  // d/dx x*Phi(x) = Phi(x) + x*phi(x)
    return tvk_ncdf(x) + x * 0.3989422804014327 * exp(-0.5 * x * x);
}
float tvk_gelu_tanh_grad(float x) {
    const float k = 0.7978845608028654, kappa = 0.044715;
    float t = tvk_tanh(k * (x + kappa * x * x * x));
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * kappa * x * x);
}
float tvk_silu_grad(float x) {
    float s = tvk_sigmoid(x);
    return s * (1.0 + x * (1.0 - s));
}
float tvk_pow(float x, float y) {  // torch semantics: negative bases with integral exponents
    if (y == 2.0) return x * x;
    if (y == 1.0) return x;
    if (y == 0.0) return 1.0;
    if (y == 0.5) return sqrt(x);
    if (x == 1.0) return 1.0;
    if (isnan(x) || isnan(y)) return TVK_NAN;
    float ax = abs(x);
    float r;
    if (ax == 0.0) r = y < 0.0 ? TVK_INF : 0.0;
    else if (isinf(ax)) r = y < 0.0 ? 0.0 : TVK_INF;
    else r = pow(ax, y);
    if (x < 0.0) {
        if (floor(y) != y) return TVK_NAN;
        if (mod(y, 2.0) == 1.0) r = -r;
    }
    return r;
}

#if CT_KIND == 0
CT tvk_max(CT a, CT b) { return (isnan(a) || isnan(b)) ? TVK_NAN : max(a, b); }
CT tvk_min(CT a, CT b) { return (isnan(a) || isnan(b)) ? TVK_NAN : min(a, b); }
#define TVK_POW tvk_pow
#else
CT tvk_max(CT a, CT b) { return max(a, b); }
CT tvk_min(CT a, CT b) { return min(a, b); }
CT tvk_ipow(CT x, CT y) {
    if (y < CT(0)) return x == CT(1) ? CT(1) : (x == CT(-1) ? ((y & CT(1)) == CT(0) ? CT(1) : CT(-1)) : CT(0));
    CT r = CT(1);
    [[dont_unroll]] while (y > CT(0)) {
        if ((y & CT(1)) != CT(0)) r *= x;
        x *= x;
        y >>= 1;
    }
    return r;
}
#define TVK_POW tvk_ipow
#endif

CT apply(CT x0, CT x1, CT x2) {
    CT a = IN_A;
    CT b = IN_B;
    CT c = IN_C;
    return CT(OP_EXPR);
}

// --------------------------------------------------------------- element kernels
void element(uint o[NT + 1]) {
    CT x0 = CT(0), x1 = CT(0), x2 = CT(0);
#if NT > 0
    x0 = CT(WTYPE(DT0)(SBuf0(p.ptr[0]).v[o[0]]));
#endif
#if NT > 1
    x1 = CT(WTYPE(DT1)(SBuf1(p.ptr[1]).v[o[1]]));
#endif
#if NT > 2
    x2 = CT(WTYPE(DT2)(SBuf2(p.ptr[2]).v[o[2]]));
#endif
    CT r = apply(x0, x1, x2);
    SBufO(p.ptr[NT]).v[o[NT]] = STYPE(DTO)(TOW(DTO, r));
}

#if VEC > 1
void velement(uint idx) {
#if NT > 0
    VWTYPE(DT0) v0 = VWTYPE(DT0)(VBuf0(p.ptr[0]).v[idx]);
#endif
#if NT > 1
    VWTYPE(DT1) v1 = VWTYPE(DT1)(VBuf1(p.ptr[1]).v[idx]);
#endif
#if NT > 2
    VWTYPE(DT2) v2 = VWTYPE(DT2)(VBuf2(p.ptr[2]).v[idx]);
#endif
    VWTYPE(DTO) r;
    [[unroll]] for (uint j = 0; j < VEC; ++j) {
        CT x0 = CT(0), x1 = CT(0), x2 = CT(0);
#if NT > 0
        x0 = CT(v0[j]);
#endif
#if NT > 1
        x1 = CT(v1[j]);
#endif
#if NT > 2
        x2 = CT(v2[j]);
#endif
        r[j] = TOW(DTO, apply(x0, x1, x2));
    }
    VBufO(p.ptr[NT]).v[idx] = VSTYPE(DTO)(r);
}
#endif

void main() {
    const uint wg = gl_WorkGroupSize.x;
    const uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    const uint base = group * wg * ITEMS + gl_LocalInvocationID.x;
#if CONTIG
    const uint nv = p.n / VEC;
    [[unroll]] for (uint it = 0; it < ITEMS; ++it) {
        uint idx = base + it * wg;
        if (idx < nv) {
#if VEC > 1
            velement(idx);
#else
            uint o[NT + 1];
            [[unroll]] for (uint k = 0; k <= NT; ++k) o[k] = idx;
            element(o);
#endif
        }
    }
#if VEC > 1
    if (group == 0 && gl_LocalInvocationID.x < p.n - nv * VEC) {  // the ragged tail, scalar
        uint o[NT + 1];
        [[unroll]] for (uint k = 0; k <= NT; ++k) o[k] = nv * VEC + gl_LocalInvocationID.x;
        element(o);
    }
#endif
#else  // strided
#if META_BUF
    MetaBuf mb = MetaBuf(p.meta);
#define META(i) mb.v[i]
#else
#define META(i) p.meta[i]
#endif
    [[unroll]] for (uint it = 0; it < ITEMS; ++it) {
        uint idx = base + it * wg;
        if (idx >= p.n) return;
        uint o[NT + 1];
        [[unroll]] for (uint k = 0; k <= NT; ++k) o[k] = 0u;
        uint rem = idx;
        [[unroll]] for (int d = NDIM - 1; d > 0; --d) {
            uint sz = META(d - 1);
            uint q = rem / sz;
            uint c = rem - q * sz;
            rem = q;
            [[unroll]] for (uint k = 0; k <= NT; ++k) o[k] += c * META(NDIM - 1 + k * NDIM + d);
        }
        [[unroll]] for (uint k = 0; k <= NT; ++k) o[k] += rem * META(NDIM - 1 + k * NDIM);
        element(o);
    }
#endif
}
