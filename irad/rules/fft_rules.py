"""Rules for numpy.fft: the complex, real and inverse transforms (1-d, 2-d, n-d) and the shifts.

Every transform is linear, so its pullback is the transpose ``J^T ybar`` (JAX's and autograd's
convention: the cotangent of ``x`` is ``ybar * dy/dx``, no conjugate).  The DFT matrix is
symmetric, so the pullback of ``fft``/``ifft`` with normalisation ``norm`` is the *same*
transform with the same ``norm``, followed by undoing the zero-padding or truncation that
``n``/``s`` applied.  ``rfft`` keeps the first ``n//2 + 1`` outputs: its pullback zero-pads
``ybar`` back to ``n``, transforms and takes the real part.  ``irfft`` reads each interior
frequency twice (it and its conjugate mirror) and ignores the imaginary part of the DC (and, for
even ``n``, the Nyquist) term: its pullback is ``conj(rfft(ybar))`` (opposite norm) weighted by 2
on the interior frequencies.  The math follows HIPS autograd's numpy/fft.py; the code is irad's.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ._common import Table, options

T = Table(__name__)

_SWAP = {None: "forward", "backward": "forward", "forward": "backward", "ortho": "ortho"}


def _adj_norm(norm: Any) -> str:
    """The normalisation of the adjoint transform."""
    return _SWAP[norm]


def _axes_1d(x: Any, n: Any, axis: Any) -> tuple[list[Any], list[int]]:
    nd = np.ndim(x)
    ax = int(axis) % nd
    return [np.shape(x)[ax] if n is None else int(n)], [ax]


def _axes_nd(x: Any, s: Any, axes: Any, default: Any) -> tuple[list[int], list[int]]:
    """numpy's rules for ``s`` and ``axes`` (``default``: the function's default axes)."""
    nd = np.ndim(x)
    shape = np.shape(x)
    if axes is None:
        if default is not None:
            axes = default
        elif s is not None:
            axes = range(-len(s), 0)
        else:
            axes = range(nd)
    axes = [int(a) % nd for a in axes]
    s = [shape[a] for a in axes] if s is None else [int(v) if v not in (None, -1) else shape[a]
                                                    for v, a in zip(s, axes)]
    return s, axes


def _fit_axes(g: Any, shape: tuple[int, ...], axes: list[int]) -> Any:
    """Truncate or zero-pad ``g`` along ``axes`` to the sizes in ``shape``: the adjoint of the
    padding/truncation an ``n``/``s`` argument applied to the input."""
    for a in axes:
        m, k = np.shape(g)[a], shape[a]
        if m > k:
            g = np.take(g, np.arange(k), axis=a)
        elif m < k:
            widths = [(0, 0)] * np.ndim(g)
            widths[a] = (0, k - m)
            g = np.pad(g, widths)
    return g


def _half_weights(n: int, m: int, axis: int, ndim: int) -> Any:
    """Weights of ``irfft``'s adjoint along the real axis: 1 for DC (and Nyquist, even ``n``),
    2 for the interior frequencies that stand for themselves and their mirror."""
    w = np.full(m, 2.0)
    w[0] = 1.0
    if n % 2 == 0:
        w[-1] = 1.0
    shape = [1] * ndim
    shape[axis] = m
    return np.reshape(w, shape)


# ---- complex-to-complex ----------------------------------------------------------------------


def _c2c_state(x: Any, s: list[int], axes: list[int], norm: Any, inverse: bool) -> Any:
    return (np.shape(x), s, axes, norm, inverse)


def fft_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    o = options(args, kw, ("n", "axis", "norm"), n=None, axis=-1, norm=None)
    s, axes = _axes_1d(a, o["n"], o["axis"])
    return np.fft.fft(a, *args, **kw), _c2c_state(a, s, axes, o["norm"], False)


def ifft_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    o = options(args, kw, ("n", "axis", "norm"), n=None, axis=-1, norm=None)
    s, axes = _axes_1d(a, o["n"], o["axis"])
    return np.fft.ifft(a, *args, **kw), _c2c_state(a, s, axes, o["norm"], True)


def fft2_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    o = options(args, kw, ("s", "axes", "norm"), s=None, axes=(-2, -1), norm=None)
    s, axes = _axes_nd(a, o["s"], o["axes"], (-2, -1))
    return np.fft.fft2(a, *args, **kw), _c2c_state(a, s, axes, o["norm"], False)


def ifft2_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    o = options(args, kw, ("s", "axes", "norm"), s=None, axes=(-2, -1), norm=None)
    s, axes = _axes_nd(a, o["s"], o["axes"], (-2, -1))
    return np.fft.ifft2(a, *args, **kw), _c2c_state(a, s, axes, o["norm"], True)


def fftn_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    o = options(args, kw, ("s", "axes", "norm"), s=None, axes=None, norm=None)
    s, axes = _axes_nd(a, o["s"], o["axes"], None)
    return np.fft.fftn(a, *args, **kw), _c2c_state(a, s, axes, o["norm"], False)


def ifftn_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    o = options(args, kw, ("s", "axes", "norm"), s=None, axes=None, norm=None)
    s, axes = _axes_nd(a, o["s"], o["axes"], None)
    return np.fft.ifftn(a, *args, **kw), _c2c_state(a, s, axes, o["norm"], True)


def fft_pullback(st: Any, g: Any) -> tuple[Any]:
    """The transpose of a complex transform: the same transform with the same norm (the DFT
    matrix is symmetric), then undo the padding/truncation of ``n``/``s``."""
    shape, s, axes, norm, inverse = st
    if inverse:
        ga = np.fft.ifftn(g, s=s, axes=axes, norm=norm)
    else:
        ga = np.fft.fftn(g, s=s, axes=axes, norm=norm)
    return (_fit_axes(ga, shape, axes),)


# ---- real transforms -------------------------------------------------------------------------


def rfft_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    o = options(args, kw, ("n", "axis", "norm"), n=None, axis=-1, norm=None)
    s, axes = _axes_1d(a, o["n"], o["axis"])
    return np.fft.rfft(a, *args, **kw), (np.shape(a), s, axes, o["norm"])


def rfft2_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    o = options(args, kw, ("s", "axes", "norm"), s=None, axes=(-2, -1), norm=None)
    s, axes = _axes_nd(a, o["s"], o["axes"], (-2, -1))
    return np.fft.rfft2(a, *args, **kw), (np.shape(a), s, axes, o["norm"])


def rfftn_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    o = options(args, kw, ("s", "axes", "norm"), s=None, axes=None, norm=None)
    s, axes = _axes_nd(a, o["s"], o["axes"], None)
    return np.fft.rfftn(a, *args, **kw), (np.shape(a), s, axes, o["norm"])


def rfft_pullback(st: Any, g: Any) -> tuple[Any]:
    """rfft keeps the first n//2+1 outputs of the complex transform: zero-pad ``g`` back to the
    full length (fftn's ``s`` does it), apply the transpose, keep the real part."""
    shape, s, axes, norm = st
    ga = np.real(np.fft.fftn(g, s=s, axes=axes, norm=norm))
    return (_fit_axes(ga, shape, axes),)


def _irfft_sizes(a: Any, s: list[int], axes: list[int], given: bool) -> list[int]:
    if not given:
        s = list(s)
        s[-1] = 2 * (np.shape(a)[axes[-1]] - 1)
    return s


def irfft_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    o = options(args, kw, ("n", "axis", "norm"), n=None, axis=-1, norm=None)
    s, axes = _axes_1d(a, o["n"], o["axis"])
    s = _irfft_sizes(a, s, axes, o["n"] is not None)
    return np.fft.irfft(a, *args, **kw), (np.shape(a), s, axes, _adj_norm(o["norm"]))


def irfft2_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    o = options(args, kw, ("s", "axes", "norm"), s=None, axes=(-2, -1), norm=None)
    s, axes = _axes_nd(a, o["s"], o["axes"], (-2, -1))
    s = _irfft_sizes(a, s, axes, o["s"] is not None)
    return np.fft.irfft2(a, *args, **kw), (np.shape(a), s, axes, _adj_norm(o["norm"]))


def irfftn_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    o = options(args, kw, ("s", "axes", "norm"), s=None, axes=None, norm=None)
    s, axes = _axes_nd(a, o["s"], o["axes"], None)
    s = _irfft_sizes(a, s, axes, o["s"] is not None)
    return np.fft.irfftn(a, *args, **kw), (np.shape(a), s, axes, _adj_norm(o["norm"]))


def irfft_pullback(st: Any, g: Any) -> tuple[Any]:
    """The transpose of irfft: conj(rfft(g)) (opposite norm; g is real, so this is the
    Hermitian adjoint conjugated), interior frequencies weighted by 2 (each stands for itself and
    its conjugate mirror); then back to the input's length."""
    shape, s, axes, norm = st
    ga = np.conj(np.fft.rfftn(g, s=s, axes=axes, norm=norm))
    ga = ga * _half_weights(s[-1], np.shape(ga)[axes[-1]], axes[-1], np.ndim(ga))
    return (_fit_axes(ga, shape, axes),)


# ---- shifts ----------------------------------------------------------------------------------


def fftshift_fwd(x: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    o = options(args, kw, ("axes",), axes=None)
    return np.fft.fftshift(x, *args, **kw), o["axes"]


def fftshift_pullback(axes: Any, g: Any) -> tuple[Any]:
    return (np.fft.ifftshift(g, axes=axes),)


def ifftshift_fwd(x: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    o = options(args, kw, ("axes",), axes=None)
    return np.fft.ifftshift(x, *args, **kw), o["axes"]


def ifftshift_pullback(axes: Any, g: Any) -> tuple[Any]:
    return (np.fft.fftshift(g, axes=axes),)


_NOTE = "n/s, axis/axes, norm"
T.rule(np.fft.fft, fft_fwd, fft_pullback, _NOTE)
T.rule(np.fft.ifft, ifft_fwd, fft_pullback, _NOTE)
T.rule(np.fft.fft2, fft2_fwd, fft_pullback, _NOTE)
T.rule(np.fft.ifft2, ifft2_fwd, fft_pullback, _NOTE)
T.rule(np.fft.fftn, fftn_fwd, fft_pullback, _NOTE)
T.rule(np.fft.ifftn, ifftn_fwd, fft_pullback, _NOTE)
T.rule(np.fft.rfft, rfft_fwd, rfft_pullback, _NOTE + "; real input")
T.rule(np.fft.rfft2, rfft2_fwd, rfft_pullback, _NOTE + "; real input")
T.rule(np.fft.rfftn, rfftn_fwd, rfft_pullback, _NOTE + "; real input")
T.rule(np.fft.irfft, irfft_fwd, irfft_pullback, _NOTE + "; Hermitian weighting")
T.rule(np.fft.irfft2, irfft2_fwd, irfft_pullback, _NOTE + "; Hermitian weighting")
T.rule(np.fft.irfftn, irfftn_fwd, irfft_pullback, _NOTE + "; Hermitian weighting")
T.rule(np.fft.fftshift, fftshift_fwd, fftshift_pullback)
T.rule(np.fft.ifftshift, ifftshift_fwd, ifftshift_pullback)
T.nograd(np.fft.fftfreq, np.fft.rfftfreq)
