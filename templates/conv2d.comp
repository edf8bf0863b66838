#version 450
// 2-D convolution (NCHW; float32, float16 or bfloat16 storage, float32 arithmetic) as an implicit
// GEMM, C[M,N] = sum_k A[M,K] * B[K,N],
// one template for the three directions, selected by DIR:
//   DIR 0  forward         M = batch*OH*OW (n,oh,ow)  N = OC/G (oc)          K = IC/G*KH*KW (ic,kh,kw)
//   DIR 1  grad wrt input  M = batch*Hc*Wc (n,ih,iw)  N = IC/G (ic)          K = OC/G*KHc*KWc (oc,kh,kw)
//   DIR 2  grad wrt weight M = OC/G (oc)              N = IC/G*KH*KW (ic,kh,kw) K = batch*OH*OW (n,oh,ow)
// A and B are never materialised: every workgroup stages a BM x BK tile of A and a BK x BN
// tile of B in shared memory through an index mapping (the im2col addresses), with small
// per-tile tables in shared memory holding the decoded (n, oh, ow) / (ic, kh, kw) offsets so
// the inner loads need no integer division. Out-of-range taps (padding, ragged tile
// tails) load zeros. Groups and split-K slices run on grid z (z = split * G + g).
// DIR 1 runs once per stride phase (rh, rw): the input rows ih = ih0 + a*sh (a < Hc) that
// (ih + ph) % sh == rh puts in that phase only meet the kernel rows kh = kh0 + b*khs (b < KHc)
// with kh*dh % sh == rh, so no stride holes are multiplied; then oh = base_h + a - b*step_h.
// Split-K (every DIR; the host plans it, conv.py _split_plan): split s sums K range
// [s*kchunk, (s+1)*kchunk) and writes its partial sums to slice s of a scratch buffer laid out
// like the output, [split][output]; conv2d_reduce.comp adds the slices up. Unsplit, the one
// slice is the output itself. DIR 0 adds the bias in split 0 only, and never splits with ACT
// (the sum must precede the activation). DIR 1: every stride phase writes every slice (a split
// past its phase's K writes zeros), so the slices cover every input pixel.
//
// Tunables (specialization constants, so one SPIR-V module per DIR serves every tile shape):
// BM, BN, BK tile; TM, TN outputs per thread; PAD shared-row padding (floats); WG must equal
// the local size (specialization constant 0) = (BM/TM)*(BN/TN).
// FRAG (specialization constant 10): 0, an invocation owns rows tm + i*BMT and columns
// tn + j*BNT, each read from shared memory on its own; 1, rows (i/4)*4*BMT + tm*4 + i%4, runs of
// 4 adjacent ones (columns alike) at 16-byte-aligned offsets, so the compiler can read a run with
// one load where four were (those loads, not the FMAs, bound the products on NVIDIA); needs TM,
// TN and PAD multiples of 4.
// Defines: DIR (it changes the push constants and the shared tables); ACT (DIR 0 only, not
// tuned): the activation applied after the bias, as a GLSL expression in x
// (common/activation.glsl; compiled mode's act(conv2d)); absent: none. DTYPE (common/storage.glsl;
// absent: float32): the storage of x, weight, bias, grad_out and C; C_F32 1: C is float32 whatever
// DTYPE (split-K partials, summed and rounded to DTYPE by conv2d_reduce.comp).
// PACKED 1 (DTYPE float16, TN even; kernels/conv.py routes it, with TVK_PACKED_CONV=1, where matmul's
// packed-fp16 kernel is verified: GPUs without cooperative matrices, RDNA1 first): the tiles are staged in fp16 and
// multiplied on packed fp16 arithmetic, one f16vec2 FMA for two adjacent columns; each fp16 partial
// sums CHAIN = min(BK, 16) products, then folds into the fp32 accumulator, so the bound is
// matmul_packed_f16.comp's: |C - exact| <= (CHAIN + 1) u sum_k |a_k b_k| (u = 2^-11) plus products
// under fp16's normal range. An output whose fp16 partials overflowed (non-finite accumulator) is
// stored, then summed again in fp32 from global memory over its K range and stored again, so it is
// what the fp32 kernel gives.
// COOPMAT 1 (DTYPE float16; kernels/conv_coopmat.py routes it where the device has 16x16x16 fp16 -> fp32
// cooperative matrices, VK_KHR_cooperative_matrix): the tiles are staged in fp16 and multiplied on
// subgroup matrices with fp32 accumulation (each output rounded once, as the fp32 kernel's). The
// workgroup is (BM / (16 TM)) x (BN / (16 TN)) subgroups of SUBGROUP_SIZE invocations (WG in all), each
// owning TM x TN accumulator matrices of 16 x 16; TM and TN count matrices here, not outputs. PAD
// (halves) keeps shared rows 16-byte aligned (a multiple of 8). The accumulators go back through a
// per-subgroup 16 x 16 fp32 staging area, laid out so that neighbouring invocations store neighbouring
// output addresses (pixels for DIR 0 and 1, weight taps for DIR 2). Its K loop prefetches: the next tile's
// global loads go out before this tile's products, into registers, with the tile tables in two halves of
// ktab (two barriers a tile instead of three). EMULATE 1: the same kernel with each
// matrix operation done by scalar code on the same shared tiles (no cooperative matrices needed): how
// lavapipe's tests run the rest of it; never a speed path.
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference_uvec2 : require
#extension GL_EXT_control_flow_attributes : enable
#extension GL_GOOGLE_include_directive : require
#include "common/storage.glsl"
#include "common/activation.glsl"
#ifndef PACKED
#define PACKED 0
#endif
#if PACKED == 1
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#if DTYPE != TVK_DT_FLOAT16
#error "conv2d.comp: PACKED needs DTYPE float16"
#endif
#define SH float16_t  // the shared tiles' element
#define TO_SH(f) float16_t(f)
#else
#define SH float
#define TO_SH(f) (f)
#endif
#ifndef COOPMAT
#define COOPMAT 0
#endif
#ifndef EMULATE
#define EMULATE 0
#endif
#if COOPMAT == 1
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#if DTYPE != TVK_DT_FLOAT16 || PACKED == 1
#error "conv2d.comp: COOPMAT needs DTYPE float16 (and no PACKED)"
#endif
#if EMULATE == 0
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#endif
#ifndef SUBGROUP_SIZE
#define SUBGROUP_SIZE 32
#endif
#undef SH
#undef TO_SH
#define SH float16_t
#define TO_SH(f) float16_t(f)
#endif

layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;

#ifndef DIR
#define DIR 0
#endif
#if !(DIR == 0 || DIR == 1 || DIR == 2)
#error "conv2d.comp: DIR must be 0 (forward), 1 (grad-input) or 2 (grad-weight)"
#endif
layout(constant_id = 3) const uint BM = 64u;
layout(constant_id = 4) const uint BN = 64u;
layout(constant_id = 5) const uint BK = 16u;
layout(constant_id = 6) const uint TM = 4u;
layout(constant_id = 7) const uint TN = 4u;
layout(constant_id = 8) const uint PAD = 1u;
layout(constant_id = 9) const uint WG = 256u;  // (BM / TM) * (BN / TN)
layout(constant_id = 10) const uint FRAG = 0u;

#if PACKED == 1
const uint CHAIN = BK < 16u ? BK : 16u;  // fp16 products per partial
#endif
const uint BMT = BM / TM;  // threads along M
const uint BNT = BN / TN;  // threads along N
#define FAR 0x10000000 // a tap offset that lands outside every image: marks invalid rows/taps

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

#if DIR == 1
layout(push_constant) uniform Params {
    uvec2 a;     // grad_out
    uvec2 b;     // weight
    uvec2 c;     // grad_in (or split-K partials)
    uint n, ic, h, w;
    uint oc, oh, ow, groups;
    uint kh, kw;
    // This phase as offsets rather than coordinates (fewer fields: kchunk fits the 128-byte minimum):
    uint pix0, pix_h, pix_w;   // its input pixels ih = ih0 + a*sh, iw = iw0 + b*sw as ih*W + iw:
    uint hc, wc;               //   pix0 + a*pix_h + b*pix_w (ih0*W + iw0, sh*W, sw), a < hc, b < wc
    uint wtap0, wtap_h, wtap_w; // its kernel taps kh = kh0 + b*khs, kw = kw0 + b*kws as kh*KW + kw:
                               //   kh0*KW + kw0, khs*KW, kws
    uint khc, kwc;             // tap counts, b < khc (0: the phase's slices get zeros)
    int base_h, base_w;        // oh = base_h + a - b*step_h
    uint step_h, step_w;
    uint kchunk;               // K per split-K slice (a multiple of BK); >= K when not split
} p;
#else
layout(push_constant) uniform Params {
    uvec2 a;     // DIR 0: x          DIR 2: grad_out
    uvec2 b;     // DIR 0: weight     DIR 2: x
    uvec2 c;     // DIR 0: out        DIR 2: grad_weight (either: or the split-K partials)
    uvec2 bias;  // DIR 0 only, read when flags & 1
    uint n, ic, h, w;
    uint oc, oh, ow, groups;
    uint kh, kw, sh, sw;
    uint ph, pw, dh, dw;
    uint kchunk; // K per split-K slice (a multiple of BK); >= K when not split
    uint flags;  // bit 0: add bias
} p;
#endif

