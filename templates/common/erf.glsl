// The error function and the standard normal CDF: the one erf of every template (GELU included).
#ifndef TVK_ERF_GLSL
#define TVK_ERF_GLSL
#include "math.glsl"
#define TVK_2_SQRTPI 1.12837916709551257390   // 2 / sqrt(pi)

// erfc(z) for z >= 0: Chebyshev-fitted form, fractional error < 1.2e-7 for all z >= 0.
float tvk_erfc_pos(float z) {
    float t = 1.0 / (1.0 + 0.5 * z);
    float r = -1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (-0.18628806
            + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277))))))));
    return t * exp(r - z * z);
}
// erf: its series below 0.5 (relative accuracy where erf is small), 1 - erfc above
float tvk_erf(float x) {
    if (abs(x) < 0.5) {
        float z = x * x;
        return x * (1.1283791670955126 + z * (-0.37612638903183754 + z * (0.11283791670955126
                + z * (-0.026866170645131252 + z * (0.005223977625442188 + z * (-0.0008548327023450852
                + z * (0.00012055332981789664 + z * -1.492565035840625e-05)))))));
    }
    float r = 1.0 - tvk_erfc_pos(abs(x));
    return tvk_copysign(r, x);
}
float tvk_erfc(float x) {
    return x < 0.5 ? 1.0 - tvk_erf(x) : tvk_erfc_pos(x);
}
// standard normal CDF, accurate in both tails
float tvk_ncdf(float x) {
    float h = 0.5 * tvk_erfc_pos(abs(x) * 0.70710678118654752);
    return x >= 0.0 ? 1.0 - h : h;
}
#endif
