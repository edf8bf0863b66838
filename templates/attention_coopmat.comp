#version 450
// Fused scaled-dot-product attention on cooperative matrices (VK_KHR_cooperative_matrix), fp16 storage:
// the same operation, tensors, strides, mask, causal, dropout and grouped heads as attention.comp
// (read it first), with the four products of a tile (q k^T, P v; in the backward also dO v^T and dS k,
// P^T dO, dS^T q) on 16 x 16 x 16 fp16 matrices with fp32 accumulation.
// A workgroup is BR / 16 subgroups; subgroup g owns 16 rows of the workgroup's BR (query rows in the
// forward and dQ, key rows in dK/dV) and every product that row block takes part in. The other side
// comes through shared memory in steps of BC rows. Between the products, the softmax and the dropout
// run on scalar threads: TPR = SUBGROUP_SIZE / 16 threads per row, each on BC / TPR adjacent columns of
// the fp32 scores the subgroup stored; a row's threads are in the subgroup that owns it. So a step needs
// the workgroup's barrier only around the shared K/V (q/dO) tiles: everything else a subgroup writes to
// shared memory (its rows of scores, P, dS, staged accumulators) only it reads, after a subgroup barrier.
// Accumulators (O, dQ, dK, dV) stay in matrices across steps and leave through the subgroup's rows of sS.
// KERNEL 0 forward: q stays in matrices (registers); per step S = q k^T (fp32, in sS), the online
//          softmax, P (fp16, in sP), then O += P v in matrices (v's tile stored transposed, see TT). The running row maximum m is lazy: P =
//          exp(s - m) may reach e^TAU, and only a step whose scores pass m + TAU in some row of the
//          subgroup moves m and rescales O (through sS; FlashAttention-4's conditional rescaling).
//          TAU = 4 keeps P, times dropout's 1 / (1 - p) up to p = 0.999, within fp16's range.
// KERNEL 2 dQ: q stays in matrices and dO in shared memory; per step S = q k^T and dP = dO v^T pass
//          through sS, dS = P (dP - delta) goes to sP in fp16, and dQ += dS k in matrices.
// KERNEL 3 dK, dV: k stays in matrices and v in shared memory; per step (over every query head of the
//          group) S^T = k q^T and dP^T = v dO^T pass through sS, and dV += P^T dO, dK += dS^T q in matrices.
//          HSPLIT > 1 splits the head dim of dK and dV over that many workgroups (workgroup x = key block
//          * HSPLIT + split): each recomputes S^T and dP^T over the whole head dim but keeps only its
//          HEAD / HSPLIT columns of dK and dV in matrices and of q and dO in the transposed tiles, so a
//          large head dim fits registers and shared memory (at head 128 unsplit: dK and dV are 16 fp32
//          accumulator matrices a subgroup beside k's 8 kept ones, and the tiles fit 48 KiB only at BR 32,
//          BC 16). Checked in the emulation, not yet timed on a GPU: the shipped default is 1.
// (attention.comp's KERNEL 1, delta = rowsum(dO * O), runs before 2 and 3.)
// The scale multiplies the fp32 scores, not q: the matrices take the stored fp16 values exactly.
// P and dS are rounded to fp16 for their products (FlashAttention does the same).
// Tiles are staged as 16-byte octets of halves (uvec4), rows HEAD + 8 halves apart; VEC 8 loads a
// row's octets with one 16-byte load each (the host checks d, the strides and the addresses), VEC 1
// half by half.
// EMULATE 1 runs the matrix products with scalar code on the same shared tiles: the matrices a
// subgroup keeps are kept in shared memory, the accumulators in a fixed lane layout. It is how a GPU
// without cooperative matrices (lavapipe, in the tests) runs every other line of this kernel; it is
// never routed to for speed. Its subgroups are not the hardware's, so their barriers and the
// rescale's vote are the workgroup's.
// Defines (a module each): KERNEL, HEAD (the head dim rounded up to a multiple of 16), BR, BC,
// SUBGROUP_SIZE, VEC, MASK, CAUSAL, DROPOUT, SEED_BUF, EMULATE, HSPLIT (KERNEL 3 only).
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference_uvec2 : require
#extension GL_EXT_control_flow_attributes : enable
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_GOOGLE_include_directive : require
#ifndef EMULATE
#define EMULATE 0
#endif
#if !EMULATE
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_vote : require
#endif
#include "common/dtypes.glsl"
#define STYPE float16_t
#define ESIZE 2
#ifndef KERNEL
#define KERNEL 0
#endif
#ifndef MASK
#define MASK 0
#endif
#if MASK == 1
#extension GL_EXT_shader_8bit_storage : require
#endif
#ifndef CAUSAL
#define CAUSAL 0
#endif
#ifndef DROPOUT
#define DROPOUT 0
#endif
#ifndef SEED_BUF
#define SEED_BUF 0
#endif
#ifndef HEAD
#define HEAD 64
#endif
#ifndef BR
#define BR 64
#endif
#ifndef BC
#define BC 64
#endif
#ifndef SUBGROUP_SIZE
#define SUBGROUP_SIZE 32
#endif
#ifndef VEC
#define VEC 1
#endif
#if HEAD % 16 != 0 || BR % 16 != 0 || BC % 16 != 0 || SUBGROUP_SIZE % 16 != 0
#error HEAD, BR, BC and SUBGROUP_SIZE must be multiples of 16
#endif
#ifndef HSPLIT
#define HSPLIT 1
#endif
#if KERNEL != 3 && HSPLIT != 1
#error only the dK/dV pass (KERNEL 3) splits the head dim
#endif

