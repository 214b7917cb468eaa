/* SPDX-License-Identifier: MIT */
/* round.c: the oracle's last step: from an enclosure of the exact value to the bits of its
 * correct rounding in a dtype, or "not decided yet" (SPEC 2.6, 5.2, 5.3). */
#include <float.h>
#include <math.h>

#include "ref/ref_internal.h"

uint64_t smattn__ref_nan_bits(smattn_dtype t)
{
    switch (t) {
    case SMATTN_F64: return 0x7ff8000000000000u;
    case SMATTN_F32: return 0x7fc00000u;
    case SMATTN_F16: return 0x7e00u;
    default: return 0x7fc0u;
    }
}

uint64_t smattn__ref_inf_bits(smattn_dtype t, int negative)
{
    const smattn_format *f = &smattn__formats[t];
    uint64_t expmask = ((uint64_t)1 << (f->bits - f->prec)) - 1;
    return ((uint64_t)(negative != 0) << (f->bits - 1)) | (expmask << (f->prec - 1));
}

/* Correct rounding of an MPFR number (exact, as given) to dtype t: nearest, ties to even.
 * A zero keeps its sign (callers pass +0 for exact zeros). tmp is scratch. */
uint64_t smattn__ref_round_mpfr(mpfr_srcptr x, smattn_dtype t, mpfr_ptr tmp)
{
    const smattn_format *f = &smattn__formats[t];
    int sign = mpfr_signbit(x) != 0;
    if (mpfr_nan_p(x))
        return smattn__ref_nan_bits(t);
    if (mpfr_inf_p(x))
        return smattn__ref_inf_bits(t, sign);
    if (mpfr_zero_p(x))
        return (uint64_t)sign << (f->bits - 1);
    mpfr_exp_t E = mpfr_get_exp(x); /* |x| in [2^(E-1), 2^E) */
    long qmin = (long)f->emin - (f->prec - 1);
    if (E > f->emax + 2)
        return smattn__ref_inf_bits(t, sign);
    if (E < qmin - 1) /* |x| < 2^(qmin-2): below half the smallest subnormal */
        return (uint64_t)sign << (f->bits - 1);
    long q = (long)E - f->prec;
    if (q < qmin)
        q = qmin;
    /* m = rint(|x| / 2^q): the scaling is exact at x's own precision, rint is ties-even. */
    mpfr_set_prec(tmp, mpfr_get_prec(x));
    mpfr_abs(tmp, x, MPFR_RNDN);
    mpfr_mul_2si(tmp, tmp, -q, MPFR_RNDN);
    mpfr_rint(tmp, tmp, MPFR_RNDN);
    uint64_t m = mpfr_get_ui(tmp, MPFR_RNDN); /* <= 2^prec <= 2^53 */
    return smattn__encode(sign, m, (int)q, t);
}

/* Decide the rounding of y = yh + yl, known to within err (|exact - y| <= err), from the
 * binary64 values alone. Returns 1 and the bits when every real in [y - err, y + err]
 * rounds to the same value of t; 0 when that cannot be shown here (the caller then uses
 * MPFR). Requires a normalised pair (|yl| <= ulp(yh)/2). Every subtraction below is either
 * exact or accounted for by the 2^-50 margins. */
int smattn__ref_decide_dd(double yh, double yl, double err, smattn_dtype t, uint64_t *bits)
{
    if (!isfinite(yh) || !isfinite(yl) || !(err >= 0) || !isfinite(err))
        return 0;
    if (yh == 0 || fabs(yh) <= 4 * err)
        return 0; /* near zero the sign itself is in doubt: leave it to MPFR */
    int neg = yh < 0;
    double ah = fabs(yh), al = neg ? -yl : yl; /* |y| = ah + al */
    const double margin = 0x1p-50;
    if (t == SMATTN_F64) {
        /* The candidate is ah itself (normalised pair); the boundaries are ah +- half the
         * spacing on each side. */
        double up = nextafter(ah, HUGE_VAL), dn = nextafter(ah, 0.0);
        double sp_up = isinf(up) ? ah - dn : up - ah; /* above DBL_MAX: the overflow edge */
        double sp_dn = ah - dn;
        double d_up = 0.5 * sp_up - al, d_dn = 0.5 * sp_dn + al;
        if (d_up * (1 - margin) > err && d_dn * (1 - margin) > err) {
            *bits = smattn__round_bits(neg ? -ah : ah, SMATTN_F64);
            return 1;
        }
        return 0;
    }
    uint64_t r = smattn__round_bits(ah, t); /* candidate; may be 0 or inf */
    double v = smattn__bits_to_double(r, t);
    double v_up = isinf(v) ? HUGE_VAL : smattn__bits_to_double(r + 1, t);
    double v_dn = r == 0 ? 0.0 : smattn__bits_to_double(r - 1, t);
    double b_up, b_dn;
    if (isinf(v)) {
        b_up = HUGE_VAL;
        b_dn = v_dn + 0.5 * (v_dn - smattn__bits_to_double(r - 2, t)); /* overflow edge */
    } else {
        b_up = isinf(v_up) ? v + 0.5 * (v - v_dn) : 0.5 * (v + v_up); /* exact in binary64 */
        b_dn = r == 0 ? 0.0 : 0.5 * (v + v_dn);
    }
    /* distances from |y| to the boundaries, each with relative error below 2^-51 */
    double d_up = isinf(b_up) ? HUGE_VAL : (b_up - ah) - al;
    double d_dn = (ah - b_dn) + al;
    double slack = margin * (fabs(al) + 0x1p-1000);
    if (d_up * (1 - margin) - slack > err && d_dn * (1 - margin) - slack > err) {
        *bits = r | ((uint64_t)neg << (smattn__formats[t].bits - 1));
        return 1;
    }
    return 0;
}
