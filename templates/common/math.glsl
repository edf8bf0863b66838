// Float helpers shared by the templates, with torch's CPU edge values (inf, nan, signed zeros).
#ifndef TVK_MATH_GLSL
#define TVK_MATH_GLSL
#define TVK_INF uintBitsToFloat(0x7f800000u)
#define TVK_NAN uintBitsToFloat(0x7fc00000u)

float tvk_copysign(float x, float s) {
    return uintBitsToFloat((floatBitsToUint(x) & 0x7fffffffu) | (floatBitsToUint(s) & 0x80000000u));
}

// log(1 + x) without cancellation near 0: a series there, the plain form elsewhere
float tvk_log1p(float x) {
    if (x > -0.3 && x < 0.5) {
        float s = x / (2.0 + x), s2 = s * s;  // log1p(x) = 2 atanh(s)
        return 2.0 * s * (1.0 + s2 * (1.0 / 3.0 + s2 * (1.0 / 5.0 + s2 * (1.0 / 7.0 + s2 * (1.0 / 9.0
                + s2 * (1.0 / 11.0 + s2 * (1.0 / 13.0)))))));
    }
    return log(1.0 + x);
}

float tvk_sigmoid(float x) { return 1.0 / (1.0 + exp(-x)); }
float tvk_tanh(float x) { return abs(x) > 15.0 ? sign(x) : tanh(x); }  // no inf/inf for large |x|
#endif
