#version 450
// Stable sort along the last dim of a [rows, n] view (bitonic network, rows padded to N = 2^nlog).
//
// Keys become unsigned integers whose unsigned order is torch's order: float32 bits are mapped
// so that -0.0 == 0.0 and every NaN is the largest value; int64 gets its sign bit flipped;
// descending inverts the key. Each element carries its column and compares as (key, column),
// so equal keys keep their input order (stable, like torch's stable=True) and the result is
// unique. Padding (columns n..N-1) has the largest key and a column >= n: it sorts last.
//
// The network is the "flip" form of the bitonic sort: stage k (2, 4, ..., N) compares i with
// i ^ (k-1) inside each k-block (the flip step), then i with i + s for s = k/4, ..., 1; each pair
// puts the smaller (key, column) first, so every block sorts ascending: no direction bits.
//
// MODE 0 (local): a workgroup holds E = 2^elog consecutive padded elements (one or more whole
//   rows, or one block of a long row) in shared memory and runs stages klo..khi, doing only the
//   steps whose pairs lie within E: the host runs the others first with MODE 1. It reads the input
//   (FROM_INPUT) or the scratch, and writes the scratch or the outputs (TO_OUTPUT: the first kout
//   columns; values gathered from the input by column, int64 columns as indices).
// MODE 1 (global): one compare-exchange step over the scratch, one pair per invocation: the flip
//   step of stage 2^klo when p.step == 0, else the step of stride p.step.
// Defines: MODE, KEY64 (0: float32 keys and values, 1: int64).
// Tunables (specialization constants): local size (id 0, = WG), ELEMS (id 3: shared capacity, power of 2).
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference_uvec2 : require
#ifndef KEY64
#define KEY64 0
#endif
#if KEY64
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#endif

layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;

#ifndef MODE
#define MODE 0
#endif
layout(constant_id = 3) const uint ELEMS = 1024u;

#define FROM_INPUT 1u
#define TO_OUTPUT 2u
#define DESCENDING 4u

#if KEY64
#define KEY uint64_t
#define PAD_KEY 0xFFFFFFFFFFFFFFFFul
layout(buffer_reference, std430, buffer_reference_align = 8) buffer Keys { uint64_t v[]; };
#else
#define KEY uint
#define PAD_KEY 0xFFFFFFFFu
layout(buffer_reference, std430, buffer_reference_align = 4) buffer Keys { uint v[]; };
#endif
layout(buffer_reference, std430, buffer_reference_align = 4) buffer Words { uint v[]; };

layout(push_constant) uniform Params {
    uvec2 in_;      // [rows, n] keys, contiguous along n, rows in_row elements apart (bits read as KEY)
    uvec2 out_val;  // [rows, kout] sorted values (TO_OUTPUT)
    uvec2 out_idx;  // [rows, kout] int64 indices (TO_OUTPUT)
    uvec2 skey;     // scratch: rows << nlog keys
    uvec2 sidx;     // scratch: rows << nlog columns (uint)
    uint rows;
    uint n;
    uint kout;
    uint in_row;
    uint nlog;      // N = 2^nlog padded columns per row
    uint elog;      // MODE 0: E = 2^elog elements per workgroup
    uint klo;       // MODE 0: first and last stage (log2 k); MODE 1: the stage of a flip step
    uint khi;
    uint step;      // MODE 1: pair stride, 0 for the flip step
    uint flags;     // FROM_INPUT | TO_OUTPUT | DESCENDING
} p;

const uint WG = gl_WorkGroupSize.x;

KEY sort_key(KEY bits) {
#if KEY64
    KEY k = bits ^ 0x8000000000000000ul;
#else
    uint mag = bits & 0x7FFFFFFFu;
    if (mag > 0x7F800000u) bits = 0x7FC00000u;  // every NaN is one value, above +inf
    else if (mag == 0u) bits = 0u;               // -0.0 == 0.0
    KEY k = (bits & 0x80000000u) != 0u ? ~bits : (bits | 0x80000000u);
#endif
    return (p.flags & DESCENDING) != 0u ? ~k : k;
}

