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
//   DT0 DT1 DT2 DTO storage dtype codes (common/dtypes.glsl): float32, float16, int64, int32,
//                   bool (uint8), bfloat16 (raw 16-bit words, computed in float32), uint8, int8,
//                   int16 (loaded zero- or sign-extended, stored by truncation: torch's wraparound)
//   CT_KIND         compute type: 0 float, 1 int, 2 int64_t
//   NS              scalars in push constants, of the compute type, read as S(k)
//   IN_A IN_B IN_C  what the op sees as a, b, c: x0/x1/x2 (tensor slot values) or S(k)
//   OP_EXPR         a CT-valued expression in a, b, c, S(k)
//   USE_F16 USE_I64 USE_U8 enable the storage extensions (USE_F16: any 16-bit storage, bfloat16 too)
// Tunables (specialization constants): local size (0), ITEMS (3). VEC stays a define: it picks
// the vector types.
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
#extension GL_GOOGLE_include_directive : require
#include "common/dtypes.glsl"
#include "common/bf16.glsl"
#include "common/activation.glsl"  // the activations' helpers, erf, math

layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;

#ifndef CONTIG
#define CONTIG 0
#endif
#ifndef VEC
#define VEC 1
#endif
layout(constant_id = 3) const uint ITEMS = 1u;  // vector loads (CONTIG=1) or elements (CONTIG=0) per thread
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
#if CT_KIND == 2
#define CT_BITS 64
#else
#define CT_BITS 32
#endif

// ---------------------------------------------------------------- dtype tables
#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
// Indexed by dtype code (common/dtypes.glsl: 0 float32, 1 float16, 2 int64, 3 int32, 4 bool,
// 5 bfloat16, 6 uint8, 7 int8, 8 int16); token pasting needs the numbers.
// storage scalar type, storage vector prefix, wide (32/64-bit) scalar, wide vector prefix, bytes
#define ST_0 float
#define ST_1 float16_t
#define ST_2 int64_t
#define ST_3 int
#define ST_4 uint8_t
#define ST_5 uint16_t
#define ST_6 uint8_t
#define ST_7 int8_t
#define ST_8 int16_t
#define SV_0 vec
#define SV_1 f16vec
#define SV_2 i64vec
#define SV_3 ivec
#define SV_4 u8vec
#define SV_5 u16vec
#define SV_6 u8vec
#define SV_7 i8vec
#define SV_8 i16vec
#define W_0 float
#define W_1 float
#define W_2 int64_t
#define W_3 int
#define W_4 uint
#define W_5 float
#define W_6 uint
#define W_7 int
#define W_8 int
#define WV_0 vec
#define WV_1 vec
#define WV_2 i64vec
#define WV_3 ivec
#define WV_4 uvec
#define WV_5 vec
#define WV_6 uvec
#define WV_7 ivec
#define WV_8 ivec
#define ES_0 4
#define ES_1 2
#define ES_2 8
#define ES_3 4
#define ES_4 1
#define ES_5 2
#define ES_6 1
#define ES_7 1
#define ES_8 2
// compute value -> wide value of the storage type (bool: nonzero -> 1)
#define TOW_0(r) float(r)
#define TOW_1(r) float(r)
#define TOW_2(r) int64_t(r)
#define TOW_3(r) int(r)
#define TOW_4(r) ((r) != CT(0) ? 1u : 0u)
#define TOW_5(r) float(r)
#define TOW_6(r) uint(TVK_LOW_BITS(r, 256.0))
#define TOW_7(r) TVK_LOW_BITS(r, 256.0)
#define TOW_8(r) TVK_LOW_BITS(r, 65536.0)
// storage value(s) -> wide value(s) of type W (U: the unsigned type of the same width); bfloat16
// is the high half of a float32, so its bits are shifted, not converted (common/bf16.glsl)
#define LDW_0(W, U, v) W(v)
#define LDW_1(W, U, v) W(v)
#define LDW_2(W, U, v) W(v)
#define LDW_3(W, U, v) W(v)
#define LDW_4(W, U, v) W(v)
#define LDW_5(W, U, v) tvk_bf16_float(U(v))
#define LDW_6(W, U, v) W(v)
#define LDW_7(W, U, v) W(v)
#define LDW_8(W, U, v) W(v)
// wide value(s) -> storage type T; bfloat16 rounds to nearest even, NaN stays NaN
#define STW_0(T, w) T(w)
#define STW_1(T, w) T(w)
#define STW_2(T, w) T(w)
#define STW_3(T, w) T(w)
#define STW_4(T, w) T(w)
#define STW_5(T, w) T(tvk_bf16_bits(w))
#define STW_6(T, w) T(w)
#define STW_7(T, w) T(w)
#define STW_8(T, w) T(w)