#if COOPMAT == 1  // flat: cooperative loads take an array and an element offset
shared SH As[BK * (BM + PAD)];
shared SH Bs[BK * (BN + PAD)];
#define A_SH(k, m) As[(k) * (BM + PAD) + (m)]
#define B_SH(k, n) Bs[(k) * (BN + PAD) + (n)]
const uint NSG = WG / SUBGROUP_SIZE;  // subgroups
const uint SG_N = BN / (16u * TN);     // subgroups along N
shared float Cs[NSG * 256u];          // each subgroup's 16 x 16 staging area
#else
shared SH As[BK][BM + PAD];
shared SH Bs[BK][BN + PAD];
#define A_SH(k, m) As[k][m]
#define B_SH(k, n) Bs[k][n]
#endif
#if COOPMAT == 1
#define KTAB_LEN (2u * BK)  // two tiles' tables: the prefetching loop's
#else
#define KTAB_LEN BK
#endif
#if DIR == 0
shared ivec3 mtab[BM];  // (x plane base of row's image, oh*sh - ph, ow*sw - pw)
shared ivec3 ktab[KTAB_LEN];  // (ic*H*W, kh*dh, kw*dw)
#elif DIR == 1
shared ivec3 mtab[BM];  // (grad_out image base, base_h + a, base_w + b)
shared ivec4 ktab[KTAB_LEN];  // (oc*OH*OW, b_h*step_h, b_w*step_w, weight offset oc*ICg*KH*KW + kh*KW + kw or -1)
#else
shared ivec3 ntab[BN];  // (ic*H*W, kh*dh, kw*dw)
shared ivec4 ktab[KTAB_LEN];  // (grad_out offset n*OC*OHW + oh*OW + ow or -1, x image base n*IC*HW, oh*sh - ph, ow*sw - pw)
#endif

#if PACKED == 1
// sum_k A[m, k] B[k, col] over [kbeg, kend) of group g in fp32, read from global memory: the index
// mappings of the staged tiles (main's tables), one element at a time
float exact_sum(uint m, uint col, uint g, uint kbeg, uint kend) {
    const uint icg = p.ic / p.groups, ocg = p.oc / p.groups;
    const uint khw = p.kh * p.kw, hw = p.h * p.w, ohw = p.oh * p.ow;
    RBuf A = RBuf(p.a), B = RBuf(p.b);
    float s = 0.0;
#if DIR == 0
    const uint K = icg * khw;
    const uint nn = m / ohw, r = m - nn * ohw, y = r / p.ow, x = r - y * p.ow;
    const int base = int((nn * p.ic + g * icg) * hw), y0 = int(y * p.sh) - int(p.ph), x0 = int(x * p.sw) - int(p.pw);
    for (uint k = kbeg; k < kend; ++k) {
        const uint cc = k / khw, rk = k - cc * khw, ky = rk / p.kw, kx = rk - ky * p.kw;
        const int yy = y0 + int(ky * p.dh), xx = x0 + int(kx * p.dw);
        if (uint(yy) < p.h && uint(xx) < p.w) {
            s = fma(TVK_LOAD(A.v[uint(base + int(cc * hw) + yy * int(p.w) + xx)]),
                    TVK_LOAD(B.v[(g * ocg + col) * K + k]), s);
        }
    }
#elif DIR == 1
    const uint hwc = p.hc * p.wc, khwc = p.khc * p.kwc;
    const uint nn = m / hwc, r = m - nn * hwc, y = r / p.wc, x = r - y * p.wc;
    const int base = int((nn * p.oc + g * ocg) * ohw), y0 = p.base_h + int(y), x0 = p.base_w + int(x);
    const uint wbase = g * ocg * icg * khw;
    for (uint k = kbeg; k < kend; ++k) {
        const uint o = k / khwc, rk = k - o * khwc, by = rk / p.kwc, bx = rk - by * p.kwc;
        const int yy = y0 - int(by * p.step_h), xx = x0 - int(bx * p.step_w);
        if (uint(yy) < p.oh && uint(xx) < p.ow) {
            s = fma(TVK_LOAD(A.v[uint(base + int(o * ohw) + yy * int(p.ow) + xx)]),
                    TVK_LOAD(B.v[wbase + o * icg * khw + p.wtap0 + by * p.wtap_h + bx * p.wtap_w + col * khw]), s);
        }
    }
#else
    const uint cc = col / khw, rc = col - cc * khw, ky = rc / p.kw, kx = rc - ky * p.kw;
    const int xbase = int((g * icg + cc) * hw), dy = int(ky * p.dh), dx = int(kx * p.dw);
    for (uint k = kbeg; k < kend; ++k) {
        const uint nn = k / ohw, r = k - nn * ohw, y = r / p.ow, x = r - y * p.ow;
        const int yy = int(y * p.sh) - int(p.ph) + dy, xx = int(x * p.sw) - int(p.pw) + dx;
        if (uint(yy) < p.h && uint(xx) < p.w) {
            s = fma(TVK_LOAD(A.v[nn * p.oc * ohw + r + (g * ocg + m) * ohw]),
                    TVK_LOAD(B.v[uint(int(nn * p.ic * hw) + xbase + yy * int(p.w) + xx)]), s);
        }
    }
#endif
    return s;
}
#endif

