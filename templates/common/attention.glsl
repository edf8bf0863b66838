// Attention's shared parts (templates/attention.comp, attention_coopmat.comp): buffers, push constants,
// the geometry buffer of strides, dropout's Philox and the masked score. The including template defines
// STYPE, ESIZE (storage type and bytes), MASK and CAUSAL first, and enables 8-bit storage for MASK 1.
#ifndef TVK_ATTENTION_GLSL
#define TVK_ATTENTION_GLSL
#define NEG_INF (-uintBitsToFloat(0x7F800000u))

layout(buffer_reference, std430, buffer_reference_align = ESIZE) buffer SBuf { STYPE v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer FBuf { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 8) buffer RngBuf { uvec2 seed; uvec2 offset; };
layout(buffer_reference, std430, buffer_reference_align = 8) buffer U64Buf { uvec2 v; };
#if MASK == 1
layout(buffer_reference, std430, buffer_reference_align = 1) readonly buffer MBuf { uint8_t v[]; };
#endif

layout(push_constant) uniform Params {
    uvec2 q, k, v;
    uvec2 o;       // forward: O (written); preprocess: O; dQ, dK/dV: dO
    uvec2 lse;     // float32 [B, Hq, Lq]
    uvec2 mask;    // MASK != 0
    uvec2 rng;     // forward: seed, or with SEED_BUF the {seed, offset} address; backward: the forward's rng_out
    uvec2 x0;      // forward: where its seed goes (int64); preprocess: dO; dQ: dQ; dK/dV: dK
    uvec2 x1;      // forward: the offset (a value); preprocess, dQ, dK/dV: delta
    uvec2 x2;      // forward: where its offset goes (int64); dQ: dS (float32 [B, Hq, Lq, Lk], or 0); dK/dV: dV
    uint lq, lk, d, hq, group;  // preprocess: lq = every row (B * Hq * Lq), lk = Lq
    float scale, p;
    uvec2 geo;  // GeoBuf
} p;

// the mask's strides over [B, Hq, Lq, Lk] (0: broadcast), then (batch, head, row) strides in elements
// of each tensor: Q 0, K 1, V 2, O 3, dO 4, dQ 5, dK 6, dV 7
layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer GeoBuf { uint ms[4]; uint s[24]; };
#define SQ 0
#define SK 1
#define SV 2
#define SO 3
#define SDO 4
#define SDQ 5
#define SDK 6
#define SDV 7
// the element offset of row `row` of (b, h) in tensor `slot`
#define AT(G, slot, b, h, row) ((b) * G.s[3 * (slot)] + (h) * G.s[3 * (slot) + 1] + (row) * G.s[3 * (slot) + 2])

// ---------------------------------------------------------------- dropout (elementwise_rng.comp)
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

// 1 / (1 - p) for a kept score, 0 for a dropped one
float keep_scale(uint n, uvec2 seed, uvec2 offset) {
    uvec4 r = philox(uvec4(n >> 2, 0u, offset.x, offset.y), seed);
    float u = float(r[n & 3u] >> 8) * (1.0 / 16777216.0);
    return u >= p.p ? 1.0 / (1.0 - p.p) : 0.0;
}

// ---------------------------------------------------------------- scores
// the masked score of (b, h, i, j) from its dot product (q already scaled); -inf where masked
float masked(float s, uint b, uint h, uint i, uint j) {
    if (i >= p.lq || j >= p.lk) return NEG_INF;
#if CAUSAL
    if (j > i) return NEG_INF;
#endif
#if MASK != 0
    GeoBuf G = GeoBuf(p.geo);
    uint mi = b * G.ms[0] + h * G.ms[1] + i * G.ms[2] + j * G.ms[3];
#if MASK == 1
    if (uint(MBuf(p.mask).v[mi]) == 0u) return NEG_INF;
#else
    s += float(SBuf(p.mask).v[mi]);
#endif
#endif
    return s;
}
#endif
