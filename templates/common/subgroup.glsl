// Subgroup helpers for the row reductions (reduce, softmax, norm). Include after enabling
// GL_KHR_shader_subgroup_basic.
#ifndef TVK_SUBGROUP_GLSL
#define TVK_SUBGROUP_GLSL

// Lanes one subgroup operation spans in this dispatch. Not gl_SubgroupSize: the driver may pick
// any size in the device's range unless the pipeline requires one, a workgroup narrower than a
// subgroup fills only part of it, and lavapipe reports a size of up to 64 while its subgroups
// hold at most 16 lanes. The workgroup's invocations over its subgroup count is the width each
// subgroup really covers (workgroup sizes are powers of two in these families). A macro, not a
// function: gl_WorkGroupSize means the layout's size only after the template declares it.
#define TVK_SUBGROUP_WIDTH (gl_WorkGroupSize.x / gl_NumSubgroups)

#endif
