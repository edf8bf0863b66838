#version 450
// Workgroup-scope cooperative-matrix GEMM (VK_NV_cooperative_matrix2):
//     C[b] = ACT(alpha * A[b] @ B[b] + bias)
// fp16 or bf16 storage and products, fp32 accumulate; same push constants, strides,
// epilogue and split-K partials as matmul.comp (MODE 0: the GEMM and its epilogue;
// MODE 1: fp32 partial sums of the K range [split*k_chunk, ...) to the scratch at p.c laid
// out [splits][batch][M][N], summed by matmul.comp's MODE 2 pass).
//
// The whole workgroup owns one BM x BN accumulator; each BK slice of A and B is one
// cooperative load through a tensor layout. The driver stages those loads through shared
// memory and splits the tile over its subgroups itself, which is what the subgroup-scope
// kernel (matmul_coopmat.comp) does by hand. Tensor layouts clamp at the operand's edges
// (zero fill on loads, dropped stores), so any M, N and K run without padding.
// An operand is read along its unit-stride dimension: A_KMAJOR 1 reads A as [m][k] rows,
// 0 as [k][m] rows through a transposing view (likewise B_NMAJOR, C_NMAJOR); the host
// sends the kernel only operands with a unit stride (matmul_coopmat2.py).
// Tunables (specialization constants: one module serves every tile): the workgroup size
// (id 0, a size the device lists for workgroup-scope matrices), BM (3), BN (4), BK (5);
// the layouts (6-8) and ALIGNED (9: every row start 16-byte aligned, a hint the host checks)
// are specialization constants too. Defines (a module each): DTYPE, ACT, MODE.
// Needs glslang >= 15 (GL_NV_cooperative_matrix2), which needs SPIR-V 1.6:
// target-env: vulkan1.3
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference_uvec2 : require
#extension GL_EXT_control_flow_attributes : enable
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_NV_cooperative_matrix2 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_bfloat16 : enable
#extension GL_GOOGLE_include_directive : require
#include "common/dtypes.glsl"

layout(local_size_x_id = 0, local_size_y = 1, local_size_z = 1) in;

#ifndef DTYPE
#define DTYPE TVK_DT_FLOAT16
#endif
#if DTYPE == TVK_DT_FLOAT16
#define ELEM float16_t
#elif DTYPE == TVK_DT_BFLOAT16
#define ELEM bfloat16_t
#else
#error matmul_coopmat2.comp supports fp16 and bf16 storage only (DTYPE TVK_DT_FLOAT16, TVK_DT_BFLOAT16)
#endif
#ifndef MODE
#define MODE 0
#endif
layout(constant_id = 3) const uint BM = 128u;
layout(constant_id = 4) const uint BN = 128u;
layout(constant_id = 5) const uint BK = 32u;
layout(constant_id = 6) const bool A_KMAJOR = true;
layout(constant_id = 7) const bool B_NMAJOR = true;
layout(constant_id = 8) const bool C_NMAJOR = true;
layout(constant_id = 9) const bool ALIGNED = false;

layout(buffer_reference, std430, buffer_reference_align = 2) buffer HBuf { ELEM v[]; };
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

#define ACC_T coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>
#define CLAMPED tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV>  // zeros past the edges, stores dropped
#define A_T coopmat<ELEM, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA>
#define B_T coopmat<ELEM, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseB>

// the epilogue of one element (row, col of the tile): alpha, the bias of its column, ACT
uint epilogue_n0;
float epilogue(const in uint row, const in uint col, const in float x, const in float alpha) {
    float v = alpha * x;
    const uint gn = epilogue_n0 + col;
    if (p.bias != uvec2(0u) && gn < p.N) v += float(HBuf(p.bias).v[gn]);
    return activation(v);
}

