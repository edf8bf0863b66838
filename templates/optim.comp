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
// MODE 5  foreach pointwise (FUSED 1 only): out = op(a, b, c, v) per element, tensors [out, a, b, c],
//         opcode in flags & OP_MASK, v = s0 or (F_PER_TENSOR) the float bits in table slot 6;
//         F_B_SCALAR: b is one element (a 0-dim tensor) for every element of every tensor
// MODE 6  per-tensor norm final (FUSED 1 only): workgroup t reduces the partials of tensor t,
//         table slot 1 = its first partial, slot 2 = their count; partials at out_, norms to blocks
//
// Fused optimizer extras (FUSED 1, MODE 0/1): F_DEVICE_STEP: table slot 6 holds the address of the
// tensor's step count (float), bias corrections computed here; F_LR_TENSOR: lr read from lr_addr;
// F_GRAD_SCALE: grad /= scale[0] (the unscaled grad is stored back, as torch's fused kernels do);
// F_FOUND_INF: nothing changes where found_inf[0] != 0 (AMP skipped step).
// Tunables (specialization constants): local size (0), WG (3: the local size again, for the shared
// array), CHUNK (4: elements per workgroup); NORM_INF (5) too. MODE and FUSED (push-constant layout)
// stay defines.
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
layout(constant_id = 3) const uint WG = 256u;
layout(constant_id = 4) const uint CHUNK = 4096u;
layout(constant_id = 5) const bool NORM_INF = false;  // the norm modes: max |x| instead of the 2-norm

#define F_NESTEROV 1u
#define F_MAXIMIZE 2u
#define F_FIRST 4u
#define F_AMSGRAD 8u
#define F_DECOUPLED 16u
#define F_SQUARED 32u
#define F_DEVICE_STEP 64u
#define F_LR_TENSOR 128u
#define F_GRAD_SCALE 256u
#define F_FOUND_INF 512u
#define F_PER_TENSOR 1024u
#define F_B_SCALAR 2048u
#define OP_SHIFT 16u

// MODE 5 opcodes (flags >> OP_SHIFT); the host's list is tvk_kernels/kernels/optim.py FOREACH_OPS
#define OP_COPY 0u
#define OP_ADD 1u
#define OP_ADD_S 2u
#define OP_MUL 3u
#define OP_MUL_S 4u
#define OP_DIV 5u
#define OP_DIV_S 6u
#define OP_NEG 7u
#define OP_SQRT 8u
#define OP_RECIP 9u
#define OP_LERP 10u
#define OP_ADDCMUL 11u
#define OP_ADDCDIV 12u
#define OP_MAXIMUM 13u
#define OP_MINIMUM 14u
#define OP_CLAMP_MIN 15u
#define OP_CLAMP_MAX 16u
#define OP_FILL 17u
#define OP_ABS 18u
#define OP_UNSCALE 19u  // GradScaler's check and unscale: out = a * grad_scale[0] (the inverse scale, F_GRAD_SCALE),
                        // and found_inf[0] = 1.0 where an a is inf or NaN (every writer writes the same 1.0)

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
    //   Adam with F_DEVICE_STEP: s0 weight_decay, s1 1 - beta1, s2 beta2, s3 1 - beta2, s4 eps, s5 lr, s6 beta1
    float s0, s1, s2, s3, s4, s5, s6, s7;
    uint flags;
#if FUSED
    uvec2 lr_addr, scale_addr, inf_addr;
#endif
} p;

// element 0 of lr (which 0), grad_scale (1) or found_inf (2) when its flag is set
float aux(uint flag, uint which, float otherwise) {
#if FUSED
    if ((p.flags & flag) != 0u)
        return FBuf(packUint2x32(which == 0u ? p.lr_addr : which == 1u ? p.scale_addr : p.inf_addr)).v[0];
#endif
    return otherwise;
}

// 1 - (1 - a)^n, Adam's bias correction from a = 1 - beta (given in full float precision by the host):
// pow(beta, n) in float loses the small difference to 1 (1e-3 for beta 0.999) to rounding, so this
// goes through log1p and expm1, as series where their arguments are small
float one_minus_pow(float a, float n) {
    float l;  // log(1 - a)
    if (a < 0.25) {
        float term = a, sum = 0.0;
        [[unroll]] for (int k = 1; k <= 14; ++k) { sum += term / float(k); term *= a; }
        l = -sum;
    } else {
        l = log(1.0 - a);
    }
    float y = n * l;  // 1 - e^y = -expm1(y)
    if (y > -0.5) {
        float term = y, sum = 0.0;
        [[unroll]] for (int k = 1; k <= 10; ++k) { sum += term; term *= y / float(k + 1); }
        return -sum;
    }
    return 1.0 - exp(y);
}

