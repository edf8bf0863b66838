#version 450
// out[i] = OP(a[i], b[i]) over n contiguous elements.
// Tunables (specialization constants): local size (0), ITEMS (3: vector loads per thread).
// Defines: VEC (elements per load: 1, 2, 4; it picks the vector type), OP (an expression in x, y
// and p.alpha).
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference_uvec2 : require
#extension GL_EXT_control_flow_attributes : enable

layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;

#ifndef VEC
#define VEC 4
#endif
layout(constant_id = 3) const uint ITEMS = 1u;
#ifndef OP
#define OP(x, y) ((x) + p.alpha * (y))
#endif

#if VEC == 4
#define VTYPE vec4
#elif VEC == 2
#define VTYPE vec2
#else
#define VTYPE float
#endif

layout(buffer_reference, std430, buffer_reference_align = 16) buffer VBuf { VTYPE v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer SBuf { float v[]; };

layout(push_constant) uniform Params {
    uvec2 a;
    uvec2 b;
    uvec2 out_;
    uint n;
    float alpha;
} p;

void main() {
    const uint wg = gl_WorkGroupSize.x;
    const uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    const uint base = group * wg * ITEMS + gl_LocalInvocationID.x;
    const uint nv = p.n / VEC;
    VBuf a = VBuf(p.a), b = VBuf(p.b), o = VBuf(p.out_);
    [[unroll]] for (uint i = 0; i < ITEMS; ++i) {
        uint idx = base + i * wg;
        if (idx < nv) {
            VTYPE x = a.v[idx], y = b.v[idx];
            o.v[idx] = OP(x, y);
        }
    }
#if VEC > 1
    if (group == 0 && gl_LocalInvocationID.x < p.n - nv * VEC) {  // the ragged tail, scalar
        uint idx = nv * VEC + gl_LocalInvocationID.x;
        SBuf sa = SBuf(p.a), sb = SBuf(p.b), so = SBuf(p.out_);
        float x = sa.v[idx], y = sb.v[idx];
        so.v[idx] = OP(x, y);
    }
#endif
}
