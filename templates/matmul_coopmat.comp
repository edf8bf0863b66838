#version 450
// Cooperative-matrix GEMM (VK_KHR_cooperative_matrix):  C[b] = ACT(alpha * A[b] @ B[b] + bias)
// fp16 storage, fp16 x fp16 products, fp32 accumulate; same push constants, strides and
// epilogue as matmul.comp.
// MODE 0: the GEMM with the epilogue (alpha, bias, activation), writes C.
// MODE 1: split-K: workgroup z = b * splits + s covers K range [s*k_chunk, ...) and writes raw
//         fp32 partial sums to the scratch at p.c laid out [splits][batch][M][N]; matmul.comp's
//         MODE 2 pass sums them and applies the epilogue.
//
// The workgroup is SG_M x SG_N subgroups of SUBGROUP_SIZE invocations; each subgroup owns
// FM x FN accumulator matrices of MS x NS (the device's cooperative-matrix shape, with
// depth KS), so the workgroup tile is BM = SG_M*FM*MS by BN = SG_N*FN*NS.
// Each BK slice of A and B is staged in shared memory as fp16 in the operand's own
// contiguity (A: [m][k] when A_KMAJOR, else [k][m]; B: [k][n] when B_NMAJOR, else [n][k]),
// moved as 16-byte octets of halves (one 16-byte global load where the operand is
// contiguous and aligned: VEC 8; narrower or scalar loads otherwise, zero-filled past the
// edges), and read with row- or column-major cooperative loads to match. STAGES 2 keeps
// two shared buffers and prefetches the next slice into registers while the current one
// is multiplied (one barrier per slice); STAGES 1 uses one buffer (less shared memory).
// The accumulators go back through a per-subgroup MS x NS fp32 staging area for the
// strided, bounds-checked epilogue.
// Tunables (specialization constants: one SPIR-V module serves every tile config): SG_M (id 3),
// SG_N (4), FM (5), FN (6), BK (7), PAD (8). Defines (a module each): MS, NS, KS (cooperative-matrix
// type parameters), SUBGROUP_SIZE (the device's), STAGES, VEC_A, VEC_B, A_KMAJOR, B_NMAJOR (code
// paths and cooperative load layouts), DTYPE, ACT, MODE.
// Needs glslang >= 13 (GL_KHR_cooperative_matrix); SPIR-V for Vulkan 1.2 is enough.
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference_uvec2 : require
#extension GL_EXT_control_flow_attributes : enable
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_GOOGLE_include_directive : require
#include "common/dtypes.glsl"

layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;

#ifndef DTYPE
#define DTYPE TVK_DT_FLOAT16
#endif
#if DTYPE != TVK_DT_FLOAT16
#error matmul_coopmat.comp supports fp16 storage only (DTYPE TVK_DT_FLOAT16)
#endif
#ifndef MS
#define MS 16
#endif
#ifndef NS
#define NS 16
#endif
#ifndef KS
#define KS 16
#endif
layout(constant_id = 3) const uint SG_M = 2u;
layout(constant_id = 4) const uint SG_N = 2u;
layout(constant_id = 5) const uint FM = 2u;
layout(constant_id = 6) const uint FN = 2u;
layout(constant_id = 7) const uint BK = 32u;
layout(constant_id = 8) const uint PAD = 8u;
#ifndef SUBGROUP_SIZE
#define SUBGROUP_SIZE 32
#endif
#ifndef VEC_A
#define VEC_A 1
#endif
#ifndef VEC_B
#define VEC_B 1
#endif
#ifndef A_KMAJOR
#define A_KMAJOR 1
#endif
#ifndef B_NMAJOR
#define B_NMAJOR 1
#endif
#ifndef STAGES
#define STAGES 2
#endif
#ifndef MODE
#define MODE 0
#endif

