/* SPDX-License-Identifier: MIT */
/* tiles_avx512.c: bench/tiles_body.h over the AVX-512 instance of the kernel body, under
 * its own names (bt_*_avx512) so that it does not clash with the library's instance. */
#include "opt/simd_avx512.h"
#undef ISA_SUFFIX
#define ISA_SUFFIX(name) bt_##name##_avx512
#define ISA_NAME "avx512"
#include "opt/kernel_body.h"
#define BT_ENTRY bench_tiles_avx512
#include "bench/tiles_body.h"
