#version 450
// Tiled shared-memory GEMM:  C[b] = ACT(alpha * A[b] @ B[b] + bias)   (fp32 accumulate)
//
// A is M x K, B is K x N, C is M x N, each with arbitrary element strides
// (batch, row, col) so transposed and broadcast (batch stride 0) views need no copy.
// bias (address 0 = none) is one value per output column n.
//
// MODE 0: GEMM with the epilogue (alpha, bias, activation), writes C.
// MODE 1: split-K GEMM: workgroup z = b * splits + s covers K range [s*k_chunk, ...),
//         writes raw fp32 partial sums to the scratch buffer at p.c laid out
//         [splits][batch][M][N] (contiguous).
// MODE 2: split-K reduce: one thread per output element sums the partials of scratch
//         buffer p.a and applies the epilogue to C (a 1-D grid over batch*M*N).
//
// Tunables and layout (specialization constants: one SPIR-V module serves every config):
// BM, BN, BK (workgroup tile), TM, TN (per-thread tile; the workgroup has (BM/TM)*(BN/TN)
// invocations, which must equal local_size_x), VEC_A, VEC_B (vector width of global loads along
// the contiguous dimension: 1, 2, 4), A_KMAJOR (A is contiguous along K, else along M), B_NMAJOR
// (B contiguous along N, else along K), UNROLL (inner-product unroll over BK), PAD (shared-memory
// row padding, in floats).
// Defines (a module each): MODE, ACT (the epilogue activation: common/activation.glsl), DTYPE
// (storage: fp32, fp16 or bf16, codes of common/dtypes.glsl). PREFETCH (specialization constant
// 14; 1: each invocation loads the next BK slice into registers while the current one is
// multiplied, hiding the global loads' latency for a few registers; 0: load, then multiply).
// FRAG (specialization constant 15): 0, an invocation's TM rows are TY apart (TN columns TX apart),
// each read from shared memory on its own; 1, they come in runs of 4 adjacent rows (columns), the
// runs 4*TY (4*TX) apart, each run 4 floats at a 16-byte-aligned offset that the compiler can load
// at once (an 8x8 tile's products then need 4 shared loads per 64 FMAs, not 16). FRAG 1 needs TM,
// TN and PAD multiples of 4 (the host checks). STAGES (specialization constant 16): 1, one shared
// buffer, two barriers per K slice; 2, two buffers: the next slice (loaded into registers during
// the products, as PREFETCH does) is stored to the other buffer after them, one barrier per slice,
// twice the shared memory.
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
layout(constant_id = 12) const uint UNROLL = 4u;
layout(constant_id = 13) const uint PAD = 0u;
layout(constant_id = 14) const uint PREFETCH = 0u;
layout(constant_id = 15) const uint FRAG = 0u;
layout(constant_id = 16) const uint STAGES = 1u;
// ------------------------------------------------------------------ storage types
#if DTYPE == TVK_DT_FLOAT32
#define T float
#define T2 vec2
#define T4 vec4
#define ESHIFT 2u
#define TO_F(x) (x)
#define TO_F2(x) (x)
#define TO_F4(x) (x)
#define FROM_F(x) (x)
#elif DTYPE == TVK_DT_FLOAT16
#define T float16_t
#define T2 f16vec2
#define T4 f16vec4
#define ESHIFT 1u
#define TO_F(x) float(x)
#define TO_F2(x) vec2(x)
#define TO_F4(x) vec4(x)
#define FROM_F(x) float16_t(x)
#else  // bfloat16 (common/bf16.glsl)
#define TVK_BF16_WORD uint16_t
#include "common/bf16.glsl"
#define T uint16_t
#define T2 u16vec2
#define T4 u16vec4
#define ESHIFT 1u
#define TO_F(x) tvk_bf16_float(uint(x))
#define TO_F2(x) tvk_bf16_float(uvec2(x))
#define TO_F4(x) tvk_bf16_float(uvec4(x))
#define FROM_F(x) tvk_bf16_bits(x)
#endif

