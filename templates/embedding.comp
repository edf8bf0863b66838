#version 450
// Embedding lookup (gather) and its deterministic backward (race-free scatter-add).
//
// MODE 0  forward:   out[i, :] = weight[idx[i], :]            (zeros for an index outside [0, V))
// MODE 1  backward, small n: one workgroup per index position i; the first position holding a
//         row v sums grad_out over every later position holding v (in increasing order, in
//         chunks: below) and adds the sum into grad_weight[v, :]. Cost O(n^2 + n*D); no atomics,
//         deterministic.
// MODE 2  backward, large n, step 1: sort keys key[i] = (v << 32) | i, padded to N = 2^k with ~0.
// MODE 3  bitonic sort of every 2*WG-key block in shared memory (all stages k <= 2*WG).
// MODE 4  one global bitonic compare-exchange step (k, j) with j >= 2*WG.
// MODE 5  bitonic merge of every 2*WG-key block for stage k (all j < 2*WG).
// MODE 6  segmented sum over the sorted keys, in parallel over chunks: the first position of each
//         chunk of a row's run sums the chunk; a run of one chunk is added to grad_weight at once,
//         a longer run's chunk sums go to the partials buffer (slot 2 (pos / CHUNK) + [pos is the
//         run's start]: the chunks of runs longer than CHUNK never share a slot).
// MODE 8  the runs longer than CHUNK: the run's first position adds its chunk sums in order.
// Every strategy sums a row's occurrences in increasing position, in chunks of CHUNK (a sum each,
// from 0), then the chunk sums from the first: the same order, so every strategy gives identical
// bits, and no invocation walks a long run alone (a BERT's token types: one row, every position).
// MODE 7  zero grad_weight[V, D] (row stride ws).
// Rows equal to padding_idx (p.pad, -1 = none) and indices outside [0, V) get no gradient.
// Tunables (specialization constants): local size (0), WG (3: the local size again, for the shared
// arrays), ITEMS (4: forward vectors per thread). VEC (forward vector width) stays a define: it
// picks the vector type.
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference_uvec2 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#extension GL_EXT_control_flow_attributes : enable

layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;

#ifndef MODE
#define MODE 0
#endif
layout(constant_id = 3) const uint WG = 64u;
#ifndef VEC
#define VEC 1
#endif
layout(constant_id = 4) const uint ITEMS = 1u;

#if VEC == 4
#define VTYPE vec4
#elif VEC == 2
#define VTYPE vec2
#else
#define VTYPE float
#endif