layout(buffer_reference, std430, buffer_reference_align = 2) buffer HBuf { float16_t v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer U1Buf { uint v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer FBuf { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 8) buffer U2Buf { uvec2 v[]; };
layout(buffer_reference, std430, buffer_reference_align = 16) buffer U4Buf { uvec4 v[]; };

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

#include "common/activation.glsl"  // activation(v): the epilogue's ACT

// 8 halves (an "octet", packed in a uvec4) from element e along a dimension of stride
// `stride`, element q valid while pos + q < lim, zero past the edge. VEC > 1 needs
// stride 1, e % VEC == 0 and a VEC-aligned base (the host checks).
uvec4 pack8(float16_t h[8]) {
    return uvec4(packFloat2x16(f16vec2(h[0], h[1])), packFloat2x16(f16vec2(h[2], h[3])),
                 packFloat2x16(f16vec2(h[4], h[5])), packFloat2x16(f16vec2(h[6], h[7])));
}

uvec4 load_octet_scalar(uvec2 base, uint e, uint stride, uint pos, uint lim) {
    float16_t h[8];
    HBuf b = HBuf(base);
    [[unroll]] for (uint q = 0u; q < 8u; ++q) h[q] = (pos + q < lim) ? b.v[e + q * stride] : float16_t(0.0);
    return pack8(h);
}

#define DEFINE_LOAD(NAME, VEC)                                                         \
uvec4 NAME(uvec2 base, uint e, uint stride, uint pos, uint lim) {                      \
    if (VEC == 8 && pos + 8u <= lim) return U4Buf(base).v[e >> 3];                     \
    if (VEC == 4 && pos + 8u <= lim) {                                                 \
        U2Buf b = U2Buf(base);                                                         \
        return uvec4(b.v[e >> 2], b.v[(e >> 2) + 1u]);                                 \
    }                                                                                  \
    if (VEC == 2 && pos + 8u <= lim) {                                                 \
        U1Buf b = U1Buf(base);                                                         \
        uint i = e >> 1;                                                               \
        return uvec4(b.v[i], b.v[i + 1u], b.v[i + 2u], b.v[i + 3u]);                   \
    }                                                                                  \
    return load_octet_scalar(base, e, stride, pos, lim);                               \
}
DEFINE_LOAD(load_a, VEC_A)
DEFINE_LOAD(load_b, VEC_B)

const uint WM = FM * MS;
const uint WN = FN * NS;
const uint BM = SG_M * WM;
const uint BN = SG_N * WN;
const uint NSG = SG_M * SG_N;
const uint WG = NSG * SUBGROUP_SIZE;

// shared tiles in octets (uvec4 = 8 halves); row lengths in halves are multiples of 8
#if A_KMAJOR
const uint A_ROWS = BM, A_ROW = BK + PAD, A_OCT_ROW = BK / 8u;   // As[m][k]
#else
const uint A_ROWS = BK, A_ROW = BM + PAD, A_OCT_ROW = BM / 8u;   // As[k][m]
#endif
#if B_NMAJOR
const uint B_ROWS = BK, B_ROW = BN + PAD, B_OCT_ROW = BN / 8u;   // Bs[k][n]
#else
const uint B_ROWS = BN, B_ROW = BK + PAD, B_OCT_ROW = BK / 8u;   // Bs[n][k]
#endif
const uint A_STRIDE8 = A_ROW / 8u, B_STRIDE8 = B_ROW / 8u;
const uint A_TILE8 = A_ROWS * A_STRIDE8, B_TILE8 = B_ROWS * B_STRIDE8;
const uint A_OCTS = A_ROWS * A_OCT_ROW, B_OCTS = B_ROWS * B_OCT_ROW;
const uint A_ITERS = (A_OCTS + WG - 1u) / WG;
const uint B_ITERS = (B_OCTS + WG - 1u) / WG;

shared uvec4 As[STAGES * A_TILE8];
shared uvec4 Bs[STAGES * B_TILE8];
shared float Cs[NSG * MS * NS];

#define ACC_T coopmat<float, gl_ScopeSubgroup, MS, NS, gl_MatrixUseAccumulator>
#define A_T coopmat<float16_t, gl_ScopeSubgroup, MS, KS, gl_MatrixUseA>
#define B_T coopmat<float16_t, gl_ScopeSubgroup, KS, NS, gl_MatrixUseB>

uvec4 ra[A_ITERS];
uvec4 rb[B_ITERS];

void fetch(uvec2 abase, uvec2 bbase, uint m0, uint n0, uint k0, uint tid) {
    [[unroll]] for (uint it = 0u; it < A_ITERS; ++it) {
        const uint v = tid + it * WG;
        uvec4 val = uvec4(0u);
        if (A_ITERS * WG == A_OCTS || v < A_OCTS) {
            const uint row = v / A_OCT_ROW, q8 = (v % A_OCT_ROW) * 8u;
#if A_KMAJOR
            const uint gm = m0 + row, gk = k0 + q8;
            if (gm < p.M) val = load_a(abase, gm * p.sAm + gk * p.sAk, p.sAk, gk, p.K);
#else
            const uint gk = k0 + row, gm = m0 + q8;
            if (gk < p.K) val = load_a(abase, gm * p.sAm + gk * p.sAk, p.sAm, gm, p.M);
#endif
        }
        ra[it] = val;
    }
    [[unroll]] for (uint it = 0u; it < B_ITERS; ++it) {
        const uint v = tid + it * WG;
        uvec4 val = uvec4(0u);
        if (B_ITERS * WG == B_OCTS || v < B_OCTS) {
            const uint row = v / B_OCT_ROW, q8 = (v % B_OCT_ROW) * 8u;
#if B_NMAJOR
            const uint gk = k0 + row, gn = n0 + q8;
            if (gk < p.K) val = load_b(bbase, gk * p.sBk + gn * p.sBn, p.sBn, gn, p.N);
#else
            const uint gn = n0 + row, gk = k0 + q8;
            if (gn < p.N) val = load_b(bbase, gk * p.sBk + gn * p.sBn, p.sBk, gk, p.K);
#endif
        }
        rb[it] = val;
    }
}

void stash(uint stage, uint tid) {
    [[unroll]] for (uint it = 0u; it < A_ITERS; ++it) {
        const uint v = tid + it * WG;
        if (A_ITERS * WG == A_OCTS || v < A_OCTS)
            As[stage * A_TILE8 + (v / A_OCT_ROW) * A_STRIDE8 + v % A_OCT_ROW] = ra[it];
    }
    [[unroll]] for (uint it = 0u; it < B_ITERS; ++it) {
        const uint v = tid + it * WG;
        if (B_ITERS * WG == B_OCTS || v < B_OCTS)
            Bs[stage * B_TILE8 + (v / B_OCT_ROW) * B_STRIDE8 + v % B_OCT_ROW] = rb[it];
    }
}

void main() {
    const uint tid = gl_LocalInvocationIndex;
    const uint sg = tid / SUBGROUP_SIZE;   // full subgroups: the host requires them
    const uint lane = tid % SUBGROUP_SIZE;
    const uint sm = sg / SG_N, sn = sg % SG_N;
    const uint tiles_n = (p.N + BN - 1u) / BN;
    const uint tiles_m = (p.M + BM - 1u) / BM;
    const uint tile = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    if (tile >= tiles_m * tiles_n) return;
    const uint m0 = (tile / tiles_n) * BM;
    const uint n0 = (tile % tiles_n) * BN;
    const uint bz = gl_WorkGroupID.z / p.splits;
    const uint split = gl_WorkGroupID.z - bz * p.splits;
    const uint kbeg = split * p.k_chunk;
    const uint kend = min(p.K, kbeg + p.k_chunk);

    const uvec2 abase = offset_addr(p.a, bz, p.sAb, 1u);
    const uvec2 bbase = offset_addr(p.b, bz, p.sBb, 1u);

    ACC_T acc[FM][FN];
    [[unroll]] for (uint i = 0u; i < FM; ++i)
        [[unroll]] for (uint j = 0u; j < FN; ++j) acc[i][j] = ACC_T(0.0);

    // a split's range is whole BK slices (k_chunk is a multiple of BK), so loads stop only at K
    fetch(abase, bbase, m0, n0, kbeg, tid);
    stash(0u, tid);
    barrier();
    uint stage = 0u;
    for (uint k0 = kbeg; k0 < kend; k0 += BK) {
        const bool more = k0 + BK < kend;
        if (more) fetch(abase, bbase, m0, n0, k0 + BK, tid);  // in flight during the products
        const uint a_off = stage * A_TILE8, b_off = stage * B_TILE8;
        [[unroll]] for (uint kk = 0u; kk < BK; kk += KS) {
            A_T fa[FM];
            B_T fb[FN];
            [[unroll]] for (uint i = 0u; i < FM; ++i) {
                const uint m = sm * WM + i * MS;
#if A_KMAJOR
                coopMatLoad(fa[i], As, a_off + m * A_STRIDE8 + kk / 8u, A_STRIDE8, gl_CooperativeMatrixLayoutRowMajor);
#else
                coopMatLoad(fa[i], As, a_off + kk * A_STRIDE8 + m / 8u, A_STRIDE8, gl_CooperativeMatrixLayoutColumnMajor);
#endif
            }
            [[unroll]] for (uint j = 0u; j < FN; ++j) {
                const uint n = sn * WN + j * NS;
#if B_NMAJOR
                coopMatLoad(fb[j], Bs, b_off + kk * B_STRIDE8 + n / 8u, B_STRIDE8, gl_CooperativeMatrixLayoutRowMajor);
#else
                coopMatLoad(fb[j], Bs, b_off + n * B_STRIDE8 + kk / 8u, B_STRIDE8, gl_CooperativeMatrixLayoutColumnMajor);
#endif
            }
            [[unroll]] for (uint i = 0u; i < FM; ++i)
                [[unroll]] for (uint j = 0u; j < FN; ++j) acc[i][j] = coopMatMulAdd(fa[i], fb[j], acc[i][j]);
        }
#if STAGES == 2
        if (more) stash(stage ^ 1u, tid);
        barrier();
        stage ^= 1u;
#else
        barrier();
        if (more) {
            stash(0u, tid);
            barrier();
        }
#endif
    }

#if MODE == 1
    FBuf S = FBuf(offset_addr(p.c, split * p.batch + bz, p.M * p.N, 2u));  // scratch[split][bz][m][n]
#else
    HBuf C = HBuf(offset_addr(p.c, bz, p.sCb, 1u));
#endif
    const bool has_bias = p.bias != uvec2(0u);
    const uint cst = sg * MS * NS;
    [[unroll]] for (uint i = 0u; i < FM; ++i) {
        [[unroll]] for (uint j = 0u; j < FN; ++j) {
            coopMatStore(acc[i][j], Cs, cst, NS, gl_CooperativeMatrixLayoutRowMajor);
            barrier();
            const uint mb = m0 + sm * WM + i * MS, nb = n0 + sn * WN + j * NS;
            for (uint e = lane; e < MS * NS; e += SUBGROUP_SIZE) {
                const uint r = e / NS, c = e - r * NS;
                const uint gm = mb + r, gn = nb + c;
                if (gm < p.M && gn < p.N) {
#if MODE == 1
                    S.v[gm * p.N + gn] = Cs[cst + e];
#else
                    float v = p.alpha * Cs[cst + e];
                    if (has_bias) v += float(HBuf(p.bias).v[gn]);
                    C.v[gm * p.sCm + gn * p.sCn] = float16_t(activation(v));
#endif
                }
            }
            barrier();
        }
    }
}