#if PACKED == 1 || COOPMAT == 1
// main's epilogue for one output (m, col) of group g and split-K slice `split`
void store_exact(uint m, uint col, uint g, uint split, float v) {
    const uint icg = p.ic / p.groups, ocg = p.oc / p.groups;
    const uint hw = p.h * p.w, ohw = p.oh * p.ow;
    WBuf C = WBuf(p.c);
#if DIR == 0
    const uint nn = m / ohw, r = m - nn * ohw;
    if (((p.flags & uint(split == 0u)) & 1u) != 0u) {
        v += TVK_LOAD(RBuf(p.bias).v[g * ocg + col]);
    }
    C.v[split * p.n * p.oc * ohw + (nn * p.oc + g * ocg) * ohw + r + col * ohw] = STORE_C(activation(v));
#elif DIR == 1
    const uint hwc = p.hc * p.wc, nn = m / hwc, r = m - nn * hwc, y = r / p.wc, x = r - y * p.wc;
    C.v[((split * p.n + nn) * p.ic + g * icg) * hw + p.pix0 + y * p.pix_h + x * p.pix_w + col * hw] = STORE_C(v);
#else
    const uint N = icg * p.kh * p.kw;
    C.v[split * p.oc * N + (g * ocg + m) * N + col] = STORE_C(v);
#endif
}
#endif

// One K tile's table entry for k (DECODE_K), and element i of its A and B tiles (A_ELEMENT, B_ELEMENT: their
// tile coordinates kl, ml / kl, nl and value v), as statements over main's names; KT(kl) reads the tile's
// table entries (the prefetching form keeps two tiles' tables). Both loop forms below use them.
#define KTAB(kl) ktab[kl]
#if DIR == 0
#define DECODE_K(t, k) \
            ivec3 t = ivec3(0, FAR, FAR); \
            if (k < kend) { \
                uint cc = k / khw, r = k - cc * khw; \
                uint ky = r / p.kw, kx = r - ky * p.kw; \
                t = ivec3(int(cc * hw), int(ky * p.dh), int(kx * p.dw)); \
            }
#define A_ELEMENT(v, i, KT) \
                uint ml = i % BM, kl = i / BM; \
                ivec3 mt = mtab[ml]; \
                ivec3 kt = KT(kl); \
                int y = mt.y + kt.y, x = mt.z + kt.z; \
                float v = 0.0; \
                if (uint(y) < p.h && uint(x) < p.w) { \
                    v = TVK_LOAD(A.v[uint(mt.x + kt.x + y * int(p.w) + x)]); \
                }
#define B_ELEMENT(v, i, K0, KT) \
                uint kl = i % BK, nl = i / BK; \
                uint nn = n0 + nl, k = K0 + kl; \
                float v = 0.0; \
                if (nn < N && k < kend) { \
                    v = TVK_LOAD(B.v[(g * ocg + nn) * K + k]); \
                }
#elif DIR == 1
#define DECODE_K(t, k) \
            ivec4 t = ivec4(0, FAR, FAR, -1); \
            if (k < kend) { \
                uint o = k / khwc, r = k - o * khwc; \
                uint by = r / p.kwc, bx = r - by * p.kwc; \
                t = ivec4(int(o * ohw), int(by * p.step_h), int(bx * p.step_w), \
                          int(o * icg * khw + p.wtap0 + by * p.wtap_h + bx * p.wtap_w)); \
            }
#define A_ELEMENT(v, i, KT) \
                uint ml = i % BM, kl = i / BM; \
                ivec3 mt = mtab[ml]; \
                ivec4 kt = KT(kl); \
                int y = mt.y - kt.y, x = mt.z - kt.z; \
                float v = 0.0; \
                if (uint(y) < p.oh && uint(x) < p.ow) { \
                    v = TVK_LOAD(A.v[uint(mt.x + kt.x + y * int(p.ow) + x)]); \
                }
#define B_ELEMENT(v, i, K0, KT) \
                uint kl = i % BK, nl = i / BK; \
                uint nn = n0 + nl, k = K0 + kl; \
                float v = 0.0; \
                int wo = KT(kl).w; \
                if (nn < N && wo >= 0) { \
                    v = TVK_LOAD(B.v[wbase + uint(wo) + nn * khw]); \
                }
