#version 450
// Matrix-vector product:  y[b][r] = ACT(alpha * sum_k W[b][r, k] * x[b][k] + bias[r * sbias])
// (fp32 accumulate), the matmul family's N == 1 and M == 1 calls (tvk_kernels/kernels/gemv.py
// maps A @ b to W = A, and a @ B to W = B^T).
//
// W is R x K, x has K elements, y R, each with arbitrary element strides (a batch stride 0
// broadcasts). T threads share one row's K range (T a power of two, p.tlog = log2(T), the host
// picks it from the shape); each adds a strided part of K, then a shared-memory tree sums the T
// partial sums in a fixed order (deterministic).
//   MMAJOR == 0 (W contiguous along K, or no unit stride): the T threads of a row are adjacent,
//       WG / T rows per workgroup; thread t reads W[r, k..k+VEC_W) at k = (t + i*T) * VEC_W.
//   MMAJOR == 1 (W contiguous along rows: a transposed operand): adjacent threads own adjacent
//       VEC_W-row blocks and step through K together (coalesced), T slices of K per workgroup,
//       (WG / T) * VEC_W rows per workgroup.
// Specialization constants: local size (id 0), VEC_W (id 3: vector width of W's loads, along K
// or along rows), VEC_X (id 4: 1 or VEC_W, x's loads in the K-major layout), MMAJOR (id 5).
// Defines (a module each): ACT (the epilogue: common/activation.glsl), DTYPE (storage: fp32,
// fp16 or bf16, codes of common/dtypes.glsl).
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference_uvec2 : require
#extension GL_EXT_control_flow_attributes : enable
#extension GL_GOOGLE_include_directive : require
#include "common/dtypes.glsl"

#ifndef DTYPE
#define DTYPE TVK_DT_FLOAT32
#endif
#if DTYPE == TVK_DT_FLOAT16
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#elif DTYPE == TVK_DT_BFLOAT16
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_int16 : require
#endif

layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;

layout(constant_id = 3) const uint VEC_W = 1u;
layout(constant_id = 4) const uint VEC_X = 1u;
layout(constant_id = 5) const uint MMAJOR = 0u;