void main() {
    const uint tiles_n = (p.N + BN - 1u) / BN;
    const uint tiles_m = (p.M + BM - 1u) / BM;
    const uint tile = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    if (tile >= tiles_m * tiles_n) return;  // uniform over the workgroup
    const uint m0 = (tile / tiles_n) * BM;
    const uint n0 = (tile % tiles_n) * BN;
    const uint bz = gl_WorkGroupID.z / p.splits;
    const uint split = gl_WorkGroupID.z - bz * p.splits;
    const uint kbeg = split * p.k_chunk;
    const uint kend = min(p.K, kbeg + p.k_chunk);

    HBuf A = HBuf(offset_addr(p.a, bz, p.sAb, 1u));
    HBuf B = HBuf(offset_addr(p.b, bz, p.sBb, 1u));
    // row strides of the layouts (elements); ALIGNED tells the compiler they are multiples of 8
    uint a_row = A_KMAJOR ? p.sAm : p.sAk;
    uint b_row = B_NMAJOR ? p.sBk : p.sBn;
    if (ALIGNED) {
        a_row &= ~7u;
        b_row &= ~7u;
    }
    // the K extent is this split's end: loads past it read zeros
    CLAMPED la = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
    CLAMPED lb = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
    la = A_KMAJOR ? setTensorLayoutDimensionNV(la, p.M, kend) : setTensorLayoutDimensionNV(la, kend, p.M);
    lb = B_NMAJOR ? setTensorLayoutDimensionNV(lb, kend, p.N) : setTensorLayoutDimensionNV(lb, p.N, kend);
    la = setTensorLayoutStrideNV(la, a_row, 1);
    lb = setTensorLayoutStrideNV(lb, b_row, 1);
    tensorViewNV<2, false, 1, 0> transposed = createTensorViewNV(2, false, 1, 0);

    ACC_T acc = ACC_T(0.0);
    for (uint k0 = kbeg; k0 < kend; k0 += BK) {
        A_T fa;
        B_T fb;
        if (A_KMAJOR) coopMatLoadTensorNV(fa, A.v, 0, sliceTensorLayoutNV(la, m0, BM, k0, BK));
        else coopMatLoadTensorNV(fa, A.v, 0, sliceTensorLayoutNV(la, k0, BK, m0, BM), transposed);
        if (B_NMAJOR) coopMatLoadTensorNV(fb, B.v, 0, sliceTensorLayoutNV(lb, k0, BK, n0, BN));
        else coopMatLoadTensorNV(fb, B.v, 0, sliceTensorLayoutNV(lb, n0, BN, k0, BK), transposed);
        acc = coopMatMulAdd(fa, fb, acc);
    }

    CLAMPED lc = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
#if MODE == 1
    FBuf S = FBuf(offset_addr(p.c, split * p.batch + bz, p.M * p.N, 2u));  // scratch[split][bz][m][n]
    lc = setTensorLayoutDimensionNV(lc, p.M, p.N);
    coopMatStoreTensorNV(acc, S.v, 0, sliceTensorLayoutNV(lc, m0, BM, n0, BN));
#else
    epilogue_n0 = n0;
    coopMatPerElementNV(acc, acc, epilogue, p.alpha);
    coopmat<ELEM, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> out16 =
        coopmat<ELEM, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>(acc);
    HBuf C = HBuf(offset_addr(p.c, bz, p.sCb, 1u));
    if (C_NMAJOR) {
        lc = setTensorLayoutDimensionNV(lc, p.M, p.N);
        lc = setTensorLayoutStrideNV(lc, p.sCm, 1);
        coopMatStoreTensorNV(out16, C.v, 0, sliceTensorLayoutNV(lc, m0, BM, n0, BN));
    } else {
        lc = setTensorLayoutDimensionNV(lc, p.N, p.M);
        lc = setTensorLayoutStrideNV(lc, p.sCn, 1);
        coopMatStoreTensorNV(out16, C.v, 0, sliceTensorLayoutNV(lc, n0, BN, m0, BM), transposed);
    }
#endif
}
