#version 450
// What a subgroup really is in a dispatch, beside what the device reports: every invocation writes
// gl_SubgroupSize, the lanes one subgroupAdd spans (its subgroup's invocation count) and the
// workgroup's invocations over gl_NumSubgroups (templates/common/subgroup.glsl's width).
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference_uvec2 : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
layout(local_size_x_id = 0) in;
layout(buffer_reference, std430, buffer_reference_align = 4) buffer UBuf { uint v[]; };
layout(push_constant) uniform Params { uvec2 out_; } p;

void main() {
    const uint l = gl_LocalInvocationID.x;
    UBuf o = UBuf(p.out_);
    o.v[3 * l] = gl_SubgroupSize;
    o.v[3 * l + 1] = subgroupAdd(1u);
    o.v[3 * l + 2] = gl_WorkGroupSize.x / gl_NumSubgroups;
}
