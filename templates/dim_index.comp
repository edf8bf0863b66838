#version 450
// Elements moved along dims: scatter and gather by an index tensor, and flip.
//
// MODE 0 (scatter): for each element c of the index (contiguous, int64, shape p.size):
//   out[c with c[dim] = index[c]] = src[c]. An index outside [0, bound) writes nothing (the
//   host's index check reports it). Duplicate indices: one of the writes wins, as in torch.
// MODE 2 (gather): for each element c of the index (contiguous, int64, shape p.size):
//   out[c] = src[c with c[dim] = index[c]]. An index outside [0, bound) (src's size along dim)
//   leaves out[c] unwritten (the host's index check reports it).
// MODE 1 (flip): for each element c of the output (shape p.size):
//   out[c] = src[c with c[d] = size[d] - 1 - c[d] for every d in p.flip_mask].
// Strides are in elements; dims past p.ndim have size 1. Elements are copied as raw bits of
// ELEM_BYTES (4 or 8), so any dtype of that width moves unchanged.
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference_uvec2 : require

layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;

#ifndef MODE
#define MODE 0
#endif
#ifndef ELEM_BYTES
#define ELEM_BYTES 4
#endif
#define MAX_DIMS 6

#if ELEM_BYTES == 8
#define ELEM uvec2
layout(buffer_reference, std430, buffer_reference_align = 8) buffer Elems { uvec2 v[]; };
#else
#define ELEM uint
layout(buffer_reference, std430, buffer_reference_align = 4) buffer Elems { uint v[]; };
#endif
layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer Index { uvec2 v[]; };

layout(push_constant) uniform Params {
    uvec2 out_;
    uvec2 src;
    uvec2 index;          // MODE 0, 2: int64, contiguous in p.size
    uint n;               // elements to move
    uint dim;             // MODE 0, 2: the indexed dim
    uint bound;           // MODE 0: out's size along dim; MODE 2: src's
    uint flip_mask;       // MODE 1: bit d set: dim d is reversed
    uint size[MAX_DIMS];
    uint src_stride[MAX_DIMS];
    uint out_stride[MAX_DIMS];
} p;

void main() {
    const uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    const uint e = group * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    if (e >= p.n) return;
    uint rest = e, src_at = 0u, out_at = 0u;
#if MODE == 0 || MODE == 2
    const uvec2 raw = Index(p.index).v[e];  // (low, high) words of the int64
    if (raw.y != 0u || raw.x >= p.bound) return;
    for (int d = MAX_DIMS - 1; d >= 0; --d) {
        const uint c = rest % p.size[d];
        rest /= p.size[d];
        const uint picked = uint(d) == p.dim ? raw.x : c;
#if MODE == 0
        src_at += c * p.src_stride[d];
        out_at += picked * p.out_stride[d];
#else
        src_at += picked * p.src_stride[d];
        out_at += c * p.out_stride[d];
#endif
    }
#else
    for (int d = MAX_DIMS - 1; d >= 0; --d) {
        const uint c = rest % p.size[d];
        rest /= p.size[d];
        out_at += c * p.out_stride[d];
        src_at += ((p.flip_mask >> d) & 1u) != 0u ? (p.size[d] - 1u - c) * p.src_stride[d] : c * p.src_stride[d];
    }
#endif
    Elems(p.out_).v[out_at] = Elems(p.src).v[src_at];
}
