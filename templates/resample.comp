#version 450
// Resampling of planes: nearest / bilinear upsampling and reflect / replicate padding, forward
// and backward. Tensors are contiguous stacks of planes: src (planes, in_h, in_w) -> dst (planes,
// out_h, out_w) forward; backward reads grad_out (planes, out_h, out_w) and writes grad_in
// (planes, in_h, in_w). One invocation per element written.
//
// Each axis maps an output index o to its source index (or two, with weights), exactly as torch's
// CPU kernels do (aten/src/ATen/native/UpSample.h, ReflectionPad.cpp, ReplicationPadding.cpp),
// in float32 with the same operation order, so nearest picks the same pixels as the CPU.
// The backward is a gather, no atomics: the source index is monotone in o, so the outputs that
// read input i form a range found by binary search (upsampling); padding reads input i from at
// most three outputs per axis (reflect) or one contiguous range (replicate).
// Tunables (specialization constants): local size (0); ALIGN_CORNERS (3) is one too. MODE and
// BACKWARD (which functions and which main body) stay defines.
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference_uvec2 : require

layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;

#define NEAREST 0
#define BILINEAR 1
#define REFLECT 2
#define REPLICATE 3
#define NEAREST_EXACT 4
#ifndef MODE
#define MODE NEAREST
#endif
#ifndef BACKWARD
#define BACKWARD 0
#endif
layout(constant_id = 3) const bool ALIGN_CORNERS = false;  // BILINEAR: torch's align_corners

layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer Src { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) writeonly buffer Dst { float v[]; };

layout(push_constant) uniform Params {
    uvec2 src;          // forward: input; backward: grad_out
    uvec2 dst;          // forward: output; backward: grad_in
    uint n;             // elements written
    int in_size[2];     // (h, w)
    int out_size[2];
    float scale[2];     // upsampling: torch's per-axis scale (in/out, 1/scale_factor or align_corners')
    int pad[2];         // padding: (top, left); negative crops
} p;

#if MODE == NEAREST || MODE == NEAREST_EXACT
// UpSample.h: nearest_idx / nearest_exact_idx
int source(int o, int a) {
    const int in_ = p.in_size[a], out_ = p.out_size[a];
#if MODE == NEAREST
    if (out_ == in_) return o;
    if (out_ == 2 * in_) return o >> 1;
    precise float s = float(o) * p.scale[a];
#else
    if (out_ == in_) return o;
    precise float s = (float(o) + 0.5) * p.scale[a];
#endif
    return min(int(floor(s)), in_ - 1);
}
#elif MODE == BILINEAR
// UpSample.h: compute_source_index_and_lambda -> first source index, and its weight lambda1
int source_lambda(int o, int a, out float lambda1) {
    const int in_ = p.in_size[a];
    if (p.out_size[a] == in_) { lambda1 = 0.0; return o; }
    precise float real;
    if (ALIGN_CORNERS) {
        real = p.scale[a] * float(o);
    } else {
        real = p.scale[a] * (float(o) + 0.5) - 0.5;
        real = max(real, 0.0);
    }
    const int i0 = min(int(floor(real)), in_ - 1);
    lambda1 = min(max(real - float(i0), 0.0), 1.0);
    return i0;
}
int source(int o, int a) { float l; return source_lambda(o, a, l); }
#else
// ReflectionPad.cpp / ReplicationPadding.cpp: the source index of output o along axis a
int source(int o, int a) {
    const int in_ = p.in_size[a], pad = p.pad[a];
    const int i_start = max(0, -pad), o_start = max(0, pad);
    int i;
#if MODE == REFLECT
    if (o < pad) i = pad * 2 - o;
    else if (o < in_ + pad) i = o;
    else i = (in_ + pad - 1) * 2 - o;
#else
    if (o < pad) i = pad;
    else if (o < in_ + pad) i = o;
    else i = in_ + pad - 1;
#endif
    return i - o_start + i_start;
}
#endif

#if BACKWARD
#if MODE == REFLECT
#define RANGES 3
#else
#define RANGES 1
#endif

#if MODE != REFLECT && MODE != REPLICATE
// the first o in [0, out] with source(o) >= t (source is nondecreasing in o)
int lower_bound(int t, int a) {
    int lo = 0, hi = p.out_size[a];
    while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        if (source(mid, a) < t) lo = mid + 1; else hi = mid;
    }
    return lo;
}
#endif

