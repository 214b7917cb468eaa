/* dispatch_clang.c: opt/dispatch.c for the clang fuzz build only. clang 14 rejects
 * __builtin_cpu_supports("f16c") ("invalid cpu feature string"), so every feature query
 * goes through fuzz_cpu_supports, which answers f16c from cpuid and the rest with the
 * builtin; the library's dispatch is then included unchanged. Reported as a library
 * portability bug (fuzz/README.md). */
#include <cpuid.h>
#include <string.h>

static int fuzz_cpu_supports(const char *s)
{
    unsigned a, b, c, d;
    if (!strcmp(s, "f16c"))
        return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
    if (!strcmp(s, "avx2"))
        return __builtin_cpu_supports("avx2");
    if (!strcmp(s, "fma"))
        return __builtin_cpu_supports("fma");
    if (!strcmp(s, "avx512f"))
        return __builtin_cpu_supports("avx512f");
    if (!strcmp(s, "avx512bw"))
        return __builtin_cpu_supports("avx512bw");
    if (!strcmp(s, "avx512vl"))
        return __builtin_cpu_supports("avx512vl");
    return 0;
}

#define __builtin_cpu_supports(s) fuzz_cpu_supports(s)
#include "opt/dispatch.c"
