#version 450
// Classification losses over [N, C] float32 rows (row stride C) with int64 targets.
//
// MODE 0  nll rows:  one thread per row: loss[i] = -w[t] * logp[i, t], rw[i] = w[t]
// MODE 1  cross-entropy rows (fused log_softmax + nll, label smoothing): TPR threads per row,
//         one read of the row with an online max / sum-exp; writes lse[i], loss[i], rw[i]
//         (and the class-weight sum W to aux[1], from row 0).
// MODE 2  reduce: a single workgroup sums loss[] and rw[] in a fixed order (deterministic):
//         out[0] = sum or sum / sum(rw) (mean), aux[0] = sum(rw) (torch's total_weight).
// MODE 3  nll backward:  gin[i, c] = -g_i * w[t] (c == t), 0 elsewhere
// MODE 4  cross-entropy backward:
//         gin[i, c] = g_i * ((1 - eps) * w[t] * (softmax - onehot) + eps / C * (W * softmax - w[c]))
// g_i is grad_out[i] (reduction none), grad_out[0] (sum) or grad_out[0] / aux[0] (mean).
// Ignored rows (target == ignore_index, or outside [0, C)) have loss, weight and gradient 0.
// Tunables (specialization constants): local size (0), WG (3: the local size again, for the shared
// arrays), TPR (4: threads per row, MODE 1). SHARED_ROWS (TPR > 1) stays a define: it declares
// the shared arrays.
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference_uvec2 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#extension GL_EXT_control_flow_attributes : enable

layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;

#ifndef MODE
#define MODE 0
#endif
layout(constant_id = 3) const uint WG = 64u;
layout(constant_id = 4) const uint TPR = 1u;
// SHARED_ROWS 1: a row's TPR lanes combine their partials in shared memory (the host passes 0
// when TPR is 1, which leaves out that code and the shared arrays; with 1 any TPR is right)
#ifndef SHARED_ROWS
#define SHARED_ROWS 1
#endif

#define RED_NONE 0u
#define RED_MEAN 1u
#define RED_SUM 2u

layout(buffer_reference, std430, buffer_reference_align = 4) buffer FBuf { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 8) buffer IBuf { int64_t v[]; };

layout(push_constant) uniform Params {
    uvec2 x;       // log-probabilities (nll) or logits (cross-entropy), [N, C]
    uvec2 target;  // int64 [N]
    uvec2 weight;  // float [C], or 0 for none
    uvec2 a;       // per-row loss (fwd; the output itself for reduction none) / grad_out (bwd)
    uvec2 b;       // per-row target weight (fwd) / grad_input (bwd)
    uvec2 lse;     // per-row logsumexp (cross-entropy); MODE 2: the output
    uvec2 aux;     // [0] total target weight, [1] class-weight sum W
    uint N;
    uint C;
    int ignore_index;
    float smoothing;
    uint reduction;
} p;

uint group_id() { return gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x; }
bool has_weight() { return p.weight != uvec2(0u); }

// target of row i; returns -1 for an ignored row
int row_target(uint i) {
    int64_t t = IBuf(p.target).v[i];
    if (t == int64_t(p.ignore_index) || t < 0 || t >= int64_t(p.C)) return -1;
    return int(t);
}

float class_weight(int c) { return has_weight() ? FBuf(p.weight).v[c] : 1.0; }

float grad_scale(uint i) {
    FBuf go = FBuf(p.a);
    if (p.reduction == RED_NONE) return go.v[i];
    float g = go.v[0];
    if (p.reduction == RED_MEAN) g /= FBuf(p.aux).v[0];
    return g;
}

#if MODE == 1 && SHARED_ROWS
shared float s_m[WG];
shared float s_s[WG];
shared float s_wx[WG];
shared float s_ws[WG];
#endif
#if MODE == 2
shared float s_l[WG];
shared float s_w[WG];
#endif

