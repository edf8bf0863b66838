#version 450
// The gate math of one LSTM or GRU time step, fused (torch's _thnn_fused_{lstm,gru}_cell and
// their backwards): the matmuls that make the gate pre-activations run before, on the matmul
// kernels. One invocation per (batch row b, hidden unit j); all tensors contiguous float32.
//   CELL 0  LSTM forward   gates = ig + hg (+ bi + bh), order i f g o (H columns each):
//           ws = (sigmoid i, sigmoid f, tanh g, sigmoid o); cy = f*cx + i*g; hy = o*tanh(cy)
//   CELL 1  LSTM backward  from grad_hy, grad_cy (either may be absent), cx, cy, ws:
//           grad of the 4 pre-activations (B, 4H) and grad_cx
//   CELL 2  GRU forward    order r z n: r = sig(ir+hr), z = sig(iz+hz), hn = hg_n (+ bh_n),
//           n = tanh(in + r*hn), hy = n + z*(hx - n); ws = (r, z, n, hx, hn) (B, 5H)
//   CELL 3  GRU backward   from grad_hy and ws: grad of input gates, hidden gates (B, 3H), hx
// Buffers are addresses in the 8 push-constant slots; their meaning per CELL is in `main`.
// An absent optional buffer is address 0: read only inside an `if` (a `?:` may become a select
// that loads both sides).
// Tunables: local size (specialization constant 0).
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference_uvec2 : require

layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;

layout(buffer_reference, std430, buffer_reference_align = 4) buffer Buf { float v[]; };

layout(push_constant) uniform Params {
    uvec2 s[8];
    uint rows;   // batch
    uint hidden; // H
    uint flags;  // bit 0: biases given (forward) / grad_hy given (LSTM backward); bit 1: grad_cy given
} p;

float sigmoid(float x) { return 1.0 / (1.0 + exp(-x)); }

// tanh that stays finite for large |x| (GLSL's tanh may overflow exp)
float tanh_(float x) {
    float e = exp(-2.0 * abs(x));
    return sign(x) * (1.0 - e) / (1.0 + e);
}

void main() {
    const uint id = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * gl_WorkGroupSize.x
                    + gl_LocalInvocationID.x;
    const uint H = p.hidden;
    if (id >= p.rows * H) return;
    const uint b = id / H, j = id - b * H;
    const bool has_bias = (p.flags & 1u) != 0u;
#if CELL == 0
    // s: ig, hg, cx, bi, bh, hy, cy, ws
    Buf ig = Buf(p.s[0]), hg = Buf(p.s[1]), cx = Buf(p.s[2]), bi = Buf(p.s[3]), bh = Buf(p.s[4]);
    Buf hy = Buf(p.s[5]), cy = Buf(p.s[6]), ws = Buf(p.s[7]);
    const uint g0 = b * 4u * H + j;
    float pre[4];
    for (uint k = 0u; k < 4u; ++k) {
        uint g = g0 + k * H;
        pre[k] = ig.v[g] + hg.v[g];
        if (has_bias) pre[k] += bi.v[k * H + j] + bh.v[k * H + j];
    }
    float i = sigmoid(pre[0]), f = sigmoid(pre[1]), gg = tanh_(pre[2]), o = sigmoid(pre[3]);
    float c = f * cx.v[id] + i * gg;
    cy.v[id] = c;
    hy.v[id] = o * tanh_(c);
    ws.v[g0] = i;
    ws.v[g0 + H] = f;
    ws.v[g0 + 2u * H] = gg;
    ws.v[g0 + 3u * H] = o;
#elif CELL == 1
    // s: grad_hy, grad_cy, cx, cy, ws, grad_gates, grad_cx
    Buf ghy = Buf(p.s[0]), gcy = Buf(p.s[1]), cx = Buf(p.s[2]), cy = Buf(p.s[3]), ws = Buf(p.s[4]);
    Buf gg_ = Buf(p.s[5]), gcx = Buf(p.s[6]);
    const uint g0 = b * 4u * H + j;
    float i = ws.v[g0], f = ws.v[g0 + H], gg = ws.v[g0 + 2u * H], o = ws.v[g0 + 3u * H];
    float gh = 0.0, gc = 0.0;
    if ((p.flags & 1u) != 0u) gh = ghy.v[id];
    if ((p.flags & 2u) != 0u) gc = gcy.v[id];
    float tc = tanh_(cy.v[id]);
    float go = gh * tc;
    gc += gh * o * (1.0 - tc * tc);
    gg_.v[g0] = gc * gg * i * (1.0 - i);
    gg_.v[g0 + H] = gc * cx.v[id] * f * (1.0 - f);
    gg_.v[g0 + 2u * H] = gc * i * (1.0 - gg * gg);
    gg_.v[g0 + 3u * H] = go * o * (1.0 - o);
    gcx.v[id] = gc * f;
#elif CELL == 2
    // s: ig, hg, hx, bi, bh, hy, ws
    Buf ig = Buf(p.s[0]), hg = Buf(p.s[1]), hx = Buf(p.s[2]), bi = Buf(p.s[3]), bh = Buf(p.s[4]);
    Buf hy = Buf(p.s[5]), ws = Buf(p.s[6]);
    const uint g0 = b * 3u * H + j;
    float ir = ig.v[g0], iz = ig.v[g0 + H], in_ = ig.v[g0 + 2u * H];
    float hr = hg.v[g0], hz = hg.v[g0 + H], hn = hg.v[g0 + 2u * H];
    if (has_bias) {
        ir += bi.v[j]; iz += bi.v[H + j]; in_ += bi.v[2u * H + j];
        hr += bh.v[j]; hz += bh.v[H + j]; hn += bh.v[2u * H + j];
    }
    float r = sigmoid(ir + hr), z = sigmoid(iz + hz);
    float n = tanh_(in_ + r * hn);
    float h = hx.v[id];
    hy.v[id] = n + z * (h - n);
    const uint w0 = b * 5u * H + j;
    ws.v[w0] = r;
    ws.v[w0 + H] = z;
    ws.v[w0 + 2u * H] = n;
    ws.v[w0 + 3u * H] = h;
    ws.v[w0 + 4u * H] = hn;
#elif CELL == 3
    // s: grad_hy, ws, grad_input_gates, grad_hidden_gates, grad_hx
    Buf ghy = Buf(p.s[0]), ws = Buf(p.s[1]), gig = Buf(p.s[2]), ghg = Buf(p.s[3]), ghx = Buf(p.s[4]);
    const uint w0 = b * 5u * H + j, g0 = b * 3u * H + j;
    float r = ws.v[w0], z = ws.v[w0 + H], n = ws.v[w0 + 2u * H], h = ws.v[w0 + 3u * H], hn = ws.v[w0 + 4u * H];
    float gh = ghy.v[id];
    float gz = gh * (h - n) * z * (1.0 - z);
    float gn = gh * (1.0 - z) * (1.0 - n * n);
    float gr = gn * hn * r * (1.0 - r);
    gig.v[g0] = gr;
    gig.v[g0 + H] = gz;
    gig.v[g0 + 2u * H] = gn;
    ghg.v[g0] = gr;
    ghg.v[g0 + H] = gz;
    ghg.v[g0 + 2u * H] = gn * r;
    ghx.v[id] = gh * z;
#endif
}