float nan_max(float a, float b) { return (isnan(a) || isnan(b)) ? a + b : max(a, b); }
float nan_min(float a, float b) { return (isnan(a) || isnan(b)) ? a + b : min(a, b); }

uint group_id() { return gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x; }

#if MODE == 2 || MODE == 3 || MODE == 6
shared float s_red[WG];

float combine(float a, float b) {
    return NORM_INF ? max(a, b) : a + b;
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

void run(uint64_t a0, uint64_t a1, uint64_t a2, uint64_t a3, uint64_t a4, uint64_t a6, uint start, uint end,
         uint slot) {
    const uint lid = gl_LocalInvocationID.x;
#if MODE == 0 || MODE == 1
    if (aux(F_FOUND_INF, 2u, 0.0) != 0.0) return;
    const float scale = aux(F_GRAD_SCALE, 1u, 1.0);
    const bool unscale = (p.flags & F_GRAD_SCALE) != 0u;
#endif
#if MODE == 0
    FBuf P = FBuf(a0), G = FBuf(a1), M = FBuf(a2);
    const bool maximize = (p.flags & F_MAXIMIZE) != 0u, nesterov = (p.flags & F_NESTEROV) != 0u;
    const bool first = (p.flags & F_FIRST) != 0u, has_mom = p.s1 != 0.0;
    const float lr = aux(F_LR_TENSOR, 0u, p.s0);
    for (uint i = start + lid; i < end; i += WG) {
        float g = G.v[i];
        if (unscale) {
            g = g / scale;
            G.v[i] = g;
        }
        if (maximize) g = -g;
        float x = P.v[i];
        if (p.s3 != 0.0) g = g + p.s3 * x;
        if (has_mom) {
            float b = first ? g : M.v[i] * p.s1 + p.s2 * g;
            M.v[i] = b;
            g = nesterov ? g + p.s1 * b : b;
        }
        P.v[i] = x - lr * g;
    }
#elif MODE == 1
    FBuf P = FBuf(a0), G = FBuf(a1), M = FBuf(a2), S = FBuf(a3), MX = FBuf(a4);
    const bool maximize = (p.flags & F_MAXIMIZE) != 0u, amsgrad = (p.flags & F_AMSGRAD) != 0u;
    const bool decoupled = (p.flags & F_DECOUPLED) != 0u;
    float l2 = p.s0, decay = p.s5, step_size = p.s6, bc2_sqrt = p.s7;
    if ((p.flags & F_DEVICE_STEP) != 0u) {  // torch's fused kernels: step counts live on the device
        const float lr = aux(F_LR_TENSOR, 0u, p.s5), step = FBuf(a6).v[0];
        step_size = lr / one_minus_pow(p.s1, step);
        bc2_sqrt = sqrt(one_minus_pow(p.s3, step));
        decay = decoupled ? 1.0 - lr * p.s0 : 1.0;
        l2 = decoupled ? 0.0 : p.s0;
    }
    for (uint i = start + lid; i < end; i += WG) {
        float g = G.v[i];
        if (unscale) {
            g = g / scale;
            G.v[i] = g;
        }
        if (maximize) g = -g;
        float x = P.v[i];
        if (decoupled) x = x * decay;
        else if (l2 != 0.0) g = g + l2 * x;
        float m = M.v[i];
        m = m + p.s1 * (g - m);
        float s = S.v[i] * p.s2 + p.s3 * (g * g);
        M.v[i] = m;
        S.v[i] = s;
        if (amsgrad) {
            s = max(MX.v[i], s);
            MX.v[i] = s;
        }
        float denom = sqrt(s) / bc2_sqrt + p.s4;
        P.v[i] = x - step_size * (m / denom);
    }
#elif MODE == 2
    FBuf X = FBuf(a0);
    float acc = 0.0;
    for (uint i = start + lid; i < end; i += WG) {
        float x = X.v[i];
        if (NORM_INF) acc = max(acc, abs(x));
        else acc += x * x;
    }
    float total = reduce_wg(acc);
    if (lid == 0u) FBuf(packUint2x32(p.out_)).v[slot] = total;
#elif MODE == 4
    FBuf X = FBuf(a0);
    float norm = FBuf(packUint2x32(p.out_)).v[0];
    float coef = min(p.s1 / (norm + 1e-6), 1.0);
    for (uint i = start + lid; i < end; i += WG) X.v[i] = X.v[i] * coef;
#elif MODE == 5
    FBuf O = FBuf(a0), A = FBuf(a1), B = FBuf(a2), C = FBuf(a3);
    const uint op = p.flags >> OP_SHIFT;
    const float v = (p.flags & F_PER_TENSOR) != 0u ? uintBitsToFloat(uint(a6)) : p.s0;
    const bool b_scalar = (p.flags & F_B_SCALAR) != 0u;
    const float bs = b_scalar ? B.v[0] : 0.0;
    for (uint i = start + lid; i < end; i += WG) {
        float x = op == OP_FILL || op == OP_COPY ? 0.0 : A.v[i], r;
        float y = b_scalar ? bs : 0.0;
        if (!b_scalar && (op == OP_COPY || op == OP_ADD || op == OP_MUL || op == OP_DIV || op == OP_LERP ||
                          op == OP_ADDCMUL || op == OP_ADDCDIV || op == OP_MAXIMUM || op == OP_MINIMUM)) y = B.v[i];
        switch (op) {
            case OP_COPY: r = y; break;
            case OP_ADD: r = x + v * y; break;
            case OP_ADD_S: r = x + v; break;
            case OP_MUL: r = x * y; break;
            case OP_MUL_S: r = x * v; break;
            case OP_DIV: r = x / y; break;
            case OP_DIV_S: r = x / v; break;
            case OP_NEG: r = -x; break;
            case OP_SQRT: r = sqrt(x); break;
            case OP_RECIP: r = 1.0 / x; break;
            case OP_LERP: r = abs(v) < 0.5 ? x + v * (y - x) : y - (y - x) * (1.0 - v); break;  // torch's lerp
            case OP_ADDCMUL: r = x + v * (y * C.v[i]); break;
            case OP_ADDCDIV: r = x + v * (y / C.v[i]); break;
            case OP_MAXIMUM: r = nan_max(x, y); break;
            case OP_MINIMUM: r = nan_min(x, y); break;
            case OP_CLAMP_MIN: r = isnan(x) ? x : max(x, v); break;
            case OP_CLAMP_MAX: r = isnan(x) ? x : min(x, v); break;
            case OP_FILL: r = v; break;
            case OP_ABS: r = abs(x); break;
            case OP_UNSCALE:
                r = x * aux(F_GRAD_SCALE, 1u, 1.0);
                if (isnan(x) || isinf(x)) FBuf(packUint2x32(p.inf_addr)).v[0] = 1.0;
                break;
            default: r = x; break;
        }
        O.v[i] = r;
    }
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
        if (!NORM_INF && (p.flags & F_SQUARED) == 0u) total = sqrt(total);
        FBuf(p.t1).v[0] = total;
    }
#elif MODE == 6
    if (group >= p.nblocks) return;
    TBuf tab = TBuf(p.table);
    const uint first = uint(tab.v[group * 8u + 1u]), count = uint(tab.v[group * 8u + 2u]);
    FBuf part = FBuf(p.out_);
    float acc = 0.0;
    for (uint i = gl_LocalInvocationID.x; i < count; i += WG) acc = combine(acc, part.v[first + i]);
    float total = reduce_wg(acc);
    if (!NORM_INF) total = sqrt(total);
    if (gl_LocalInvocationID.x == 0u) FBuf(packUint2x32(p.blocks)).v[group] = total;
#elif FUSED
    if (group >= p.nblocks) return;
    const uvec2 blk = BBuf(p.blocks).v[group];
    TBuf tab = TBuf(p.table);
    const uint e = blk.x * 8u;
    const uint numel = uint(tab.v[e + 5u]);
    run(tab.v[e], tab.v[e + 1u], tab.v[e + 2u], tab.v[e + 3u], tab.v[e + 4u], tab.v[e + 6u],
        blk.y, min(blk.y + CHUNK, numel), group);
#else
    const uint start = group * CHUNK;
    if (start >= p.numel) return;
    run(packUint2x32(p.t0), packUint2x32(p.t1), packUint2x32(p.t2), packUint2x32(p.t3), packUint2x32(p.t4), 0ul,
        start, min(start + CHUNK, p.numel), p.block_offset + group);
#endif
}
