#version 450
// Fused scaled-dot-product attention, flash-attention style: the L x L score matrix is never
// stored. q [B, Hq, Lq, D], k and v [B, Hkv, Lk, D], o [B, Hq, Lq, D] (Hq = Hkv * group: query head
// h reads key/value head h / group), each with its own batch, head and row strides (a view's, read
// in place: no copy to contiguous) and unit stride along D; lse and delta [B, Hq, Lq] float32.
// The strides, and the mask's, are in a geometry buffer (GeoBuf): the push constants have no room.
//   S = (q * scale) k^T + mask, P = softmax(S), O = dropout(P) v,  lse = logsumexp(S) per row.
// KERNEL 0 forward: a workgroup owns BR query rows of one (b, h) and walks k/v in tiles of BC
//          rows through shared memory with an online softmax (running max m and sum l).
// KERNEL 1 backward preprocess: delta = rowsum(dO * O), one thread per row.
// KERNEL 2 dQ:  a workgroup owns BR query rows; recomputes P = exp(S - lse) tile by tile,
//          dS = P * (dropout(dO v^T) - delta), dQ = scale * dS k; writes dS when asked (mask grad).
// KERNEL 3 dK, dV: a workgroup owns BR key rows of one (b, kv head) and walks the query rows
//          of every query head of its group: dV = dropout(P)^T dO, dK = scale * dS^T q.
// Threads: TPR adjacent threads per owned row; thread t of a row keeps the output dims
// t, t + TPR, ... (HEAD / TPR of them) in registers and the scores of tile columns t, t + TPR, ...
// HEAD: the head dim D rounded up to a multiple of 16 (shared tiles are zero past D); shared rows
// are HEAD + 1 floats apart so the TPR threads of a row, reading different rows, hit different banks.
// MASK 0 none, 1 bool (uint8), 2 additive (the storage type); read through 4 strides, so a mask
// broadcast over batch or heads costs nothing. CAUSAL: keep j <= i (torch's top-left alignment).
// DROPOUT: Philox4x32-10 as templates/elementwise_rng.comp: score (b, h, i, j) with flat index
// n = ((b * Hq + h) * Lq + i) * Lk + j uses word n % 4 of the block for counter (n / 4, 0, offset);
// kept when unit(word) >= p, so the mask equals a dropout of a [B, Hq, Lq, Lk] tensor at that offset.
// The forward writes the seed and offset it used to two int64s; the backward reads them as one
// {seed, offset} pair (16 bytes).
// SEED_BUF (forward): `rng` is the address of {seed, base offset} (compiled mode's replays) and
// `offset` is relative to that base.
// PACKED (fp16 storage, HEAD a multiple of 2 TPR): packed fp16 arithmetic for GPUs without cooperative
// matrices (RDNA1's v_pk_fma_f16): shared tiles hold f16vec2 pairs of adjacent head dims (half the
// shared memory and half the shared loads), q is loaded unscaled and the scale multiplies the score.
// A dot product over the head dim runs in chains of CHAIN pairs, each summed in fp16 by f16vec2 FMAs,
// then added to an fp32 sum, so |s - exact| <= (CHAIN + 1) u sum_d |q_d k_d| (u = 2^-11; products
// under fp16's normal range lose relative precision). A chain that overflowed (inf or nan in fp16) is
// summed again in fp32 from the same values, so overflow is never silent. Accumulations over rows
// (P v, dS k, P^T dO, dS^T q) stay fp32: each thread keeps pairs of output dims in vec2s.
// Tunables (specialization constants: one SPIR-V module serves every config): BR (id 3), BC (4).
// Defines: KERNEL (its own main), DT (storage type), MASK (bool: 8-bit storage), PACKED, and HEAD, TPR,
// CAUSAL, DROPOUT, SEED_BUF: as specialization constants these give other RDNA1 machine code (glslc
// -O unrolls the DPT loops and folds the flags before the driver sees them), so they stay defines.
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference_uvec2 : require
#extension GL_EXT_control_flow_attributes : enable
#extension GL_GOOGLE_include_directive : require
#include "common/dtypes.glsl"
#ifndef DT
#define DT TVK_DT_FLOAT32
#endif
#if DT == TVK_DT_FLOAT16
#extension GL_EXT_shader_16bit_storage : require
#define STYPE float16_t
#define ESIZE 2
#else
#define STYPE float
#define ESIZE 4
#endif
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
layout(constant_id = 3) const uint BR = 16u;
layout(constant_id = 4) const uint BC = 16u;
#ifndef TPR
#define TPR 4
#endif
#ifndef PACKED
#define PACKED 0
#endif
#if PACKED
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#if DT != TVK_DT_FLOAT16 || HEAD % (2 * TPR) != 0
#error PACKED needs float16 storage and HEAD a multiple of 2 TPR
#endif
#define TILE f16vec2            // a shared tile's word: two adjacent head dims
#define TW (HEAD / 2)           // words per tile row
#define ACC vec2                // a thread's accumulator: the dims of one word
#define ACC_ZERO vec2(0.0)
#define CHAIN 4                 // pairs summed in fp16 before the fp32 sum (divides TW: HEAD is a multiple of 16)
#define Q_LOAD_SCALE 1.0        // q stays unscaled in fp16 ...
#define SCALED(x) ((x) * p.scale)  // ... and the scale multiplies the fp32 score (and dK)
#else
#define TILE float
#define TW HEAD
#define ACC float
#define ACC_ZERO 0.0
#define Q_LOAD_SCALE p.scale    // q is scaled as it is loaded
#define SCALED(x) (x)
#endif
#define DPT (TW / TPR)  // accumulators (output dims, or pairs of them) per thread
#define HS (TW + 1)     // shared row stride in words: the TPR threads of a row read different rows, other banks

layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;

#include "common/attention.glsl"  // buffers, push constants, strides, dropout, masked scores

// load `rows` rows of HEAD from rows RS elements apart at row `first` (zero past d and past `count`)
#if PACKED
#define LOAD_TILE(DST, SRC, BASE, RS, FIRST, COUNT, ROWS, MUL)                              \
    for (uint e = gl_LocalInvocationID.x; e < (ROWS) * TW; e += gl_WorkGroupSize.x) {       \
        uint rr = e / TW, dd = 2u * (e % TW), row = (FIRST) + rr, at = (BASE) + row * (RS) + dd; \
        bool live = row < (COUNT);                                                          \
        DST[rr * HS + e % TW] = f16vec2(live && dd < p.d ? SRC.v[at] : float16_t(0.0),      \
                                        live && dd + 1u < p.d ? SRC.v[at + 1u] : float16_t(0.0)); \
    }
// float OUT = the dot product of row RA of tile A and row RB of tile B: chains of CHAIN f16vec2 FMAs,
// a chain that overflowed fp16 summed again in fp32; DOT2: two of them
#define DOT(OUT, A, RA, B, RB)                                                              \
    float OUT = 0.0;                                                                        \
    [[unroll]] for (uint w0 = 0; w0 < TW; w0 += CHAIN) {                                    \
        f16vec2 part = f16vec2(0.0);                                                        \
        [[unroll]] for (uint u = 0; u < CHAIN; ++u)                                         \
            part = fma(A[(RA) * HS + w0 + u], B[(RB) * HS + w0 + u], part);                 \
        float chain = float(part.x) + float(part.y);                                        \
        if (isinf(chain) || isnan(chain)) {                                                 \
            chain = 0.0;                                                                    \
            for (uint u = 0; u < CHAIN; ++u) {                                              \
                vec2 a2 = vec2(A[(RA) * HS + w0 + u]), b2 = vec2(B[(RB) * HS + w0 + u]);    \
                chain += a2.x * b2.x + a2.y * b2.y;                                         \
            }                                                                               \
        }                                                                                   \
        OUT += chain;                                                                       \
    }
