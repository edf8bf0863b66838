#version 450
// Index validation: report the first index outside [0, bound) (other than an ignored value)
// in the device's error word (tvk_kernels/runtime/error_word.py), which the host reads at its
// next sync point. Reads the n indices and nothing else; writes only on an error.
//
// Error word: uint flag, uint site, int64 value, int64 bound. The first invocation to swap the
// flag from 0 to 1 records its value (first error wins until the host reads and clears it).
// A fixed grid strides over n indices (n < 2^31: the host splits longer arrays).
// INDEX_BITS: 64 (int64 indices) or 32 (int32).
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference_uvec2 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require

layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;

#ifndef INDEX_BITS
#define INDEX_BITS 64
#endif

#if INDEX_BITS == 32
layout(buffer_reference, std430, buffer_reference_align = 4) buffer Indices { int v[]; };
#else
layout(buffer_reference, std430, buffer_reference_align = 8) buffer Indices { int64_t v[]; };
#endif
layout(buffer_reference, std430, buffer_reference_align = 8) buffer ErrorWord {
    uint flag;
    uint site;
    int64_t value;
    int64_t bound;
};

layout(push_constant) uniform Params {
    uvec2 idx;       // the indices, contiguous
    uvec2 word;      // the error word
    int64_t bound;   // valid indices are [0, bound)
    int64_t ignore;  // a value that is not an error when has_ignore (nll_loss's ignore_index)
    uint n;          // number of indices
    uint site;       // what the host reports for this launch (op, dimension)
    uint has_ignore;
} p;

void main() {
    const uint stride = gl_NumWorkGroups.x * gl_NumWorkGroups.y * gl_WorkGroupSize.x;
    const uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    Indices ix = Indices(p.idx);
    for (uint i = group * gl_WorkGroupSize.x + gl_LocalInvocationID.x; i < p.n; i += stride) {
#if INDEX_BITS == 32  // the sign test in 32 bits: lavapipe (Mesa 22.3.6) got int64_t(x) < 0 wrong for x < 0
        const int v32 = ix.v[i];
        const int64_t v = int64_t(v32);
        const bool neg = v32 < 0;
#else
        const int64_t v = ix.v[i];
        const bool neg = v < 0;
#endif
        if ((neg || v >= p.bound) && !(p.has_ignore != 0u && v == p.ignore)) {
            ErrorWord w = ErrorWord(p.word);
            if (atomicCompSwap(w.flag, 0u, 1u) == 0u) {
                w.site = p.site;
                w.value = v;
                w.bound = p.bound;
            }
            return;  // one report per invocation is enough: only the first is kept
        }
    }
}
