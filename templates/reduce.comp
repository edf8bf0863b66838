#version 450
// Reductions (sum, prod, max, min, argmax, argmin) over an N-d strided view.
//
// The host splits the (collapsed) shape into kept dims (the output, row-major) and RD
// reduced dims; p.size/p.stride hold the reduced dims first (innermost last), then the
// p.nk kept dims. Each output is reduced by T threads of one workgroup (T, WG powers of
// two, p.tlog = log2(T), WG / T outputs per workgroup):
//   COLS == 0: the T threads of one output are adjacent (contiguous reductions), and the
//              cross-thread step may use subgroup arithmetic (SUBGROUP; taken where T covers
//              whole subgroups of this dispatch, else shared memory);
//   COLS == 1: adjacent threads own adjacent outputs (reductions over a strided dim whose
//              kept dims are contiguous), cross-thread step in shared memory.
// Two-pass: gl_WorkGroupID.z picks a chunk [z*chunk, z*chunk + chunk) of the reduced
// range; pass 1 writes per-chunk partials, pass 2 (IN_IDX for arg-ops) reduces them.
// Tunables (specialization constants): local size (id 0, = WG), ITEMS (id 3: unrolled loads
// per thread and step). Also specialization constants: COLS (id 4), IN_IDX (id 5), IDX64 (id 6),
// RD (id 7). Defines: SUBGROUP (tunable; a define as it enables the subgroup extensions) and
// OP: 0 sum, 1 prod, 2 max, 3 min, 4 argmax, 5 argmin.
// IN_F16: the input's storage: float32, float16 or bfloat16 (common/dtypes.glsl); all read as float.
// OUT_F16 (absent: float32): the values' storage where they are the result (one pass, or pass 2;
// pass-1 partials stay float32), float16 or bfloat16, rounded once from the float32 result.
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference_uvec2 : require
#extension GL_EXT_control_flow_attributes : enable
#extension GL_GOOGLE_include_directive : require
#include "common/dtypes.glsl"
#ifdef OUT_F16
#define DTYPE OUT_F16
#include "common/storage.glsl"
#endif
#ifndef SUBGROUP
#define SUBGROUP 0
#endif
#if SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_vote : require
#include "common/subgroup.glsl"
#endif
#ifndef IN_F16
#define IN_F16 TVK_DT_FLOAT32
#endif
#if IN_F16 != TVK_DT_FLOAT32
#extension GL_EXT_shader_16bit_storage : require
#endif

layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;

#ifndef OP
#define OP 0
#endif
layout(constant_id = 3) const uint ITEMS = 1u;
layout(constant_id = 4) const bool COLS = false;
layout(constant_id = 5) const bool IN_IDX = false;
layout(constant_id = 6) const bool IDX64 = false;
layout(constant_id = 7) const int RD = 1;

#define PAIR (OP >= 4)
#define NOIDX 0xFFFFFFFFu
#define NAN_F uintBitsToFloat(0x7FC00000u)
#define INF_F uintBitsToFloat(0x7F800000u)

#if OP == 0
#define IDENT 0.0
#elif OP == 1
#define IDENT 1.0
#elif OP == 2 || OP == 4
#define IDENT (-INF_F)
#else
#define IDENT INF_F
#endif