#define NSG (BR / 16)                // subgroups
#define WG (NSG * SUBGROUP_SIZE)     // invocations
#define TPR (SUBGROUP_SIZE / 16)     // scalar threads per row
#define CPT (BC / TPR)               // score columns per thread
#define DPB (16 / TPR)               // dims of a 16-wide head block per thread
#define HB (HEAD / 16)               // 16-wide blocks of the head dim
#define KB (BC / 16)                 // 16-wide blocks of a step
#define SB (HB < KB ? HB : KB)       // head blocks staged in sS at once (a subgroup's rows hold BC floats)
#define DH (HB / HSPLIT)             // head blocks a workgroup accumulates (its split of the head dim)
#if HB % HSPLIT != 0
#error HSPLIT must divide the head dim's 16-wide blocks
#endif
#define TS8 (HEAD / 8 + 1)           // tile row stride in octets: one octet of padding, other banks
#define SST (BC + 4)                 // sS row stride in floats
#define PST (BC + 8)                 // sP / sdS row stride in halves
#if CPT < 1
#error BC must be at least SUBGROUP_SIZE / 16
#endif

layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;

#include "common/attention.glsl"  // buffers, push constants, strides, dropout, masked scores
layout(buffer_reference, std430, buffer_reference_align = 16) buffer U4Buf { uvec4 v[]; };

// one octet (8 halves) of a row from head dim d0: zero past d
uvec4 load_octet(uvec2 addr, uint rowbase, uint d0) {
#if VEC == 8
    if (d0 < p.d) return U4Buf(addr).v[(rowbase + d0) >> 3];  // the host: d, strides, address multiples of 8 halves
    return uvec4(0u);
#else
    SBuf s = SBuf(addr);
    float16_t h[8];
    [[unroll]] for (uint q = 0u; q < 8u; ++q) h[q] = d0 + q < p.d ? s.v[rowbase + d0 + q] : float16_t(0.0);
    return uvec4(packFloat2x16(f16vec2(h[0], h[1])), packFloat2x16(f16vec2(h[2], h[3])),
                 packFloat2x16(f16vec2(h[4], h[5])), packFloat2x16(f16vec2(h[6], h[7])));
#endif
}

// rows [FIRST, FIRST + ROWS) of the tensor at ADDR (element BASE, rows RS apart) into tile DST, zero past COUNT
#define LOAD_TILE(DST, ADDR, BASE, RS, FIRST, COUNT, ROWS)                                  \
    for (uint e = gl_LocalInvocationIndex; e < (ROWS) * (HEAD / 8u); e += WG) {             \
        const uint rr = e / (HEAD / 8u), oc = e % (HEAD / 8u), row = (FIRST) + rr;          \
        DST[rr * TS8 + oc] = row < (COUNT) ? load_octet(ADDR, (BASE) + row * (RS), oc * 8u) : uvec4(0u); \
    }
// the half at (row, col) of an octet tile
#define TILE_HALF(T, ROW, COL) float(unpackFloat2x16(T[(ROW) * TS8 + (COL) / 8u][((COL) % 8u) / 2u])[(COL) % 2u])

// The step loops' BC-row tiles: with PREFETCH, the next step's tile is fetched into registers (PT octets a thread)
// while this step computes, and stored to shared memory after the next barrier, so the loads' latency hides
// behind the products (the forward spent a third of its time waiting on them); without, loaded in place.
// dK/dV above head dim 64 a workgroup keeps 2 HB accumulators and HB kept matrices: no registers left for a tile
// in flight (unless HSPLIT leaves it 64 columns of dK and dV).
#ifndef PREFETCH
#define PREFETCH (KERNEL != 3 || HEAD / HSPLIT <= 64)
#endif
#define TILE_OCTETS (BC * (HEAD / 8u))
#define PT ((TILE_OCTETS + WG - 1u) / WG)
#if PREFETCH
#define TILE_REGS(R) uvec4 R[PT];
#define FETCH_TILE(R, ADDR, BASE, RS, FIRST, COUNT)                                         \
    [[unroll]] for (uint u = 0u; u < PT; ++u) {                                             \
        const uint e = tid + u * WG, rr = e / (HEAD / 8u), oc = e % (HEAD / 8u), row = (FIRST) + rr; \
        R[u] = e < TILE_OCTETS && row < (COUNT) ? load_octet(ADDR, (BASE) + row * (RS), oc * 8u) : uvec4(0u); \
    }