bool before(KEY ka, uint ia, KEY kb, uint ib) {
    return ka < kb || (ka == kb && ia < ib);
}

// the pair of step (stride s, or the flip step of k-blocks when flip) that pair number q owns
uvec2 pair_of(uint q, uint s, bool flip, uint k) {
    uint i = ((q & ~(s - 1u)) << 1) | (q & (s - 1u));
    return uvec2(i, flip ? (i ^ (k - 1u)) : (i + s));
}

#if MODE == 0
shared KEY sk[ELEMS];
shared uint si[ELEMS];

void exchange_step(uint E, uint s, bool flip, uint k) {
    for (uint q = gl_LocalInvocationID.x; q < E / 2u; q += WG) {
        uvec2 ij = pair_of(q, s, flip, k);
        KEY ka = sk[ij.x], kb = sk[ij.y];
        uint ia = si[ij.x], ib = si[ij.y];
        if (before(kb, ib, ka, ia)) {
            sk[ij.x] = kb; sk[ij.y] = ka;
            si[ij.x] = ib; si[ij.y] = ia;
        }
    }
    barrier();
}

void main() {
    const uint l = gl_LocalInvocationID.x;
    const uint E = 1u << p.elog;
    const uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    const uint base = group << p.elog;
    const uint colmask = (1u << p.nlog) - 1u;
    Keys src = Keys(p.in_);

    for (uint e = l; e < E; e += WG) {
        const uint f = base + e, row = f >> p.nlog, col = f & colmask;
        KEY k = PAD_KEY;
        uint c = col;
        if ((p.flags & FROM_INPUT) != 0u) {
            if (row < p.rows && col < p.n) k = sort_key(src.v[row * p.in_row + col]);
        } else {
            k = Keys(p.skey).v[f];
            c = Words(p.sidx).v[f];
        }
        sk[e] = k;
        si[e] = c;
    }
    barrier();

    for (uint kl = p.klo; kl <= p.khi; ++kl) {
        const uint k = 1u << kl;
        uint s = E >> 1;
        if (k <= E) {
            exchange_step(E, k >> 1, true, k);
            s = k >> 2;
        }
        for (; s > 0u; s >>= 1) exchange_step(E, s, false, k);
    }

    for (uint e = l; e < E; e += WG) {
        const uint f = base + e, row = f >> p.nlog, col = f & colmask;
        if ((p.flags & TO_OUTPUT) != 0u) {
            if (row < p.rows && col < p.kout) {
                const uint c = si[e], dst = row * p.kout + col;
                Keys(p.out_val).v[dst] = src.v[row * p.in_row + c];
                Words(p.out_idx).v[2u * dst] = c;
                Words(p.out_idx).v[2u * dst + 1u] = 0u;
            }
        } else {
            Keys(p.skey).v[f] = sk[e];
            Words(p.sidx).v[f] = si[e];
        }
    }
}

#else  // MODE 1
void main() {
    const uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    const uint q = group * WG + gl_LocalInvocationID.x;
    if (q >= (p.rows << p.nlog) >> 1) return;
    const uint k = 1u << p.klo;
    const bool flip = p.step == 0u;
    const uvec2 ij = pair_of(q, flip ? k >> 1 : p.step, flip, k);
    Keys key = Keys(p.skey);
    Words idx = Words(p.sidx);
    KEY ka = key.v[ij.x], kb = key.v[ij.y];
    uint ia = idx.v[ij.x], ib = idx.v[ij.y];
    if (before(kb, ib, ka, ia)) {
        key.v[ij.x] = kb; key.v[ij.y] = ka;
        idx.v[ij.x] = ib; idx.v[ij.y] = ia;
    }
}
#endif
