#version 450
// fp16 GEMM on packed half-precision arithmetic, for GPUs without cooperative matrices (RDNA1's
// v_pk_fma_f16, Intel's and NVIDIA's paired fp16 FMAs: two fp16 FMAs per instruction):
//     C[b] = ACT(alpha * A[b] @ B[b] + bias)
//
// matmul.comp's push constants, strides, epilogue and split-K partials (MODE 0: GEMM, MODE 1: fp32
// partial sums; matmul.comp's MODE 2 pass sums them). fp16 storage only.
//
// Each invocation owns TM x TN outputs, its columns in pairs: one f16vec2 FMA multiplies an A value
// (splat) by two adjacent B values of row k and adds to two fp16 partial sums. After CHAIN values of
// k the fp16 partials are added to fp32 accumulators and restart at 0 ("folded"): the sum over K is
// fp32, each partial sums CHAIN fp16 products. Error bound per output (u = 2^-11, fp16's unit
// roundoff): |C - exact| <= (CHAIN + 1) u sum_k |a_k b_k| + products under fp16's normal range
// (|a_k b_k| < 2^-14) lose relative precision; tests/test_matmul_packed_f16.py checks the bound.
// Overflow is not silent: a partial past 65504 becomes inf and makes its fp32 accumulator non-finite;
// such an output is recomputed in fp32 from global memory at the end, so it equals what the
// fp32-accumulating kernels give (inf or nan only where those give them).
//
// Tunables (specialization constants): BM, BN, BK (workgroup tile), TM, TN (per-invocation tile, each
// a multiple of 4: an invocation's rows and columns come in runs of 4 adjacent, the runs 4*TY (4*TX)
// apart, so its shared-memory reads are 8-byte runs), VEC_A, VEC_B (global load width along the
// contiguous dimension: 1, 2 or 4 halves), A_KMAJOR, B_NMAJOR (the operands' layouts, as matmul.comp),
// PAD (halves added to each shared row, a multiple of 4), CHAIN (fp16 products per partial; divides BK).
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference_uvec2 : require
#extension GL_EXT_control_flow_attributes : enable
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_GOOGLE_include_directive : require

layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;

#ifndef MODE
#define MODE 0
#endif
layout(constant_id = 3) const uint BM = 64u;
layout(constant_id = 4) const uint BN = 64u;
layout(constant_id = 5) const uint BK = 16u;
layout(constant_id = 6) const uint TM = 4u;
layout(constant_id = 7) const uint TN = 4u;
layout(constant_id = 8) const uint VEC_A = 1u;
layout(constant_id = 9) const uint VEC_B = 1u;
layout(constant_id = 10) const uint A_KMAJOR = 1u;
layout(constant_id = 11) const uint B_NMAJOR = 1u;
layout(constant_id = 12) const uint PAD = 0u;
layout(constant_id = 13) const uint CHAIN = 16u;

