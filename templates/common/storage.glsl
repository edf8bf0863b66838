// Scalar storage of a template's DTYPE (common/dtypes.glsl codes): float32, float16 or bfloat16
// elements in buffers, float32 arithmetic. Needs only 16-bit storage (no 16-bit arithmetic), so
// every device with storageBuffer16BitAccess runs it. Include it before any declaration (it may
// enable an extension):
//   TVK_ST          the element type a buffer declares (float, float16_t, or uint16_t bf16 words)
//   TVK_ST_ALIGN    its size in bytes (buffer_reference_align)
//   TVK_LOAD(x)     an element as float
//   TVK_STORE(f)    a float as an element (fp16: the nearest; bf16: nearest even, NaN kept)
#ifndef TVK_STORAGE_GLSL
#define TVK_STORAGE_GLSL
#include "dtypes.glsl"
#ifndef DTYPE
#define DTYPE TVK_DT_FLOAT32
#endif
#if DTYPE == TVK_DT_FLOAT32
#define TVK_ST float
#define TVK_ST_ALIGN 4
#define TVK_LOAD(x) (x)
#define TVK_STORE(f) (f)
#elif DTYPE == TVK_DT_FLOAT16
#extension GL_EXT_shader_16bit_storage : require
#define TVK_ST float16_t
#define TVK_ST_ALIGN 2
#define TVK_LOAD(x) float(x)
#define TVK_STORE(f) float16_t(f)
#elif DTYPE == TVK_DT_BFLOAT16
#extension GL_EXT_shader_16bit_storage : require
#include "bf16.glsl"
#define TVK_ST uint16_t
#define TVK_ST_ALIGN 2
#define TVK_LOAD(x) tvk_bf16_float(uint(x))
#define TVK_STORE(f) uint16_t(tvk_bf16_bits(f))
#else
#error "common/storage.glsl: DTYPE must be float32, float16 or bfloat16"
#endif
#endif