#if IN_F16 == TVK_DT_BFLOAT16
#include "common/bf16.glsl"
layout(buffer_reference, std430, buffer_reference_align = 2) readonly buffer InBuf { uint16_t v[]; };
#define IN_FLOAT(v) tvk_bf16_float(uint(v))
#elif IN_F16 == TVK_DT_FLOAT16
layout(buffer_reference, std430, buffer_reference_align = 2) readonly buffer InBuf { float16_t v[]; };
#define IN_FLOAT(v) float(v)
#else
layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer InBuf { float v[]; };
#define IN_FLOAT(v) float(v)
#endif
layout(buffer_reference, std430, buffer_reference_align = 4) buffer FBuf { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer UBuf { uint v[]; };
#ifdef OUT_F16
#if PAIR
#error "reduce.comp: OUT_F16 is for value reductions; arg-ops write float32 values beside their indices"
#endif
layout(buffer_reference, std430, buffer_reference_align = TVK_ST_ALIGN) buffer OutBuf { TVK_ST v[]; };
#define OUT_VALUE(f) TVK_STORE(f)
#else  // float32: the same module as before OUT_F16 existed
#define OutBuf FBuf
#define OUT_VALUE(f) (f)
#endif

layout(push_constant) uniform Params {
    uvec2 in_;      // input values
    uvec2 in_idx;   // pass 2 of arg-ops: partial indices (uint32), same layout as in_
    uvec2 out_;     // float32 values (0: do not write)
    uvec2 out_idx;  // indices: uint32, or int64 when IDX64 (0: do not write)
    uint n_out;
    uint n_red;
    uint chunk;     // reduced elements per gl_WorkGroupID.z
    uint nk;        // kept dims
    float scale;    // sum: result * scale (mean)
    uint tlog;      // log2(threads per output)
    uint size[6];   // RD reduced dims (innermost last), then nk kept dims
    uint stride[6]; // in elements
} p;

const uint WG = gl_WorkGroupSize.x;
#define T (1u << p.tlog)
#define G (WG >> p.tlog)  // outputs per workgroup
shared float sv[gl_WorkGroupSize.x];
#if PAIR
shared uint si[gl_WorkGroupSize.x];
#endif

// ------------------------------------------------------------------ combine
float comb(float a, float b) {
#if OP == 0
    return a + b;
#elif OP == 1
    return a * b;
#elif OP == 2
    return (a > b || isnan(a)) ? a : b;  // NaN propagates like torch
#else
    return (a < b || isnan(a)) ? a : b;
#endif
}

// does (b, ib) replace (a, ia)? NaN counts as the extreme value; ties go to the lower index
bool takes(float a, uint ia, float b, uint ib) {
    if (isnan(b)) return !isnan(a) || ib < ia;
    if (isnan(a)) return false;
#if OP == 4
    return b > a || (b == a && ib < ia);
#else
    return b < a || (b == a && ib < ia);
#endif
}

#if SUBGROUP
void sg_reduce(inout float v, inout uint i) {
#if PAIR
    bool n = isnan(v);
    if (subgroupAny(n)) {
        i = subgroupMin(n ? i : NOIDX);
        v = NAN_F;
    } else {
#if OP == 4
        float m = subgroupMax(v);
#else
        float m = subgroupMin(v);
#endif
        i = subgroupMin(v == m ? i : NOIDX);
        v = m;
    }
#elif OP == 0
    v = subgroupAdd(v);
#elif OP == 1
    v = subgroupMul(v);
#else
    bool n = subgroupAny(isnan(v));
#if OP == 2
    v = n ? NAN_F : subgroupMax(v);
#else
    v = n ? NAN_F : subgroupMin(v);
#endif
#endif
}
#endif

uint kept_offset(uint o) {
    uint off = 0;
    for (int j = int(p.nk) - 1; j >= 0; --j) {
        uint s = p.size[RD + j];
        off += (o % s) * p.stride[RD + j];
        o /= s;
    }
    return off;
}

uint red_offset(uint r) {
    uint off = 0;
    [[unroll]] for (int j = RD - 1; j > 0; --j) {
        uint s = p.size[j];
        off += (r % s) * p.stride[j];
        r /= s;
    }
    return off + r * p.stride[0];
}

void main() {
    const uint l = gl_LocalInvocationID.x;
    const uint ol = COLS ? l % G : l / T, t = COLS ? l / G : l % T;
    const uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    const uint o = group * G + ol;
    const bool live = o < p.n_out;
    const uint start = gl_WorkGroupID.z * p.chunk;
    const uint end = min(start + p.chunk, p.n_red);

    float acc = IDENT;
    uint ai = NOIDX;
    if (live) {
        InBuf src = InBuf(p.in_);
        UBuf isrc = UBuf(p.in_idx);
        const uint base = kept_offset(o);
        for (uint r = start + t; r < end; r += T * ITEMS) {
            [[unroll]] for (uint k = 0; k < ITEMS; ++k) {
                uint rr = r + k * T;
                // item 0 is in range by the loop's own test: said here, as the driver unrolls ITEMS
                // only after specialization and would test it again
                if (k == 0u || rr < end) {
                    uint off = base + red_offset(rr);
                    float x = IN_FLOAT(src.v[off]);
#if PAIR
                    uint xi = IN_IDX ? isrc.v[off] : rr;
                    if (takes(acc, ai, x, xi)) { acc = x; ai = xi; }
#else
                    acc = comb(acc, x);
#endif
                }
            }
        }
    }

    if (T > 1) {
#if SUBGROUP
        // subgroup arithmetic needs the threads of an output adjacent and covering whole
        // subgroups (a subgroup wider than T would mix outputs)
        const uint SG = TVK_SUBGROUP_WIDTH;
        if (!COLS && T >= SG) {
            // subgroup reduce, then rounds of (one value per subgroup -> shared -> subgroup reduce)
            sg_reduce(acc, ai);
            uint cnt = T / SG;
            while (cnt > 1) {
                barrier();
                if (gl_SubgroupInvocationID == 0 && t / SG < cnt) {
                    sv[ol * T + t / SG] = acc;
#if PAIR
                    si[ol * T + t / SG] = ai;
#endif
                }
                barrier();
                acc = IDENT;
                ai = NOIDX;
                if (t < cnt) {
                    acc = sv[ol * T + t];
#if PAIR
                    ai = si[ol * T + t];
#endif
                }
                sg_reduce(acc, ai);
                cnt = (cnt + SG - 1) / SG;
            }
        } else
#endif
        {
            sv[l] = acc;
#if PAIR
            si[l] = ai;
#endif
            barrier();
            for (uint s = T / 2; s > 0; s >>= 1) {
                if (t < s) {
                    const uint other = COLS ? l + s * G : l + s;
#if PAIR
                    float b = sv[other];
                    uint ib = si[other];
                    if (takes(acc, ai, b, ib)) { acc = b; ai = ib; }
                    sv[l] = acc;
                    si[l] = ai;
#else
                    acc = comb(acc, sv[other]);
                    sv[l] = acc;
#endif
                }
                barrier();
            }
        }
    }

    if (live && t == 0) {
        const uint dst = gl_WorkGroupID.z * p.n_out + o;  // pass 1 partials: [chunk][n_out]
#if PAIR
        if (any(notEqual(p.out_, uvec2(0)))) FBuf(p.out_).v[dst] = acc;
        if (any(notEqual(p.out_idx, uvec2(0)))) {
            if (IDX64) {
                UBuf(p.out_idx).v[2 * dst] = ai;
                UBuf(p.out_idx).v[2 * dst + 1] = 0u;
            } else {
                UBuf(p.out_idx).v[dst] = ai;
            }
        }
#elif OP == 0
        OutBuf(p.out_).v[dst] = OUT_VALUE(acc * p.scale);
#else
        OutBuf(p.out_).v[dst] = OUT_VALUE(acc);
#endif
    }
}
