/* SPDX-License-Identifier: MIT */
/* kernel_avx512.c: the avx512 instance of the kernel (opt/kernel_body.h over simd_avx512.h). */
#include "opt/simd_avx512.h"
#define ISA_NAME "avx512"
#include "opt/kernel_body.h"
#include "opt/backward_body.h"
