// Storage dtype codes, one table for every template (DTYPE, DT, DT0.., IN_F16 defines).
// Mirrors tvk_kernels/kernels/dtypes.py (tests/test_activation_table.py checks the two agree).
#ifndef TVK_DTYPES_GLSL
#define TVK_DTYPES_GLSL
#define TVK_DT_FLOAT32 0
#define TVK_DT_FLOAT16 1
#define TVK_DT_INT64 2
#define TVK_DT_INT32 3
#define TVK_DT_BOOL 4
#define TVK_DT_BFLOAT16 5
#define TVK_DT_UINT8 6
#define TVK_DT_INT8 7
#define TVK_DT_INT16 8
#endif
