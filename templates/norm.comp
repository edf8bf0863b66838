#version 450
// Layer norm and batch norm, forward and backward, on contiguous tensors: x, y and grad in DTYPE
// (common/storage.glsl: float32, float16 or bfloat16; absent: float32), everything else float32,
// arithmetic float32 (autocast's batch norm: 16-bit activations, float32 weights and statistics).
// A "row" is what one set of statistics covers: a layer-norm row (n contiguous elements)
// or a batch-norm channel (n = N * inner elements; element k sits at
// (k / inner) * ostride + c * inner + k % inner, ostride = C * inner). T threads reduce one
// row (T, WG powers of two, p.tlog = log2(T), WG / T rows per workgroup, adjacent threads
// on one row).
// PHASE
//   0 LN forward:  mean, rstd = 1/sqrt(var + eps) (biased var), y = xhat * w + b
//   1 LN backward: dx = rstd * (g*w - mean(g*w) - xhat * mean(g*w*xhat))
//   2 LN weight/bias grads: per column j, over a chunk of rows (gl_WorkGroupID.z):
//     aux0[z, j] = sum g * xhat, aux1[z, j] = sum g; adjacent threads own adjacent columns
//   3 BN forward: training (per-channel batch stats, running stats updated in place,
//     running_var with the unbiased var) or eval (flags & 1: stats from running mean/var)
//   4 BN backward: grad weight/bias per channel, dx for training or eval (flags & 1)
// Split batch norm, for few channels with many elements each (one workgroup per channel
// would leave the device idle): a channel's n elements are cut into p.nsplit chunks of
// p.chunk; scratch = coefs [C, 4] then partials [nsplit, C, 2].
//   5 BN forward partials: workgroup (c, z = chunk), T = WG: chunk mean and M2 (sum of
//     squared deviations from the chunk mean; two passes, for stability)
//   6 BN backward partials: sum g, sum g * (x - mean) per chunk
//   7 BN combine, one thread per channel: forward (Chan's formula over the chunks; saved
//     and running stats as PHASE 3; eval: running stats) or backward (flags & 2; grad
//     weight/bias as PHASE 4); writes the per-channel coefficients of PHASE 8
//   8 BN apply, elementwise over all C * n elements: forward y = x * c0 + c1, backward
//     dx = c0 * (g - c1 - (x - c2) * c3) (flags & 2; eval: dx = c0 * g)
//   9 LN backward, fused: PHASE 1's dx and PHASE 2's column sums from one read of g and x.
//     Workgroup z takes rows [z * p.inner, (z + 1) * p.inner), G at a time; thread t owns
//     columns t + i * T (i < ITEMS, n <= T * ITEMS: a row is in registers once) and keeps
//     their sums over its rows; aux0[z, j] = sum g * xhat, aux1[z, j] = sum g (the reduce
//     kernel adds the workgroups' partials)
// Optional buffers have address 0 (weight, bias, stats outputs, grads).
// Tunables (specialization constants): local size (id 0, = WG), ITEMS (id 3: unrolled loads);
// RELU (id 4) is one too. Defines: PHASE, SUBGROUP (tunable; a define as it enables the
// subgroup extensions).
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference_uvec2 : require
#extension GL_EXT_control_flow_attributes : enable
#extension GL_GOOGLE_include_directive : require
#include "common/storage.glsl"
#ifndef SUBGROUP
#define SUBGROUP 0
#endif
#if SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common/subgroup.glsl"
#endif

layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;

#ifndef PHASE
#define PHASE 0
#endif
layout(constant_id = 3) const uint ITEMS = 1u;
// RELU: batch norm forward (PHASE 3, 8) writes relu(y) (compiled mode's bn + relu fusion)
layout(constant_id = 4) const bool RELU = false;
#define ACT(v) (RELU && (v) < 0.0 ? 0.0 : (v))
#if PHASE == 2
#define COLS 1
#else
#define COLS 0
#endif

layout(buffer_reference, std430, buffer_reference_align = 4) buffer FBuf { float v[]; };
#if DTYPE == TVK_DT_FLOAT32
#define SBuf FBuf  // one buffer type: the float32 kernels stay the SPIR-V they were tuned as
#else
layout(buffer_reference, std430, buffer_reference_align = TVK_ST_ALIGN) buffer SBuf { TVK_ST v[]; };  // x, y, grad
#endif

