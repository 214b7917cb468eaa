/* SPDX-License-Identifier: MIT */
/* kernel_scalar.c: the scalar instance of the kernel (opt/kernel_body.h over simd_scalar.h). */
#include "opt/simd_scalar.h"
#define ISA_NAME "scalar"
#include "opt/kernel_body.h"
#include "opt/backward_body.h"
