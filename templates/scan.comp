#version 450
// Inclusive scan (cumsum, cumprod, logcumsumexp) along one dim of a [outer, n, inner] view.
//
// Row r (outer index r / inner, inner index r % inner) is scanned by T = 2^tlog threads of one
// workgroup (WG / T rows per workgroup). It is walked in chunks of T * ITEMS elements: each thread
// combines its ITEMS consecutive elements, a Hillis-Steele scan in shared memory over the T thread
// totals gives each thread its prefix, and a running carry joins the chunks. T = 1 (a thread per
// row, adjacent rows on adjacent threads) suits scans along a strided dim: loads are coalesced.
// Long rows are split into nsplit spans (gl_WorkGroupID.z): MODE 0 scans each span and writes its
// total to p.part ([rows, nsplit]); the host scans those totals, then MODE 1 combines span s's
// elements with the scanned total of spans 0..s-1.
//
// The input is read with strides; the output is contiguous [outer, n, inner] (in place is fine:
// an element is read and written by the same invocation).
// logsumexp accumulates (max m, sum s of exp(x - m)) pairs and writes m + log(s): one rounding
// per output, as close to torch's double-accumulated CPU result as float32 allows (a running
// float32 log-sum rounds at every step: ulps that torch's backward formula amplifies). Span totals
// (split rows) travel as values, one more rounding per span.
// Defines: OP (0 sum, 1 prod, 2 logsumexp), INT64 (int64 values, else float32), MODE.
// Tunables (specialization constants): local size (id 0, = WG), ITEMS (id 3).
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference_uvec2 : require
#extension GL_EXT_control_flow_attributes : enable
#ifndef INT64
#define INT64 0
#endif
#if INT64
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#endif

layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;

#ifndef OP
#define OP 0
#endif
#ifndef MODE
#define MODE 0
#endif
layout(constant_id = 3) const uint ITEMS = 4u;

#if INT64
#define VAL int64_t
layout(buffer_reference, std430, buffer_reference_align = 8) buffer Vals { int64_t v[]; };
#else
#define VAL float
layout(buffer_reference, std430, buffer_reference_align = 4) buffer Vals { float v[]; };
#endif
// ACC: what the scan combines; to_acc / from_acc convert from and to stored values
#if OP == 2
#define ACC vec2
#define IDENT vec2(uintBitsToFloat(0xFF800000u), 0.0)
#define to_acc(x) vec2(x, 1.0)
#define from_acc(a) ((a).x + log((a).y))
#else
#define ACC VAL
#define IDENT VAL(OP == 1 ? 1 : 0)
#define to_acc(x) (x)
#define from_acc(a) (a)
#endif

layout(push_constant) uniform Params {
    uvec2 in_;
    uvec2 out_;
    uvec2 part;       // [rows, nsplit] span totals: MODE 0 writes them (nsplit > 1), MODE 1 reads their scan
    uint rows;
    uint n;
    uint inner;
    uint tlog;        // T = 2^tlog threads per row
    uint span;        // elements per span (a multiple of T * ITEMS)
    uint nsplit;
    uint in_outer;    // input strides, in elements
    uint in_n;
    uint in_inner;
} p;

const uint WG = gl_WorkGroupSize.x;
shared ACC sh[gl_WorkGroupSize.x];

ACC comb(ACC a, ACC b) {
#if OP == 0
    return a + b;
#elif OP == 1
    return a * b;
#else  // (m, s) pairs: NaN propagates, +inf wins, all -inf stays -inf (as torch's _log_add_exp_helper)
    if (isnan(a.x) || isnan(b.x)) return vec2(a.x + b.x, 1.0);
    const float m = max(a.x, b.x);
    if (isinf(m)) return vec2(m, m > 0.0 ? 1.0 : a.y + b.y);
    return vec2(m, a.y * exp(a.x - m) + b.y * exp(b.x - m));
#endif
}

void main() {
    const uint l = gl_LocalInvocationID.x;
    const uint T = 1u << p.tlog;
    const uint ol = l >> p.tlog, t = l & (T - 1u);
    const uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    const uint r = group * (WG >> p.tlog) + ol;
    const bool live = r < p.rows;
    const uint o = r / p.inner, i = r % p.inner;
    const uint in_base = o * p.in_outer + i * p.in_inner;
    const uint out_base = o * p.n * p.inner + i;
    Vals src = Vals(p.in_), dst = Vals(p.out_);

#if MODE == 0
    const uint s = gl_WorkGroupID.z;
    const uint start = s * p.span, end = min(start + p.span, p.n);
    ACC carry = IDENT;
    for (uint c = start; c < end; c += T * ITEMS) {  // the same trip count for every thread: barriers below
        ACC run[ITEMS];
        ACC acc = IDENT;
        [[unroll]] for (uint k = 0; k < ITEMS; ++k) {
            const uint j = c + t * ITEMS + k;
            if (live && j < end) acc = comb(acc, to_acc(src.v[in_base + j * p.in_n]));
            run[k] = acc;
        }
        sh[l] = acc;
        barrier();
        for (uint d = 1; d < T; d <<= 1) {
            ACC y = t >= d ? comb(sh[l - d], acc) : acc;
            barrier();
            sh[l] = y;
            acc = y;
            barrier();
        }
        const ACC before = comb(carry, t > 0u ? sh[l - 1u] : IDENT);
        carry = comb(carry, sh[l | (T - 1u)]);
        [[unroll]] for (uint k = 0; k < ITEMS; ++k) {
            const uint j = c + t * ITEMS + k;
            if (live && j < end) dst.v[out_base + j * p.inner] = from_acc(comb(before, run[k]));
        }
        barrier();
    }
    if (p.nsplit > 1u && live && t == 0u) Vals(p.part).v[r * p.nsplit + s] = from_acc(carry);
#else  // MODE 1: span s = z + 1 joins the scanned totals of the spans before it
    const uint s = gl_WorkGroupID.z + 1u;
    if (!live) return;
    const ACC before = to_acc(Vals(p.part).v[r * p.nsplit + s - 1u]);
    const uint end = min((s + 1u) * p.span, p.n);
    for (uint j = s * p.span + t; j < end; j += T) {
        const uint at = out_base + j * p.inner;
        dst.v[at] = from_acc(comb(before, to_acc(dst.v[at])));
    }
#endif
}