#define STYPE(dt) CAT(ST_, dt)
#define WTYPE(dt) CAT(W_, dt)
#define ESIZE(dt) CAT(ES_, dt)
#define TOW(dt, r) CAT(TOW_, dt)(r)
#define LDW(dt, W, U, v) CAT(LDW_, dt)(W, U, v)
#define STW(dt, T, w) CAT(STW_, dt)(T, w)
#if VEC == 1
#define VSTYPE(dt) CAT(ST_, dt)
#define VWTYPE(dt) CAT(W_, dt)
#define VCOMP(v, j) v
#define VUTYPE uint
#else
#define VSTYPE(dt) CAT(CAT(SV_, dt), VEC)
#define VWTYPE(dt) CAT(CAT(WV_, dt), VEC)
#define VCOMP(v, j) v[j]
#define VUTYPE CAT(uvec, VEC)
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
// (the activations' helpers, erf and the shared float helpers come from the common/ includes)
#define B2CT(e) ((e) ? CT(1) : CT(0))

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
        if (floor(y) != y) return isinf(x) ? r : TVK_NAN;  // C's pow(-inf, 2.5) is inf, pow(-inf, -2.5) 0
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

// --------------------------------------------------------------- math helpers of the OPS table
// Float helpers compute in float32; the CT-typed ones (division family, fmax/fmin, signbit)
// exist per compute type. Those other templates share are in common/*.glsl. They follow torch's CPU kernels (ATen/native/Math.h and the cpu/*Kernel.cpp files), edge
// values included. Several are derived from the Cephes Math Library through ATen's Math.h:
// Copyright (c) 2018, Steven Moshier, 3-clause BSD (see the note in ATen/native/Math.h).

#define TVK_PI 3.14159265358979323846
#define TVK_LN2 0.69314718055994530942

// exp(x) - 1 without cancellation near 0: a series there, the plain form elsewhere
float tvk_expm1(float x) {
    if (abs(x) < 0.5) {
        return x * (1.0 + x * (1.0 / 2.0 + x * (1.0 / 6.0 + x * (1.0 / 24.0 + x * (1.0 / 120.0 + x * (1.0 / 720.0
                + x * (1.0 / 5040.0 + x * (1.0 / 40320.0 + x * (1.0 / 362880.0)))))))));
    }
    return exp(x) - 1.0;
}

// sin, cos and tan with Cephes' range reduction (pi/4 in three parts) and minimax polynomials:
// a GPU's own sin is accurate only in absolute terms (sin(x)/x off by 20% near 0 on NVIDIA).
// The reduction is exact up to |x| = 8192; beyond that the builtins.
void tvk_sincos(float x, out float s, out float c) {
    float ax = abs(x);
    if (!(ax <= 8192.0)) {  // nan, inf, huge
        bool finite = !isinf(x) && !isnan(x);
        s = finite ? sin(x) : TVK_NAN;
        c = finite ? cos(x) : TVK_NAN;
        return;
    }
    int j = int(ax * 1.27323954473516);  // 4 / pi
    precise float y = float(j);
    if ((j & 1) != 0) { j += 1; y += 1.0; }
    precise float z = ((ax - y * 0.78515625) - y * 2.4187564849853515625e-4) - y * 3.77489497744594108e-8;
    float zz = z * z;
    float sp = ((-1.9515295891e-4 * zz + 8.3321608736e-3) * zz - 1.6666654611e-1) * zz * z + z;
    float cp = ((2.443315711809948e-5 * zz - 1.388731625493765e-3) * zz + 4.166664568298827e-2) * zz * zz
             - 0.5 * zz + 1.0;
    int q = (j >> 1) & 3;  // quadrant: x = q pi/2 + z
    float sv = (q & 1) == 0 ? sp : cp, cv = (q & 1) == 0 ? cp : sp;
    s = q >= 2 ? -sv : sv;
    c = (q == 1 || q == 2) ? -cv : cv;
    if ((floatBitsToUint(x) >> 31) != 0u) s = -s;
}
float tvk_sin(float x) { float s, c; tvk_sincos(x, s, c); return s; }
float tvk_cos(float x) { float s, c; tvk_sincos(x, s, c); return c; }
float tvk_tan(float x) { float s, c; tvk_sincos(x, s, c); return s / c; }