#if DTYPE == TVK_DT_FLOAT32
layout(buffer_reference, std430, buffer_reference_align = 4) buffer SBuf { T v[]; };
layout(buffer_reference, std430, buffer_reference_align = 8) buffer V2Buf { T2 v[]; };
layout(buffer_reference, std430, buffer_reference_align = 16) buffer V4Buf { T4 v[]; };
#else
layout(buffer_reference, std430, buffer_reference_align = 2) buffer SBuf { T v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer V2Buf { T2 v[]; };
layout(buffer_reference, std430, buffer_reference_align = 8) buffer V4Buf { T4 v[]; };
#endif
layout(buffer_reference, std430, buffer_reference_align = 4) buffer FBuf { float v[]; };

layout(push_constant) uniform Params {
    uvec2 a;       // MODE 2: the fp32 scratch with the partial sums
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

// base + idx * stride elements, in 64 bits without needing shaderInt64
uvec2 offset_addr(uvec2 base, uint idx, uint stride, uint shift) {
    uint hi, lo;
    umulExtended(idx, stride, hi, lo);
    if (shift > 0u) {
        hi = (hi << shift) | (lo >> (32u - shift));
        lo <<= shift;
    }
    uint carry;
    uint rlo = uaddCarry(base.x, lo, carry);
    return uvec2(rlo, base.y + hi + carry);
}

// ------------------------------------------------------------------ epilogue
#include "common/activation.glsl"

#if MODE == 2
// ------------------------------------------------------------------ split-K reduce
void main() {
    const uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    const uint idx = group * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    const uint mn = p.M * p.N;
    if (idx >= mn * p.batch) return;
    const uint bz = idx / mn, r = idx - bz * mn;
    const uint m = r / p.N, n = r - m * p.N;
    FBuf part = FBuf(p.a);
    const uint slice = p.batch * mn;
    float acc = 0.0;
    for (uint s = 0u; s < p.splits; ++s) acc += part.v[s * slice + idx];
    float v = p.alpha * acc;
    if (p.bias != uvec2(0u)) v += TO_F(SBuf(p.bias).v[n]);
    SBuf C = SBuf(offset_addr(p.c, bz, p.sCb, ESHIFT));
    C.v[m * p.sCm + n * p.sCn] = FROM_F(activation(v));
}

#else
// ------------------------------------------------------------------ tiled GEMM
const uint TX = BN / TN;   // threads along N
const uint TY = BM / TM;   // threads along M
const uint WG = TX * TY;
const uint AS = BM + PAD;  // shared row lengths
const uint BS = BN + PAD;

shared float As[STAGES * BK * AS];  // As[stage][k][m]
shared float Bs[STAGES * BK * BS];  // Bs[stage][k][n]
// the output row (column) of an invocation's i-th (j-th) accumulator
#define GM(i) (FRAG != 0u ? m0 + ((i) >> 2) * (TY * 4u) + ty * 4u + ((i) & 3u) : m0 + ty + (i) * TY)
#define GN(j) (FRAG != 0u ? n0 + ((j) >> 2) * (TX * 4u) + tx * 4u + ((j) & 3u) : n0 + tx + (j) * TX)

const uint A_PER = (A_KMAJOR != 0u ? BK : BM) / VEC_A;  // vectors per m-row (k-row when not K-major) of the tile
const uint A_VECS = BM * BK / VEC_A;
const uint A_ITERS = (A_VECS + WG - 1) / WG;
const uint B_PER = (B_NMAJOR != 0u ? BN : BK) / VEC_B;
const uint B_VECS = BN * BK / VEC_B;
const uint B_ITERS = (B_VECS + WG - 1) / WG;

// Load up to 4 elements starting at element `e` along a dimension where consecutive
// elements are `stride` apart and element pos + q exists while pos + q < lim; missing
// elements read as 0. The vector forms need e % VEC == 0 and a VEC-aligned base (the
// host checks both) and fall back to scalar loads at the ragged edge.
vec4 load_v1(uvec2 base, uint e, uint stride, uint pos, uint lim) {
    return vec4(pos < lim ? TO_F(SBuf(base).v[e]) : 0.0, 0.0, 0.0, 0.0);
}
vec4 load_v2(uvec2 base, uint e, uint stride, uint pos, uint lim) {
    if (pos + 2u <= lim) return vec4(TO_F2(V2Buf(base).v[e >> 1]), 0.0, 0.0);
    return load_v1(base, e, stride, pos, lim);
}
vec4 load_v4(uvec2 base, uint e, uint stride, uint pos, uint lim) {
    if (pos + 4u <= lim) return TO_F4(V4Buf(base).v[e >> 2]);
    vec4 r = vec4(0.0);
    [[unroll]] for (uint q = 0u; q < 3u; ++q)
        if (pos + q < lim) r[q] = TO_F(SBuf(base).v[e + q * stride]);
    return r;
}
// VEC is a specialization constant: the driver keeps only the load it selects
vec4 load_vec(uint vec, uvec2 base, uint e, uint stride, uint pos, uint lim) {
    if (vec == 4u) return load_v4(base, e, stride, pos, lim);
    if (vec == 2u) return load_v2(base, e, stride, pos, lim);
    return load_v1(base, e, stride, pos, lim);
}
#define LOAD_A(base, e, stride, pos, lim) load_vec(VEC_A, base, e, stride, pos, lim)
#define LOAD_B(base, e, stride, pos, lim) load_vec(VEC_B, base, e, stride, pos, lim)

// Vector v of the A (B) tile of the slice at k0 (zero past the edges), and its store to shared
// memory transposed to As[k][m] (Bs[k][n]).
vec4 fetch_a(uint v, uvec2 abase, uint m0, uint k0, uint kend) {
    const uint row = v / A_PER, col = (v % A_PER) * VEC_A;
    vec4 val = vec4(0.0);
    if (A_KMAJOR != 0u) {
        const uint gm = m0 + row, gk = k0 + col;  // row: m, col: k
        if (gm < p.M) val = LOAD_A(abase, gm * p.sAm + gk * p.sAk, p.sAk, gk, kend);
    } else {
        const uint gk = k0 + row, gm = m0 + col;  // row: k, col: m
        if (gk < kend) val = LOAD_A(abase, gm * p.sAm + gk * p.sAk, p.sAm, gm, p.M);
    }
    return val;
}
void stash_a(uint v, vec4 val, uint base) {
    const uint row = v / A_PER, col = (v % A_PER) * VEC_A;
    if (A_KMAJOR != 0u) {
        [[unroll]] for (uint q = 0u; q < VEC_A; ++q) As[base + (col + q) * AS + row] = val[q];
    } else {
        [[unroll]] for (uint q = 0u; q < VEC_A; ++q) As[base + row * AS + col + q] = val[q];
    }
}
vec4 fetch_b(uint v, uvec2 bbase, uint n0, uint k0, uint kend) {
    const uint row = v / B_PER, col = (v % B_PER) * VEC_B;
    vec4 val = vec4(0.0);
    if (B_NMAJOR != 0u) {
        const uint gk = k0 + row, gn = n0 + col;  // row: k, col: n
        if (gk < kend) val = LOAD_B(bbase, gk * p.sBk + gn * p.sBn, p.sBn, gn, p.N);
    } else {
        const uint gn = n0 + row, gk = k0 + col;  // row: n, col: k
        if (gn < p.N) val = LOAD_B(bbase, gk * p.sBk + gn * p.sBn, p.sBk, gk, kend);
    }
    return val;
}
void stash_b(uint v, vec4 val, uint base) {
    const uint row = v / B_PER, col = (v % B_PER) * VEC_B;
    if (B_NMAJOR != 0u) {
        [[unroll]] for (uint q = 0u; q < VEC_B; ++q) Bs[base + row * BS + col + q] = val[q];
    } else {
        [[unroll]] for (uint q = 0u; q < VEC_B; ++q) Bs[base + (col + q) * BS + row] = val[q];
    }
}
// whether vector v of a tile exists (the last round of a workgroup's loads may be partial)
#define A_VALID(v) (A_ITERS * WG == A_VECS || (v) < A_VECS)
#define B_VALID(v) (B_ITERS * WG == B_VECS || (v) < B_VECS)

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

    const uvec2 abase = offset_addr(p.a, bz, p.sAb, ESHIFT);
    const uvec2 bbase = offset_addr(p.b, bz, p.sBb, ESHIFT);

    float acc[TM][TN];
    [[unroll]] for (uint i = 0u; i < TM; ++i)
        [[unroll]] for (uint j = 0u; j < TN; ++j) acc[i][j] = 0.0;

    vec4 ra[A_ITERS];  // this slice's vectors (PREFETCH, STAGES 2: loaded during the previous slice)
    vec4 rb[B_ITERS];
    const bool ahead = PREFETCH != 0u || STAGES > 1u;  // loads run a slice ahead, into registers
    if (ahead) {
        [[unroll]] for (uint it = 0u; it < A_ITERS; ++it)
            if (A_VALID(tid + it * WG)) ra[it] = fetch_a(tid + it * WG, abase, m0, kbeg, kend);
        [[unroll]] for (uint it = 0u; it < B_ITERS; ++it)
            if (B_VALID(tid + it * WG)) rb[it] = fetch_b(tid + it * WG, bbase, n0, kbeg, kend);
    }
    uint stage = 0u;  // STAGES 2: the buffer holding this slice
    if (STAGES > 1u) {
        [[unroll]] for (uint it = 0u; it < A_ITERS; ++it)
            if (A_VALID(tid + it * WG)) stash_a(tid + it * WG, ra[it], 0u);
        [[unroll]] for (uint it = 0u; it < B_ITERS; ++it)
            if (B_VALID(tid + it * WG)) stash_b(tid + it * WG, rb[it], 0u);
        barrier();
    }
    for (uint k0 = kbeg; k0 < kend; k0 += BK) {
        // ---- STAGES 1: this slice -> shared memory, from the registers it was prefetched into, or loaded now
        if (STAGES == 1u) {
            [[unroll]] for (uint it = 0u; it < A_ITERS; ++it) {
                if (!A_VALID(tid + it * WG)) continue;
                if (PREFETCH == 0u) ra[it] = fetch_a(tid + it * WG, abase, m0, k0, kend);
                stash_a(tid + it * WG, ra[it], 0u);
            }
            [[unroll]] for (uint it = 0u; it < B_ITERS; ++it) {
                if (!B_VALID(tid + it * WG)) continue;
                if (PREFETCH == 0u) rb[it] = fetch_b(tid + it * WG, bbase, n0, k0, kend);
                stash_b(tid + it * WG, rb[it], 0u);
            }
            barrier();
        }
        const uint sa = stage * (BK * AS), sb = stage * (BK * BS);
        if (ahead && k0 + BK < kend) {  // the next slice's loads are in flight during this one's products
            [[unroll]] for (uint it = 0u; it < A_ITERS; ++it)
                if (A_VALID(tid + it * WG)) ra[it] = fetch_a(tid + it * WG, abase, m0, k0 + BK, kend);
            [[unroll]] for (uint it = 0u; it < B_ITERS; ++it)
                if (B_VALID(tid + it * WG)) rb[it] = fetch_b(tid + it * WG, bbase, n0, k0 + BK, kend);
        }

        // ---- inner product over the BK slice
        [[dont_unroll]] for (uint kk = 0u; kk < BK; kk += UNROLL) {
            [[unroll]] for (uint u = 0u; u < UNROLL; ++u) {
                float av[TM], bv[TN];
                if (FRAG != 0u) {
                    [[unroll]] for (uint i = 0u; i < TM; i += 4u) {
                        const uint e = sa + (kk + u) * AS + (i >> 2) * (TY * 4u) + ty * 4u;  // 16-byte aligned
                        [[unroll]] for (uint q = 0u; q < 4u; ++q) av[i + q] = As[e + q];
                    }
                    [[unroll]] for (uint j = 0u; j < TN; j += 4u) {
                        const uint e = sb + (kk + u) * BS + (j >> 2) * (TX * 4u) + tx * 4u;
                        [[unroll]] for (uint q = 0u; q < 4u; ++q) bv[j + q] = Bs[e + q];
                    }
                } else {
                    [[unroll]] for (uint i = 0u; i < TM; ++i) av[i] = As[sa + (kk + u) * AS + ty + i * TY];
                    [[unroll]] for (uint j = 0u; j < TN; ++j) bv[j] = Bs[sb + (kk + u) * BS + tx + j * TX];
                }
                [[unroll]] for (uint i = 0u; i < TM; ++i)
                    [[unroll]] for (uint j = 0u; j < TN; ++j) acc[i][j] = fma(av[i], bv[j], acc[i][j]);
            }
        }
        if (STAGES > 1u && k0 + BK < kend) {  // the next slice -> the other buffer, which nobody reads now
            [[unroll]] for (uint it = 0u; it < A_ITERS; ++it)
                if (A_VALID(tid + it * WG)) stash_a(tid + it * WG, ra[it], (stage ^ 1u) * (BK * AS));
            [[unroll]] for (uint it = 0u; it < B_ITERS; ++it)
                if (B_VALID(tid + it * WG)) stash_b(tid + it * WG, rb[it], (stage ^ 1u) * (BK * BS));
            stage ^= 1u;
        }
        barrier();
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
#else
    SBuf C = SBuf(offset_addr(p.c, bz, p.sCb, ESHIFT));
    const bool has_bias = p.bias != uvec2(0u);
    float bias_v[TN];
    [[unroll]] for (uint j = 0u; j < TN; ++j) {
        const uint gn = GN(j);
        bias_v[j] = (has_bias && gn < p.N) ? TO_F(SBuf(p.bias).v[gn]) : 0.0;
    }
    [[unroll]] for (uint i = 0u; i < TM; ++i) {
        const uint gm = GM(i);
        if (gm < p.M) {
            [[unroll]] for (uint j = 0u; j < TN; ++j) {
                const uint gn = GN(j);
                if (gn < p.N) C.v[gm * p.sCm + gn * p.sCn] = FROM_F(activation(p.alpha * acc[i][j] + bias_v[j]));
            }
        }
    }
#endif
}
#endif
