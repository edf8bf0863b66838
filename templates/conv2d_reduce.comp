#version 450
// Strided sums for the convolution family:
//   dst[i] = sum_{a < A} sum_{b < B} src[a * sa + i * si + b]      for i < count
// Split-K partials of any direction: A = splits, sa = the output's elements, si = 1, B = 1.
// grad_bias:                      A = batch, sa = OC*OH*OW,       si = OH*OW, B = OH*OW.
// PER_THREAD 1: one invocation per output (short sums); 0: one workgroup per output with a
// shared-memory tree (long sums). A define, not a specialization constant: as a constant, the
// tree's shared array would take LDS in per-thread mode too (RADV keeps it).
// ACT (absent: none): the forward's epilogue activation (common/activation.glsl), applied to each
// finished sum of split-K partials. DTYPE (common/storage.glsl; absent: float32): dst's storage
// (the sources are float32 partials); each sum is rounded once, as a float16/bfloat16 GEMM's output.
// Tunables (specialization constants): the local size (constant 0, a power of two).
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference_uvec2 : require
#extension GL_GOOGLE_include_directive : require
#include "common/storage.glsl"
#include "common/activation.glsl"

layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;

#ifndef PER_THREAD
#define PER_THREAD 1
#endif

layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer RBuf { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = TVK_ST_ALIGN) writeonly buffer WBuf { TVK_ST v[]; };

layout(push_constant) uniform Params {
    uvec2 src;
    uvec2 dst;
    uint count, A, B, sa, si;
} p;

#if PER_THREAD == 0
shared float part[gl_WorkGroupSize.x];
#endif

void main() {
    RBuf S = RBuf(p.src);
    WBuf D = WBuf(p.dst);
    const uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
#if PER_THREAD == 1
    const uint i = group * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    if (i >= p.count) {
        return;
    }
    float s = 0.0;
    for (uint a = 0; a < p.A; ++a) {
        uint base = a * p.sa + i * p.si;
        for (uint b = 0; b < p.B; ++b) {
            s += S.v[base + b];
        }
    }
    D.v[i] = TVK_STORE(activation(s));
#else
    const uint i = group;
    if (i >= p.count) {
        return;  // uniform over the workgroup
    }
    const uint tid = gl_LocalInvocationID.x;
    float s = 0.0;
    if (p.B >= gl_WorkGroupSize.x) {
        for (uint a = 0; a < p.A; ++a) {
            uint base = a * p.sa + i * p.si;
            for (uint b = tid; b < p.B; b += gl_WorkGroupSize.x) {
                s += S.v[base + b];
            }
        }
    } else {
        const uint total = p.A * p.B;
        for (uint t = tid; t < total; t += gl_WorkGroupSize.x) {
            uint a = t / p.B, b = t - a * p.B;
            s += S.v[a * p.sa + i * p.si + b];
        }
    }
    part[tid] = s;
    barrier();
    for (uint off = gl_WorkGroupSize.x / 2; off > 0; off >>= 1) {
        if (tid < off) {
            part[tid] += part[tid + off];
        }
        barrier();
    }
    if (tid == 0) {
        D.v[i] = TVK_STORE(activation(part[0]));
    }
#endif
}