// hyperbolic and their inverses, finite where torch's are (GLSL's may overflow or cancel)
float tvk_sinh(float x) {
    if (abs(x) < 0.5) {
        float z = x * x;
        return x * (1.0 + z * (1.0 / 6.0 + z * (1.0 / 120.0 + z * (1.0 / 5040.0 + z * (1.0 / 362880.0)))));
    }
    float e = exp(abs(x) - TVK_LN2);  // e^|x| / 2, finite up to |x| = 89.4
    return tvk_copysign(e - 0.25 / e, x);
}
float tvk_cosh(float x) {
    float e = exp(abs(x) - TVK_LN2);
    return e + 0.25 / e;
}
float tvk_asinh(float x) {
    float ax = abs(x);
    float r = ax > 1e8 ? log(ax) + TVK_LN2 : tvk_log1p(ax + ax * ax / (1.0 + sqrt(1.0 + ax * ax)));
    return tvk_copysign(r, x);
}
float tvk_acosh(float x) {
    if (x > 1e8) return log(x) + TVK_LN2;
    float t = x - 1.0;
    return tvk_log1p(t + sqrt(2.0 * t + t * t));  // nan below 1
}
float tvk_atanh(float x) {
    return 0.5 * tvk_log1p(2.0 * x / (1.0 - x));
}
float tvk_atan2(float y, float x) {  // quadrants and signed zeros as C's atan2
    if (isnan(x) || isnan(y)) return TVK_NAN;
    if (isinf(x) || isinf(y)) {
        float r = isinf(x) ? (isinf(y) ? (x > 0.0 ? 0.25 : 0.75) * TVK_PI : (x > 0.0 ? 0.0 : TVK_PI)) : 0.5 * TVK_PI;
        return tvk_copysign(r, y);
    }
    if (y == 0.0) return tvk_copysign((floatBitsToUint(x) >> 31) != 0u ? TVK_PI : 0.0, y);
    if (x == 0.0) return tvk_copysign(0.5 * TVK_PI, y);
    float ax = abs(x), ay = abs(y);
    float r = ay <= ax ? atan(ay / ax) : 0.5 * TVK_PI - atan(ax / ay);
    if (x < 0.0) r = TVK_PI - r;
    return tvk_copysign(r, y);
}

float tvk_asin(float x) {  // through atan: GLSL's asin may be off by 4e-4 (lavapipe)
    return abs(x) > 1.0 ? TVK_NAN : tvk_atan2(x, sqrt((1.0 - x) * (1.0 + x)));
}
float tvk_acos(float x) {
    return abs(x) > 1.0 ? TVK_NAN : tvk_atan2(sqrt((1.0 - x) * (1.0 + x)), x);
}

// erf's family beyond tvk_erf and tvk_erfc (common/erf.glsl)
float tvk_erfcx(float x) {  // exp(x^2) erfc(x); tvk_erfc_pos's form without its exp(-x^2)
    float z = abs(x);
    float t = 1.0 / (1.0 + 0.5 * z);
    float r = -1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (-0.18628806
            + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277))))))));
    float pos = t * exp(r);
    return x >= 0.0 ? pos : 2.0 * exp(x * x) - pos;
}
float tvk_erfinv(float y) {  // torch's calc_erfinv: a rational first guess, two Newton steps
    float ay = abs(y);
    if (ay > 1.0) return TVK_NAN;
    if (ay == 1.0) return tvk_copysign(TVK_INF, y);
    float x;
    if (ay <= 0.7) {
        float z = y * y;
        float num = ((-0.140543331 * z + 0.914624893) * z - 1.645349621) * z + 0.886226899;
        float dem = (((0.012229801 * z - 0.329097515) * z + 1.442710462) * z - 2.118377725) * z + 1.0;
        x = y * num / dem;
    } else {
        float z = sqrt(-log((1.0 - ay) / 2.0));
        float num = ((1.641345311 * z + 3.429567803) * z - 1.624906493) * z - 1.970840454;
        float dem = (1.637067800 * z + 3.543889200) * z + 1.0;
        x = tvk_copysign(num, y) / dem;
    }
    x = x - (tvk_erf(x) - y) / (TVK_2_SQRTPI * exp(-x * x));
    x = x - (tvk_erf(x) - y) / (TVK_2_SQRTPI * exp(-x * x));
    return x;
}
float tvk_log_ndtr(float x) {  // torch's calc_log_ndtr
    float t = x * 0.70710678118654752;
    return x < -1.0 ? log(tvk_erfcx(-t) / 2.0) - t * t : tvk_log1p(-tvk_erfc(t) / 2.0);
}