#define DOT2(OUT1, A1, RA1, B1, RB1, OUT2, A2, RA2, B2, RB2) \
    DOT(OUT1, A1, RA1, B1, RB1)                               \
    DOT(OUT2, A2, RA2, B2, RB2)
#define TILE_AT(A, ROW, COL) vec2(A[ROW * HS + COL])  // ROW * HS + COL as written: the same SPIR-V as before
#else
#define LOAD_TILE(DST, SRC, BASE, RS, FIRST, COUNT, ROWS, MUL)                              \
    for (uint e = gl_LocalInvocationID.x; e < (ROWS) * HEAD; e += gl_WorkGroupSize.x) {     \
        uint rr = e / HEAD, dd = e % HEAD, row = (FIRST) + rr;                              \
        DST[rr * HS + dd] = (row < (COUNT) && dd < p.d) ? float(SRC.v[(BASE) + row * (RS) + dd]) * (MUL) : 0.0; \
    }
#define DOT(OUT, A, RA, B, RB) \
    float OUT = 0.0;           \
    for (uint dd = 0; dd < HEAD; ++dd) OUT += A[(RA) * HS + dd] * B[(RB) * HS + dd];
#define DOT2(OUT1, A1, RA1, B1, RB1, OUT2, A2, RA2, B2, RB2) \
    float OUT1 = 0.0, OUT2 = 0.0;                              \
    for (uint dd = 0; dd < HEAD; ++dd) {                       \
        OUT1 += A1[(RA1) * HS + dd] * B1[(RB1) * HS + dd];     \
        OUT2 += A2[(RA2) * HS + dd] * B2[(RB2) * HS + dd];     \
    }
#define TILE_AT(A, ROW, COL) A[ROW * HS + COL]
#endif

// PACKED: accumulator e of this thread holds output dims 2 (t + e TPR) and the next
#define PAIR_STORE(DST, BASE, VALUE, e)                                                     \
    {                                                                                       \
        uint dd = 2u * (t + (e) * TPR);                                                     \
        vec2 pair = (VALUE);                                                                \
        if (dd < p.d) DST.v[(BASE) + dd] = STYPE(pair.x);                                   \
        if (dd + 1u < p.d) DST.v[(BASE) + dd + 1u] = STYPE(pair.y);                         \
    }

#if KERNEL == 1
// ---------------------------------------------------------------- backward preprocess
void main() {
    uint row = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * gl_WorkGroupSize.x
               + gl_LocalInvocationID.x;
    if (row >= p.lq) return;  // lq: every row, B * Hq * Lq; lk: Lq
    SBuf O = SBuf(p.o), dO = SBuf(p.x0);
    GeoBuf G = GeoBuf(p.geo);
    const uint i = row % p.lk, h = (row / p.lk) % p.hq, b = row / p.lk / p.hq;
    const uint ob = AT(G, SO, b, h, i), gb = AT(G, SDO, b, h, i);
    float acc = 0.0;
    for (uint dd = 0; dd < p.d; ++dd) acc += float(O.v[ob + dd]) * float(dO.v[gb + dd]);
    FBuf(p.x1).v[row] = acc;
}
#else

#define r (gl_LocalInvocationID.x / TPR)  // the workgroup's row this thread works on
#define t (gl_LocalInvocationID.x % TPR)  // its place among the row's TPR threads

#if KERNEL == 0
// ---------------------------------------------------------------- forward
shared TILE sQ[BR * HS];
shared TILE sKV[BC * HS];
shared float sS[BR * BC];

