/* SPDX-License-Identifier: MIT */
/* dispatch.c: the ISA table, chosen once at first use (thread-safely) from what the CPU
 * has, or forced by SMATTN_ISA=scalar|avx2|avx512 when the CPU has that one. */
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "opt/opt_internal.h"

static const opt_isa *chosen;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static int has_avx2(void)
{
#if defined(__x86_64__) || defined(__i386__)
    /* F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports does not know
     * the name; AVX2's check already covers the OS's saving of the YMM state */
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 29)))
        return 0;
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return 0;
#endif
}

static int has_avx512(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    return has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
#else
    return 0;
#endif
}

/* what the CPU has, read once (CPUID traps to the hypervisor in a virtual machine: tens of
 * microseconds, once per call when a caller names its ISA) */
static int cpu_avx2, cpu_avx512;
static int env_state; /* smattn_opt_isa_env(): what became of SMATTN_ISA */

/* a name the kernel knows (whether or not this CPU has it) */
int smattn__isa_known(const char *name)
{
    return name && (strcmp(name, "scalar") == 0 || strcmp(name, "avx2") == 0 ||
                    strcmp(name, "avx512") == 0);
}

/* The ISA for an SMATTN_ISA value e (NULL: unset) on this CPU; *state as in
 * smattn_opt_isa_env(). The library never prints: an ignored value is only reported. */
const opt_isa *smattn__isa_from_env(const char *e, int *state)
{
    const opt_isa *best = cpu_avx512 ? &smattn__isa_avx512 : cpu_avx2 ? &smattn__isa_avx2
                                                                       : &smattn__isa_scalar;
    if (!e || !*e)
        return *state = 0, best;
    if (!smattn__isa_known(e))
        return *state = -1, best;
    if (strcmp(e, "scalar") == 0)
        return *state = 1, &smattn__isa_scalar;
    if (strcmp(e, "avx2") == 0)
        return *state = cpu_avx2 ? 1 : -2, cpu_avx2 ? &smattn__isa_avx2 : best;
    return *state = cpu_avx512 ? 1 : -2, cpu_avx512 ? &smattn__isa_avx512 : best;
}

static void choose(void)
{
    cpu_avx2 = has_avx2();
    cpu_avx512 = has_avx512();
    chosen = smattn__isa_from_env(getenv("SMATTN_ISA"), &env_state);
}

int smattn_opt_isa_env(void)
{
    pthread_once(&once, choose);
    return env_state;
}

const opt_isa *smattn__opt_isa(void)
{
    pthread_once(&once, choose);
    return chosen;
}

const char *smattn_opt_isa(void)
{
    return smattn__opt_isa()->name;
}

int smattn_opt_isa_available(const char *name)
{
    if (!name)
        return 0;
    pthread_once(&once, choose);
    if (strcmp(name, "scalar") == 0)
        return 1;
    if (strcmp(name, "avx2") == 0)
        return cpu_avx2;
    if (strcmp(name, "avx512") == 0)
        return cpu_avx512;
    return 0;
}
