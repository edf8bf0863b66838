// Activations: the GLSL helpers of the expressions in tvk_kernels/kernels/activations.py (the one
// table of activations), and activation(x) for the GEMM and convolution epilogues.
// ACT (a define from the host, absent: none): the epilogue's activation as a GLSL expression in x.
#ifndef TVK_ACTIVATION_GLSL
#define TVK_ACTIVATION_GLSL
#include "erf.glsl"

float tvk_relu6(float x) { return isnan(x) ? x : (x <= 0.0 ? 0.0 : (x >= 6.0 ? 6.0 : x)); }  // a min/max would drop nan
float tvk_gelu_tanh(float x) {
    float inner = 0.7978845608028654 * (x + 0.044715 * x * x * x);
    return 0.5 * x * (1.0 + tvk_tanh(inner));
}

// derivatives (torch's CPU formulas), for the backward ops
float tvk_gelu_grad(float x) {  // d/dx x*Phi(x) = Phi(x) + x*phi(x)
    return tvk_ncdf(x) + x * 0.3989422804014327 * exp(-0.5 * x * x);
}
float tvk_gelu_tanh_grad(float x) {
    const float k = 0.7978845608028654, kappa = 0.044715;
    float t = tvk_tanh(k * (x + kappa * x * x * x));
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * kappa * x * x);
}
float tvk_silu_grad(float x) {
    float s = tvk_sigmoid(x);
    return s * (1.0 + x * (1.0 - s));
}
float tvk_mish_grad(float x) {
    float s = 1.0 / (1.0 + exp(-x));
    float t = tvk_tanh(tvk_log1p(exp(x)));
    return t + x * s * (1.0 - t * t);
}
float tvk_log_sigmoid_grad(float x) {
    float z = exp(-abs(x));
    return x < 0.0 ? 1.0 - z / (1.0 + z) : z / (1.0 + z);
}

#ifdef ACT
float activation(float x) { return float(ACT); }
#else
float activation(float x) { return x; }
#endif
#endif
