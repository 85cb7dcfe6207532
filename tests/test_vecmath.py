"""irad.backends.vecmath: the branch-free float64 functions, as numba ufuncs, against numpy.

Within 4 ulp of numpy everywhere (ulp: |got - ref| / np.spacing(|ref|), the subnormal grid's
spacing where the reference is subnormal), and numpy's exact answer (value, sign of zero,
nan-ness) wherever numpy's answer is 0, +-inf or nan, and at the special inputs.
"""
import functools
import math
import warnings

import numpy as np
import pytest

numba = pytest.importorskip("numba")  # numba is the `fast` extra

from irad.backends import vecmath  # noqa: E402  (after the importorskip)

NAMES = ["exp", "expm1", "log", "log1p", "tanh", "cosh", "sinh", "sigmoid"]
MAX_ULP = 4.0

TINY = 5e-324                      # the smallest subnormal
DBL_MIN = np.finfo(np.float64).tiny
DBL_MAX = np.finfo(np.float64).max
LN_MAX = math.log(DBL_MAX)         # 709.78...: exp overflows above
LN_MIN = math.log(DBL_MIN)         # -708.39...: exp is subnormal below
LN_TINY = -1075 * math.log(2)      # -745.13...: exp rounds to 0 below
COSH_MAX = LN_MAX + math.log(2)    # 710.47...: cosh and sinh overflow above


def _sigmoid_ref(x):
    """1 / (1 + exp(-x)), computed in extended precision and rounded to float64."""
    if np.finfo(np.longdouble).nmant >= 63:
        xl = x.astype(np.longdouble)
        with np.errstate(over="ignore"):
            return (1 / (1 + np.exp(-xl))).astype(np.float64)
    mpmath = pytest.importorskip("mpmath")  # where long double is double (Windows, macOS arm64)
    with mpmath.workdps(40):
        return np.array([float(1 / (1 + mpmath.exp(-mpmath.mpf(float(v))))) if np.isfinite(v)
                         else (np.nan if np.isnan(v) else float(v > 0)) for v in x.ravel()]).reshape(x.shape)


REFERENCE = {"exp": np.exp, "expm1": np.expm1, "log": np.log, "log1p": np.log1p, "tanh": np.tanh,
             "cosh": np.cosh, "sinh": np.sinh, "sigmoid": _sigmoid_ref}


@functools.cache
def ufunc(name):
    return numba.vectorize(["float64(float64)"])(getattr(vecmath, name))