#define PUT_TILE(DST, R, ADDR, BASE, RS, FIRST, COUNT)                                      \
    [[unroll]] for (uint u = 0u; u < PT; ++u) {                                             \
        const uint e = tid + u * WG;                                                        \
        if (e < TILE_OCTETS) DST[(e / (HEAD / 8u)) * TS8 + e % (HEAD / 8u)] = R[u];         \
    }
#else
#define TILE_REGS(R)
#define FETCH_TILE(R, ADDR, BASE, RS, FIRST, COUNT)
#define PUT_TILE(DST, R, ADDR, BASE, RS, FIRST, COUNT) LOAD_TILE(DST, ADDR, BASE, RS, FIRST, COUNT, BC)
#endif
// Transposed tiles (halves, a row of BC + 8 per head dim): the second operand of P v (dS k, P^T dO, dS^T q) as the
// column-major B matrix NVIDIA's products take directly; from the row-major tile a B load is far slower
// (benchmarks/attention_coopmat_ablation.py: P v took 4x the time of q k^T)
// A split of the head dim (KERNEL 3, HSPLIT > 1) keeps only its DH * 16 rows, from head octet T_OC0 on.
#define TT (BC + 8u)
#define PUT_OCTET_T(DST, ROW, OC, V)                                                        \
    [[unroll]] for (uint w = 0u; w < 4u; ++w) {                                             \
        const f16vec2 pair = unpackFloat2x16(V[w]);                                         \
        DST[((OC) * 8u + 2u * w) * TT + (ROW)] = pair.x;                                    \
        DST[((OC) * 8u + 2u * w + 1u) * TT + (ROW)] = pair.y;                               \
    }
#if PREFETCH
#define PUT_TILE_T(DST, R, ADDR, BASE, RS, FIRST, COUNT)                                    \
    [[unroll]] for (uint u = 0u; u < PT; ++u) {                                             \
        const uint e = tid + u * WG;                                                        \
        const uint oc = e % (HEAD / 8u) - T_OC0;  /* wraps past the split's octets */      \
        if (e < TILE_OCTETS && oc < DH * 2u) PUT_OCTET_T(DST, e / (HEAD / 8u), oc, R[u])     \
    }
#else
#define PUT_TILE_T(DST, R, ADDR, BASE, RS, FIRST, COUNT)                                    \
    for (uint e = tid; e < BC * DH * 2u; e += WG) {                                         \
        const uint rr = e / (DH * 2u), oc = e % (DH * 2u), row = (FIRST) + rr;              \
        const uvec4 octet = row < (COUNT) ? load_octet(ADDR, (BASE) + row * (RS), (T_OC0 + oc) * 8u) : uvec4(0u); \
        PUT_OCTET_T(DST, rr, oc, octet)                                                     \
    }
#endif

#if !EMULATE
#define ACC_T coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>
#define A_T coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>
#define B_T coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB>
#define ROWMAJOR gl_CooperativeMatrixLayoutRowMajor
#define COLMAJOR gl_CooperativeMatrixLayoutColumnMajor
// the subgroup's 16 rows of tile T (from row ROW0) as HB A matrices
#define KEEP_ROWS(M, T, ROW0) [[unroll]] for (uint kd = 0u; kd < HB; ++kd) coopMatLoad(M[kd], T, (ROW0) * TS8 + kd * 2u, TS8, ROWMAJOR);
// OUT (fp32, row stride SST, from column 0) = the subgroup's kept rows M times the BC rows of tile T, transposed
#define ROWS_BY_TILE_T(OUT, M, T)                                                           \
    [[unroll]] for (uint cb = 0u; cb < KB; ++cb) {                                          \
        ACC_T acc = ACC_T(0.0);                                                             \
        [[unroll]] for (uint kd = 0u; kd < HB; ++kd) {                                      \
            B_T bt;                                                                         \
            coopMatLoad(bt, T, cb * 16u * TS8 + kd * 2u, TS8, COLMAJOR);                    \
            acc = coopMatMulAdd(M[kd], bt, acc);                                            \
        }                                                                                   \
        coopMatStore(acc, OUT, sg * 16u * SST + cb * 16u, SST, ROWMAJOR);                   \
    }
// ACC[db] += the subgroup's 16 rows of H (halves, row stride PST) times the BC rows of a tile, head blocks
// D0..D0+N; the tile comes transposed (TT_: halves, row d holding the BC rows' element d)
#define HALVES_BY_TILE(ACC, H, TT_, D0, N)                                                \
    {                                                                                       \
        A_T ha[KB];                                                                         \
        [[unroll]] for (uint kb = 0u; kb < KB; ++kb) coopMatLoad(ha[kb], H, sg * 16u * PST + kb * 16u, PST, ROWMAJOR); \
        [[unroll]] for (uint db = (D0); db < (D0) + (N); ++db) {                            \
            [[unroll]] for (uint kb = 0u; kb < KB; ++kb) {                                  \
                B_T bt;                                                                     \
                coopMatLoad(bt, TT_, db * 16u * TT + kb * 16u, TT, COLMAJOR);               \
                ACC[db] = coopMatMulAdd(ha[kb], bt, ACC[db]);                               \
            }                                                                               \
        }                                                                                   \
    }
