#version 450
// Cooperative-matrix GEMM (VK_KHR_cooperative_matrix):  C[b] = ACT(alpha * A[b] @ B[b] + bias)
// fp16 storage, fp16 x fp16 products, fp32 accumulate; same push constants, strides and
// epilogue as matmul.comp (MODE 0 only).
//
// The workgroup is SG_M x SG_N subgroups of SUBGROUP_SIZE invocations; each subgroup owns
// FM x FN accumulator matrices of MS x NS (the device's cooperative-matrix shape, with
// depth KS), so the workgroup tile is BM = SG_M*FM*MS by BN = SG_N*FN*NS. Each BK slice
// of A and B is staged in shared memory as fp16 (any strides; zero-filled past the
// edges), then loaded into cooperative matrices. The accumulators go back through a
// per-subgroup MS x NS fp32 staging area for the strided, bounds-checked epilogue.
// Needs glslang >= 13 (GL_KHR_cooperative_matrix); SPIR-V for Vulkan 1.2 is enough.
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference_uvec2 : require
#extension GL_EXT_control_flow_attributes : enable
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require

layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;

#ifndef DTYPE
#define DTYPE 1
#endif
#if DTYPE != 1
#error matmul_coopmat.comp supports fp16 storage only (DTYPE 1)
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
#ifndef SG_M
#define SG_M 2
#endif
#ifndef SG_N
#define SG_N 2
#endif
#ifndef FM
#define FM 2
#endif
#ifndef FN
#define FN 2
#endif
#ifndef BK
#define BK 32
#endif
#ifndef PAD
#define PAD 8
#endif
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
#ifndef ACT
#define ACT 0
#endif