def compare(name, x):
    """The max ulp over finite nonzero references; asserts exact agreement everywhere else."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(all="ignore"):
        got = ufunc(name)(x)
        ref = REFERENCE[name](x)
    regular = np.isfinite(ref) & (ref != 0)
    same = (got == ref) & (np.signbit(got) == np.signbit(ref)) | (np.isnan(got) & np.isnan(ref))
    wrong = ~regular & ~same
    assert not wrong.any(), (f"{name}: not numpy's exact answer at x = {x[wrong][:8].tolist()}: "
                             f"got {got[wrong][:8].tolist()}, numpy {ref[wrong][:8].tolist()}")
    if not regular.any():
        return 0.0
    with np.errstate(invalid="ignore"):
        ulp = np.abs(got[regular] - ref[regular]) / np.spacing(np.abs(ref[regular]))
    worst = int(np.argmax(np.where(np.isnan(ulp), np.inf, ulp)))
    assert ulp[worst] <= MAX_ULP, (f"{name}: {ulp[worst]} ulp at x = {x[regular][worst]!r}: "
                                   f"got {got[regular][worst]!r}, numpy {ref[regular][worst]!r}")
    return float(ulp[worst])


def ulp_grid(x0, half_width=300):
    """x0 and its neighbours, half_width float64 steps either side."""
    bits = np.array([x0], dtype=np.float64).view(np.int64) + np.arange(-half_width, half_width + 1)
    x = bits.view(np.float64)
    return x[np.isfinite(x)]


def rel_grid(x0, rel=1e-3, num=2001):
    with np.errstate(over="ignore"):
        return x0 * (1.0 + np.linspace(-rel, rel, num))


# thresholds of the implementations and of float64 (both signs are added below)
THRESHOLDS = {
    "exp": [LN_MAX, LN_MIN, LN_TINY, -746.0, 711.0, 0.5 * math.log(2), 1e-300, DBL_MIN],
    "expm1": [LN_MAX, 711.0, -40.0, -37.43, 0.5 * math.log(2), math.log(2), 1e-16, 2.0 ** -54, DBL_MIN],
    "log": [1.0, math.sqrt(2.0), math.sqrt(0.5), 2.0, 0.5, DBL_MIN, TINY * 2 ** 30, DBL_MAX, 1e-300],
    "log1p": [-1.0 + 2.0 ** -40, -0.5, math.sqrt(0.5) - 1.0, math.sqrt(2.0) - 1.0, 1.0, 2.0 ** -54, 2.0 ** -30,
              2.0 ** 53, 2.0 ** 1022, DBL_MAX, 1e-300],
    "tanh": [20.0, 19.06, 2.0 ** -27, 0.5 * math.log(2), 0.55, 1e-300, DBL_MIN],
    "cosh": [COSH_MAX, LN_MAX, 711.0, 22.0, 0.5 * math.log(2), 1e-8, 1e-300],
    "sinh": [COSH_MAX, LN_MAX, 711.0, 22.0, 1.0, 0.5 * math.log(2), 2.0 ** -26, 1e-300, DBL_MIN],
    "sigmoid": [LN_TINY, LN_MIN, LN_MAX, 711.0, 746.0, 36.7, 40.0, 1.0, 1e-17, 1e-300],
}

SPECIALS = np.array([0.0, TINY, 2 * TINY, 3 * TINY, 1e-310, np.nextafter(DBL_MIN, 0), DBL_MIN, 2.0 ** -54,
                     1e-300, 1.0, 2.0, 0.5, 20.0, 22.0, 40.0, 700.0, 709.78, 709.79, 710.4, 710.5, 711.0,
                     745.1, 745.2, 746.0, 800.0, 1e300, DBL_MAX, np.inf, np.nan])
SPECIALS = np.concatenate([SPECIALS, -SPECIALS])


def test_random_scales():
    rng = np.random.default_rng(20240611)
    n = 200_000
    x = 10.0 ** rng.uniform(-300, 300, n) * rng.choice([-1.0, 1.0], n)
    small = 10.0 ** rng.uniform(-17, 0.5, 20_000)
    x = np.concatenate([x, rng.uniform(-750, 750, 20_000), rng.uniform(-4, 4, 20_000),
                        small * rng.choice([-1.0, 1.0], 20_000), small - 1.0])  # the last: log1p near -1
    for name in NAMES:
        compare(name, x)


@pytest.mark.parametrize("name", NAMES)
def test_thresholds(name):
    x0s = [s * t for t in THRESHOLDS[name] for s in (1.0, -1.0)]
    x = np.concatenate([np.concatenate([ulp_grid(x0), rel_grid(x0)]) for x0 in x0s])
    compare(name, x)


@pytest.mark.parametrize("name", NAMES)
def test_subnormal_range(name):
    """Subnormal inputs; for exp and sigmoid also every result through the subnormals down to 0."""
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.uniform(0, 1, 5000) * DBL_MIN, rng.integers(1, 1000, 1000) * TINY])
    x = np.concatenate([x, -x, np.linspace(LN_TINY - 1, LN_MIN + 1, 20_001)])
    compare(name, x)


@pytest.mark.parametrize("name", NAMES)
def test_special_values(name):
    """Exact at +-0, subnormal and non-finite inputs (log of subnormals: ulp-checked); ulp elsewhere."""
    x = SPECIALS
    compare(name, x)
    with np.errstate(all="ignore"):
        got = ufunc(name)(x)
        ref = REFERENCE[name](x)
    exact = ~np.isfinite(x) | (np.abs(x) < (DBL_MIN if name != "log" else TINY))
    same = (got == ref) & (np.signbit(got) == np.signbit(ref)) | (np.isnan(got) & np.isnan(ref))
    wrong = exact & ~same
    assert not wrong.any(), list(zip(x[wrong].tolist(), got[wrong].tolist(), ref[wrong].tolist()))


@pytest.mark.parametrize("name,x,expected", [
    ("tanh", -0.0, -0.0), ("expm1", -0.0, -0.0), ("log1p", -0.0, -0.0), ("sinh", -0.0, -0.0),
    ("log", 0.0, -np.inf), ("log", -0.0, -np.inf), ("log", -1.0, np.nan), ("log", -np.inf, np.nan),
    ("log1p", -1.0, -np.inf), ("log1p", -1.5, np.nan), ("log1p", -np.inf, np.nan),
    ("exp", -np.inf, 0.0), ("exp", 745.2, np.inf), ("exp", -746.0, 0.0), ("expm1", -np.inf, -1.0),
    ("cosh", -np.inf, np.inf), ("sinh", -np.inf, -np.inf), ("tanh", -np.inf, -1.0),
    ("sigmoid", -np.inf, 0.0), ("sigmoid", np.inf, 1.0), ("sigmoid", -0.0, 0.5), ("sigmoid", -800.0, 0.0),
    ("sigmoid", -745.0, 5e-324),
])
def test_named_values(name, x, expected):
    with np.errstate(all="ignore"):
        got = ufunc(name)(np.array([x]))[0]
    if np.isnan(expected):
        assert np.isnan(got)
    else:
        assert got == expected and np.signbit(got) == np.signbit(expected)


def test_thresholds_agree_with_numpy():
    """The last finite / first infinite (and last nonzero) inputs are numpy's."""
    x = ulp_grid(LN_MAX, 2000)
    with np.errstate(over="ignore"):
        assert np.array_equal(np.isinf(ufunc("exp")(x)), np.isinf(np.exp(x)))
        assert np.array_equal(np.isinf(ufunc("expm1")(x)), np.isinf(np.expm1(x)))
    x = ulp_grid(COSH_MAX, 2000)
    with np.errstate(over="ignore"):
        assert np.array_equal(np.isinf(ufunc("cosh")(x)), np.isinf(np.cosh(x)))
        assert np.array_equal(np.isinf(ufunc("sinh")(x)), np.isinf(np.sinh(x)))
    assert np.isfinite(ufunc("cosh")(np.array([710.4])))[0]
    x = ulp_grid(LN_TINY, 2000)
    assert np.array_equal(ufunc("exp")(x) == 0, np.exp(x) == 0)


def test_nan_in_nan_out():
    x = np.array([np.nan, -np.nan])
    for name in NAMES:
        assert np.isnan(ufunc(name)(x)).all(), name


def test_no_spurious_warnings():
    """Finite inputs raise no RuntimeWarning where numpy's function raises none.  (nan and +-inf
    inputs may: LLVM keeps no promise about floating-point flags, and a build of the same numba on
    Python 3.12 set 'invalid' for tanh/cosh/sigmoid of nan and 'overflow' for cosh of +-inf, with
    numpy's values; docs/compiled.md says so.)"""
    x = np.array([0.0, -0.0, 1e-310, 0.5, -3.0, 30.0, 700.0, 709.9, 710.3] * 4)
    for name in NAMES:
        xs = np.abs(x) if name in ("log", "log1p") else x
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            quiet = [v for v in xs if not _warns(lambda a: REFERENCE[name](a), np.array([v]))]
        got = _warns(ufunc(name), np.array(quiet))
        assert not got, f"{name}: {got}"


def _warns(f, x):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        f(x)
    return [str(w.message) for w in caught]