// sin(pi x) with exact zeros at the integers (lgamma's poles)
float tvk_sinpi(float x) {
    if (x == floor(x)) return 0.0;
    float y = x - 2.0 * floor(0.5 * x);  // [0, 2)
    float s = 1.0;
    if (y >= 1.0) { y -= 1.0; s = -1.0; }
    return s * tvk_sin(TVK_PI * min(y, 1.0 - y));
}
float tvk_lgamma(float x) {
    if (isnan(x)) return x;
    if (isinf(x)) return TVK_INF;
    float refl = 0.0;
    bool reflected = x < 0.5;
    if (reflected) {  // lgamma(x) = log(pi / |sin(pi x)|) - lgamma(1 - x)
        float s = abs(tvk_sinpi(x));
        if (s == 0.0) return TVK_INF;
        refl = log(TVK_PI / s);
        x = 1.0 - x;
    }
    float p = 1.0;  // push x to >= 8, then Stirling's series
    [[dont_unroll]] while (x < 8.0) { p *= x; x += 1.0; }
    float z = 1.0 / (x * x);
    float series = (1.0 / 12.0 + z * (-1.0 / 360.0 + z * (1.0 / 1260.0 + z * (-1.0 / 1680.0)))) / x;
    float r = (x - 0.5) * log(x) - x + 0.91893853320467274 + series - log(p);
    return reflected ? refl - r : r;
}
float tvk_digamma(float x) {  // torch's calc_digamma (float)
    if (x == 0.0) return tvk_copysign(TVK_INF, -x);
    float result = 0.0;
    if (x < 0.0) {
        if (x == trunc(x)) return TVK_NAN;
        float r = x - trunc(x);
        result = -TVK_PI / tvk_tan(TVK_PI * r);
        x = 1.0 - x;
    }
    [[dont_unroll]] while (x < 10.0) { result -= 1.0 / x; x += 1.0; }
    if (x == 10.0) return result + 2.25175258906672110764;
    float y = 0.0;
    if (x < 1.0e17) {
        float z = 1.0 / (x * x);
        y = z * (8.33333333333333333333E-2 + z * (-8.33333333333333333333E-3 + z * (3.96825396825396825397E-3
                + z * (-4.16666666666666666667E-3 + z * (7.57575757575757575758E-3 + z * (-2.10927960927960927961E-2
                + z * 8.33333333333333333333E-2))))));
    }
    return result + log(x) - 0.5 / x - y;
}
float tvk_trigamma(float x) {  // torch's trigamma (float)
    float sign = 1.0, result = 0.0;
    if (x < 0.5) {
        sign = -1.0;
        float s = tvk_sin(TVK_PI * x);
        result -= (TVK_PI * TVK_PI) / (s * s);
        x = 1.0 - x;
    }
    for (int i = 0; i < 6; ++i) { result += 1.0 / (x * x); x += 1.0; }
    float ixx = 1.0 / (x * x);
    result += (1.0 + 1.0 / (2.0 * x) + ixx * (1.0 / 6.0 - ixx * (1.0 / 30.0 - ixx * (1.0 / 42.0)))) / x;
    return sign * result;
}
const float TVK_ZETA_A[12] = float[](12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1.8924375803183791606e9,
    7.47242496e10, -2.950130727918164224e12, 1.1646782814350067249e14, -4.5979787224074726105e15,
    1.8152105401943546773e17, -7.1661652561756670113e18);
float tvk_zeta(float x, float q) {  // Hurwitz zeta, Cephes (torch's zeta)
    const float MACHEP = 5.96e-8;
    if (x == 1.0) return TVK_INF;
    if (x < 1.0) return TVK_NAN;
    if (q <= 0.0) {
        if (q == floor(q)) return TVK_INF;
        if (x != floor(x)) return TVK_NAN;
    }
    float s = tvk_pow(q, -x), a = q, b = 0.0;  // tvk_pow: negative q with integral x
    int i = 0;
    [[dont_unroll]] while (i < 9 || a <= 9.0) {
        i += 1;
        a += 1.0;
        b = tvk_pow(a, -x);
        s += b;
        if (-MACHEP * s < b && b < MACHEP * s) return s;
    }
    float w = a;
    s += b * w / (x - 1.0);
    s -= 0.5 * b;
    a = 1.0;
    float k = 0.0;
    for (i = 0; i < 12; ++i) {
        a *= x + k;
        b /= w;
        float t = a * b / TVK_ZETA_A[i];
        s += t;
        if (abs(t / s) < MACHEP) return s;
        k += 1.0;
        a *= x + k;
        b /= w;
        k += 1.0;
    }
    return s;
}
float tvk_polygamma(float n, float x) {
    if (n == 0.0) return tvk_digamma(x);
    if (n == 1.0) return tvk_trigamma(x);
    float sign = mod(n, 2.0) == 1.0 ? 1.0 : -1.0;
    return sign * exp(tvk_lgamma(n + 1.0)) * tvk_zeta(n + 1.0, x);
}

