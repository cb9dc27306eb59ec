#!/usr/bin/python3
"""The polynomial coefficients of ir/host_math.h, refitted.

Least squares on Chebyshev nodes (erf's weighted to relative error), with a
few Lawson reweightings toward the minimax fit, in double; prints each
fit's worst relative error over its range and its coefficients, lowest power
first. exp's coefficients are Cephes' (expf.c) and are checked, not fitted.
Needs numpy and scipy (Debian: python3-numpy python3-scipy).
"""
import numpy as np
from scipy.special import erf, erfc


def fit(f, lo, hi, deg, weight=None, n=4000, rounds=60):
    """Coefficients, lowest power first, of the degree-deg fit of f on
    [lo, hi], errors weighted by weight(x) (1 when None)."""
    k = np.arange(n)
    x = (lo + hi) / 2 + (hi - lo) / 2 * np.cos(np.pi * (k + 0.5) / n)
    y = f(x)
    w = np.ones_like(x) if weight is None else weight(x)
    v = np.vander(x, deg + 1, increasing=True)
    c = np.linalg.lstsq(v * w[:, None], y * w, rcond=None)[0]
    for _ in range(rounds):
        r = np.abs(v @ c - y) * w
        ww = w * ((r / r.max()) ** 0.5 + 1e-3)
        c2 = np.linalg.lstsq(v * ww[:, None], y * ww, rcond=None)[0]
        if (np.abs(v @ c2 - y) * w).max() >= r.max():
            break
        c = c2
    return c


def report(name, c, worst):
    print(f"{name}: worst relative error {worst:.2e}")
    print("  " + ", ".join(f"{v:.9e}" for v in c))


def main():
    # tanh(x) = x (1 + z P(z)), z = x^2, |x| < 0.625
    def tanh_p(z):
        x = np.sqrt(z)
        return np.where(z > 1e-12, (np.tanh(x) / np.where(x > 0, x, 1) - 1) / np.where(z > 0, z, 1), -1 / 3)
    c = fit(tanh_p, 0, 0.625 ** 2, 4)
    x = np.linspace(1e-4, 0.625, 100001)
    report("tanh, |x| < 0.625", c, np.max(np.abs(x * (1 + x * x * np.polyval(c[::-1], x * x)) / np.tanh(x) - 1)))

    # erf(x) = x P(z), z = x^2, |x| < 0.9
    def erf_p(z):
        x = np.sqrt(z)
        return np.where(x > 0, erf(x) / np.where(x > 0, x, 1), 2 / np.sqrt(np.pi))
    c = fit(erf_p, 0, 0.81, 5, weight=lambda z: 1 / erf_p(z))
    x = np.linspace(1e-4, 0.9, 100001)
    report("erf, |x| < 0.9", c, np.max(np.abs(x * np.polyval(c[::-1], x * x) / erf(x) - 1)))

    # erfc(x) = t exp(-x^2 + P(t)), t = 1 / (1 + x/2), 0.9 <= x <= 4
    def erfc_p(t):
        x = (1 / t - 1) * 2
        return np.log(erfc(x) / t) + x * x
    c = fit(erfc_p, 1 / 3, 1 / 1.45, 6)
    t = np.linspace(1 / 3, 1 / 1.45, 100001)
    x = (1 / t - 1) * 2
    report("erfc, 0.9 <= x <= 4", c, np.max(np.abs(t * np.exp(-x * x + np.polyval(c[::-1], t)) / erfc(x) - 1)))

    # Cephes expf: exp(r) = 1 + r + r^2 P(r), |r| <= ln2 / 2
    p = [5.0000001201e-1, 1.6666665459e-1, 4.1665795894e-2, 8.3334519073e-3, 1.3981999507e-3, 1.9875691500e-4]
    r = np.linspace(-np.log(2) / 2, np.log(2) / 2, 100001)
    report("exp (Cephes), |r| <= ln2/2", p, np.max(np.abs((1 + r + r * r * np.polyval(p[::-1], r)) / np.exp(r) - 1)))


if __name__ == "__main__":
    main()