#else
#define DECODE_K(t, k) \
            ivec4 t = ivec4(-1, 0, FAR, FAR); \
            if (k < kend) { \
                uint nn = k / ohw, r = k - nn * ohw; \
                uint y = r / p.ow, x = r - y * p.ow; \
                t = ivec4(int(nn * p.oc * ohw + r), int(nn * p.ic * hw), int(y * p.sh) - int(p.ph), int(x * p.sw) - int(p.pw)); \
            }
#define A_ELEMENT(v, i, KT) \
                uint kl = i % BK, ml = i / BK; \
                ivec4 kt = KT(kl); \
                uint m = m0 + ml; \
                float v = 0.0; \
                if (kt.x >= 0 && m < M) { \
                    v = TVK_LOAD(A.v[uint(kt.x) + (g * ocg + m) * ohw]); \
                }
#define B_ELEMENT(v, i, K0, KT) \
                uint kl = i % BK, nl = i / BK; \
                uint nn = n0 + nl, k = K0 + kl; \
                float v = 0.0; \
                ivec4 kt = KT(kl); \
                ivec3 nt = ntab[nl]; \
                int y = kt.z + nt.y, x = kt.w + nt.z; \
                if (uint(y) < p.h && uint(x) < p.w) { \
                    v = TVK_LOAD(B.v[uint(kt.y + nt.x + y * int(p.w) + x)]); \
                }
#endif
#define A_PER ((BM * BK + WG - 1) / WG)  // A elements an invocation stages
#define B_PER ((BK * BN + WG - 1) / WG)

// the A and B elements of the tile at K0 into ra, rb (its table: ktab's half tb)
#define FETCH(K0) \
        [[unroll]] for (uint l = 0; l < A_PER; ++l) { \
            uint i = tid + l * WG; \
            if ((BM * BK) % WG == 0 || i < BM * BK) { \
                A_ELEMENT(v, i, KTAB_AT) \
                ra[l] = TO_SH(v); \
            } \
        } \
        [[unroll]] for (uint l = 0; l < B_PER; ++l) { \
            uint i = tid + l * WG; \
            if ((BK * BN) % WG == 0 || i < BK * BN) { \
                B_ELEMENT(v, i, (K0), KTAB_AT) \
                rb[l] = TO_SH(v); \
            } \
        }

