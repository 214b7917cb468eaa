/* SPDX-License-Identifier: MIT */
/* status.c: sentences and names for the pinned status codes of smattn.h. */
#include "smattn.h"

static const char *const messages[] = {
    [SMATTN_OK] = "success",
    [SMATTN_ERR_NULL] = "a required pointer is NULL",
    [SMATTN_ERR_SHAPE] = "a dimension is out of range or two shapes disagree",
    [SMATTN_ERR_HEADS] = "the number of query heads is not a multiple of the KV heads",
    [SMATTN_ERR_STRIDE] = "a stride is negative",
    [SMATTN_ERR_OVERFLOW] = "a size or an element offset does not fit in 64 bits",
    [SMATTN_ERR_DTYPE] = "a dtype is unknown or not allowed for that tensor",
    [SMATTN_ERR_SCALE] = "the scale is NaN or infinite, or a descale is not a positive finite binary32 value",
    [SMATTN_ERR_SOFTCAP] = "the softcap is negative, NaN or infinite",
    [SMATTN_ERR_WINDOW] = "a window bound is below -1",
    [SMATTN_ERR_LENGTHS] = "a kv_lens or q_lens entry is out of range",
    [SMATTN_ERR_OPTION] = "an option field holds an unknown value",
    [SMATTN_ERR_NOMEM] = "out of memory",
    [SMATTN_ERR_PRECISION] = "the rounding could not be decided within the precision limit",
    [SMATTN_ERR_THREADS] = "a worker thread could not be started",
    [SMATTN_ERR_UNSUPPORTED] = "valid, but not supported by this implementation",
    [SMATTN_ERR_ALIAS] = "an output overlaps itself, another output or an input",
    [SMATTN_ERR_INTERNAL] = "internal consistency check failed (a bug in smattn)",
    [SMATTN_ERR_LAYOUT] = "ragged or paged layout is inconsistent",
    [SMATTN_ERR_ALIBI] = "an ALiBi slope is not finite, the mask mode has no bias, or S or T "
                         "exceeds 2^29",
};

static const char *const names[] = {
    [SMATTN_OK] = "SMATTN_OK",
    [SMATTN_ERR_NULL] = "SMATTN_ERR_NULL",
    [SMATTN_ERR_SHAPE] = "SMATTN_ERR_SHAPE",
    [SMATTN_ERR_HEADS] = "SMATTN_ERR_HEADS",
    [SMATTN_ERR_STRIDE] = "SMATTN_ERR_STRIDE",
    [SMATTN_ERR_OVERFLOW] = "SMATTN_ERR_OVERFLOW",
    [SMATTN_ERR_DTYPE] = "SMATTN_ERR_DTYPE",
    [SMATTN_ERR_SCALE] = "SMATTN_ERR_SCALE",
    [SMATTN_ERR_SOFTCAP] = "SMATTN_ERR_SOFTCAP",
    [SMATTN_ERR_WINDOW] = "SMATTN_ERR_WINDOW",
    [SMATTN_ERR_LENGTHS] = "SMATTN_ERR_LENGTHS",
    [SMATTN_ERR_OPTION] = "SMATTN_ERR_OPTION",
    [SMATTN_ERR_NOMEM] = "SMATTN_ERR_NOMEM",
    [SMATTN_ERR_PRECISION] = "SMATTN_ERR_PRECISION",
    [SMATTN_ERR_THREADS] = "SMATTN_ERR_THREADS",
    [SMATTN_ERR_UNSUPPORTED] = "SMATTN_ERR_UNSUPPORTED",
    [SMATTN_ERR_ALIAS] = "SMATTN_ERR_ALIAS",
    [SMATTN_ERR_INTERNAL] = "SMATTN_ERR_INTERNAL",
    [SMATTN_ERR_LAYOUT] = "SMATTN_ERR_LAYOUT",
    [SMATTN_ERR_ALIBI] = "SMATTN_ERR_ALIBI",
};

const char *smattn_status_str(smattn_status s)
{
    if ((unsigned)s < sizeof messages / sizeof messages[0] && messages[s])
        return messages[s];
    return "unknown status code";
}

const char *smattn_status_name(smattn_status s)
{
    if ((unsigned)s < sizeof names / sizeof names[0] && names[s])
        return names[s];
    return "SMATTN_ERR_UNKNOWN";
}