void main() {
    const uint b = gl_WorkGroupID.z, h = gl_WorkGroupID.y, hk = h / p.group, hkv = p.hq / p.group;
    const uint i0 = gl_WorkGroupID.x * BR, i = i0 + r;
    GeoBuf G = GeoBuf(p.geo);
    const uint qbase = AT(G, SQ, b, h, 0), kbase = AT(G, SK, b, hk, 0), vbase = AT(G, SV, b, hk, 0);
    const uint qrs = G.s[3 * SQ + 2], krs = G.s[3 * SK + 2], vrs = G.s[3 * SV + 2];
    SBuf Q = SBuf(p.q), K = SBuf(p.k), V = SBuf(p.v), O = SBuf(p.o);
#if DROPOUT
#if SEED_BUF
    RngBuf sb = RngBuf(p.rng);
    uint carry;
    uint off_lo = uaddCarry(sb.offset.x, p.x1.x, carry);
    const uvec2 offset = uvec2(off_lo, sb.offset.y + p.x1.y + carry), seed = sb.seed;
#else
    const uvec2 offset = p.x1, seed = p.rng;
#endif
    if (gl_WorkGroupID == uvec3(0) && gl_LocalInvocationID.x == 0) {  // for the backward
        U64Buf(p.x0).v = seed;
        U64Buf(p.x2).v = offset;
    }
    const uint nrow = ((b * p.hq + h) * p.lq + i) * p.lk;
#endif
    LOAD_TILE(sQ, Q, qbase, qrs, i0, p.lq, BR, Q_LOAD_SCALE)
    ACC acc[DPT];
    [[unroll]] for (uint c = 0; c < DPT; ++c) acc[c] = ACC_ZERO;
    float m = NEG_INF, lsum = 0.0;
#if CAUSAL
    const uint jend = min(p.lk, i0 + BR);
#else
    const uint jend = p.lk;
#endif
    for (uint j0 = 0; j0 < jend; j0 += BC) {
        barrier();
        LOAD_TILE(sKV, K, kbase, krs, j0, p.lk, BC, 1.0)
        barrier();
        for (uint c = t; c < BC; c += TPR) {
            DOT(s, sQ, r, sKV, c)
            sS[r * BC + c] = masked(SCALED(s), b, h, i, j0 + c);
        }
        barrier();
        LOAD_TILE(sKV, V, vbase, vrs, j0, p.lk, BC, 1.0)
        barrier();
        float mt = m;
        for (uint c = 0; c < BC; ++c) mt = max(mt, sS[r * BC + c]);
        if (mt != NEG_INF) {  // else every score so far is masked: nothing to add
            float alpha = exp(m - mt);  // m = -inf: 0, and acc, lsum are 0
            lsum *= alpha;
            [[unroll]] for (uint c = 0; c < DPT; ++c) acc[c] *= alpha;
            for (uint c = 0; c < BC; ++c) {
                float s = sS[r * BC + c];
                float pr = s == NEG_INF ? 0.0 : exp(s - mt);
                lsum += pr;
#if DROPOUT
                if (pr != 0.0) pr *= keep_scale(nrow + j0 + c, seed, offset);
#endif
                [[unroll]] for (uint e = 0; e < DPT; ++e) acc[e] += pr * TILE_AT(sKV, c, t + e * TPR);
            }
            m = mt;
        }
    }
    if (i < p.lq) {
        // a row with every score masked: O = 0 and lse = -inf (its gradients are 0)
        float inv = lsum > 0.0 ? 1.0 / lsum : 0.0;
        const uint obase = AT(G, SO, b, h, i);
#if PACKED
        [[unroll]] for (uint e = 0; e < DPT; ++e) PAIR_STORE(O, obase, acc[e] * inv, e)
#else
        [[unroll]] for (uint e = 0; e < DPT; ++e) {
            uint dd = t + e * TPR;
            if (dd < p.d) O.v[obase + dd] = STYPE(acc[e] * inv);
        }
#endif
        if (t == 0) FBuf(p.lse).v[(b * p.hq + h) * p.lq + i] = lsum > 0.0 ? m + log(lsum) : NEG_INF;
    }
}

#elif KERNEL == 2
// ---------------------------------------------------------------- backward: dQ
shared TILE sQ[BR * HS];
shared TILE sdO[BR * HS];
shared TILE sK[BC * HS];
shared TILE sV[BC * HS];
shared float sdS[BR * BC];