layout(buffer_reference, std430, buffer_reference_align = 2) buffer HBuf { float16_t v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer H2Buf { f16vec2 v[]; };
layout(buffer_reference, std430, buffer_reference_align = 8) buffer H4Buf { f16vec4 v[]; };

layout(push_constant) uniform Params {
    uvec2 a;
    uvec2 b;
    uvec2 c;
    uvec2 bias;    // (0, 0): no bias
    uint M, N, K, batch;
    uint sAb, sAm, sAk;
    uint sBb, sBk, sBn;
    uint sCb, sCm, sCn;
    float alpha;
    uint k_chunk;  // unused here (no split-K)
    uint splits;   // 1
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

float erf_approx(float x) {  // Abramowitz & Stegun 7.1.26, |error| < 1.5e-7
    float s = sign(x), ax = abs(x);
    float t = 1.0 / (1.0 + 0.3275911 * ax);
    float y = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
    return s * (1.0 - y * exp(-ax * ax));
}

float tanh_safe(float x) {
    float e = exp(-2.0 * abs(x));
    return sign(x) * (1.0 - e) / (1.0 + e);
}

float activation(float v) {
#if ACT == 1
    return max(v, 0.0);
#elif ACT == 2
    return 0.5 * v * (1.0 + erf_approx(v * 0.70710678118654752));
#elif ACT == 3
    return 0.5 * v * (1.0 + tanh_safe(0.79788456080286536 * (v + 0.044715 * v * v * v)));
#elif ACT == 4
    return v / (1.0 + exp(-v));
#elif ACT == 5
    return 1.0 / (1.0 + exp(-v));
#elif ACT == 6
    return tanh_safe(v);
#else
    return v;
#endif
}

// up to 4 halves from element e along a dimension of stride `stride`, valid while pos + q < lim
f16vec4 load_v1(uvec2 base, uint e, uint stride, uint pos, uint lim) {
    return f16vec4(pos < lim ? HBuf(base).v[e] : float16_t(0.0), float16_t(0.0), float16_t(0.0), float16_t(0.0));
}
#if VEC_A == 2 || VEC_B == 2
f16vec4 load_v2(uvec2 base, uint e, uint stride, uint pos, uint lim) {
    if (pos + 2u <= lim) return f16vec4(H2Buf(base).v[e >> 1], float16_t(0.0), float16_t(0.0));
    return load_v1(base, e, stride, pos, lim);
}
#endif
#if VEC_A == 4 || VEC_B == 4
f16vec4 load_v4(uvec2 base, uint e, uint stride, uint pos, uint lim) {
    if (pos + 4u <= lim) return H4Buf(base).v[e >> 2];
    f16vec4 r = f16vec4(float16_t(0.0));
    [[unroll]] for (uint q = 0u; q < 3u; ++q)
        if (pos + q < lim) r[q] = HBuf(base).v[e + q * stride];
    return r;
}
#endif
#if VEC_A == 4
#define LOAD_A load_v4
#elif VEC_A == 2
#define LOAD_A load_v2
#else
#define LOAD_A load_v1
#endif
#if VEC_B == 4
#define LOAD_B load_v4
#elif VEC_B == 2
#define LOAD_B load_v2
#else
#define LOAD_B load_v1
#endif

const uint WM = FM * MS;
const uint WN = FN * NS;
const uint BM = SG_M * WM;
const uint BN = SG_N * WN;
const uint NSG = SG_M * SG_N;
const uint WG = NSG * SUBGROUP_SIZE;
const uint AS = BK + PAD;  // As[m][k]: row stride in halves (keep a multiple of 8: 16 bytes)
const uint BS = BN + PAD;  // Bs[k][n]

shared float16_t As[BM * AS];
shared float16_t Bs[BK * BS];
shared float Cs[NSG * MS * NS];

#if A_KMAJOR
const uint A_PER = BK / VEC_A;
#else
const uint A_PER = BM / VEC_A;
#endif
const uint A_VECS = BM * BK / VEC_A;
const uint A_ITERS = (A_VECS + WG - 1) / WG;
#if B_NMAJOR
const uint B_PER = BN / VEC_B;
#else
const uint B_PER = BK / VEC_B;
#endif
const uint B_VECS = BN * BK / VEC_B;
const uint B_ITERS = (B_VECS + WG - 1) / WG;

#define ACC_T coopmat<float, gl_ScopeSubgroup, MS, NS, gl_MatrixUseAccumulator>
#define A_T coopmat<float16_t, gl_ScopeSubgroup, MS, KS, gl_MatrixUseA>
#define B_T coopmat<float16_t, gl_ScopeSubgroup, KS, NS, gl_MatrixUseB>

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
    const uint bz = gl_WorkGroupID.z;

    const uvec2 abase = offset_addr(p.a, bz, p.sAb, 1u);
    const uvec2 bbase = offset_addr(p.b, bz, p.sBb, 1u);

    ACC_T acc[FM][FN];
    [[unroll]] for (uint i = 0u; i < FM; ++i)
        [[unroll]] for (uint j = 0u; j < FN; ++j) acc[i][j] = ACC_T(0.0);

    for (uint k0 = 0u; k0 < p.K; k0 += BK) {
        [[unroll]] for (uint it = 0u; it < A_ITERS; ++it) {
            const uint v = tid + it * WG;
            if (A_ITERS * WG == A_VECS || v < A_VECS) {
                const uint row = v / A_PER, col = (v % A_PER) * VEC_A;
                f16vec4 val = f16vec4(float16_t(0.0));
#if A_KMAJOR
                const uint gm = m0 + row, gk = k0 + col;
                if (gm < p.M) val = LOAD_A(abase, gm * p.sAm + gk * p.sAk, p.sAk, gk, p.K);
                [[unroll]] for (uint q = 0u; q < VEC_A; ++q) As[row * AS + col + q] = val[q];
#else
                const uint gk = k0 + row, gm = m0 + col;
                if (gk < p.K) val = LOAD_A(abase, gm * p.sAm + gk * p.sAk, p.sAm, gm, p.M);
                [[unroll]] for (uint q = 0u; q < VEC_A; ++q) As[(col + q) * AS + row] = val[q];
#endif
            }
        }
        [[unroll]] for (uint it = 0u; it < B_ITERS; ++it) {
            const uint v = tid + it * WG;
            if (B_ITERS * WG == B_VECS || v < B_VECS) {
                const uint row = v / B_PER, col = (v % B_PER) * VEC_B;
                f16vec4 val = f16vec4(float16_t(0.0));
#if B_NMAJOR
                const uint gk = k0 + row, gn = n0 + col;
                if (gk < p.K) val = LOAD_B(bbase, gk * p.sBk + gn * p.sBn, p.sBn, gn, p.N);
                [[unroll]] for (uint q = 0u; q < VEC_B; ++q) Bs[row * BS + col + q] = val[q];
#else
                const uint gn = n0 + row, gk = k0 + col;
                if (gn < p.N) val = LOAD_B(bbase, gk * p.sBk + gn * p.sBn, p.sBk, gk, p.K);
                [[unroll]] for (uint q = 0u; q < VEC_B; ++q) Bs[(col + q) * BS + row] = val[q];
#endif
            }
        }
        barrier();

        [[unroll]] for (uint kk = 0u; kk < BK; kk += KS) {
            A_T fa[FM];
            B_T fb[FN];
            [[unroll]] for (uint i = 0u; i < FM; ++i)
                coopMatLoad(fa[i], As, (sm * WM + i * MS) * AS + kk, AS, gl_CooperativeMatrixLayoutRowMajor);
            [[unroll]] for (uint j = 0u; j < FN; ++j)
                coopMatLoad(fb[j], Bs, kk * BS + sn * WN + j * NS, BS, gl_CooperativeMatrixLayoutRowMajor);
            [[unroll]] for (uint i = 0u; i < FM; ++i)
                [[unroll]] for (uint j = 0u; j < FN; ++j) acc[i][j] = coopMatMulAdd(fa[i], fb[j], acc[i][j]);
        }
        barrier();
    }

    HBuf C = HBuf(offset_addr(p.c, bz, p.sCb, 1u));
    const bool has_bias = p.bias != uvec2(0u);
    const uint stage = sg * MS * NS;
    [[unroll]] for (uint i = 0u; i < FM; ++i) {
        [[unroll]] for (uint j = 0u; j < FN; ++j) {
            coopMatStore(acc[i][j], Cs, stage, NS, gl_CooperativeMatrixLayoutRowMajor);
            barrier();
            const uint mb = m0 + sm * WM + i * MS, nb = n0 + sn * WN + j * NS;
            for (uint e = lane; e < MS * NS; e += SUBGROUP_SIZE) {
                const uint r = e / NS, c = e - r * NS;
                const uint gm = mb + r, gn = nb + c;
                if (gm < p.M && gn < p.N) {
                    float v = p.alpha * Cs[stage + e];
                    if (has_bias) v += float(HBuf(p.bias).v[gn]);
                    C.v[gm * p.sCm + gn * p.sCn] = float16_t(activation(v));
                }
            }
            barrier();
        }
    }
}
