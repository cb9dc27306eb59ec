/* cli_py_repr against Python's repr(float): the shortest digits that read
 * back, fixed notation for exponents from -4 to 15 (a benchmark CSV's 50.0
 * samples/s is "50.0", not "5e+01"), else exponent notation. */
#include <string.h>

#include "check.h"
#include "cli/common.h"

static void expect(double v, int f32, const char *want)
{
    char buf[40];
    cli_py_repr(buf, sizeof buf, v, f32);
    CHECKF(!strcmp(buf, want), "%.17g: '%s', Python writes '%s'", v, buf, want);
}

int main(void)
{
    expect(50.0, 0, "50.0");
    expect(1200.0, 0, "1200.0");
    expect(100.0, 1, "100.0");
    expect(0.1, 0, "0.1");
    expect(1.0 / 3, 0, "0.3333333333333333");
    expect(0.0001, 0, "0.0001");
    expect(1.5e-5, 0, "1.5e-05");
    expect(1e16, 0, "1e+16");
    expect(123456789012345.0, 0, "123456789012345.0");
    expect(0.1f, 1, "0.1");
    expect(0.0, 0, "0.0");
    return check_done("test_py_repr");
}