void main() {
    const uint b = gl_WorkGroupID.z, h = gl_WorkGroupID.y, hk = h / p.group, hkv = p.hq / p.group;
    const uint i0 = gl_WorkGroupID.x * BR, i = i0 + r;
    GeoBuf G = GeoBuf(p.geo);
    const uint qbase = AT(G, SQ, b, h, 0), gbase = AT(G, SDO, b, h, 0);
    const uint kbase = AT(G, SK, b, hk, 0), vbase = AT(G, SV, b, hk, 0);
    const uint qrs = G.s[3 * SQ + 2], grs = G.s[3 * SDO + 2], krs = G.s[3 * SK + 2], vrs = G.s[3 * SV + 2];
    const uint row = (b * p.hq + h) * p.lq + i;
    SBuf Q = SBuf(p.q), K = SBuf(p.k), V = SBuf(p.v), dO = SBuf(p.o), dQ = SBuf(p.x0);
#if DROPOUT
    RngBuf rs = RngBuf(p.rng);
    const uvec2 seed = rs.seed, offset = rs.offset;
#endif
    const float lse_i = i < p.lq ? FBuf(p.lse).v[row] : 0.0;
    const float delta_i = i < p.lq ? FBuf(p.x1).v[row] : 0.0;
    const bool write_ds = p.x2 != uvec2(0u);
    LOAD_TILE(sQ, Q, qbase, qrs, i0, p.lq, BR, Q_LOAD_SCALE)
    LOAD_TILE(sdO, dO, gbase, grs, i0, p.lq, BR, 1.0)
    ACC acc[DPT];
    [[unroll]] for (uint c = 0; c < DPT; ++c) acc[c] = ACC_ZERO;
#if CAUSAL
    const uint jend = write_ds ? p.lk : min(p.lk, i0 + BR);  // dS is written (as 0) past the diagonal too
#else
    const uint jend = p.lk;
#endif
    for (uint j0 = 0; j0 < jend; j0 += BC) {
        barrier();
        LOAD_TILE(sK, K, kbase, krs, j0, p.lk, BC, 1.0)
        LOAD_TILE(sV, V, vbase, vrs, j0, p.lk, BC, 1.0)
        barrier();
        for (uint c = t; c < BC; c += TPR) {
            const uint j = j0 + c;
            DOT2(s, sQ, r, sK, c, dp, sdO, r, sV, c)
            s = masked(SCALED(s), b, h, i, j);
            float pr = s == NEG_INF ? 0.0 : exp(s - lse_i);
#if DROPOUT
            if (pr != 0.0) dp *= keep_scale(row * p.lk + j, seed, offset);
#endif
            float ds = pr * (dp - delta_i);
            sdS[r * BC + c] = ds;
            if (write_ds && i < p.lq && j < p.lk) FBuf(p.x2).v[row * p.lk + j] = ds;
        }
        barrier();
        for (uint c = 0; c < BC; ++c) {
            float ds = sdS[r * BC + c];
            [[unroll]] for (uint e = 0; e < DPT; ++e) acc[e] += ds * TILE_AT(sK, c, t + e * TPR);
        }
    }
    if (i < p.lq) {
        const uint dqbase = AT(G, SDQ, b, h, i);
#if PACKED
        [[unroll]] for (uint e = 0; e < DPT; ++e) PAIR_STORE(dQ, dqbase, acc[e] * p.scale, e)
#else
        [[unroll]] for (uint e = 0; e < DPT; ++e) {
            uint dd = t + e * TPR;
            if (dd < p.d) dQ.v[dqbase + dd] = STYPE(acc[e] * p.scale);
        }
#endif
    }
}

#elif KERNEL == 3
// ---------------------------------------------------------------- backward: dK, dV
shared TILE sK[BR * HS];
shared TILE sV[BR * HS];
shared TILE sQ[BC * HS];
shared TILE sdO[BC * HS];
shared float sP[BR * BC];
shared float sdS[BR * BC];