// ROWS_BY_TILE_T with the kept rows in a shared tile MS (the subgroup's 16 rows from row sg * 16), loaded into
// matrices for each product: the backward keeps its second operand so (design note 54)
#define ROWS_BY_SHARED_T(OUT, MS, T)                                                        \
    [[unroll]] for (uint cb = 0u; cb < KB; ++cb) {                                          \
        ACC_T acc = ACC_T(0.0);                                                             \
        [[unroll]] for (uint kd = 0u; kd < HB; ++kd) {                                      \
            A_T am;                                                                         \
            B_T bt;                                                                         \
            coopMatLoad(am, MS, sg * 16u * TS8 + kd * 2u, TS8, ROWMAJOR);                   \
            coopMatLoad(bt, T, cb * 16u * TS8 + kd * 2u, TS8, COLMAJOR);                    \
            acc = coopMatMulAdd(am, bt, acc);                                               \
        }                                                                                   \
        coopMatStore(acc, OUT, sg * 16u * SST + cb * 16u, SST, ROWMAJOR);                   \
    }
#define ACC_ARRAY(NAME) ACC_T NAME[DH]; [[unroll]] for (uint db = 0u; db < DH; ++db) NAME[db] = ACC_T(0.0);
// head block DB of ACC into (out of) the subgroup's rows of sS at column C0
#define STORE_BLOCK(ACC, DB, C0) coopMatStore(ACC[DB], sS, sg * 16u * SST + (C0), SST, ROWMAJOR);
#define LOAD_BLOCK(ACC, DB, C0) coopMatLoad(ACC[DB], sS, sg * 16u * SST + (C0), SST, ROWMAJOR);
// what a subgroup wrote to its own rows of shared memory, visible to the subgroup
#define SG_SYNC() subgroupBarrier()
#else
// Emulation. A kept matrix is the tile rows themselves (MROWS: a shared tile of the workgroup's BR rows);
// an accumulator block is 256 / SUBGROUP_SIZE floats per lane, element e = lane + k SUBGROUP_SIZE at
// (e / 16, e % 16) of the block.
#define EPL (256 / SUBGROUP_SIZE)
#define KEEP_ROWS(M, T, ROW0) [[unroll]] for (uint e = lane; e < 16u * TS8; e += SUBGROUP_SIZE) M[sg * 16u * TS8 + e] = T[(ROW0) * TS8 + e];
#define ROWS_BY_TILE_T(OUT, M, T)                                                           \
    for (uint e = lane; e < 16u * BC; e += SUBGROUP_SIZE) {                                 \
        const uint rr = e / BC, cc = e % BC;                                                \
        float acc = 0.0;                                                                    \
        for (uint dd = 0u; dd < HEAD; ++dd) acc += TILE_HALF(M, sg * 16u + rr, dd) * TILE_HALF(T, cc, dd); \
        OUT[(sg * 16u + rr) * SST + cc] = acc;                                              \
    }
#define HALVES_BY_TILE(ACC, H, TT_, D0, N)                                                \
    [[unroll]] for (uint db = (D0); db < (D0) + (N); ++db) {                                \
        [[unroll]] for (uint k = 0u; k < EPL; ++k) {                                        \
            const uint e = lane + k * SUBGROUP_SIZE, rr = e / 16u, cc = db * 16u + e % 16u; \
            float acc = 0.0;                                                                \
            for (uint kk = 0u; kk < BC; ++kk) acc += float(H[(sg * 16u + rr) * PST + kk]) * float(TT_[cc * TT + kk]); \
            ACC[db][k] += acc;                                                              \
        }                                                                                   \
    }
#define ROWS_BY_SHARED_T(OUT, MS, T) ROWS_BY_TILE_T(OUT, MS, T)
#define ACC_ARRAY(NAME) float NAME[DH][EPL]; [[unroll]] for (uint db = 0u; db < DH; ++db) [[unroll]] for (uint k = 0u; k < EPL; ++k) NAME[db][k] = 0.0;
#define STORE_BLOCK(ACC, DB, C0)                                                            \
    [[unroll]] for (uint k = 0u; k < EPL; ++k) {                                            \
        const uint e = lane + k * SUBGROUP_SIZE;                                            \
        sS[(sg * 16u + e / 16u) * SST + (C0) + e % 16u] = ACC[DB][k];                       \
    }
#define LOAD_BLOCK(ACC, DB, C0)                                                             \
    [[unroll]] for (uint k = 0u; k < EPL; ++k) {                                            \
        const uint e = lane + k * SUBGROUP_SIZE;                                            \
        ACC[DB][k] = sS[(sg * 16u + e / 16u) * SST + (C0) + e % 16u];                       \
    }