layout(push_constant) uniform Params {
    uvec2 x;
    uvec2 y;     // forward output / dx
    uvec2 g;     // grad of y
    uvec2 w;     // weight
    uvec2 b;     // bias
    uvec2 mean;  // saved mean (BN eval: running mean)
    uvec2 rstd;  // saved 1/sqrt(var + eps) (BN eval: running var)
    uvec2 aux0;  // BN fwd: running mean; grad weight (partials for PHASE 2)
    uvec2 aux1;  // BN fwd: running var;  grad bias
    uvec2 scratch;  // split BN (PHASE 5-8): coefs [C, 4], then partials [nsplit, C, 2]
    uint rows;   // LN rows / BN channels
    uint n;      // elements per row
    uint inner;  // BN: elements per (sample, channel); PHASE 2: rows per chunk
    uint ostride;
    float eps;
    float momentum;
    float unbias;  // M / (M - 1) for the running var
    uint flags;    // 1: BN eval (statistics from the running buffers)
    uint tlog;     // log2(threads per row)
    uint chunk;    // split BN: elements of a channel per chunk
    uint nsplit;   // split BN: chunks per channel
} p;

const uint WG = gl_WorkGroupSize.x;
#define T (1u << p.tlog)
#define G (WG >> p.tlog)
shared float sv[gl_WorkGroupSize.x];

#define HAS(a) any(notEqual(a, uvec2(0)))

#if COLS
#define SLOT0 ol
#define OTHER(s) (l + (s) * G)
#else
#define SLOT0 (ol * T)
#define OTHER(s) (l + (s))
#endif

// sum of v over the T threads of a row, returned to all of them; uniform control flow
float seg_sum(float v, uint l, uint t, uint ol) {
    if (T == 1) return v;
#if SUBGROUP && !COLS
    const uint SG = TVK_SUBGROUP_WIDTH;
    if (T >= SG) {  // a subgroup wider than T would mix rows: shared memory below
        v = subgroupAdd(v);
        uint cnt = T / SG;
        if (cnt == 1) return v;
        while (cnt > 1) {
            barrier();
            if (gl_SubgroupInvocationID == 0 && t / SG < cnt) sv[ol * T + t / SG] = v;
            barrier();
            v = t < cnt ? sv[ol * T + t] : 0.0;
            v = subgroupAdd(v);
            cnt = (cnt + SG - 1) / SG;
        }
        barrier();
        if (t == 0) sv[ol * T] = v;
        barrier();
        return sv[ol * T];
    }
#endif
    barrier();
    sv[l] = v;
    barrier();
    for (uint s = T / 2; s > 0; s >>= 1) {
        if (t < s) { v += sv[OTHER(s)]; sv[l] = v; }
        barrier();
    }
    return sv[SLOT0];
}

#if PHASE <= 1
#define OFFSET(row, k) ((row) * p.n + (k))
#else
#define OFFSET(row, k) (((k) / p.inner) * p.ostride + (row) * p.inner + (k) % p.inner)
#endif

// advance (q, r), r < p.inner, by dq * p.inner + dr without a division
#define STEP_QR(q, r, dq, dr) { r += dr; q += dq; if (r >= p.inner) { r -= p.inner; q += 1u; } }

// split BN: BODY for each element of this thread's share of chunk [k0, k1) of channel c;
// k = q * inner + r walks by WG without per-element division; `off` is the offset
#define FOR_CHUNK(BODY)                                              \
    {                                                                \
        uint q = (k0 + t) / p.inner, r = (k0 + t) % p.inner;         \
        const uint dq = WG / p.inner, dr = WG % p.inner;             \
        for (uint kb = k0 + t; kb < k1; kb += WG * ITEMS) {          \
            [[unroll]] for (uint i_ = 0; i_ < ITEMS; ++i_) {          \
                if (i_ == 0u || kb + i_ * WG < k1) {                 \
                    const uint off = q * p.ostride + c * p.inner + r; \
                    BODY                                             \
                }                                                    \
                STEP_QR(q, r, dq, dr)                                \
            }                                                        \
        }                                                            \
    }

