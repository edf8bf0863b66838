#version 450
// The whole recurrence of one LSTM / GRU layer direction in one dispatch (forward) and one
// (backward). Batch rows are independent, so each workgroup owns ROWS of them and runs every
// time step by itself: no sync between workgroups. Per step and row:
//   gates = proj[t, row] + h_prev @ W_hh^T (+ b_ih + b_hh), then the cell, in torch's orders:
//   LSTM i f g o: c = f*c_prev + i*g, h = o*tanh(c)
//   GRU  r z n:   n = tanh(in + b_in + r*(hn + b_hn)), h = n + z*(h_prev - n)
// KS invocations share a hidden unit's dot products (each a strided part of their length, summed
// in shared memory in a fixed order); the first of them, invocation `lid` < UPP = WG / KS, owns
// the units j = lid, lid + UPP, ... of all its workgroup's rows in both kernels: the state it
// alone reads and writes (c, the backward's carried grads) stays in global memory (its own
// writes, no barrier), the state all read (h_prev, the gate grads) in shared memory.
// A row b takes part in step t iff b < sizes[t] (packed sequences: the sequences still running);
// step t's rows start at row starts[t] of the packed proj / outputs.
//   KIND 0 LSTM, 1 GRU; DIRECTION 0 forward, 1 backward.
//   ROWS rows per workgroup, HC >= H (shared capacity per row and gate), KS (a power of two).
// Saved per packed row (forward writes, backward reads), S*H floats:
//   LSTM S = 7: i f g o (activated), h_prev, c_prev, c;  GRU S = 5: r z n h_prev hn (hn + b_hn).
// Buffers are addresses in the push-constant slots (meaning per direction: `main`). An absent
// optional buffer is a present one with its flag bit off: read only inside an `if`.
// Tunables: local size (specialization constant 0), ROWS; the host derives KS and HC from H.
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference_uvec2 : require
#extension GL_EXT_control_flow_attributes : require

layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;

