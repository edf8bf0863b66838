// bfloat16 kept as raw 16-bit words, the high half of a float32, so no bf16 arithmetic is needed:
// a load shifts the bits up; a store rounds to nearest even, and a NaN stays a (quiet) NaN.
// TVK_BF16_WORD: the type tvk_bf16_bits returns the word as: uint (the default), or uint16_t where
// GL_EXT_shader_explicit_arithmetic_types_int16 makes that a value type.
#ifndef TVK_BF16_GLSL
#define TVK_BF16_GLSL
#ifndef TVK_BF16_WORD
#define TVK_BF16_WORD uint
#endif
float tvk_bf16_float(uint bits) { return uintBitsToFloat(bits << 16); }
vec2 tvk_bf16_float(uvec2 bits) { return uintBitsToFloat(bits << 16); }
vec3 tvk_bf16_float(uvec3 bits) { return uintBitsToFloat(bits << 16); }
vec4 tvk_bf16_float(uvec4 bits) { return uintBitsToFloat(bits << 16); }

TVK_BF16_WORD tvk_bf16_bits(float f) {
    uint u = floatBitsToUint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return TVK_BF16_WORD((u >> 16) | 0x40u);  // NaN, even where isnan is not kept
    u += 0x7fffu + ((u >> 16) & 1u);
    return TVK_BF16_WORD(u >> 16);
}
uvec2 tvk_bf16_bits(vec2 f) { return uvec2(tvk_bf16_bits(f.x), tvk_bf16_bits(f.y)); }
uvec3 tvk_bf16_bits(vec3 f) { return uvec3(tvk_bf16_bits(f.x), tvk_bf16_bits(f.y), tvk_bf16_bits(f.z)); }
uvec4 tvk_bf16_bits(vec4 f) { return uvec4(tvk_bf16_bits(f.xy), tvk_bf16_bits(f.zw)); }
#endif
