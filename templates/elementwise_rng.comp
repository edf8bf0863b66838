#version 450
// Counter-based random numbers: Philox4x32-10 (Salmon et al., SC'11), uint32 arithmetic only.
// Thread t makes one Philox block from counter (t, 0, offset.lo, offset.hi) and key
// (seed.lo, seed.hi) and uses its 4 words for elements 4t..4t+3, so a result depends only
// on (seed, offset, element index): deterministic whatever the launch shape.
// MODE 0 uniform: out = lo + (hi - lo) * u, u in [0, 1)
// MODE 1 normal:  out = mean + std * z (Box-Muller on word pairs)
// MODE 2 dropout: keep = u >= p; out = keep ? x * scale : 0; mask (uint8) = keep (if mask != 0)
// DT: float32 or float16 data (common/dtypes.glsl).
// SEED_BUF 1: `seed` is the address of {uvec2 seed; uvec2 offset} and `offset` is added to that
// offset: a recorded command buffer (compiled mode's replay) draws new numbers on every replay
// because the host rewrites those 16 bytes before each one.
// Tunables (specialization constants): local size (0); SEED_BUF (3) is one too. MODE (extensions,
// buffers) and DT (the storage type) stay defines.
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference_uvec2 : require
#extension GL_EXT_control_flow_attributes : enable
#extension GL_GOOGLE_include_directive : require
#include "common/dtypes.glsl"
#if DT == TVK_DT_FLOAT16
#extension GL_EXT_shader_16bit_storage : require
#endif
#if MODE == 2
#extension GL_EXT_shader_8bit_storage : require
#endif

layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;

#ifndef MODE
#define MODE 0
#endif
#ifndef DT
#define DT TVK_DT_FLOAT32
#endif
layout(constant_id = 3) const bool SEED_BUF = false;
#if DT == TVK_DT_FLOAT16
#define STYPE float16_t
#define ESIZE 2
#else
#define STYPE float
#define ESIZE 4
#endif

layout(buffer_reference, std430, buffer_reference_align = ESIZE) buffer DataBuf { STYPE v[]; };
layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer SeedBuf { uvec2 seed; uvec2 offset; };
#if MODE == 2
layout(buffer_reference, std430, buffer_reference_align = 1) writeonly buffer MaskBuf { uint8_t v[]; };
#endif

layout(push_constant) uniform Params {
    uvec2 x;       // dropout input
    uvec2 out_;    // output
    uvec2 mask;    // dropout mask (uint8) or 0
    uvec2 seed;
    uvec2 offset;
    uint n;
    float s0;      // lo / mean / p
    float s1;      // hi / std / scale
} p;

uvec4 philox_round(uvec4 c, uvec2 k) {
    uint hi0, lo0, hi1, lo1;
    umulExtended(0xD2511F53u, c.x, hi0, lo0);
    umulExtended(0xCD9E8D57u, c.z, hi1, lo1);
    return uvec4(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
}

uvec4 philox(uvec4 c, uvec2 k) {
    [[unroll]] for (int r = 0; r < 9; ++r) {
        c = philox_round(c, k);
        k += uvec2(0x9E3779B9u, 0xBB67AE85u);
    }
    return philox_round(c, k);
}

float unit(uint w) { return float(w >> 8) * (1.0 / 16777216.0); }           // [0, 1)
float unit_open0(uint w) { return (float(w >> 8) + 1.0) * (1.0 / 16777216.0); }  // (0, 1]

void main() {
    const uint t = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * gl_WorkGroupSize.x
                   + gl_LocalInvocationID.x;
    const uint first = t * 4u;
    if (first >= p.n) return;
    uvec2 offset, key;
    if (SEED_BUF) {
        SeedBuf sb = SeedBuf(p.seed);
        uint carry;
        uint off_lo = uaddCarry(sb.offset.x, p.offset.x, carry);
        offset = uvec2(off_lo, sb.offset.y + p.offset.y + carry);
        key = sb.seed;
    } else {
        offset = p.offset;
        key = p.seed;
    }
    uvec4 r = philox(uvec4(t, 0u, offset.x, offset.y), key);
    float v[4];
#if MODE == 0
    [[unroll]] for (int j = 0; j < 4; ++j) v[j] = p.s0 + (p.s1 - p.s0) * unit(r[j]);
#elif MODE == 1
    [[unroll]] for (int j = 0; j < 4; j += 2) {
        float rad = sqrt(-2.0 * log(unit_open0(r[j])));
        float th = 6.283185307179586 * unit(r[j + 1]);
        v[j] = p.s0 + p.s1 * rad * cos(th);
        v[j + 1] = p.s0 + p.s1 * rad * sin(th);
    }
#endif
    DataBuf o = DataBuf(p.out_);
#if MODE == 2
    DataBuf xs = DataBuf(p.x);
    bool has_mask = p.mask != uvec2(0u);
    MaskBuf m = MaskBuf(p.mask);
#endif
    [[unroll]] for (int j = 0; j < 4; ++j) {
        uint i = first + uint(j);
        if (i < p.n) {
#if MODE == 2
            bool keep = unit(r[j]) >= p.s0;
            o.v[i] = STYPE(keep ? float(xs.v[i]) * p.s1 : 0.0);
            if (has_mask) m.v[i] = uint8_t(keep ? 1u : 0u);
#else
            o.v[i] = STYPE(v[j]);
#endif
        }
    }
}