void main() {
    const uint lid = gl_LocalInvocationID.x;
    const uint group = group_id();

#if MODE == 0
    const uint i = group * WG + lid;
    if (i >= p.N) return;
    int t = row_target(i);
    float w = 0.0, l = 0.0;
    if (t >= 0) {
        w = class_weight(t);
        l = -w * FBuf(p.x).v[i * p.C + uint(t)];
    }
    FBuf(p.a).v[i] = l;
    if (p.reduction != RED_NONE) FBuf(p.b).v[i] = w;

#elif MODE == 1
    const uint lane = lid % TPR;
    const uint row = group * (WG / TPR) + lid / TPR;
    const bool live = row < p.N;
    const bool smoothed = p.smoothing != 0.0;
    float m = -3.402823466e38, s = 0.0, wx = 0.0, wsum = 0.0;
    if (live) {
        FBuf x = FBuf(p.x);
        const uint base = row * p.C;
        for (uint c = lane; c < p.C; c += TPR) {
            float v = x.v[base + c];
            if (v > m) { s = s * exp(m - v) + 1.0; m = v; }
            else s += exp(v - m);
            if (smoothed) {
                float wc = class_weight(int(c));
                wx += wc * v;
                wsum += wc;
            }
        }
    }
#if SHARED_ROWS
    s_m[lid] = m; s_s[lid] = s; s_wx[lid] = wx; s_ws[lid] = wsum;
    barrier();
    [[unroll]] for (uint st = TPR / 2u; st > 0u; st >>= 1) {
        if (lane < st) {
            float m2 = s_m[lid + st], s2 = s_s[lid + st];
            float mm = max(m, m2);
            s = s * exp(m - mm) + s2 * exp(m2 - mm);
            m = mm;
            wx += s_wx[lid + st];
            wsum += s_ws[lid + st];
            s_m[lid] = m; s_s[lid] = s; s_wx[lid] = wx; s_ws[lid] = wsum;
        }
        barrier();
    }
#endif
    if (live && lane == 0u) {
        float lse = m + log(s);
        int t = row_target(row);
        float w = 0.0, l = 0.0;
        if (t >= 0) {
            w = class_weight(t);
            float nll = (m - FBuf(p.x).v[row * p.C + uint(t)]) + log(s);
            l = (1.0 - p.smoothing) * w * nll;
            if (smoothed) l += p.smoothing / float(p.C) * (wsum * lse - wx);
        }
        FBuf(p.lse).v[row] = lse;
        FBuf(p.a).v[row] = l;
        if (p.reduction != RED_NONE) FBuf(p.b).v[row] = w;
        if (row == 0u) FBuf(p.aux).v[1] = wsum;
    }

#elif MODE == 2
    FBuf rl = FBuf(p.a), rw = FBuf(p.b);
    float l = 0.0, w = 0.0;
    for (uint i = lid; i < p.N; i += WG) { l += rl.v[i]; w += rw.v[i]; }
    s_l[lid] = l; s_w[lid] = w;
    barrier();
    [[unroll]] for (uint st = WG / 2u; st > 0u; st >>= 1) {
        if (lid < st) { s_l[lid] += s_l[lid + st]; s_w[lid] += s_w[lid + st]; }
        barrier();
    }
    if (lid == 0u) {
        float total = s_l[0], tw = s_w[0];
        FBuf(p.lse).v[0] = p.reduction == RED_MEAN ? total / tw : total;  // the output
        FBuf(p.aux).v[0] = tw;
    }

#elif MODE == 3 || MODE == 4
    const uint e = group * WG + lid;
    if (e >= p.N * p.C) return;
    const uint i = e / p.C, c = e - i * p.C;
    int t = row_target(i);
    float gin = 0.0;
    if (t >= 0) {
        float g = grad_scale(i);
        float wt = class_weight(t);
#if MODE == 3
        if (uint(t) == c) gin = -g * wt;
#else
        float sm = exp(FBuf(p.x).v[e] - FBuf(p.lse).v[i]);
        float d = (1.0 - p.smoothing) * wt * (sm - (uint(t) == c ? 1.0 : 0.0));
        if (p.smoothing != 0.0) d += p.smoothing / float(p.C) * (FBuf(p.aux).v[1] * sm - class_weight(int(c)));
        gin = g * d;
#endif
    }
    FBuf(p.b).v[e] = gin;
#endif
}