layout(buffer_reference, std430, buffer_reference_align = 16) buffer VBuf { VTYPE v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer FBuf { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 8) buffer IBuf { int64_t v[]; };
layout(buffer_reference, std430, buffer_reference_align = 8) buffer KBuf { uint64_t v[]; };

layout(push_constant) uniform Params {
    uvec2 a;     // weight (fwd) / grad_out (bwd)
    uvec2 idx;   // int64 indices [n]
    uvec2 c;     // out (fwd) / grad_weight (bwd)
    uvec2 keys;  // uint64 sort keys [N] (sort path)
    uvec2 parts; // float32 chunk sums [2 ceil(n / CHUNK), D] (sort path, runs longer than CHUNK)
    uint n;      // number of indices
    uint D;      // embedding dim
    uint V;      // number of rows
    uint ws;     // row stride of weight / grad_weight, in elements
    int pad;     // padding_idx, -1 = none
    uint k;      // bitonic stage size
    uint j;      // bitonic step distance
    uint N;      // padded key count (power of two)
    uint chunk;  // occurrences of a row summed apart before their sums are added (backward)
} p;
#define CHUNK p.chunk

const uint64_t NONE = 0xFFFFFFFFFFFFFFFFUL;

uint group_id() { return gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x; }

bool valid_row(int64_t v) {
    return v >= 0 && v < int64_t(p.V) && v != int64_t(p.pad);
}

#if MODE == 6 || MODE == 8
layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer SortedKeys { uint64_t v[]; };

uint row_of(SortedKeys kb, uint pos) { return uint(kb.v[pos] >> 32); }

// the first position of the run of row v that holds `pos` (keys sorted by row, then position)
uint run_start(SortedKeys kb, uint pos, uint v) {
    uint lo = 0u, hi = pos;
    while (lo < hi) {
        uint mid = (lo + hi) >> 1;
        if (row_of(kb, mid) < v) lo = mid + 1u; else hi = mid;
    }
    return lo;
}

// whether the run starting at `start` holds more than CHUNK positions
bool long_run(SortedKeys kb, uint start, uint v) {
    return start + CHUNK < p.n && row_of(kb, start + CHUNK) == v;
}

uint slot(uint pos, bool is_start) { return 2u * (pos / CHUNK) + (is_start ? 1u : 0u); }
#endif

#if MODE == 3 || MODE == 5
shared uint64_t sk[2 * WG];

void compare_local(uint i, uint j, uint k, uint gbase) {
    uint l = i + j;
    uint64_t x = sk[i], y = sk[l];
    bool asc = ((gbase + i) & k) == 0u;
    if ((x > y) == asc) { sk[i] = y; sk[l] = x; }
}
#endif

void main() {
    const uint lid = gl_LocalInvocationID.x;
    const uint group = group_id();

#if MODE == 0
    const uint dv = p.D / VEC;
    const uint total = p.n * dv;
    const uint wsv = p.ws / VEC;
    VBuf w = VBuf(p.a), o = VBuf(p.c);
    IBuf ix = IBuf(p.idx);
    [[unroll]] for (uint it = 0; it < ITEMS; ++it) {
        uint e = group * WG * ITEMS + it * WG + lid;
        if (e < total) {
            uint row = e / dv, col = e - row * dv;
            int64_t v = ix.v[row];
            VTYPE val = VTYPE(0.0);
            if (v >= 0 && v < int64_t(p.V)) val = w.v[uint(v) * wsv + col];
            o.v[e] = val;
        }
    }

#elif MODE == 1
    const uint i = group;
    if (i >= p.n) return;
    IBuf ix = IBuf(p.idx);
    const int64_t v = ix.v[i];
    if (!valid_row(v)) return;
    for (uint q = 0; q < i; ++q)
        if (ix.v[q] == v) return;  // an earlier position owns this row
    FBuf g = FBuf(p.a), gw = FBuf(p.c);
    const uint rowbase = uint(v) * p.ws;
    for (uint d = lid; d < p.D; d += WG) {
        float total = 0.0, part = 0.0;
        uint count = 0u;
        for (uint q = i; q < p.n; ++q) {
            if (ix.v[q] != v) continue;
            part += g.v[q * p.D + d];
            if (++count % CHUNK == 0u) {  // a chunk's sum joins the total (the first is the total)
                total = count == CHUNK ? part : total + part;
                part = 0.0;
            }
        }
        if (count % CHUNK != 0u) total = count < CHUNK ? part : total + part;
        gw.v[rowbase + d] += total;
    }

#elif MODE == 2
    const uint i = group * WG + lid;
    if (i >= p.N) return;
    uint64_t key = NONE;
    if (i < p.n) {
        int64_t v = IBuf(p.idx).v[i];
        if (valid_row(v)) key = (uint64_t(v) << 32) | uint64_t(i);
    }
    KBuf(p.keys).v[i] = key;

#elif MODE == 3 || MODE == 5
    const uint B = 2u * WG;
    const uint gbase = group * B;
    KBuf kb = KBuf(p.keys);
    sk[lid] = kb.v[gbase + lid];
    sk[lid + WG] = kb.v[gbase + lid + WG];
#if MODE == 3
    for (uint k = 2u; k <= B; k <<= 1) {
        for (uint j = k >> 1; j > 0u; j >>= 1) {
            barrier();
            uint i = ((lid & ~(j - 1u)) << 1) | (lid & (j - 1u));
            compare_local(i, j, k, gbase);
        }
    }
#else
    for (uint j = min(p.k >> 1, WG); j > 0u; j >>= 1) {
        barrier();
        uint i = ((lid & ~(j - 1u)) << 1) | (lid & (j - 1u));
        compare_local(i, j, p.k, gbase);
    }
#endif
    barrier();
    kb.v[gbase + lid] = sk[lid];
    kb.v[gbase + lid + WG] = sk[lid + WG];

#elif MODE == 4
    const uint t = group * WG + lid;
    if (t >= (p.N >> 1)) return;
    const uint j = p.j;
    const uint i = ((t & ~(j - 1u)) << 1) | (t & (j - 1u));
    const uint l = i + j;
    KBuf kb = KBuf(p.keys);
    uint64_t x = kb.v[i], y = kb.v[l];
    bool asc = (i & p.k) == 0u;
    if ((x > y) == asc) { kb.v[i] = y; kb.v[l] = x; }

#elif MODE == 6
    const uint pos = group;
    if (pos >= p.n) return;
    SortedKeys kb = SortedKeys(p.keys);
    const uint64_t key = kb.v[pos];
    if (key == NONE) return;
    const uint v = uint(key >> 32);
    const uint start = (pos > 0u && row_of(kb, pos - 1u) == v) ? run_start(kb, pos, v) : pos;
    if ((pos - start) % CHUNK != 0u) return;  // not the first position of a chunk of its run
    FBuf g = FBuf(p.a);
    const bool whole = pos == start && !long_run(kb, start, v);
    const uint to = slot(pos, pos == start) * p.D;
    for (uint d = lid; d < p.D; d += WG) {
        float part = 0.0;
        for (uint q = pos; q < min(pos + CHUNK, p.n); ++q) {
            uint64_t kq = kb.v[q];
            if (uint(kq >> 32) != v) break;
            part += g.v[uint(kq & 0xFFFFFFFFUL) * p.D + d];
        }
        if (whole) FBuf(p.c).v[v * p.ws + d] += part;
        else FBuf(p.parts).v[to + d] = part;
    }

#elif MODE == 8
    const uint pos = group;
    if (pos >= p.n) return;
    SortedKeys kb = SortedKeys(p.keys);
    const uint64_t key = kb.v[pos];
    if (key == NONE) return;
    const uint v = uint(key >> 32);
    if ((pos > 0u && row_of(kb, pos - 1u) == v) || !long_run(kb, pos, v)) return;  // not a long run's start
    FBuf parts = FBuf(p.parts);
    for (uint d = lid; d < p.D; d += WG) {
        float total = parts.v[slot(pos, true) * p.D + d];
        for (uint q = pos + CHUNK; q < p.n && row_of(kb, q) == v; q += CHUNK)
            total += parts.v[slot(q, false) * p.D + d];
        FBuf(p.c).v[v * p.ws + d] += total;
    }

#elif MODE == 7
    const uint e = group * WG + lid;
    if (e >= p.V * p.D) return;
    uint row = e / p.D, col = e - row * p.D;
    FBuf(p.c).v[row * p.ws + col] = 0.0;
#endif
}