// BODY runs for each element k of this thread's share of the row; `off` is its offset.
// Item 0 of each step is in range by the loop's own test: said in the code (here, in FOR_CHUNK and
// PHASE 2), as the driver unrolls ITEMS only after specialization and would test it again.
#define FOR_ROW(BODY)                                                \
    if (live) {                                                      \
        for (uint k0 = t; k0 < p.n; k0 += T * ITEMS) {               \
            [[unroll]] for (uint i_ = 0; i_ < ITEMS; ++i_) {          \
                const uint k = k0 + i_ * T;                          \
                if (i_ == 0u || k < p.n) {                           \
                    const uint off = OFFSET(row, k);                 \
                    BODY                                             \
                }                                                    \
            }                                                        \
        }                                                            \
    }

void main() {
    const uint l = gl_LocalInvocationID.x;
#if COLS
    const uint ol = l % G, t = l / G;
#else
    const uint ol = l / T, t = l % T;
#endif
    const uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    const uint row = group * G + ol;
    SBuf X = SBuf(p.x), Y = SBuf(p.y), Gr = SBuf(p.g);
    FBuf W = FBuf(p.w), B = FBuf(p.b);
    const bool has_w = HAS(p.w), has_b = HAS(p.b), has_y = HAS(p.y);
    const float inv_n = 1.0 / float(p.n);

#if PHASE == 5 || PHASE == 6
    // ------------------------------------------------ split BN: partials of one chunk
    const uint c = gl_WorkGroupID.x, z = gl_WorkGroupID.z;
    const uint k0 = z * p.chunk, k1 = min(k0 + p.chunk, p.n);
    float a = 0.0, b = 0.0;
#if PHASE == 5
    FOR_CHUNK(a += TVK_LOAD(X.v[off]);)
    a = seg_sum(a, l, t, ol) / float(k1 - k0);  // chunk mean
    FOR_CHUNK(float d = TVK_LOAD(X.v[off]) - a; b += d * d;)
#else
    const float mu = FBuf(p.mean).v[c];
    FOR_CHUNK(float gv = TVK_LOAD(Gr.v[off]); a += gv; b += gv * (TVK_LOAD(X.v[off]) - mu);)
    a = seg_sum(a, l, t, ol);
#endif
    b = seg_sum(b, l, t, ol);
    if (t == 0) {
        FBuf P = FBuf(p.scratch);
        const uint dst = 4u * p.rows + 2u * (z * p.rows + c);
        P.v[dst] = a;
        P.v[dst + 1u] = b;
    }
#elif PHASE == 7
    // ------------------------------------------------ split BN: combine, per channel
    const uint c = group * WG + l;
    if (c < p.rows) {
        FBuf P = FBuf(p.scratch);
        const bool eval_ = (p.flags & 1u) != 0u;
        const float wv = has_w ? W.v[c] : 1.0;
        float mu, rs;
        float a = 0.0, b = 0.0;  // forward: mean, M2 so far; backward: sum g, sum g * (x - mean)
        if ((p.flags & 2u) == 0u) {
            if (eval_) {
                mu = FBuf(p.mean).v[c];
                rs = inversesqrt(FBuf(p.rstd).v[c] + p.eps);
            } else {
                float na = 0.0;
                for (uint s = 0; s < p.nsplit; ++s) {  // Chan et al.: merge (na, a, b) with chunk s
                    const uint src = 4u * p.rows + 2u * (s * p.rows + c);
                    const float nb = float(min(p.chunk, p.n - s * p.chunk)), nn = na + nb;
                    const float d = P.v[src] - a;
                    a += d * (nb / nn);
                    b += P.v[src + 1u] + d * d * (na * nb / nn);
                    na = nn;
                }
                mu = a;
                const float var = b * inv_n;
                rs = inversesqrt(var + p.eps);
                if (HAS(p.mean)) FBuf(p.mean).v[c] = mu;
                if (HAS(p.rstd)) FBuf(p.rstd).v[c] = rs;
                if (HAS(p.aux0)) {
                    FBuf rm = FBuf(p.aux0);
                    rm.v[c] = (1.0 - p.momentum) * rm.v[c] + p.momentum * mu;
                }
                if (HAS(p.aux1)) {
                    FBuf rv = FBuf(p.aux1);
                    rv.v[c] = (1.0 - p.momentum) * rv.v[c] + p.momentum * var * p.unbias;
                }
            }
            const float bv = has_b ? B.v[c] : 0.0;
            P.v[4u * c] = rs * wv;
            P.v[4u * c + 1u] = bv - mu * rs * wv;
        } else {
            mu = FBuf(p.mean).v[c];
            rs = FBuf(p.rstd).v[c];
            if (eval_) rs = inversesqrt(rs + p.eps);
            for (uint s = 0; s < p.nsplit; ++s) {
                const uint src = 4u * p.rows + 2u * (s * p.rows + c);
                a += P.v[src];
                b += P.v[src + 1u];
            }
            b *= rs;  // sum g * xhat
            if (HAS(p.aux0)) FBuf(p.aux0).v[c] = b;
            if (HAS(p.aux1)) FBuf(p.aux1).v[c] = a;
            P.v[4u * c] = wv * rs;
            P.v[4u * c + 1u] = eval_ ? 0.0 : a * inv_n;
            P.v[4u * c + 2u] = mu;
            P.v[4u * c + 3u] = eval_ ? 0.0 : b * inv_n * rs;
        }
    }
#elif PHASE == 8
    // ------------------------------------------------ split BN: apply, elementwise
    // each workgroup covers WG * ITEMS contiguous elements; the channel of each is tracked
    // by stepping (channel, r) instead of dividing per element
    FBuf P = FBuf(p.scratch);
    const uint total = p.rows * p.n, e0 = group * (WG * ITEMS) + l;
    uint c = (e0 / p.inner) % p.rows, r = e0 % p.inner;
    const uint dq = (WG / p.inner) % p.rows, dr = WG % p.inner;
    const bool bwd = (p.flags & 2u) != 0u, eval_ = (p.flags & 1u) != 0u;
    [[unroll]] for (uint i_ = 0; i_ < ITEMS; ++i_) {
        const uint off = e0 + i_ * WG;
        if (off < total) {
            const float c0 = P.v[4u * c], c1 = P.v[4u * c + 1u];
            if (!bwd) {
                Y.v[off] = TVK_STORE(ACT(TVK_LOAD(X.v[off]) * c0 + c1));
            } else if (eval_) {
                Y.v[off] = TVK_STORE(TVK_LOAD(Gr.v[off]) * c0);
            } else {
                Y.v[off] = TVK_STORE(c0 * (TVK_LOAD(Gr.v[off]) - c1 - (TVK_LOAD(X.v[off]) - P.v[4u * c + 2u]) * P.v[4u * c + 3u]));
            }
        }
        STEP_QR(c, r, dq, dr)
        if (c >= p.rows) c -= p.rows;
    }
#elif PHASE == 2
    // ------------------------------------------------ LN grad weight / bias, column sums
    const uint col = row;
    const bool live = col < p.n;
    FBuf Mn = FBuf(p.mean), Rs = FBuf(p.rstd);
    const uint r0 = gl_WorkGroupID.z * p.inner;
    const uint r1 = min(r0 + p.inner, p.rows);
    float gw = 0.0, gb = 0.0;
    if (live) {
        for (uint r = r0 + t; r < r1; r += T * ITEMS) {
            [[unroll]] for (uint i_ = 0; i_ < ITEMS; ++i_) {
                const uint rr = r + i_ * T;
                if (i_ == 0u || rr < r1) {
                    const uint off = rr * p.n + col;
                    const float gv = TVK_LOAD(Gr.v[off]);
                    gw += gv * (TVK_LOAD(X.v[off]) - Mn.v[rr]) * Rs.v[rr];
                    gb += gv;
                }
            }
        }
    }
    gw = seg_sum(gw, l, t, ol);
    gb = seg_sum(gb, l, t, ol);
    if (live && t == 0) {
        const uint dst = gl_WorkGroupID.z * p.n + col;
        if (HAS(p.aux0)) FBuf(p.aux0).v[dst] = gw;
        if (HAS(p.aux1)) FBuf(p.aux1).v[dst] = gb;
    }
#elif PHASE == 9
    // ------------------------------------------------ LN backward, fused (dx and column partials)
    const uint z = group;
    const uint r0 = z * p.inner, r1 = min(r0 + p.inner, p.rows);
    if (r0 >= p.rows) return;  // past the last chunk (a 2-d grid rounds up); the whole workgroup
    FBuf Mn = FBuf(p.mean), Rs = FBuf(p.rstd);
    float sum_gx[ITEMS], sum_g[ITEMS];  // this thread's columns, over its rows
    [[unroll]] for (uint i = 0; i < ITEMS; ++i) { sum_gx[i] = 0.0; sum_g[i] = 0.0; }
    for (uint rb = r0; rb < r1; rb += G) {  // uniform: seg_sum's barriers
        const uint row = rb + ol;
        const bool live = row < r1;
        const float mu = live ? Mn.v[row] : 0.0, rs = live ? Rs.v[row] : 0.0;
        float gv[ITEMS], xh[ITEMS];
        float a = 0.0, c = 0.0;
        [[unroll]] for (uint i = 0; i < ITEMS; ++i) {
            const uint k = t + i * T;
            gv[i] = 0.0;
            xh[i] = 0.0;
            if (live && k < p.n) {
                const uint off = row * p.n + k;
                gv[i] = TVK_LOAD(Gr.v[off]);
                xh[i] = (TVK_LOAD(X.v[off]) - mu) * rs;
                const float gw = has_w ? gv[i] * W.v[k] : gv[i];
                a += gw;
                c += gw * xh[i];
            }
        }
        a = seg_sum(a, l, t, ol) * inv_n;
        c = seg_sum(c, l, t, ol) * inv_n;
        [[unroll]] for (uint i = 0; i < ITEMS; ++i) {
            const uint k = t + i * T;
            if (live && k < p.n) {
                const float gw = has_w ? gv[i] * W.v[k] : gv[i];
                Y.v[row * p.n + k] = TVK_STORE(rs * (gw - a - xh[i] * c));
                sum_gx[i] += gv[i] * xh[i];
                sum_g[i] += gv[i];
            }
        }
    }
    // the G row groups' sums of each column, added through shared memory by the first group
    [[unroll]] for (uint i = 0; i < ITEMS; ++i) {
        const uint k = t + i * T;
        barrier();
        sv[l] = sum_gx[i];
        barrier();
        if (ol == 0u && k < p.n && HAS(p.aux0)) {
            float s = 0.0;
            for (uint o = 0; o < G; ++o) s += sv[o * T + t];
            FBuf(p.aux0).v[z * p.n + k] = s;
        }
        barrier();
        sv[l] = sum_g[i];
        barrier();
        if (ol == 0u && k < p.n && HAS(p.aux1)) {
            float s = 0.0;
            for (uint o = 0; o < G; ++o) s += sv[o * T + t];
            FBuf(p.aux1).v[z * p.n + k] = s;
        }
    }
#else
    const bool live = row < p.rows;
#if PHASE == 0
    // ------------------------------------------------------------ LN forward
    float s = 0.0;
    FOR_ROW(s += TVK_LOAD(X.v[off]);)
    const float mu = seg_sum(s, l, t, ol) * inv_n;
    s = 0.0;
    FOR_ROW(float d = TVK_LOAD(X.v[off]) - mu; s += d * d;)
    const float rs = inversesqrt(seg_sum(s, l, t, ol) * inv_n + p.eps);
    FOR_ROW(
        float v = (TVK_LOAD(X.v[off]) - mu) * rs;
        if (has_w) v *= W.v[k];
        if (has_b) v += B.v[k];
        Y.v[off] = TVK_STORE(v);
    )
    if (live && t == 0) {
        if (HAS(p.mean)) FBuf(p.mean).v[row] = mu;
        if (HAS(p.rstd)) FBuf(p.rstd).v[row] = rs;
    }
#elif PHASE == 1
    // ------------------------------------------------------------ LN backward (dx)
    const float mu = live ? FBuf(p.mean).v[row] : 0.0;
    const float rs = live ? FBuf(p.rstd).v[row] : 0.0;
    float a = 0.0, c = 0.0;
    FOR_ROW(
        float gv = TVK_LOAD(Gr.v[off]);
        if (has_w) gv *= W.v[k];
        a += gv;
        c += gv * (TVK_LOAD(X.v[off]) - mu) * rs;
    )
    a = seg_sum(a, l, t, ol) * inv_n;
    c = seg_sum(c, l, t, ol) * inv_n;
    FOR_ROW(
        float gv = TVK_LOAD(Gr.v[off]);
        if (has_w) gv *= W.v[k];
        Y.v[off] = TVK_STORE(rs * (gv - a - (TVK_LOAD(X.v[off]) - mu) * rs * c));
    )
#elif PHASE == 3
    // ------------------------------------------------------------ BN forward
    float mu, rs;
    if ((p.flags & 1u) != 0u) {  // eval: running statistics
        mu = live ? FBuf(p.mean).v[row] : 0.0;
        rs = live ? inversesqrt(FBuf(p.rstd).v[row] + p.eps) : 0.0;
    } else {
        float s = 0.0;
        FOR_ROW(s += TVK_LOAD(X.v[off]);)
        mu = seg_sum(s, l, t, ol) * inv_n;
        s = 0.0;
        FOR_ROW(float d = TVK_LOAD(X.v[off]) - mu; s += d * d;)
        const float var = seg_sum(s, l, t, ol) * inv_n;
        rs = inversesqrt(var + p.eps);
        if (live && t == 0) {
            if (HAS(p.mean)) FBuf(p.mean).v[row] = mu;
            if (HAS(p.rstd)) FBuf(p.rstd).v[row] = rs;
            if (HAS(p.aux0)) {
                FBuf rm = FBuf(p.aux0);
                rm.v[row] = (1.0 - p.momentum) * rm.v[row] + p.momentum * mu;
            }
            if (HAS(p.aux1)) {
                FBuf rv = FBuf(p.aux1);
                rv.v[row] = (1.0 - p.momentum) * rv.v[row] + p.momentum * var * p.unbias;
            }
        }
    }
    const float wv = (live && has_w) ? W.v[row] : 1.0;
    const float bv = (live && has_b) ? B.v[row] : 0.0;
    const float scale = rs * wv, shift = bv - mu * rs * wv;
    FOR_ROW(Y.v[off] = TVK_STORE(ACT(TVK_LOAD(X.v[off]) * scale + shift));)
#elif PHASE == 4
    // ------------------------------------------------------------ BN backward
    const bool eval_ = (p.flags & 1u) != 0u;
    const float mu = live ? FBuf(p.mean).v[row] : 0.0;
    float rs = live ? FBuf(p.rstd).v[row] : 0.0;
    if (eval_) rs = inversesqrt(rs + p.eps);
    const float wv = (live && has_w) ? W.v[row] : 1.0;
    float sg = 0.0, sgx = 0.0;
    FOR_ROW(
        float gv = TVK_LOAD(Gr.v[off]);
        sg += gv;
        sgx += gv * (TVK_LOAD(X.v[off]) - mu);
    )
    sg = seg_sum(sg, l, t, ol);
    sgx = seg_sum(sgx, l, t, ol) * rs;  // sum g * xhat
    if (live && t == 0) {
        if (HAS(p.aux0)) FBuf(p.aux0).v[row] = sgx;
        if (HAS(p.aux1)) FBuf(p.aux1).v[row] = sg;
    }
    if (has_y) {
        if (eval_) {
            const float k_ = wv * rs;
            FOR_ROW(Y.v[off] = TVK_STORE(TVK_LOAD(Gr.v[off]) * k_);)
        } else {
            const float k_ = wv * rs, mg = sg * inv_n, mgx = sgx * inv_n * rs;
            FOR_ROW(Y.v[off] = TVK_STORE(k_ * (TVK_LOAD(Gr.v[off]) - mg - (TVK_LOAD(X.v[off]) - mu) * mgx));)
        }
    }
#endif
#endif
}
