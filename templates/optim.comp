#version 450
// Multi-tensor ("foreach") optimizer steps and gradient norms over float32 tensors.
//
// FUSED 1: one dispatch walks many tensors. p.table holds 8 uint64 per tensor
//   [param, grad, state0, state1, state2, numel, 0, 0] and p.blocks one uvec2 per workgroup
//   (tensor index, first element of its chunk); a workgroup handles CHUNK elements of one tensor.
// FUSED 0: one tensor per dispatch, addresses in push constants (t0..t4), CHUNK elements per group.
//
// MODE 0  SGD     state0 = momentum buffer          (torch.optim.SGD, single-tensor path)
// MODE 1  Adam(W) state0 = exp_avg, state1 = exp_avg_sq, state2 = max_exp_avg_sq (amsgrad)
// MODE 2  norm partials: partial[block] = sum of squares (or max |x| with NORM_INF) of its chunk
// MODE 3  norm final (FUSED 0 only): one workgroup reduces partials t0[0..numel) in a fixed order,
//         writes t1[0] = sqrt(sum) (or sum with flag SQUARED, or max with NORM_INF)
// MODE 4  clip: x *= min(max_norm / (norm + 1e-6), 1) with norm read from out_[0] (no host round trip)
// Tunables: local size (spec constant 0, also -DWG), CHUNK (elements per workgroup).
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference_uvec2 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#extension GL_EXT_control_flow_attributes : enable

layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;

#ifndef MODE
#define MODE 0
#endif
#ifndef FUSED
#define FUSED 1
#endif
#ifndef WG
#define WG 256
#endif
#ifndef CHUNK
#define CHUNK 4096
#endif
#ifndef NORM_INF
#define NORM_INF 0
#endif

#define F_NESTEROV 1u
#define F_MAXIMIZE 2u
#define F_FIRST 4u
#define F_AMSGRAD 8u
#define F_DECOUPLED 16u
#define F_SQUARED 32u

layout(buffer_reference, std430, buffer_reference_align = 4) buffer FBuf { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 8) buffer TBuf { uint64_t v[]; };
layout(buffer_reference, std430, buffer_reference_align = 8) buffer BBuf { uvec2 v[]; };

layout(push_constant) uniform Params {
#if FUSED
    uvec2 table;
    uvec2 blocks;
    uvec2 out_;
    uint nblocks;
    uint unused;
#else
    uvec2 t0, t1, t2, t3, t4;
    uvec2 out_;
    uint numel;
    uint block_offset;
#endif
    // scalars, precomputed on the host in double precision like torch's Python-float arguments:
    //   SGD:  s0 lr, s1 momentum, s2 1 - dampening, s3 weight_decay
    //   Adam: s0 weight_decay (L2), s1 1 - beta1, s2 beta2, s3 1 - beta2, s4 eps,
    //         s5 1 - lr * weight_decay (AdamW), s6 lr / (1 - beta1^step), s7 sqrt(1 - beta2^step)
    //   clip: s1 max_norm
    float s0, s1, s2, s3, s4, s5, s6, s7;
    uint flags;
} p;

uint group_id() { return gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x; }

#if MODE == 2 || MODE == 3
shared float s_red[WG];

float combine(float a, float b) {
#if NORM_INF
    return max(a, b);
#else
    return a + b;
#endif
}

float reduce_wg(float v) {
    const uint lid = gl_LocalInvocationID.x;
    s_red[lid] = v;
    barrier();
    [[unroll]] for (uint st = WG / 2u; st > 0u; st >>= 1) {
        if (lid < st) s_red[lid] = combine(s_red[lid], s_red[lid + st]);
        barrier();
    }
    return s_red[0];
}
#endif