#define SG_SYNC() barrier()
#endif

// the subgroup's 16 rows of tile T (from row ROW0) copied into shared tile MS (rows sg * 16 on)
#define KEEP_ROWS_SHARED(MS, T, ROW0) [[unroll]] for (uint e = lane; e < 16u * TS8; e += SUBGROUP_SIZE) MS[sg * 16u * TS8 + e] = T[(ROW0) * TS8 + e];
// ACC (the workgroup's DH head blocks, from block T_OC0 / 2) times MUL into row ROW0 + r of the tensor at ADDR
// (slot SLOT, head H) where it is under COUNT, staged through the subgroup's rows of sS SB blocks at a time
// (MUL: per row, the scalar phase's)
#define WRITE_ACC(ACC, MUL, ADDR, SLOT, H, ROW0, COUNT)                                     \
    {                                                                                       \
        SBuf OUTB = SBuf(ADDR);                                                             \
        const uint obase = AT(G, SLOT, b, H, (ROW0) + r) + T_OC0 * 8u;                      \
        [[unroll]] for (uint d0 = 0u; d0 < DH; d0 += SB) {                                  \
            SG_SYNC();                                                                      \
            [[unroll]] for (uint db = d0; db < min(d0 + SB, DH); ++db) STORE_BLOCK(ACC, db, (db - d0) * 16u) \
            SG_SYNC();                                                                      \
            if ((ROW0) + r < (COUNT))                                                       \
                [[unroll]] for (uint db = d0; db < min(d0 + SB, DH); ++db)                  \
                    [[unroll]] for (uint k = 0u; k < DPB; ++k) {                            \
                        const uint dd = db * 16u + t * DPB + k;                             \
                        if (T_OC0 * 8u + dd < p.d) OUTB.v[obase + dd] = STYPE(sS[r * SST + (db - d0) * 16u + t * DPB + k] * (MUL)); \
                    }                                                                       \
        }                                                                                   \
    }

#define tid gl_LocalInvocationIndex
#define sg (tid / SUBGROUP_SIZE)    // full subgroups: the host requires them
#define lane (tid % SUBGROUP_SIZE)
#define r (tid / TPR)               // the scalar phases' row (one of subgroup sg's 16)
#define t (tid % TPR)               // this thread's place among the row's

shared float sS[BR * SST];          // scores, dP, staged products
shared float sRed[WG];              // per-thread partial row maxima and sums

#if KERNEL != 3
#define T_OC0 0u  // the whole head dim: from octet 0
#endif

#if KERNEL == 0
// ---------------------------------------------------------------- forward
shared uvec4 sK[BC * TS8];
shared float16_t sVt[HEAD * TT];  // v's tile, transposed
shared float16_t sP[BR * PST];
#if EMULATE
shared uvec4 sQ[BR * TS8];
#define KEPT_Q sQ
#else
#define KEPT_Q qa
#endif
#define TAU 4.0  // the lazy maximum's slack: P < e^TAU (see the top)

// whether any row of the subgroup (the emulation: of the workgroup) votes true; the same answer for all of them
bool any_row(bool vote) {
#if EMULATE
    barrier();
    sRed[tid] = vote ? 1.0 : 0.0;
    barrier();
    float any = 0.0;
    for (uint u = 0u; u < WG; ++u) any = max(any, sRed[u]);
    barrier();
    return any > 0.0;
#else
    return subgroupAny(vote);
#endif
}