layout(buffer_reference, std430, buffer_reference_align = 4) buffer Buf { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer IntBuf { uint v[]; };

layout(push_constant) uniform Params {
    uvec2 s[11];
    uint steps;  // T
    uint batch;  // B: rows of h0 / h_n
    uint hidden; // H
    uint flags;  // bit 0: biases given; bit 1: reverse direction; bit 2: packed (sizes / starts buffer)
} p;

#if KIND == 0
#define G 4u  // gates
#define S 7u  // saved floats per row and unit
#define HPREV 4u
#else
#define G 3u
#define S 5u
#define HPREV 3u
#endif

float sigmoid(float x) { return 1.0 / (1.0 + exp(-x)); }

// tanh that stays finite for large |x| (GLSL's tanh may overflow exp)
float tanh_(float x) {
    float e = exp(-2.0 * abs(x));
    return sign(x) * (1.0 - e) / (1.0 + e);
}

// the rows taking part in step t and the packed row of the step's first
void step_rows(uint t, out uint n, out uint start) {
    if ((p.flags & 4u) != 0u) {
        IntBuf sizes = IntBuf(p.s[10]);  // sizes[T], then starts[T]
        n = sizes.v[t];
        start = sizes.v[p.steps + t];
    } else {
        n = p.batch;
        start = t * p.batch;
    }
}

// the dot products' loads in flight per invocation: 16 a group (a define may override it, for A/B
// runs; 8 / 32 and 2 / 8 measured no better on the H200)
#ifndef UNROLL
#if DIRECTION == 0
#define UNROLL 4u  // times G gates
#else
#define UNROLL 16u
#endif
#endif

#if DIRECTION == 0
shared float sh_h[2u * ROWS * HC];  // per row: h_prev of this step, then h of the next
#if KS > 1
shared float sh_part[ROWS * G * gl_WorkGroupSize.x];  // the KS partial dot products of UPP units
#endif

// s: proj (N, G*H), w_t (H, G*H) = W_hh^T, b_ih, b_hh, h0 (B, H), c0, out (N, H), saved (N, S*H),
// h_n (B, H), c_n, sizes; LSTM only: c0, c_n. h_n / c_n hold each row's running state.
void main() {
    Buf proj = Buf(p.s[0]), wt = Buf(p.s[1]), bi = Buf(p.s[2]), bh = Buf(p.s[3]), h0 = Buf(p.s[4]);
    Buf c0 = Buf(p.s[5]), outs = Buf(p.s[6]), saved = Buf(p.s[7]), hn = Buf(p.s[8]), cn = Buf(p.s[9]);
    const uint H = p.hidden, GH = G * H, lid = gl_LocalInvocationID.x, upp = gl_WorkGroupSize.x / KS;
    const uint jj = lid % upp, kp = lid / upp;  // unit within a pass, part of the dot products
    const uint b0 = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * ROWS;
    const bool has_bias = (p.flags & 1u) != 0u, reverse = (p.flags & 2u) != 0u;
    if (kp == 0u) {
        for (uint j = jj; j < H; j += upp) {
            [[unroll]] for (uint r = 0u; r < ROWS; ++r) {
                const uint b = b0 + r;
                float h = 0.0;
                if (b < p.batch) {
                    h = h0.v[b * H + j];
                    hn.v[b * H + j] = h;
#if KIND == 0
                    cn.v[b * H + j] = c0.v[b * H + j];
#endif
                }
                sh_h[r * H + j] = h;
            }
        }
    }
    barrier();
    uint cur = 0u;  // which half of sh_h holds h_prev
    for (uint s = 0u; s < p.steps; ++s) {
        const uint t = reverse ? p.steps - 1u - s : s;
        uint n, start;
        step_rows(t, n, start);
        const uint hp = cur * ROWS * H, hnext = (1u - cur) * ROWS * H;
        for (uint j0 = 0u; j0 < H; j0 += upp) {  // the same trip count in every invocation: barriers inside
            const uint j = j0 + jj;
            float acc[ROWS][G];  // h_prev @ W_hh^T of unit j's gates, per row (this invocation's part)
            [[unroll]] for (uint r = 0u; r < ROWS; ++r)
                [[unroll]] for (uint g = 0u; g < G; ++g) acc[r][g] = 0.0;
            if (j < H) {
                uint k = kp;
                for (; k + (UNROLL - 1u) * KS < H; k += UNROLL * KS) {
                    float w[UNROLL][G];
                    [[unroll]] for (uint u = 0u; u < UNROLL; ++u)
                        [[unroll]] for (uint g = 0u; g < G; ++g) w[u][g] = wt.v[(k + u * KS) * GH + g * H + j];
                    [[unroll]] for (uint u = 0u; u < UNROLL; ++u)
                        [[unroll]] for (uint r = 0u; r < ROWS; ++r) {
                            const float x = sh_h[hp + r * H + k + u * KS];
                            [[unroll]] for (uint g = 0u; g < G; ++g) acc[r][g] += x * w[u][g];
                        }
                }
                for (; k < H; k += KS) {
                    float w[G];
                    [[unroll]] for (uint g = 0u; g < G; ++g) w[g] = wt.v[k * GH + g * H + j];
                    [[unroll]] for (uint r = 0u; r < ROWS; ++r) {
                        const float x = sh_h[hp + r * H + k];
                        [[unroll]] for (uint g = 0u; g < G; ++g) acc[r][g] += x * w[g];
                    }
                }
            }
#if KS > 1
            [[unroll]] for (uint r = 0u; r < ROWS; ++r)
                [[unroll]] for (uint g = 0u; g < G; ++g) sh_part[((kp * ROWS + r) * G + g) * upp + jj] = acc[r][g];
            barrier();
            if (kp == 0u) {
                for (uint q = 1u; q < KS; ++q)
                    [[unroll]] for (uint r = 0u; r < ROWS; ++r)
                        [[unroll]] for (uint g = 0u; g < G; ++g)
                            acc[r][g] += sh_part[((q * ROWS + r) * G + g) * upp + jj];
            }
#endif
            if (kp == 0u && j < H) {
                [[unroll]] for (uint r = 0u; r < ROWS; ++r) {
                    const uint b = b0 + r;
                    const float h_prev = sh_h[hp + r * H + j];
                    float h = h_prev;
                    if (b < n) {  // n <= B
                        const uint row = start + b, in0 = row * GH + j, sv = row * S * H + j;
                        float pre[G];
                        [[unroll]] for (uint g = 0u; g < G; ++g) pre[g] = proj.v[in0 + g * H];
                        if (has_bias) {
#if KIND == 0
                            [[unroll]] for (uint g = 0u; g < G; ++g) acc[r][g] += bi.v[g * H + j] + bh.v[g * H + j];
#else
                            pre[0] += bi.v[j]; pre[1] += bi.v[H + j]; pre[2] += bi.v[2u * H + j];
                            acc[r][0] += bh.v[j]; acc[r][1] += bh.v[H + j]; acc[r][2] += bh.v[2u * H + j];
#endif
                        }
#if KIND == 0
                        const float i = sigmoid(pre[0] + acc[r][0]), f = sigmoid(pre[1] + acc[r][1]);
                        const float gg = tanh_(pre[2] + acc[r][2]), o = sigmoid(pre[3] + acc[r][3]);
                        const float c_prev = cn.v[b * H + j];
                        const float c = f * c_prev + i * gg;
                        h = o * tanh_(c);
                        cn.v[b * H + j] = c;
                        saved.v[sv] = i;
                        saved.v[sv + H] = f;
                        saved.v[sv + 2u * H] = gg;
                        saved.v[sv + 3u * H] = o;
                        saved.v[sv + 5u * H] = c_prev;
                        saved.v[sv + 6u * H] = c;
#else
                        const float rr = sigmoid(pre[0] + acc[r][0]), z = sigmoid(pre[1] + acc[r][1]);
                        const float nn = tanh_(pre[2] + rr * acc[r][2]);
                        h = nn + z * (h_prev - nn);
                        saved.v[sv] = rr;
                        saved.v[sv + H] = z;
                        saved.v[sv + 2u * H] = nn;
                        saved.v[sv + 4u * H] = acc[r][2];
#endif
                        saved.v[sv + HPREV * H] = h_prev;
                        outs.v[row * H + j] = h;
                        hn.v[b * H + j] = h;
                    }
                    sh_h[hnext + r * H + j] = h;
                }
            }
#if KS > 1
            barrier();  // sh_part is written again by the next units
#endif
        }
        barrier();  // the next step reads every unit's h
        cur = 1u - cur;
    }
}

#else
shared float sh_g[ROWS * G * HC];  // per row: the step's grads of the hidden gates' pre-activations
#if KS > 1
shared float sh_part[ROWS * gl_WorkGroupSize.x];  // the KS partial dot products of UPP units
#endif

// s: d_out (N, H), w (G*H, H) = W_hh, saved (N, S*H), d_hn (B, H), d_cn, grad_in (N, G*H),
// grad_hidden (N, G*H), d_h0 (B, H), d_c0, (unused), sizes. LSTM: d_cn, d_c0; grad_hidden only
// GRU (LSTM's input and hidden gate grads are the same). d_h0 / d_c0 carry each row's grads of
// its state back through the steps.
void main() {
    Buf d_out = Buf(p.s[0]), w = Buf(p.s[1]), saved = Buf(p.s[2]), d_hn = Buf(p.s[3]), d_cn = Buf(p.s[4]);
    Buf g_in = Buf(p.s[5]), g_hid = Buf(p.s[6]), d_h0 = Buf(p.s[7]), d_c0 = Buf(p.s[8]);
    const uint H = p.hidden, GH = G * H, lid = gl_LocalInvocationID.x, upp = gl_WorkGroupSize.x / KS;
    const uint jj = lid % upp, kp = lid / upp;  // unit within a pass, part of the dot products
    const uint b0 = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * ROWS;
    const bool reverse = (p.flags & 2u) != 0u;
    if (kp == 0u) {
        for (uint j = jj; j < H; j += upp) {
            [[unroll]] for (uint r = 0u; r < ROWS; ++r) {
                const uint b = b0 + r;
                if (b < p.batch) {
                    d_h0.v[b * H + j] = d_hn.v[b * H + j];
#if KIND == 0
                    d_c0.v[b * H + j] = d_cn.v[b * H + j];
#endif
                }
            }
        }
    }
    for (uint s = 0u; s < p.steps; ++s) {
        const uint t = reverse ? s : p.steps - 1u - s;  // the forward's steps, last first
        uint n, start;
        step_rows(t, n, start);
        // the cell backward of unit j: gate grads, the grad of c_prev, GRU's direct grad of h_prev
        if (kp == 0u) {
            for (uint j = jj; j < H; j += upp) {
                [[unroll]] for (uint r = 0u; r < ROWS; ++r) {
                    const uint b = b0 + r;
                    if (b < n) {
                        const uint row = start + b, g0 = row * GH + j, sv = row * S * H + j, sg = r * GH + j;
                        const float gh = d_out.v[row * H + j] + d_h0.v[b * H + j];
#if KIND == 0
                        const float i = saved.v[sv], f = saved.v[sv + H], gg = saved.v[sv + 2u * H];
                        const float o = saved.v[sv + 3u * H], cx = saved.v[sv + 5u * H];
                        const float tc = tanh_(saved.v[sv + 6u * H]);
                        const float gc = d_c0.v[b * H + j] + gh * o * (1.0 - tc * tc);
                        const float gi = gc * gg * i * (1.0 - i), gf = gc * cx * f * (1.0 - f);
                        const float gg_ = gc * i * (1.0 - gg * gg), go = gh * tc * o * (1.0 - o);
                        g_in.v[g0] = gi;
                        g_in.v[g0 + H] = gf;
                        g_in.v[g0 + 2u * H] = gg_;
                        g_in.v[g0 + 3u * H] = go;
                        sh_g[sg] = gi;
                        sh_g[sg + H] = gf;
                        sh_g[sg + 2u * H] = gg_;
                        sh_g[sg + 3u * H] = go;
                        d_c0.v[b * H + j] = gc * f;
#else
                        const float rr = saved.v[sv], z = saved.v[sv + H], nn = saved.v[sv + 2u * H];
                        const float h = saved.v[sv + 3u * H], hn = saved.v[sv + 4u * H];
                        const float gz = gh * (h - nn) * z * (1.0 - z);
                        const float gn = gh * (1.0 - z) * (1.0 - nn * nn);
                        const float gr = gn * hn * rr * (1.0 - rr);
                        g_in.v[g0] = gr;
                        g_in.v[g0 + H] = gz;
                        g_in.v[g0 + 2u * H] = gn;
                        g_hid.v[g0] = gr;
                        g_hid.v[g0 + H] = gz;
                        g_hid.v[g0 + 2u * H] = gn * rr;
                        sh_g[sg] = gr;
                        sh_g[sg + H] = gz;
                        sh_g[sg + 2u * H] = gn * rr;
                        d_h0.v[b * H + j] = gh * z;
#endif
                    }
                }
            }
        }
        barrier();  // every gate grad of the step is in sh_g
        // the grad of h_prev: the hidden gate grads @ W_hh (+ GRU's direct grad, already in d_h0)
        for (uint k0 = 0u; k0 < H; k0 += upp) {  // the same trip count in every invocation: barriers inside
            const uint k = k0 + jj;
            float acc[ROWS];
            [[unroll]] for (uint r = 0u; r < ROWS; ++r) acc[r] = 0.0;
            if (k < H) {
                uint m = kp;
                for (; m + (UNROLL - 1u) * KS < GH; m += UNROLL * KS) {
                    float x[UNROLL];
                    [[unroll]] for (uint u = 0u; u < UNROLL; ++u) x[u] = w.v[(m + u * KS) * H + k];
                    [[unroll]] for (uint u = 0u; u < UNROLL; ++u)
                        [[unroll]] for (uint r = 0u; r < ROWS; ++r) acc[r] += sh_g[r * GH + m + u * KS] * x[u];
                }
                for (; m < GH; m += KS) {
                    const float x = w.v[m * H + k];
                    [[unroll]] for (uint r = 0u; r < ROWS; ++r) acc[r] += sh_g[r * GH + m] * x;
                }
            }
#if KS > 1
            [[unroll]] for (uint r = 0u; r < ROWS; ++r) sh_part[(kp * ROWS + r) * upp + jj] = acc[r];
            barrier();
            if (kp == 0u) {
                for (uint q = 1u; q < KS; ++q)
                    [[unroll]] for (uint r = 0u; r < ROWS; ++r) acc[r] += sh_part[(q * ROWS + r) * upp + jj];
            }
#endif
            if (kp == 0u && k < H) {
                [[unroll]] for (uint r = 0u; r < ROWS; ++r) {
                    const uint b = b0 + r;
                    if (b < n) {
#if KIND == 0
                        d_h0.v[b * H + k] = acc[r];
#else
                        d_h0.v[b * H + k] += acc[r];
#endif
                    }
                }
            }
#if KS > 1
            barrier();  // sh_part is written again by the next units
#endif
        }
        barrier();  // sh_g is read before the next step writes it
    }
}
#endif