void main() {
    const uint tid = gl_LocalInvocationID.x;
    const uint G = p.groups;
    const uint icg = p.ic / G, ocg = p.oc / G;
    const uint khw = p.kh * p.kw;
    const uint hw = p.h * p.w, ohw = p.oh * p.ow;
#if DIR == 0
    const uint M = p.n * ohw, N = ocg, K = icg * khw;
#elif DIR == 1
    const uint hwc = p.hc * p.wc, khwc = p.khc * p.kwc;
    const uint M = p.n * hwc, N = icg, K = ocg * khwc;
#else
    const uint M = ocg, N = icg * khw, K = p.n * ohw;
#endif
    const uint mtiles = (M + (BM - 1)) / BM, ntiles = (N + (BN - 1)) / BN;  // grouped: one constant, as the defines gave
    const uint tile = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    if (tile >= mtiles * ntiles) {
        return;  // the whole workgroup: grid_1d rounding
    }
    const uint m0 = (tile % mtiles) * BM, n0 = (tile / mtiles) * BN;
    const uint split = gl_WorkGroupID.z / G, g = gl_WorkGroupID.z - split * G;  // one division, not two
    const uint kbeg = split * p.kchunk;
    const uint kend = min(K, kbeg + p.kchunk);

    RBuf A = RBuf(p.a), B = RBuf(p.b);

    // per-row / per-column tables, fixed for the whole K loop
#if DIR == 0
    for (uint i = tid; i < BM; i += WG) {
        uint m = m0 + i;
        ivec3 t = ivec3(0, FAR, FAR);
        if (m < M) {
            uint nn = m / ohw, r = m - nn * ohw;
            uint y = r / p.ow, x = r - y * p.ow;
            t = ivec3(int((nn * p.ic + g * icg) * hw), int(y * p.sh) - int(p.ph), int(x * p.sw) - int(p.pw));
        }
        mtab[i] = t;
    }
#elif DIR == 1
    for (uint i = tid; i < BM; i += WG) {
        uint m = m0 + i;
        ivec3 t = ivec3(0, -FAR, -FAR);
        if (m < M) {
            uint nn = m / hwc, r = m - nn * hwc;
            uint y = r / p.wc, x = r - y * p.wc;
            t = ivec3(int((nn * p.oc + g * ocg) * ohw), p.base_h + int(y), p.base_w + int(x));
        }
        mtab[i] = t;
    }
    const uint wbase = g * ocg * icg * khw;
#else
    for (uint i = tid; i < BN; i += WG) {
        uint j = n0 + i;
        ivec3 t = ivec3(0, FAR, FAR);
        if (j < N) {
            uint cc = j / khw, r = j - cc * khw;
            uint ky = r / p.kw, kx = r - ky * p.kw;
            t = ivec3(int((g * icg + cc) * hw), int(ky * p.dh), int(kx * p.dw));
        }
        ntab[i] = t;
    }
#endif

#if COOPMAT == 1
    const uint sg = tid / SUBGROUP_SIZE, lane = tid % SUBGROUP_SIZE;  // full subgroups: the host requires them
    const uint row0 = (sg / SG_N) * TM * 16u, col0 = (sg % SG_N) * TN * 16u;  // this subgroup's corner of the tile
#if EMULATE == 1
    const uint EPL = 256u / SUBGROUP_SIZE;  // a matrix's elements per invocation
    float acc[TM][TN][EPL];
    [[unroll]] for (uint i = 0; i < TM; ++i) {
        [[unroll]] for (uint j = 0; j < TN; ++j) {
            [[unroll]] for (uint t = 0; t < EPL; ++t) {
                acc[i][j][t] = 0.0;
            }
        }
    }
#else
    coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> acc[TM][TN];
    [[unroll]] for (uint i = 0; i < TM; ++i) {
        [[unroll]] for (uint j = 0; j < TN; ++j) {
            acc[i][j] = coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(0.0);
        }
    }
#endif
// element e of a 16 x 16 staging area: its (row, column); neighbouring e, neighbouring output addresses
// (element e is also its index in the area: row-major for DIR 2, column-major otherwise)
#if DIR == 2
#define STAGE_RC(e) uvec2((e) / 16u, (e) % 16u)
#define STAGE_LAYOUT gl_CooperativeMatrixLayoutRowMajor
#else
#define STAGE_RC(e) uvec2((e) % 16u, (e) / 16u)
#define STAGE_LAYOUT gl_CooperativeMatrixLayoutColumnMajor
#endif
#else
    float acc[TM][TN];
    [[unroll]] for (uint i = 0; i < TM; ++i) {
        [[unroll]] for (uint j = 0; j < TN; ++j) {
            acc[i][j] = 0.0;
        }
    }
#endif

#if DIR == 2
    const uint tn = tid % BNT, tm = tid / BNT;  // consecutive threads: consecutive weight columns
#else
    const uint tm = tid % BMT, tn = tid / BMT;  // consecutive threads: consecutive output pixels
#endif
    // the tile row (column) of this invocation's accumulator i (j)
#define TILE_ROW(i) (FRAG != 0u ? (i) / 4u * (4u * BMT) + tm * 4u + (i) % 4u : tm + (i) * BMT)
#define TILE_COL(j) (FRAG != 0u ? (j) / 4u * (4u * BNT) + tn * 4u + (j) % 4u : tn + (j) * BNT)

#if COOPMAT == 1
    // The next K tile's global loads go out before this tile's products and land in registers (ra, rb), so
    // their latency overlaps the matrix products; the tile tables alternate between ktab's two halves.
#define KTAB_AT(kl) ktab[tb + (kl)]
    SH ra[A_PER], rb[B_PER];
    uint tb = 0u;  // the half of ktab holding the table of the tile in registers
    for (uint i = tid; i < BK; i += WG) {
        uint k = kbeg + i;
        DECODE_K(t, k)
        ktab[i] = t;
    }
    barrier();
    FETCH(kbeg)
    for (uint k0 = kbeg; k0 < kend; k0 += BK) {
        const bool more = k0 + BK < kend;
        [[unroll]] for (uint l = 0; l < A_PER; ++l) {
            uint i = tid + l * WG;
            if ((BM * BK) % WG == 0 || i < BM * BK) {
#if DIR == 2
                A_SH(i % BK, i / BK) = ra[l];
#else
                A_SH(i / BM, i % BM) = ra[l];
#endif
            }
        }
        [[unroll]] for (uint l = 0; l < B_PER; ++l) {
            uint i = tid + l * WG;
            if ((BK * BN) % WG == 0 || i < BK * BN) {
                B_SH(i % BK, i / BK) = rb[l];
            }
        }
        if (more) {
            for (uint i = tid; i < BK; i += WG) {
                uint k = k0 + BK + i;
                DECODE_K(t, k)
                ktab[(tb ^ BK) + i] = t;
            }
        }
        barrier();
        tb ^= BK;
        if (more) {
            FETCH(k0 + BK)
        }
        [[unroll]] for (uint kk = 0; kk < BK; kk += 16u) {
#if EMULATE == 1
            [[unroll]] for (uint i = 0; i < TM; ++i) {
                [[unroll]] for (uint j = 0; j < TN; ++j) {
                    [[unroll]] for (uint t = 0; t < EPL; ++t) {
                        const uvec2 rc = STAGE_RC(lane + t * SUBGROUP_SIZE);
                        float s = acc[i][j][t];
                        for (uint k1 = kk; k1 < kk + 16u; ++k1) {
                            s += float(A_SH(k1, row0 + i * 16u + rc.x)) * float(B_SH(k1, col0 + j * 16u + rc.y));
                        }
                        acc[i][j][t] = s;
                    }
                }
            }
#else
            coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA> fa[TM];
            coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB> fb[TN];
            [[unroll]] for (uint i = 0; i < TM; ++i) {  // As is [k][m]: A (m x k) is column-major
                coopMatLoad(fa[i], As, kk * (BM + PAD) + row0 + i * 16u, BM + PAD, gl_CooperativeMatrixLayoutColumnMajor);
            }
            [[unroll]] for (uint j = 0; j < TN; ++j) {
                coopMatLoad(fb[j], Bs, kk * (BN + PAD) + col0 + j * 16u, BN + PAD, gl_CooperativeMatrixLayoutRowMajor);
            }
            [[unroll]] for (uint i = 0; i < TM; ++i) {
                [[unroll]] for (uint j = 0; j < TN; ++j) {
                    acc[i][j] = coopMatMulAdd(fa[i], fb[j], acc[i][j]);
                }
            }
#endif
        }
        barrier();
    }
#else
    for (uint k0 = kbeg; k0 < kend; k0 += BK) {
        // decode this K tile
        for (uint i = tid; i < BK; i += WG) {
            uint k = k0 + i;
            DECODE_K(t, k)
            ktab[i] = t;
        }
        barrier();

        // stage A (BM x BK) and B (BK x BN) in shared memory
        [[unroll]] for (uint l = 0; l < (BM * BK + WG - 1) / WG; ++l) {
            uint i = tid + l * WG;
            if ((BM * BK) % WG == 0 || i < BM * BK) {
                A_ELEMENT(v, i, KTAB)
                A_SH(kl, ml) = TO_SH(v);
            }
        }
        [[unroll]] for (uint l = 0; l < (BK * BN + WG - 1) / WG; ++l) {
            uint i = tid + l * WG;
            if ((BK * BN) % WG == 0 || i < BK * BN) {
                B_ELEMENT(v, i, k0, KTAB)
                B_SH(kl, nl) = TO_SH(v);
            }
        }
        barrier();

#if PACKED == 1
        [[unroll]] for (uint k1 = 0; k1 < BK; k1 += CHAIN) {
            f16vec2 part[TM][TN / 2u];
            [[unroll]] for (uint i = 0; i < TM; ++i) {
                [[unroll]] for (uint j = 0; j < TN / 2u; ++j) {
                    part[i][j] = f16vec2(0.0hf);
                }
            }
            [[unroll]] for (uint kk = k1; kk < k1 + CHAIN; ++kk) {
                float16_t av[TM];
                f16vec2 bv[TN / 2u];
                [[unroll]] for (uint i = 0; i < TM; ++i) {
                    av[i] = A_SH(kk, TILE_ROW(i));
                }
                [[unroll]] for (uint j = 0; j < TN / 2u; ++j) {
                    bv[j] = f16vec2(B_SH(kk, TILE_COL(2u * j)), B_SH(kk, TILE_COL(2u * j + 1u)));
                }
                [[unroll]] for (uint i = 0; i < TM; ++i) {
                    [[unroll]] for (uint j = 0; j < TN / 2u; ++j) {
                        part[i][j] = fma(f16vec2(av[i]), bv[j], part[i][j]);
                    }
                }
            }
            [[unroll]] for (uint i = 0; i < TM; ++i) {  // fold: the sum over K stays fp32
                [[unroll]] for (uint j = 0; j < TN / 2u; ++j) {
                    acc[i][2u * j] += float(part[i][j].x);
                    acc[i][2u * j + 1u] += float(part[i][j].y);
                }
            }
        }
#else
        [[unroll]] for (uint kk = 0; kk < BK; ++kk) {
            float av[TM], bv[TN];
            [[unroll]] for (uint i = 0; i < TM; ++i) {
                av[i] = A_SH(kk, TILE_ROW(i));
            }
            [[unroll]] for (uint j = 0; j < TN; ++j) {
                bv[j] = B_SH(kk, TILE_COL(j));
            }
            [[unroll]] for (uint i = 0; i < TM; ++i) {
                [[unroll]] for (uint j = 0; j < TN; ++j) {
                    acc[i][j] = fma(av[i], bv[j], acc[i][j]);
                }
            }
        }
#endif
        barrier();
    }
#endif
#if PACKED == 1
    // outputs whose fp16 partials left fp16's range (bit i * TN + j; TM * TN <= 64): stored as they are
    // below, then summed again in fp32 and stored again, in one loop (the fp32 path is not unrolled)
    uvec2 bad = uvec2(0u);
    [[unroll]] for (uint i = 0; i < TM; ++i) {
        [[unroll]] for (uint j = 0; j < TN; ++j) {
            if (isinf(acc[i][j]) || isnan(acc[i][j])) {
                const uint e = i * TN + j;
                if (e < 32u) {
                    bad.x |= 1u << e;
                } else {
                    bad.y |= 1u << (e - 32u);
                }
            }
        }
    }
#endif

#if COOPMAT == 1
    const uint cst = sg * 256u;
    [[unroll]] for (uint i = 0; i < TM; ++i) {
        [[unroll]] for (uint j = 0; j < TN; ++j) {
#if EMULATE == 1
            [[unroll]] for (uint t = 0; t < EPL; ++t) {
                Cs[cst + lane + t * SUBGROUP_SIZE] = acc[i][j][t];
            }
#else
            coopMatStore(acc[i][j], Cs, cst, 16u, STAGE_LAYOUT);
#endif
            barrier();
            for (uint e = lane; e < 256u; e += SUBGROUP_SIZE) {
                const uvec2 rc = STAGE_RC(e);
                const uint m = m0 + row0 + i * 16u + rc.x, col = n0 + col0 + j * 16u + rc.y;
                if (m < M && col < N) {
                    store_exact(m, col, g, split, Cs[cst + e]);
                }
            }
            barrier();
        }
    }
#else
    WBuf C = WBuf(p.c);
#if DIR == 0
    RBuf Bias = RBuf(p.bias);
    const uint flags = p.flags & uint(split == 0u);  // the bias: split 0 only
    const uint slice = split * p.n * p.oc * ohw;
    [[unroll]] for (uint i = 0; i < TM; ++i) {
        uint m = m0 + TILE_ROW(i);
        if (m < M) {
            uint nn = m / ohw, r = m - nn * ohw;
            uint base = slice + (nn * p.oc + g * ocg) * ohw + r;
            [[unroll]] for (uint j = 0; j < TN; ++j) {
                uint col = n0 + TILE_COL(j);
                if (col < N) {
                    float v = acc[i][j];
                    if ((flags & 1u) != 0u) {
                        v += TVK_LOAD(Bias.v[g * ocg + col]);
                    }
                    C.v[base + col * ohw] = STORE_C(activation(v));
                }
            }
        }
    }
#elif DIR == 1
    const uint nslice = split * p.n;  // slice `split` of [split][N][IC][H][W]
    [[unroll]] for (uint i = 0; i < TM; ++i) {
        uint m = m0 + TILE_ROW(i);
        if (m < M) {
            uint nn = m / hwc, r = m - nn * hwc;
            uint y = r / p.wc, x = r - y * p.wc;
            uint base = ((nslice + nn) * p.ic + g * icg) * hw + p.pix0 + y * p.pix_h + x * p.pix_w;
            [[unroll]] for (uint j = 0; j < TN; ++j) {
                uint col = n0 + TILE_COL(j);
                if (col < N) {
                    C.v[base + col * hw] = STORE_C(acc[i][j]);
                }
            }
        }
    }
#else
    const uint slice = split * p.oc * N;
    [[unroll]] for (uint i = 0; i < TM; ++i) {
        uint m = m0 + TILE_ROW(i);
        if (m < M) {
            uint base = slice + (g * ocg + m) * N;
            [[unroll]] for (uint j = 0; j < TN; ++j) {
                uint col = n0 + TILE_COL(j);
                if (col < N) {
                    C.v[base + col] = STORE_C(acc[i][j]);
                }
            }
        }
    }
#endif
#endif
#if PACKED == 1
    if (bad.x != 0u || bad.y != 0u) {
        [[dont_unroll]] for (uint e = 0; e < TM * TN; ++e) {
            if ((((e < 32u) ? bad.x >> e : bad.y >> (e - 32u)) & 1u) != 0u) {
                const uint m = m0 + TILE_ROW(e / TN), col = n0 + TILE_COL(e % TN);
                if (m < M && col < N) {
                    store_exact(m, col, g, split, exact_sum(m, col, g, kbeg, kend));
                }
            }
        }
    }
#endif
}