void main() {
    const uint b = gl_WorkGroupID.z, hk = gl_WorkGroupID.y, hkv = p.hq / p.group;
    const uint j0 = gl_WorkGroupID.x * BR, j = j0 + r;
    GeoBuf G = GeoBuf(p.geo);
    const uint kbase = AT(G, SK, b, hk, 0), vbase = AT(G, SV, b, hk, 0);
    const uint krs = G.s[3 * SK + 2], vrs = G.s[3 * SV + 2], qrs = G.s[3 * SQ + 2], grs = G.s[3 * SDO + 2];
    SBuf Q = SBuf(p.q), K = SBuf(p.k), V = SBuf(p.v), dO = SBuf(p.o), dK = SBuf(p.x0), dV = SBuf(p.x2);
    FBuf L = FBuf(p.lse), Dl = FBuf(p.x1);
#if DROPOUT
    RngBuf rs = RngBuf(p.rng);
    const uvec2 seed = rs.seed, offset = rs.offset;
#endif
    LOAD_TILE(sK, K, kbase, krs, j0, p.lk, BR, 1.0)
    LOAD_TILE(sV, V, vbase, vrs, j0, p.lk, BR, 1.0)
    ACC dk[DPT], dv[DPT];
    [[unroll]] for (uint c = 0; c < DPT; ++c) { dk[c] = ACC_ZERO; dv[c] = ACC_ZERO; }
#if CAUSAL
    const uint istart = (j0 / BC) * BC;  // queries above the diagonal see none of these keys
#else
    const uint istart = 0;
#endif
    for (uint hh = 0; hh < p.group; ++hh) {
        const uint h = hk * p.group + hh;
        const uint qbase = AT(G, SQ, b, h, 0), gbase = AT(G, SDO, b, h, 0), lbase = (b * p.hq + h) * p.lq;
        for (uint i0 = istart; i0 < p.lq; i0 += BC) {
            barrier();
            LOAD_TILE(sQ, Q, qbase, qrs, i0, p.lq, BC, Q_LOAD_SCALE)
            LOAD_TILE(sdO, dO, gbase, grs, i0, p.lq, BC, 1.0)
            barrier();
            for (uint c = t; c < BC; c += TPR) {
                const uint i = i0 + c;
                DOT2(s, sQ, c, sK, r, dp, sdO, c, sV, r)
                s = masked(SCALED(s), b, h, i, j);
                float pr = s == NEG_INF ? 0.0 : exp(s - L.v[lbase + i]);
                float pd = pr;
#if DROPOUT
                if (pr != 0.0) {
                    float z = keep_scale((lbase + i) * p.lk + j, seed, offset);
                    pd *= z;
                    dp *= z;
                }
#endif
                sP[r * BC + c] = pd;
                sdS[r * BC + c] = pr == 0.0 ? 0.0 : pr * (dp - Dl.v[lbase + i]);
            }
            barrier();
            for (uint c = 0; c < BC; ++c) {
                float pd = sP[r * BC + c], ds = sdS[r * BC + c];
                [[unroll]] for (uint e = 0; e < DPT; ++e) {
                    dv[e] += pd * TILE_AT(sdO, c, t + e * TPR);
                    dk[e] += ds * TILE_AT(sQ, c, t + e * TPR);
                }
            }
        }
    }
    if (j < p.lk) {
        const uint dkbase = AT(G, SDK, b, hk, j), dvbase = AT(G, SDV, b, hk, j);
#if PACKED
        [[unroll]] for (uint e = 0; e < DPT; ++e) {
            PAIR_STORE(dK, dkbase, SCALED(dk[e]), e)  // q was loaded unscaled
            PAIR_STORE(dV, dvbase, dv[e], e)
        }
#else
        [[unroll]] for (uint e = 0; e < DPT; ++e) {
            uint dd = t + e * TPR;
            if (dd < p.d) {
                dK.v[dkbase + dd] = STYPE(dk[e]);
                dV.v[dvbase + dd] = STYPE(dv[e]);
            }
        }
#endif
    }
}
#endif
#endif
