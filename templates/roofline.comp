#version 450
// The device's ceilings, measured (tvk_kernels/bench/roofline.py): what a kernel's time is compared with.
// KIND 1: an FMA loop on registers only (the peak arithmetic rate of TYPE; FP16 1: float16_t,
//         which packs two lanes an instruction where the hardware can);
// KIND 2: a vec4 copy over a grid-stride loop (the peak bandwidth a kernel reaches: read + write);
// KIND 3: cooperative-matrix multiply-adds on registers only (the peak fp16 x fp16 -> fp32
//         tensor-unit rate; MS, NS, KS: the device's matrix shape; needs glslang >= 13).
// Each invocation stores one value (KIND 1, 3), so the compiler keeps the loop; the multiplier
// and addend come from push constants, so it cannot fold the chain.
// Specialization constants: local size (0), ITER (3: loop trips, 4 x 8 chains each).
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference_uvec2 : require
#extension GL_EXT_control_flow_attributes : enable
#if FP16 || KIND == 3
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
#endif
#if KIND == 3
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#endif

layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;
layout(constant_id = 3) const uint ITER = 64u;

#if FP16
#define VTYPE f16vec4
#define STYPE float16_t
#else
#define VTYPE vec4
#define STYPE float
#endif

layout(buffer_reference, std430, buffer_reference_align = 16) buffer Vec4Buf { vec4 v[]; };
layout(buffer_reference, std430, buffer_reference_align = 8) buffer ValueBuf { VTYPE v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer FloatBuf { float v[]; };

layout(push_constant) uniform Params {
    uvec2 src;
    uvec2 dst;
    uint n;        // KIND 2: vec4s to copy
    float mul;     // KIND 1, 3: the chain's multiplier and addend (a fixed point: no overflow)
    float add;
} p;

void main() {
    const uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    const uint gid = group * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
#if KIND == 1
    const VTYPE m = VTYPE(STYPE(p.mul)), c = VTYPE(STYPE(p.add));
    VTYPE acc[8];
    [[unroll]] for (uint j = 0; j < 8; ++j) acc[j] = VTYPE(STYPE(float(gid & 15u) * 0.01 + float(j)));
    for (uint i = 0; i < ITER; ++i) {
        [[unroll]] for (uint u = 0; u < 4; ++u) {
            [[unroll]] for (uint j = 0; j < 8; ++j) acc[j] = fma(acc[j], m, c);
        }
    }
    VTYPE total = acc[0];
    [[unroll]] for (uint j = 1; j < 8; ++j) total += acc[j];
    ValueBuf(p.dst).v[gid] = total;
#elif KIND == 2
    const uint stride = gl_NumWorkGroups.x * gl_NumWorkGroups.y * gl_WorkGroupSize.x;
    Vec4Buf src = Vec4Buf(p.src), dst = Vec4Buf(p.dst);
    for (uint i = gid; i < p.n; i += stride) dst.v[i] = src.v[i];
#elif KIND == 3
    coopmat<float16_t, gl_ScopeSubgroup, MS, KS, gl_MatrixUseA> a = coopmat<float16_t, gl_ScopeSubgroup, MS, KS, gl_MatrixUseA>(float16_t(p.mul));
    coopmat<float16_t, gl_ScopeSubgroup, KS, NS, gl_MatrixUseB> b = coopmat<float16_t, gl_ScopeSubgroup, KS, NS, gl_MatrixUseB>(float16_t(p.add));
    coopmat<float, gl_ScopeSubgroup, MS, NS, gl_MatrixUseAccumulator> acc[8];
    [[unroll]] for (uint j = 0; j < 8; ++j) acc[j] = coopmat<float, gl_ScopeSubgroup, MS, NS, gl_MatrixUseAccumulator>(float(j));
    for (uint i = 0; i < ITER; ++i) {
        [[unroll]] for (uint u = 0; u < 4; ++u) {
            [[unroll]] for (uint j = 0; j < 8; ++j) acc[j] = coopMatMulAdd(a, b, acc[j]);
        }
    }
    [[unroll]] for (uint j = 1; j < 8; ++j) acc[0] = acc[0] + acc[j];
    const uint subgroup = gid / gl_SubgroupSize;
    FloatBuf out_ = FloatBuf(p.dst);
    coopMatStore(acc[0], out_.v, subgroup * MS * NS, NS, gl_CooperativeMatrixLayoutRowMajor);
#endif
}