// ------------------------------------------------------------------ storage types
#if DTYPE == TVK_DT_FLOAT32
#define T1 float
#define T2 vec2
#define T4 vec4
#define ESHIFT 2u
#define TO_F(x) (x)
#define TO_F2(x) (x)
#define TO_F4(x) (x)
#define FROM_F(x) (x)
layout(buffer_reference, std430, buffer_reference_align = 4) buffer SBuf { T1 v[]; };
layout(buffer_reference, std430, buffer_reference_align = 8) buffer V2Buf { T2 v[]; };
layout(buffer_reference, std430, buffer_reference_align = 16) buffer V4Buf { T4 v[]; };
#else
#if DTYPE == TVK_DT_FLOAT16
#define T1 float16_t
#define T2 f16vec2
#define T4 f16vec4
#define TO_F(x) float(x)
#define TO_F2(x) vec2(x)
#define TO_F4(x) vec4(x)
#define FROM_F(x) float16_t(x)
#else  // bfloat16 (common/bf16.glsl)
#define TVK_BF16_WORD uint16_t
#include "common/bf16.glsl"
#define T1 uint16_t
#define T2 u16vec2
#define T4 u16vec4
#define TO_F(x) tvk_bf16_float(uint(x))
#define TO_F2(x) tvk_bf16_float(uvec2(x))
#define TO_F4(x) tvk_bf16_float(uvec4(x))
#define FROM_F(x) tvk_bf16_bits(x)
#endif
#define ESHIFT 1u
layout(buffer_reference, std430, buffer_reference_align = 2) buffer SBuf { T1 v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer V2Buf { T2 v[]; };
layout(buffer_reference, std430, buffer_reference_align = 8) buffer V4Buf { T4 v[]; };
#endif

layout(push_constant) uniform Params {
    uvec2 w, x, y;
    uvec2 bias;          // (0, 0): no bias
    uint R, K;
    uint sWb, sWr, sWk;  // element strides of W (batch, row, k)
    uint sxb, sxk;       // of x
    uint syb, syr;       // of y
    uint sbias;          // 0: one bias value for every row (N == 1), 1: one per row (M == 1)
    float alpha;
    uint tlog;           // log2(T)
} p;

// base + idx * stride elements, in 64 bits without needing shaderInt64
uvec2 offset_addr(uvec2 base, uint idx, uint stride, uint shift) {
    uint hi, lo;
    umulExtended(idx, stride, hi, lo);
    hi = (hi << shift) | (lo >> (32u - shift));
    lo <<= shift;
    uint carry;
    uint rlo = uaddCarry(base.x, lo, carry);
    return uvec2(rlo, base.y + hi + carry);
}

#include "common/activation.glsl"

// `n` (<= vec) elements at e, e + stride, ...; missing elements read as 0. `vector`: the
// elements are adjacent and e is vec-aligned (the host checks the alignment), so a full
// vector is one load.
vec4 load(uint vec, bool vector, uvec2 base, uint e, uint stride, uint n) {
    if (vector && vec == 4u && n == 4u) return TO_F4(V4Buf(base).v[e >> 2]);
    if (vector && vec == 2u && n == 2u) return vec4(TO_F2(V2Buf(base).v[e >> 1]), 0.0, 0.0);
    vec4 r = vec4(0.0);
    [[unroll]] for (uint q = 0u; q < 4u; ++q)
        if (q < vec && q < n) r[q] = TO_F(SBuf(base).v[e + q * stride]);
    return r;
}

const uint WG = gl_WorkGroupSize.x;
shared vec4 partial[gl_WorkGroupSize.x];

void main() {
    const uint l = gl_LocalInvocationID.x;
    const uint T = 1u << p.tlog, G = WG >> p.tlog;  // threads per row (block); rows (blocks) per workgroup
    const uint g = MMAJOR != 0u ? l % G : l >> p.tlog;
    const uint t = MMAJOR != 0u ? l / G : l & (T - 1u);
    const uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    const uint bz = gl_WorkGroupID.z;
    const uvec2 wbase = offset_addr(p.w, bz, p.sWb, ESHIFT);
    const uvec2 xbase = offset_addr(p.x, bz, p.sxb, ESHIFT);
    const uint K = p.K;

    vec4 acc = vec4(0.0);
    if (MMAJOR != 0u) {
        // rows r0 .. r0 + VEC_W - 1 of W, K in steps of T
        const uint r0 = (group * G + g) * VEC_W;
        if (r0 < p.R) {
            const uint n = min(VEC_W, p.R - r0);
            for (uint k = t; k < K; k += T) {
                const float xk = TO_F(SBuf(xbase).v[k * p.sxk]);
                acc = fma(load(VEC_W, true, wbase, r0 * p.sWr + k * p.sWk, p.sWr, n), vec4(xk), acc);
            }
        }
    } else {
        // row r, K in vectors of VEC_W, every T-th vector
        const uint r = group * G + g;
        if (r < p.R) {
            for (uint k = t * VEC_W; k < K; k += T * VEC_W) {
                const uint n = min(VEC_W, K - k);
                const vec4 wv = load(VEC_W, true, wbase, r * p.sWr + k * p.sWk, p.sWk, n);
                acc = fma(wv, load(VEC_W, VEC_X == VEC_W, xbase, k * p.sxk, p.sxk, n), acc);
            }
        }
        acc = vec4((acc.x + acc.y) + (acc.z + acc.w), 0.0, 0.0, 0.0);
    }

    // tree over the T partial sums of a row (block): a fixed order, whatever the device
    partial[l] = acc;
    barrier();
    const uint other = MMAJOR != 0u ? G : 1u;  // distance of thread t + 1 of the same row
    for (uint s = T >> 1; s > 0u; s >>= 1) {
        if (t < s) partial[l] += partial[l + s * other];
        barrier();
    }
    if (t != 0u) return;

    acc = partial[l];
    SBuf Y = SBuf(offset_addr(p.y, bz, p.syb, ESHIFT));
    const bool has_bias = p.bias != uvec2(0u);
    const uint r0 = MMAJOR != 0u ? (group * G + g) * VEC_W : group * G + g;
    const uint rows = MMAJOR != 0u ? VEC_W : 1u;
    [[unroll]] for (uint q = 0u; q < 4u; ++q) {
        const uint r = r0 + q;
        if (q < rows && r < p.R) {
            float v = p.alpha * acc[q];
            if (has_bias) v += TO_F(SBuf(p.bias).v[r * p.sbias]);
            Y.v[r * p.syr] = FROM_F(activation(v));
        }
    }
}