// modified Bessel functions I0, I1 and their exponentially scaled forms (Cephes Chebyshev series)
const float TVK_I0_A[30] = float[](-4.41534164647933937950E-18, 3.33079451882223809783E-17,
    -2.43127984654795469359E-16, 1.71539128555513303061E-15, -1.16853328779934516808E-14, 7.67618549860493561688E-14,
    -4.85644678311192946090E-13, 2.95505266312963983461E-12, -1.72682629144155570723E-11, 9.67580903537323691224E-11,
    -5.18979560163526290666E-10, 2.65982372468238665035E-9, -1.30002500998624804212E-8, 6.04699502254191894932E-8,
    -2.67079385394061173391E-7, 1.11738753912010371815E-6, -4.41673835845875056359E-6, 1.64484480707288970893E-5,
    -5.75419501008210370398E-5, 1.88502885095841655729E-4, -5.76375574538582365885E-4, 1.63947561694133579842E-3,
    -4.32430999505057594430E-3, 1.05464603945949983183E-2, -2.37374148058994688156E-2, 4.93052842396707084878E-2,
    -9.49010970480476444210E-2, 1.71620901522208775349E-1, -3.04682672343198398683E-1, 6.76795274409476084995E-1);
const float TVK_I0_B[25] = float[](-7.23318048787475395456E-18, -4.83050448594418207126E-18,
    4.46562142029675999901E-17, 3.46122286769746109310E-17, -2.82762398051658348494E-16, -3.42548561967721913462E-16,
    1.77256013305652638360E-15, 3.81168066935262242075E-15, -9.55484669882830764870E-15, -4.15056934728722208663E-14,
    1.54008621752140982691E-14, 3.85277838274214270114E-13, 7.18012445138366623367E-13, -1.79417853150680611778E-12,
    -1.32158118404477131188E-11, -3.14991652796324136454E-11, 1.18891471078464383424E-11, 4.94060238822496958910E-10,
    3.39623202570838634515E-9, 2.26666899049817806459E-8, 2.04891858946906374183E-7, 2.89137052083475648297E-6,
    6.88975834691682398426E-5, 3.36911647825569408990E-3, 8.04490411014108831608E-1);
const float TVK_I1_A[17] = float[](9.38153738649577178388E-9, -4.44505912879632808065E-8, 2.00329475355213526229E-7,
    -8.56872026469545474066E-7, 3.47025130813767847674E-6, -1.32731636560394358279E-5, 4.78156510755005422638E-5,
    -1.61760815825896745588E-4, 5.12285956168575772895E-4, -1.51357245063125314899E-3, 4.15642294431288815669E-3,
    -1.05640848946261981558E-2, 2.47264490306265168283E-2, -5.29459812080949914269E-2, 1.02643658689847095384E-1,
    -1.76416518357834055153E-1, 2.52587186443633654823E-1);
const float TVK_I1_B[7] = float[](-3.83538038596423702205E-9, -2.63146884688951950684E-8, -2.51223623787020892529E-7,
    -3.88256480887769039346E-6, -1.10588938762623716291E-4, -9.76109749136146840777E-3, 7.78576235018280120474E-1);
#define TVK_CHBEVL(res, xv, arr, len) { \
    float b0_ = arr[0], b1_ = 0.0, b2_ = 0.0; \
    for (int i_ = 1; i_ < len; ++i_) { b2_ = b1_; b1_ = b0_; b0_ = (xv) * b1_ - b2_ + arr[i_]; } \
    res = 0.5 * (b0_ - b2_); }