layout(buffer_reference, std430, buffer_reference_align = 2) buffer SBuf { float16_t v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer V2Buf { f16vec2 v[]; };
layout(buffer_reference, std430, buffer_reference_align = 8) buffer V4Buf { f16vec4 v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer FBuf { float v[]; };

layout(push_constant) uniform Params {
    uvec2 a;
    uvec2 b;
    uvec2 c;       // MODE 1: the fp32 scratch
    uvec2 bias;    // (0, 0): no bias
    uint M, N, K, batch;
    uint sAb, sAm, sAk;
    uint sBb, sBk, sBn;
    uint sCb, sCm, sCn;
    float alpha;
    uint k_chunk;  // K range per split (multiple of BK); K when not split
    uint splits;
} p;

// base + idx * stride elements of 2^shift bytes, in 64 bits without needing shaderInt64
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

const uint TX = BN / TN;   // invocations along N
const uint TY = BM / TM;   // invocations along M
const uint WG = TX * TY;
const uint AS = BM + PAD;  // shared row lengths, in halves
const uint BS = BN + PAD;

shared float16_t As[BK * AS];  // As[k][m]
shared float16_t Bs[BK * BS];  // Bs[k][n]
// the output row (column) of an invocation's i-th (j-th) output: runs of 4, 4*TY (4*TX) apart
#define GM(i) (m0 + ((i) >> 2) * (TY * 4u) + ty * 4u + ((i) & 3u))
#define GN(j) (n0 + ((j) >> 2) * (TX * 4u) + tx * 4u + ((j) & 3u))

// 4 halves from element e along a dimension of stride `stride`, element pos + q existing while
// pos + q < lim (missing ones read 0). Widths 2 and 4 need e % vec == 0 and an aligned base (the
// host checks) and fall back to single loads at the ragged edge. vec is a specialization constant.
f16vec4 load4(uint vec, uvec2 base, uint e, uint stride, uint pos, uint lim) {
    if (vec == 4u && pos + 4u <= lim) return V4Buf(base).v[e >> 2];
    if (vec == 2u && pos + 4u <= lim) return f16vec4(V2Buf(base).v[e >> 1], V2Buf(base).v[(e >> 1) + 1u]);
    f16vec4 r = f16vec4(0.0hf);
    [[unroll]] for (uint q = 0u; q < 4u; ++q)
        if (pos + q < lim) r[q] = SBuf(base).v[e + q * stride];
    return r;
}

// A tile: BM x BK halves in runs of 4 along its contiguous dimension, stored to As[k][m]
const uint A_RUNS = BM * BK / 4u;
const uint B_RUNS = BN * BK / 4u;
void stage_a(uint run, uvec2 abase, uint m0, uint k0, uint kend) {
    if (A_KMAJOR != 0u) {  // run: row m, 4 k
        const uint row = run / (BK / 4u), col = (run % (BK / 4u)) * 4u;
        const uint gm = m0 + row, gk = k0 + col;
        f16vec4 v = gm < p.M ? load4(VEC_A, abase, gm * p.sAm + gk * p.sAk, p.sAk, gk, kend) : f16vec4(0.0hf);
        [[unroll]] for (uint q = 0u; q < 4u; ++q) As[(col + q) * AS + row] = v[q];
    } else {  // run: row k, 4 m
        const uint row = run / (BM / 4u), col = (run % (BM / 4u)) * 4u;
        const uint gk = k0 + row, gm = m0 + col;
        f16vec4 v = gk < kend ? load4(VEC_A, abase, gm * p.sAm + gk * p.sAk, p.sAm, gm, p.M) : f16vec4(0.0hf);
        [[unroll]] for (uint q = 0u; q < 4u; ++q) As[row * AS + col + q] = v[q];
    }
}
void stage_b(uint run, uvec2 bbase, uint n0, uint k0, uint kend) {
    if (B_NMAJOR != 0u) {  // run: row k, 4 n
        const uint row = run / (BN / 4u), col = (run % (BN / 4u)) * 4u;
        const uint gk = k0 + row, gn = n0 + col;
        f16vec4 v = gk < kend ? load4(VEC_B, bbase, gk * p.sBk + gn * p.sBn, p.sBn, gn, p.N) : f16vec4(0.0hf);
        [[unroll]] for (uint q = 0u; q < 4u; ++q) Bs[row * BS + col + q] = v[q];
    } else {  // run: column n, 4 k
        const uint row = run / (BK / 4u), col = (run % (BK / 4u)) * 4u;
        const uint gn = n0 + row, gk = k0 + col;
        f16vec4 v = gn < p.N ? load4(VEC_B, bbase, gk * p.sBk + gn * p.sBn, p.sBk, gk, kend) : f16vec4(0.0hf);
        [[unroll]] for (uint q = 0u; q < 4u; ++q) Bs[(col + q) * BS + row] = v[q];
    }
}

// the fp32 sum over [kbeg, kend) of one output, from global memory: the overflow path
float exact_dot(uvec2 abase, uvec2 bbase, uint gm, uint gn, uint kbeg, uint kend) {
    float s = 0.0;
    for (uint k = kbeg; k < kend; ++k)
        s = fma(float(SBuf(abase).v[gm * p.sAm + k * p.sAk]), float(SBuf(bbase).v[k * p.sBk + gn * p.sBn]), s);
    return s;
}

void main() {
    const uint tid = gl_LocalInvocationIndex;
    const uint tx = tid % TX, ty = tid / TX;
    const uint tiles_n = (p.N + BN - 1u) / BN;
    const uint tiles_m = (p.M + BM - 1u) / BM;
    const uint tile = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    if (tile >= tiles_m * tiles_n) return;  // whole workgroup: uniform
    const uint m0 = (tile / tiles_n) * BM;
    const uint n0 = (tile % tiles_n) * BN;
    const uint bz = gl_WorkGroupID.z / p.splits;
    const uint split = gl_WorkGroupID.z - bz * p.splits;
    const uint kbeg = split * p.k_chunk;
    const uint kend = min(p.K, kbeg + p.k_chunk);
    const uvec2 abase = offset_addr(p.a, bz, p.sAb, 1u);
    const uvec2 bbase = offset_addr(p.b, bz, p.sBb, 1u);

    float acc[TM][TN];
    [[unroll]] for (uint i = 0u; i < TM; ++i)
        [[unroll]] for (uint j = 0u; j < TN; ++j) acc[i][j] = 0.0;

    for (uint k0 = kbeg; k0 < kend; k0 += BK) {
        for (uint r = tid; r < A_RUNS; r += WG) stage_a(r, abase, m0, k0, kend);
        for (uint r = tid; r < B_RUNS; r += WG) stage_b(r, bbase, n0, k0, kend);
        barrier();
        [[dont_unroll]] for (uint kc = 0u; kc < BK; kc += CHAIN) {
            f16vec2 part[TM][TN / 2u];
            [[unroll]] for (uint i = 0u; i < TM; ++i)
                [[unroll]] for (uint j = 0u; j < TN / 2u; ++j) part[i][j] = f16vec2(0.0hf);
            [[unroll]] for (uint u = 0u; u < CHAIN; ++u) {
                const uint k = kc + u;
                float16_t av[TM];
                f16vec2 bv[TN / 2u];
                [[unroll]] for (uint i = 0u; i < TM; i += 4u) {
                    const uint e = k * AS + (i >> 2) * (TY * 4u) + ty * 4u;
                    [[unroll]] for (uint q = 0u; q < 4u; ++q) av[i + q] = As[e + q];
                }
                [[unroll]] for (uint j = 0u; j < TN; j += 4u) {
                    const uint e = k * BS + (j >> 2) * (TX * 4u) + tx * 4u;
                    bv[j >> 1] = f16vec2(Bs[e], Bs[e + 1u]);
                    bv[(j >> 1) + 1u] = f16vec2(Bs[e + 2u], Bs[e + 3u]);
                }
                [[unroll]] for (uint i = 0u; i < TM; ++i)
                    [[unroll]] for (uint j = 0u; j < TN / 2u; ++j) part[i][j] = fma(f16vec2(av[i]), bv[j], part[i][j]);
            }
            [[unroll]] for (uint i = 0u; i < TM; ++i) {
                [[unroll]] for (uint j = 0u; j < TN / 2u; ++j) {
                    acc[i][2u * j] += float(part[i][j].x);
                    acc[i][2u * j + 1u] += float(part[i][j].y);
                }
            }
        }
        barrier();
    }

    // outputs whose fp16 partials left the fp16 range (bit i * TN + j): stored as they are below, then
    // recomputed in fp32 and stored again (one loop, so the fp32 path is not unrolled per output)
    uint bad_lo = 0u, bad_hi = 0u;  // outputs 0-31, 32-63 (TM * TN <= 64)
    [[unroll]] for (uint i = 0u; i < TM; ++i)
        [[unroll]] for (uint j = 0u; j < TN; ++j)
            if (isinf(acc[i][j]) || isnan(acc[i][j])) {
                if (i * TN + j < 32u) bad_lo |= 1u << (i * TN + j);
                else bad_hi |= 1u << (i * TN + j - 32u);
            }

#if MODE == 1
    // raw partial sums: scratch[split][bz][m][n]
    FBuf S = FBuf(offset_addr(p.c, split * p.batch + bz, p.M * p.N, 2u));
    [[unroll]] for (uint i = 0u; i < TM; ++i) {
        const uint gm = GM(i);
        if (gm < p.M) {
            [[unroll]] for (uint j = 0u; j < TN; ++j) {
                const uint gn = GN(j);
                if (gn < p.N) S.v[gm * p.N + gn] = acc[i][j];
            }
        }
    }
    [[dont_unroll]] for (uint o = 0u; o < TM * TN; ++o) {
        if (((o < 32u ? bad_lo : bad_hi) & (1u << (o & 31u))) == 0u) continue;
        const uint gm = GM(o / TN), gn = GN(o % TN);
        if (gm < p.M && gn < p.N) S.v[gm * p.N + gn] = exact_dot(abase, bbase, gm, gn, kbeg, kend);
    }
#else
    SBuf C = SBuf(offset_addr(p.c, bz, p.sCb, 1u));
    const bool has_bias = p.bias != uvec2(0u);
    float bias_v[TN];
    [[unroll]] for (uint j = 0u; j < TN; ++j) {
        const uint gn = GN(j);
        bias_v[j] = (has_bias && gn < p.N) ? float(SBuf(p.bias).v[gn]) : 0.0;
    }
    [[unroll]] for (uint i = 0u; i < TM; ++i) {
        const uint gm = GM(i);
        if (gm < p.M) {
            [[unroll]] for (uint j = 0u; j < TN; ++j) {
                const uint gn = GN(j);
                if (gn < p.N) C.v[gm * p.sCm + gn * p.sCn] = float16_t(activation(p.alpha * acc[i][j] + bias_v[j]));
            }
        }
    }
    [[dont_unroll]] for (uint o = 0u; o < TM * TN; ++o) {
        if (((o < 32u ? bad_lo : bad_hi) & (1u << (o & 31u))) == 0u) continue;
        const uint gm = GM(o / TN), gn = GN(o % TN);
        if (gm >= p.M || gn >= p.N) continue;
        const float bias = has_bias ? float(SBuf(p.bias).v[gn]) : 0.0;
        C.v[gm * p.sCm + gn * p.sCn] = float16_t(activation(p.alpha * exact_dot(abase, bbase, gm, gn, kbeg, kend) + bias));
    }
#endif
}
