/* SPDX-License-Identifier: MIT */
/* kernel_avx2.c: the avx2 instance of the kernel (opt/kernel_body.h over simd_avx2.h). */
#include "opt/simd_avx2.h"
#define ISA_NAME "avx2"
#include "opt/kernel_body.h"
#include "opt/backward_body.h"