float tvk_i0e(float x) {
    x = abs(x);
    float r;
    if (x <= 8.0) { TVK_CHBEVL(r, x / 2.0 - 2.0, TVK_I0_A, 30) return r; }
    TVK_CHBEVL(r, 32.0 / x - 2.0, TVK_I0_B, 25)
    return r / sqrt(x);
}
float tvk_i0(float x) {
    x = abs(x);
    float r;
    if (x <= 8.0) { TVK_CHBEVL(r, x / 2.0 - 2.0, TVK_I0_A, 30) return exp(x) * r; }
    TVK_CHBEVL(r, 32.0 / x - 2.0, TVK_I0_B, 25)
    return exp(x) * r / sqrt(x);
}
float tvk_i1e(float x0) {
    float x = abs(x0), r;
    if (x <= 8.0) { TVK_CHBEVL(r, x / 2.0 - 2.0, TVK_I1_A, 17) r *= x; }
    else { TVK_CHBEVL(r, 32.0 / x - 2.0, TVK_I1_B, 7) r /= sqrt(x); }
    return x0 < 0.0 ? -r : r;
}
float tvk_i1(float x0) {
    float x = abs(x0), r;
    if (x <= 8.0) { TVK_CHBEVL(r, x / 2.0 - 2.0, TVK_I1_A, 17) r *= exp(x) * x; }
    else { TVK_CHBEVL(r, 32.0 / x - 2.0, TVK_I1_B, 7) r = exp(x) * r / sqrt(x); }
    return x0 < 0.0 ? -r : r;
}

// the inverse of the standard normal CDF, Cephes ndtri (torch's calc_ndtri)
const float TVK_NDTRI_P0[5] = float[](-5.99633501014107895267E1, 9.80010754185999661536E1, -5.66762857469070293439E1,
    1.39312609387279679503E1, -1.23916583867381258016E0);
const float TVK_NDTRI_Q0[9] = float[](1.0, 1.95448858338141759834E0, 4.67627912898881538453E0,
    8.63602421390890590575E1, -2.25462687854119370527E2, 2.00260212380060660359E2, -8.20372256168333339912E1,
    1.59056225126211695515E1, -1.18331621121330003142E0);
const float TVK_NDTRI_P1[9] = float[](4.05544892305962419923E0, 3.15251094599893866154E1, 5.71628192246421288162E1,
    4.40805073893200834700E1, 1.46849561928858024014E1, 2.18663306850790267539E0, -1.40256079171354495875E-1,
    -3.50424626827848203418E-2, -8.57456785154685413611E-4);
const float TVK_NDTRI_Q1[9] = float[](1.0, 1.57799883256466749731E1, 4.53907635128879210584E1,
    4.13172038254672030440E1, 1.50425385692907503408E1, 2.50464946208309415979E0, -1.42182922854787788574E-1,
    -3.80806407691578277194E-2, -9.33259480895457427372E-4);
const float TVK_NDTRI_P2[9] = float[](3.23774891776946035970E0, 6.91522889068984211695E0, 3.93881025292474443415E0,
    1.33303460815807542389E0, 2.01485389549179081538E-1, 1.23716634817820021358E-2, 3.01581553508235416007E-4,
    2.65806974686737550832E-6, 6.23974539184983293730E-9);
const float TVK_NDTRI_Q2[9] = float[](1.0, 6.02427039364742014255E0, 3.67983563856160859403E0,
    1.37702099489081330271E0, 2.16236993594496635890E-1, 1.34204006088543189037E-2, 3.28014464682127739104E-4,
    2.89247864745380683936E-6, 6.79019408009981274425E-9);
#define TVK_POLEVL(res, xv, arr, n) { res = 0.0; for (int i_ = 0; i_ <= n; ++i_) res = res * (xv) + arr[i_]; }
float tvk_ndtri(float y0) {
    if (y0 == 0.0) return -TVK_INF;
    if (y0 == 1.0) return TVK_INF;
    if (!(y0 > 0.0 && y0 < 1.0)) return TVK_NAN;
    bool code = true;
    float y = y0;
    if (y > 1.0 - 0.13533528323661269189) { y = 1.0 - y; code = false; }
    if (y > 0.13533528323661269189) {
        y = y - 0.5;
        float y2 = y * y, p, q;
        TVK_POLEVL(p, y2, TVK_NDTRI_P0, 4)
        TVK_POLEVL(q, y2, TVK_NDTRI_Q0, 8)
        return (y + y * (y2 * p / q)) * 2.50662827463100050242;
    }
    float x = sqrt(-2.0 * log(y));
    float x0 = x - log(x) / x;
    float z = 1.0 / x, p, q;
    if (x < 8.0) { TVK_POLEVL(p, z, TVK_NDTRI_P1, 8) TVK_POLEVL(q, z, TVK_NDTRI_Q1, 8) }
    else { TVK_POLEVL(p, z, TVK_NDTRI_P2, 8) TVK_POLEVL(q, z, TVK_NDTRI_Q2, 8) }
    x = x0 - z * p / q;
    return code ? -x : x;
}

