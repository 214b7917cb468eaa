/* SPDX-License-Identifier: MIT */
/* tiles_avx2.c: bench/tiles_body.h over the AVX2 instance of the kernel body, under its
 * own names (bt_*_avx2) so that it does not clash with the library's instance. */
#include "opt/simd_avx2.h"
#undef ISA_SUFFIX
#define ISA_SUFFIX(name) bt_##name##_avx2
#define ISA_NAME "avx2"
#include "opt/kernel_body.h"
#define BT_ENTRY bench_tiles_avx2
#include "bench/tiles_body.h"