// outputs [lo, hi) along axis a that may read input i: range k of RANGES (duplicates are empty)
void outputs_reading(int i, int a, int k, out int lo, out int hi) {
#if MODE == NEAREST || MODE == NEAREST_EXACT
    lo = lower_bound(i, a);
    hi = lower_bound(i + 1, a);
#elif MODE == BILINEAR
    lo = lower_bound(i - 1, a);  // source i - 1 reads i as its second tap
    hi = lower_bound(i + 1, a);
#else
    const int in_ = p.in_size[a], pad = p.pad[a];
    const int q = i + max(0, pad) - max(0, -pad);  // i in output coordinates before the reflection
#if MODE == REFLECT
    const int direct = q, left = 2 * pad - q, right = 2 * (in_ + pad - 1) - q;
    const int c = k == 0 ? direct : (k == 1 ? (left == direct ? -1 : left)
                                            : ((right == direct || right == left) ? -1 : right));
    lo = c; hi = c + 1;
#else
    lo = q == pad ? 0 : q;
    hi = q == in_ + pad - 1 ? p.out_size[a] : q + 1;
#endif
    lo = max(lo, 0);
    hi = min(hi, p.out_size[a]);
#endif
}

// the weight with which output o reads input i along axis a (0 if it does not)
float weight(int o, int i, int a) {
#if MODE == BILINEAR
    float lambda1;
    const int i0 = source_lambda(o, a, lambda1);
    const int i1 = i0 + (i0 < p.in_size[a] - 1 ? 1 : 0);
    return (i0 == i ? 1.0 - lambda1 : 0.0) + (i1 == i ? lambda1 : 0.0);
#else
    return source(o, a) == i ? 1.0 : 0.0;
#endif
}
#endif

void main() {
    const uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    const uint e = group * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    if (e >= p.n) return;
#if BACKWARD
    const int w = int(e % uint(p.in_size[1]));
    const uint rest = e / uint(p.in_size[1]);
    const int h = int(rest % uint(p.in_size[0]));
    const uint plane = (rest / uint(p.in_size[0])) * uint(p.out_size[0] * p.out_size[1]);
    float acc = 0.0;
    for (int kh = 0; kh < RANGES; ++kh) {
        int lo_h, hi_h;
        outputs_reading(h, 0, kh, lo_h, hi_h);
        for (int oh = lo_h; oh < hi_h; ++oh) {
            const float wh = weight(oh, h, 0);
            if (wh == 0.0) continue;
            const uint row = plane + uint(oh * p.out_size[1]);
            float acc_row = 0.0;
            for (int kw = 0; kw < RANGES; ++kw) {
                int lo_w, hi_w;
                outputs_reading(w, 1, kw, lo_w, hi_w);
                for (int ow = lo_w; ow < hi_w; ++ow)
                    acc_row += weight(ow, w, 1) * Src(p.src).v[row + uint(ow)];
            }
            acc += wh * acc_row;
        }
    }
    Dst(p.dst).v[e] = acc;
#else
    const int ow = int(e % uint(p.out_size[1]));
    const uint rest = e / uint(p.out_size[1]);
    const int oh = int(rest % uint(p.out_size[0]));
    const uint plane = (rest / uint(p.out_size[0])) * uint(p.in_size[0] * p.in_size[1]);
#if MODE == BILINEAR
    float lh, lw;
    const int h0 = source_lambda(oh, 0, lh), w0 = source_lambda(ow, 1, lw);
    const int h1 = h0 + (h0 < p.in_size[0] - 1 ? 1 : 0), w1 = w0 + (w0 < p.in_size[1] - 1 ? 1 : 0);
    const uint r0 = plane + uint(h0 * p.in_size[1]), r1 = plane + uint(h1 * p.in_size[1]);
    Src s = Src(p.src);
    const float top = (1.0 - lw) * s.v[r0 + uint(w0)] + lw * s.v[r0 + uint(w1)];
    const float bottom = (1.0 - lw) * s.v[r1 + uint(w0)] + lw * s.v[r1 + uint(w1)];
    Dst(p.dst).v[e] = (1.0 - lh) * top + lh * bottom;
#else
    const int h = source(oh, 0), w = source(ow, 1);
    Dst(p.dst).v[e] = Src(p.src).v[plane + uint(h * p.in_size[1] + w)];
#endif
#endif
}