float tvk_spherical_bessel_j0(float x) {  // sin(x) / x
    if (isinf(x)) return 0.0;
    if (abs(x) < 0.5) {
        float z = x * x;
        return 1.0 + z * (-1.0 / 6.0 + z * (1.0 / 120.0 + z * (-1.0 / 5040.0 + z * (1.0 / 362880.0
                + z * (-1.0 / 39916800.0 + z * (1.0 / 6227020800.0))))));
    }
    return tvk_sin(x) / x;
}
float tvk_entr(float x) {
    if (isnan(x)) return x;
    if (x > 0.0) return -x * log(x);
    return x == 0.0 ? 0.0 : -TVK_INF;
}
float tvk_sinc(float x) {
    if (x == 0.0) return 1.0;
    float px = TVK_PI * x;
    return tvk_sin(px) / px;
}
float tvk_xlogy(float x, float y) {  // 0 * log(y) is 0, except for a nan y
    if (isnan(y)) return TVK_NAN;
    return x == 0.0 ? 0.0 : x * log(y);
}
float tvk_xlog1py(float x, float y) {
    if (isnan(y)) return TVK_NAN;
    return x == 0.0 ? 0.0 : x * tvk_log1p(y);
}
float tvk_logaddexp(float a, float b) {
    if (isnan(a) || isnan(b)) return TVK_NAN;
    if (isinf(a) && a == b) return a;
    return max(a, b) + tvk_log1p(exp(-abs(a - b)));
}
float tvk_logaddexp2(float a, float b) {
    if (isnan(a) || isnan(b)) return TVK_NAN;
    if (isinf(a) && a == b) return a;
    return max(a, b) + tvk_log1p(exp2(-abs(a - b))) / TVK_LN2;
}
float tvk_hypot(float a, float b) {
    a = abs(a);
    b = abs(b);
    if (isinf(a) || isinf(b)) return TVK_INF;
    float m = max(a, b);
    if (isnan(a) || isnan(b)) return TVK_NAN;
    if (m == 0.0) return 0.0;
    float u = a / m, v = b / m;
    return m * sqrt(u * u + v * v);
}
float tvk_nextafter(float a, float b) {
    if (isnan(a) || isnan(b)) return TVK_NAN;
    if (a == b) return b;
    if (a == 0.0) return tvk_copysign(uintBitsToFloat(1u), b);
    uint u = floatBitsToUint(a);
    return uintBitsToFloat((a < b) == (a > 0.0) ? u + 1u : u - 1u);
}
float tvk_round_decimals(float x, float ten_pow, float neg) {  // torch's round(decimals=d)
    return neg != 0.0 ? roundEven(x / ten_pow) * ten_pow : roundEven(x * ten_pow) / ten_pow;
}
float tvk_logit(float x, float eps) {  // eps < 0: none
    if (eps < 0.0) return x == 1.0 ? TVK_INF : log(x / (1.0 - x));
    float z = isnan(x) ? x : (x < eps ? eps : (x > 1.0 - eps ? 1.0 - eps : x));  // no clamp: it drops nan
    return log(z / (1.0 - z));
}
float tvk_fmod_f(float a, float b) {  // exact, as C's fmod: long division by |b| * 2^k, each step exact
    if (isnan(a) || isnan(b) || isinf(a) || b == 0.0) return TVK_NAN;
    float ab = abs(b), r = abs(a);
    if (r < ab || isinf(b)) return a;
    int er, eb;
    frexp(r, er);
    frexp(ab, eb);
    float d = ldexp(ab, er - eb);  // |b| * 2^k within a factor 2 of r (fma is not fused everywhere: lavapipe)
    if (d > r) d *= 0.5;
    [[dont_unroll]] while (d >= ab) {
        if (r >= d) r -= d;  // d <= r < 2d: exact (Sterbenz)
        d *= 0.5;
    }
    return tvk_copysign(r, a);
}
float tvk_floor_div_f(float a, float b) {  // torch's div_floor_floating
    if (b == 0.0) return a / b;
    float m = tvk_fmod_f(a, b);
    float d = (a - m) / b;
    if (m != 0.0 && (b < 0.0) != (m < 0.0)) d -= 1.0;
    if (d == 0.0) return tvk_copysign(0.0, a / b);
    float f = floor(d);
    return d - f > 0.5 ? f + 1.0 : f;
}