void main() {
    const uint b = gl_WorkGroupID.z, h = gl_WorkGroupID.y, hk = h / p.group;
    const uint i0 = gl_WorkGroupID.x * BR, i = i0 + r;
    GeoBuf G = GeoBuf(p.geo);
    const uint qbase = AT(G, SQ, b, h, 0), kbase = AT(G, SK, b, hk, 0), vbase = AT(G, SV, b, hk, 0);
    const uint qrs = G.s[3 * SQ + 2], krs = G.s[3 * SK + 2], vrs = G.s[3 * SV + 2];
#if DROPOUT
#if SEED_BUF
    RngBuf sb = RngBuf(p.rng);
    uint carry;
    uint off_lo = uaddCarry(sb.offset.x, p.x1.x, carry);
    const uvec2 offset = uvec2(off_lo, sb.offset.y + p.x1.y + carry), seed = sb.seed;
#else
    const uvec2 offset = p.x1, seed = p.rng;
#endif
    if (gl_WorkGroupID == uvec3(0) && tid == 0u) {  // for the backward
        U64Buf(p.x0).v = seed;
        U64Buf(p.x2).v = offset;
    }
    const uint nrow = ((b * p.hq + h) * p.lq + i) * p.lk;
#endif
    // q, staged through sK BC rows at a time, kept by the subgroup that owns its rows
#if !EMULATE
    A_T qa[HB];
#endif
    for (uint c0 = 0u; c0 < BR; c0 += BC) {
        barrier();
        LOAD_TILE(sK, p.q, qbase, qrs, i0 + c0, p.lq, (BR < BC ? BR : BC))
        barrier();
        if (sg * 16u >= c0 && sg * 16u < c0 + BC) { KEEP_ROWS(KEPT_Q, sK, sg * 16u - c0) }
    }
    ACC_ARRAY(o)
    float m = NEG_INF, lsum = 0.0;  // m: the row's lazy maximum; lsum: this thread's columns' share of the row sum
#if CAUSAL
    const uint jend = min(p.lk, i0 + BR);
#else
    const uint jend = p.lk;
#endif
    TILE_REGS(kr)
    TILE_REGS(vr)
    FETCH_TILE(kr, p.k, kbase, krs, 0u, p.lk)
    FETCH_TILE(vr, p.v, vbase, vrs, 0u, p.lk)
    for (uint j0 = 0u; j0 < jend; j0 += BC) {
        barrier();
        PUT_TILE(sK, kr, p.k, kbase, krs, j0, p.lk)
        PUT_TILE_T(sVt, vr, p.v, vbase, vrs, j0, p.lk)
        barrier();
        if (j0 + BC < jend) {
            FETCH_TILE(kr, p.k, kbase, krs, j0 + BC, p.lk)
            FETCH_TILE(vr, p.v, vbase, vrs, j0 + BC, p.lk)
        }
        ROWS_BY_TILE_T(sS, KEPT_Q, sK)
        SG_SYNC();
        float s[CPT];
        float mx = NEG_INF;
        [[unroll]] for (uint c = 0u; c < CPT; ++c) {
            const uint col = t * CPT + c;
            s[c] = masked(sS[r * SST + col] * p.scale, b, h, i, j0 + col);
            mx = max(mx, s[c]);
        }
        sRed[tid] = mx;
        SG_SYNC();
        [[unroll]] for (uint u = 0u; u < TPR; ++u) mx = max(mx, sRed[r * TPR + u]);
        if (m == NEG_INF) m = mx;  // nothing kept yet (o and lsum are 0): no rescale
        if (any_row(mx > m + TAU)) {
            const float mn = max(m, mx), alpha = mn == NEG_INF ? 1.0 : exp(m - mn);  // m = -inf: so is mx
            m = mn;
            lsum *= alpha;
            [[unroll]] for (uint d0 = 0u; d0 < HB; d0 += SB) {  // o's rows times alpha, through sS
                SG_SYNC();
                [[unroll]] for (uint db = d0; db < min(d0 + SB, HB); ++db) STORE_BLOCK(o, db, (db - d0) * 16u)
                SG_SYNC();
                for (uint c = t; c < min(SB, HB - d0) * 16u; c += TPR) sS[r * SST + c] *= alpha;
                SG_SYNC();
                [[unroll]] for (uint db = d0; db < min(d0 + SB, HB); ++db) LOAD_BLOCK(o, db, (db - d0) * 16u)
            }
        }
        [[unroll]] for (uint c = 0u; c < CPT; ++c) {
            float pr = s[c] == NEG_INF ? 0.0 : exp(s[c] - m);
            lsum += pr;
#if DROPOUT
            if (pr != 0.0) pr *= keep_scale(nrow + j0 + t * CPT + c, seed, offset);
#endif
            sP[r * PST + t * CPT + c] = float16_t(pr);
        }
        SG_SYNC();
        HALVES_BY_TILE(o, sP, sVt, 0u, HB)
    }
    SG_SYNC();
    sRed[tid] = lsum;
    SG_SYNC();
    float total = 0.0;
    [[unroll]] for (uint u = 0u; u < TPR; ++u) total += sRed[r * TPR + u];
    // a row with every score masked: O = 0 and lse = -inf (its gradients are 0)
    const float inv = total > 0.0 ? 1.0 / total : 0.0;
    WRITE_ACC(o, inv, p.o, SO, h, i0, p.lq)
    if (i < p.lq && t == 0u) FBuf(p.lse).v[(b * p.hq + h) * p.lq + i] = total > 0.0 ? m + log(total) : NEG_INF;
}

#elif KERNEL == 2
// ---------------------------------------------------------------- backward: dQ
shared uvec4 sK[BC * TS8];
shared float16_t sKt[HEAD * TT];  // k's tile again, transposed, for dS k
shared uvec4 sV[BC * TS8];
shared float16_t sP[BR * PST];  // dS
// dO's rows are kept in shared memory, not in matrices: NVIDIA's driver crashes building this kernel with two
// kept arrays of matrices (q's and dO's) live together (design note 54)
shared uvec4 sdO[BR * TS8];
#if EMULATE
shared uvec4 sQ[BR * TS8];
#define KEPT_Q sQ
#else
#define KEPT_Q qa
#endif

