#version 450
// GradScaler's two kernels (torch.amp.GradScaler on tvk: torchvk/aten/amp.py).
//
// MODE 0, unscale: grad[i] *= inv_scale for n elements, and found_inf = 1.0 when one of them
//   is inf or NaN (every invocation that sees one writes the same 1.0: no atomics needed, as
//   in CUDA's kernel). A fixed grid strides over the elements. DTYPE: the grad's storage,
//   float32, float16 or bfloat16 (common/dtypes.glsl, common/bf16.glsl); the product is taken in float32.
// MODE 1, update scale (one invocation): CUDA's rule. An inf backs the scale off and resets the
//   tracker; otherwise the tracker counts clean steps and at `interval` the scale grows (when
//   the grown scale is finite) and the tracker restarts.
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference_uvec2 : require
#extension GL_GOOGLE_include_directive : require
#include "common/dtypes.glsl"

layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;

#ifndef MODE
#define MODE 0
#endif
#ifndef DTYPE
#define DTYPE TVK_DT_FLOAT32
#endif
#if DTYPE != TVK_DT_FLOAT32
#extension GL_EXT_shader_16bit_storage : require
#endif

layout(buffer_reference, std430, buffer_reference_align = 4) buffer FBuf { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer IBuf { int v[]; };

#if MODE == 0
#if DTYPE == TVK_DT_FLOAT16
layout(buffer_reference, std430, buffer_reference_align = 2) buffer GBuf { float16_t v[]; };
#define LOAD(x) float(x)
#define STORE(f) float16_t(f)
#elif DTYPE == TVK_DT_BFLOAT16
#include "common/bf16.glsl"
layout(buffer_reference, std430, buffer_reference_align = 2) buffer GBuf { uint16_t v[]; };
#define LOAD(x) tvk_bf16_float(uint(x))
#define STORE(f) uint16_t(tvk_bf16_bits(f))
#else
layout(buffer_reference, std430, buffer_reference_align = 4) buffer GBuf { float v[]; };
#define LOAD(x) (x)
#define STORE(f) (f)
#endif

layout(push_constant) uniform Params {
    uvec2 grad;
    uvec2 found_inf;
    uvec2 inv_scale;
    uint n;
} p;

void main() {
    const uint stride = gl_NumWorkGroups.x * gl_NumWorkGroups.y * gl_WorkGroupSize.x;
    const uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    GBuf g = GBuf(p.grad);
    const float inv = FBuf(p.inv_scale).v[0];
    bool bad = false;
    for (uint i = group * gl_WorkGroupSize.x + gl_LocalInvocationID.x; i < p.n; i += stride) {
        const float x = LOAD(g.v[i]);
        bad = bad || isnan(x) || isinf(x);
        if (inv != 1.0) g.v[i] = STORE(x * inv);
    }
    if (bad) FBuf(p.found_inf).v[0] = 1.0;
}

#else  // MODE 1

layout(push_constant) uniform Params {
    uvec2 scale;
    uvec2 tracker;
    uvec2 found_inf;
    float growth;
    float backoff;
    int interval;
} p;

void main() {
    FBuf scale = FBuf(p.scale);
    IBuf tracker = IBuf(p.tracker);
    if (FBuf(p.found_inf).v[0] != 0.0) {
        scale.v[0] = scale.v[0] * p.backoff;
        tracker.v[0] = 0;
        return;
    }
    const int successful = tracker.v[0] + 1;
    if (successful == p.interval) {
        const float grown = scale.v[0] * p.growth;
        if (!isinf(grown) && !isnan(grown)) scale.v[0] = grown;
        tracker.v[0] = 0;
    } else {
        tracker.v[0] = successful;
    }
}
#endif