#if CT_KIND == 0
CT tvk_trunc_div(CT a, CT b) { return trunc(a / b); }
CT tvk_floor_div(CT a, CT b) { return tvk_floor_div_f(a, b); }
CT tvk_fmod(CT a, CT b) { return tvk_fmod_f(a, b); }
CT tvk_fmax(CT a, CT b) { return isnan(a) ? b : (isnan(b) ? a : max(a, b)); }
CT tvk_fmin(CT a, CT b) { return isnan(a) ? b : (isnan(b) ? a : min(a, b)); }
bool tvk_signbit(CT a) { return (floatBitsToUint(a) >> 31) != 0u; }
#else  // integers: a zero divisor is refused on the host (torch's ZeroDivisionError)
CT tvk_trunc_div(CT a, CT b) { return a / b; }
CT tvk_floor_div(CT a, CT b) {
    CT q = a / b;
    return (a - q * b != CT(0) && ((a < CT(0)) != (b < CT(0)))) ? q - CT(1) : q;
}
CT tvk_fmod(CT a, CT b) { return a - (a / b) * b; }
CT tvk_fmax(CT a, CT b) { return max(a, b); }
CT tvk_fmin(CT a, CT b) { return min(a, b); }
bool tvk_signbit(CT a) { return a < CT(0); }
#endif
CT tvk_remainder(CT a, CT b) {  // the sign follows the divisor
    CT m = tvk_fmod(a, b);
    return (m != CT(0) && ((b < CT(0)) != (m < CT(0)))) ? m + b : m;
}

// logit's derivative (torch's CPU formula); the activations' are in common/activation.glsl
float tvk_logit_grad(float dy, float x, float eps) {
    if (eps < 0.0) return (x < 0.0 || x > 1.0) ? TVK_NAN : dy / (x * (1.0 - x));
    return (x < eps || x > 1.0 - eps) ? 0.0 : dy / (x * (1.0 - x));
}

CT apply(CT x0, CT x1, CT x2) {
    CT a = IN_A;
    CT b = IN_B;
    CT c = IN_C;
    return CT(OP_EXPR);
}

// --------------------------------------------------------------- small-integer outputs
// A compute value -> an int whose low bits are the uint8/int8/int16 result (the store truncates).
// From float, torch's cast: toward zero, then the low bits of that integer (torch goes through
// int64); exact in float for every finite value; nan and inf give 0, as torch on x86.
#if DTO == TVK_DT_UINT8 || DTO == TVK_DT_INT8 || DTO == TVK_DT_INT16
#if CT_KIND == 0
int tvk_low_bits(float r, float m) {  // m = 2^bits
    if (isnan(r) || isinf(r)) return 0;
    float t = trunc(r);
    return int(t - m * floor(t / m));  // t mod m, in [0, m)
}
#define TVK_LOW_BITS(r, m) tvk_low_bits(r, m)
#else
#define TVK_LOW_BITS(r, m) int(r)
#endif
#endif

// --------------------------------------------------------------- element kernels
void element(uint o[NT + 1]) {
    CT x0 = CT(0), x1 = CT(0), x2 = CT(0);
#if NT > 0
    x0 = CT(LDW(DT0, WTYPE(DT0), uint, SBuf0(p.ptr[0]).v[o[0]]));
#endif
#if NT > 1
    x1 = CT(LDW(DT1, WTYPE(DT1), uint, SBuf1(p.ptr[1]).v[o[1]]));
#endif
#if NT > 2
    x2 = CT(LDW(DT2, WTYPE(DT2), uint, SBuf2(p.ptr[2]).v[o[2]]));
#endif
    CT r = apply(x0, x1, x2);
    SBufO(p.ptr[NT]).v[o[NT]] = STW(DTO, STYPE(DTO), TOW(DTO, r));
}

#if VEC > 1
void velement(uint idx) {
#if NT > 0
    VWTYPE(DT0) v0 = LDW(DT0, VWTYPE(DT0), VUTYPE, VBuf0(p.ptr[0]).v[idx]);
#endif
#if NT > 1
    VWTYPE(DT1) v1 = LDW(DT1, VWTYPE(DT1), VUTYPE, VBuf1(p.ptr[1]).v[idx]);
#endif
#if NT > 2
    VWTYPE(DT2) v2 = LDW(DT2, VWTYPE(DT2), VUTYPE, VBuf2(p.ptr[2]).v[idx]);
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
    VBufO(p.ptr[NT]).v[idx] = STW(DTO, VSTYPE(DTO), r);
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