void main() {
    const uint b = gl_WorkGroupID.z, h = gl_WorkGroupID.y, hk = h / p.group;
    const uint i0 = gl_WorkGroupID.x * BR, i = i0 + r;
    GeoBuf G = GeoBuf(p.geo);
    const uint qbase = AT(G, SQ, b, h, 0), gbase = AT(G, SDO, b, h, 0);
    const uint kbase = AT(G, SK, b, hk, 0), vbase = AT(G, SV, b, hk, 0);
    const uint qrs = G.s[3 * SQ + 2], grs = G.s[3 * SDO + 2], krs = G.s[3 * SK + 2], vrs = G.s[3 * SV + 2];
    const uint row = (b * p.hq + h) * p.lq + i;
#if DROPOUT
    RngBuf rs = RngBuf(p.rng);
    const uvec2 seed = rs.seed, offset = rs.offset;
#endif
    const float lse_i = i < p.lq ? FBuf(p.lse).v[row] : 0.0;
    const float delta_i = i < p.lq ? FBuf(p.x1).v[row] : 0.0;
    const bool write_ds = p.x2 != uvec2(0u);
#if !EMULATE
    A_T qa[HB];
#endif
    for (uint c0 = 0u; c0 < BR; c0 += BC) {
        barrier();
        LOAD_TILE(sK, p.q, qbase, qrs, i0 + c0, p.lq, (BR < BC ? BR : BC))
        LOAD_TILE(sV, p.o, gbase, grs, i0 + c0, p.lq, (BR < BC ? BR : BC))
        barrier();
        if (sg * 16u >= c0 && sg * 16u < c0 + BC) {
            KEEP_ROWS(KEPT_Q, sK, sg * 16u - c0)
            KEEP_ROWS_SHARED(sdO, sV, sg * 16u - c0)
        }
    }
    ACC_ARRAY(dq)
#if CAUSAL
    const uint jend = write_ds ? p.lk : min(p.lk, i0 + BR);  // dS is written (as 0) past the diagonal too
#else
    const uint jend = p.lk;
#endif
    TILE_REGS(kr)
    TILE_REGS(vr)
    FETCH_TILE(kr, p.k, kbase, krs, 0u, p.lk)
    FETCH_TILE(vr, p.v, vbase, vrs, 0u, p.lk)
    for (uint j0 = 0u; j0 < jend; j0 += BC) {
        barrier();
        PUT_TILE(sK, kr, p.k, kbase, krs, j0, p.lk)
        PUT_TILE_T(sKt, kr, p.k, kbase, krs, j0, p.lk)
        PUT_TILE(sV, vr, p.v, vbase, vrs, j0, p.lk)
        barrier();
        if (j0 + BC < jend) {
            FETCH_TILE(kr, p.k, kbase, krs, j0 + BC, p.lk)
            FETCH_TILE(vr, p.v, vbase, vrs, j0 + BC, p.lk)
        }
        ROWS_BY_TILE_T(sS, KEPT_Q, sK)
        SG_SYNC();
        float pr[CPT];
        [[unroll]] for (uint c = 0u; c < CPT; ++c) {
            const float s = masked(sS[r * SST + t * CPT + c] * p.scale, b, h, i, j0 + t * CPT + c);
            pr[c] = s == NEG_INF ? 0.0 : exp(s - lse_i);
        }
        SG_SYNC();
        ROWS_BY_SHARED_T(sS, sdO, sV)
        SG_SYNC();
        [[unroll]] for (uint c = 0u; c < CPT; ++c) {
            const uint j = j0 + t * CPT + c;
            float dp = sS[r * SST + t * CPT + c];
#if DROPOUT
            if (pr[c] != 0.0) dp *= keep_scale(row * p.lk + j, seed, offset);
#endif
            const float ds = pr[c] * (dp - delta_i);
            sP[r * PST + t * CPT + c] = float16_t(ds);
            if (write_ds && i < p.lq && j < p.lk) FBuf(p.x2).v[row * p.lk + j] = ds;
        }
        SG_SYNC();
        HALVES_BY_TILE(dq, sP, sKt, 0u, HB)
    }
    WRITE_ACC(dq, p.scale, p.x0, SDQ, h, i0, p.lq)
}

#elif KERNEL == 3
// ---------------------------------------------------------------- backward: dK, dV
#define T_OC0 toc0
shared uvec4 sQ[BC * TS8];
shared uvec4 sdO[BC * TS8];
shared float16_t sQt[DH * 16u * TT];   // the same two tiles transposed, for dS^T q and P^T dO (the split's rows)
shared float16_t sdOt[DH * 16u * TT];
shared float16_t sP[BR * PST];   // P^T (with dropout)
shared float16_t sdS[BR * PST];  // dS^T
shared uvec4 sVk[BR * TS8];  // v's rows, kept in shared memory as dO's in the dQ pass
#if EMULATE
shared uvec4 sKk[BR * TS8];
#define KEPT_K sKk
#else
#define KEPT_K ka
#endif