void run(uint64_t a0, uint64_t a1, uint64_t a2, uint64_t a3, uint64_t a4, uint start, uint end, uint slot) {
    const uint lid = gl_LocalInvocationID.x;
#if MODE == 0
    FBuf P = FBuf(a0), G = FBuf(a1), M = FBuf(a2);
    const bool maximize = (p.flags & F_MAXIMIZE) != 0u, nesterov = (p.flags & F_NESTEROV) != 0u;
    const bool first = (p.flags & F_FIRST) != 0u, has_mom = p.s1 != 0.0;
    for (uint i = start + lid; i < end; i += WG) {
        float g = G.v[i];
        if (maximize) g = -g;
        float x = P.v[i];
        if (p.s3 != 0.0) g = g + p.s3 * x;
        if (has_mom) {
            float b = first ? g : M.v[i] * p.s1 + p.s2 * g;
            M.v[i] = b;
            g = nesterov ? g + p.s1 * b : b;
        }
        P.v[i] = x - p.s0 * g;
    }
#elif MODE == 1
    FBuf P = FBuf(a0), G = FBuf(a1), M = FBuf(a2), S = FBuf(a3), MX = FBuf(a4);
    const bool maximize = (p.flags & F_MAXIMIZE) != 0u, amsgrad = (p.flags & F_AMSGRAD) != 0u;
    const bool decoupled = (p.flags & F_DECOUPLED) != 0u;
    for (uint i = start + lid; i < end; i += WG) {
        float g = G.v[i];
        if (maximize) g = -g;
        float x = P.v[i];
        if (decoupled) x = x * p.s5;
        else if (p.s0 != 0.0) g = g + p.s0 * x;
        float m = M.v[i];
        m = m + p.s1 * (g - m);
        float s = S.v[i] * p.s2 + p.s3 * (g * g);
        M.v[i] = m;
        S.v[i] = s;
        if (amsgrad) {
            s = max(MX.v[i], s);
            MX.v[i] = s;
        }
        float denom = sqrt(s) / p.s7 + p.s4;
        P.v[i] = x - p.s6 * (m / denom);
    }
#elif MODE == 2
    FBuf X = FBuf(a0);
    float acc = 0.0;
    for (uint i = start + lid; i < end; i += WG) {
        float x = X.v[i];
#if NORM_INF
        acc = max(acc, abs(x));
#else
        acc += x * x;
#endif
    }
    float total = reduce_wg(acc);
    if (lid == 0u) FBuf(packUint2x32(p.out_)).v[slot] = total;
#elif MODE == 4
    FBuf X = FBuf(a0);
    float norm = FBuf(packUint2x32(p.out_)).v[0];
    float coef = min(p.s1 / (norm + 1e-6), 1.0);
    for (uint i = start + lid; i < end; i += WG) X.v[i] = X.v[i] * coef;
#endif
}

void main() {
    const uint group = group_id();
#if MODE == 3
    FBuf part = FBuf(p.t0);
    float acc = 0.0;
    for (uint i = gl_LocalInvocationID.x; i < p.numel; i += WG) acc = combine(acc, part.v[i]);
    float total = reduce_wg(acc);
    if (gl_LocalInvocationID.x == 0u) {
#if !NORM_INF
        if ((p.flags & F_SQUARED) == 0u) total = sqrt(total);
#endif
        FBuf(p.t1).v[0] = total;
    }
#elif FUSED
    if (group >= p.nblocks) return;
    const uvec2 blk = BBuf(p.blocks).v[group];
    TBuf tab = TBuf(p.table);
    const uint e = blk.x * 8u;
    const uint numel = uint(tab.v[e + 5u]);
    run(tab.v[e], tab.v[e + 1u], tab.v[e + 2u], tab.v[e + 3u], tab.v[e + 4u],
        blk.y, min(blk.y + CHUNK, numel), group);
#else
    const uint start = group * CHUNK;
    if (start >= p.numel) return;
    run(packUint2x32(p.t0), packUint2x32(p.t1), packUint2x32(p.t2), packUint2x32(p.t3), packUint2x32(p.t4),
        start, min(start + CHUNK, p.numel), p.block_offset + group);
#endif
}