void main() {
    const uint b = gl_WorkGroupID.z, hk = gl_WorkGroupID.y;
    const uint j0 = (gl_WorkGroupID.x / HSPLIT) * BR, j = j0 + r;
    const uint toc0 = (gl_WorkGroupID.x % HSPLIT) * DH * 2u;  // this split's first head octet
    GeoBuf G = GeoBuf(p.geo);
    const uint kbase = AT(G, SK, b, hk, 0), vbase = AT(G, SV, b, hk, 0);
    const uint krs = G.s[3 * SK + 2], vrs = G.s[3 * SV + 2], qrs = G.s[3 * SQ + 2], grs = G.s[3 * SDO + 2];
    FBuf L = FBuf(p.lse), Dl = FBuf(p.x1);
#if DROPOUT
    RngBuf rs = RngBuf(p.rng);
    const uvec2 seed = rs.seed, offset = rs.offset;
#endif
#if !EMULATE
    A_T ka[HB];
#endif
    for (uint c0 = 0u; c0 < BR; c0 += BC) {
        barrier();
        LOAD_TILE(sQ, p.k, kbase, krs, j0 + c0, p.lk, (BR < BC ? BR : BC))
        LOAD_TILE(sdO, p.v, vbase, vrs, j0 + c0, p.lk, (BR < BC ? BR : BC))
        barrier();
        if (sg * 16u >= c0 && sg * 16u < c0 + BC) {
            KEEP_ROWS(KEPT_K, sQ, sg * 16u - c0)
            KEEP_ROWS_SHARED(sVk, sdO, sg * 16u - c0)
        }
    }
    ACC_ARRAY(dk)
    ACC_ARRAY(dv)
#if CAUSAL
    const uint istart = (j0 / BC) * BC;  // queries above the diagonal see none of these keys
#else
    const uint istart = 0u;
#endif
    // one loop over the steps of every query head of the group: the next step's tile may be another head's
    const uint tiles = istart < p.lq ? (p.lq - istart + BC - 1u) / BC : 0u;
    TILE_REGS(qr)
    TILE_REGS(gr)
    if (tiles > 0u) {
        FETCH_TILE(qr, p.q, AT(G, SQ, b, hk * p.group, 0), qrs, istart, p.lq)
        FETCH_TILE(gr, p.o, AT(G, SDO, b, hk * p.group, 0), grs, istart, p.lq)
    }
    for (uint qstep = 0u; qstep < p.group * tiles; ++qstep) {
        const uint h = hk * p.group + qstep / tiles, i0 = istart + (qstep % tiles) * BC;
        const uint qbase = AT(G, SQ, b, h, 0), gbase = AT(G, SDO, b, h, 0), lbase = (b * p.hq + h) * p.lq;
        barrier();
        PUT_TILE(sQ, qr, p.q, qbase, qrs, i0, p.lq)
        PUT_TILE(sdO, gr, p.o, gbase, grs, i0, p.lq)
        PUT_TILE_T(sQt, qr, p.q, qbase, qrs, i0, p.lq)
        PUT_TILE_T(sdOt, gr, p.o, gbase, grs, i0, p.lq)
        barrier();
        if (qstep + 1u < p.group * tiles) {
            const uint nh = hk * p.group + (qstep + 1u) / tiles, ni0 = istart + ((qstep + 1u) % tiles) * BC;
            FETCH_TILE(qr, p.q, AT(G, SQ, b, nh, 0), qrs, ni0, p.lq)
            FETCH_TILE(gr, p.o, AT(G, SDO, b, nh, 0), grs, ni0, p.lq)
        }
        ROWS_BY_TILE_T(sS, KEPT_K, sQ)
        SG_SYNC();
        float pr[CPT];
        [[unroll]] for (uint c = 0u; c < CPT; ++c) {
            const uint i = i0 + t * CPT + c;
            const float s = masked(sS[r * SST + t * CPT + c] * p.scale, b, h, i, j);
            pr[c] = s == NEG_INF ? 0.0 : exp(s - L.v[lbase + i]);
        }
        SG_SYNC();
        ROWS_BY_SHARED_T(sS, sVk, sdO)
        SG_SYNC();
        [[unroll]] for (uint c = 0u; c < CPT; ++c) {
            const uint i = i0 + t * CPT + c;
            float dp = sS[r * SST + t * CPT + c], pd = pr[c];
#if DROPOUT
            if (pr[c] != 0.0) {
                const float z = keep_scale((lbase + i) * p.lk + j, seed, offset);
                pd *= z;
                dp *= z;
            }
#endif
            sP[r * PST + t * CPT + c] = float16_t(pd);
            sdS[r * PST + t * CPT + c] = float16_t(pr[c] == 0.0 ? 0.0 : pr[c] * (dp - Dl.v[lbase + i]));
        }
        SG_SYNC();
        HALVES_BY_TILE(dv, sP, sdOt, 0u, DH)
        HALVES_BY_TILE(dk, sdS, sQt, 0u, DH)
    }
    WRITE_ACC(dk, p.scale, p.x0, SDK, hk, j0, p.lk)
    WRITE_ACC(dv, 1.0, p.x2, SDV, hk, j0, p.lk)
}
#endif
