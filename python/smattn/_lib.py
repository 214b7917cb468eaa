# SPDX-License-Identifier: MIT
"""_lib.py: finds and loads libsmattn.so.X (X: VERSION's major, _version.SONAME; the public C API, include/smattn.h) and the
package's private shim _smattn_conform.so, and mirrors their structs with ctypes.

Where the libraries are looked for, first match wins:

libsmattn.so.X
  1. the file named by the environment variable SMATTN_LIBRARY;
  2. next to this file (a wheel built by ``pip install ./python`` bundles it);
  3. the path recorded by ``make install-python`` (smattn/_paths.py);
  4. the source tree: ``<repo>/build/libsmattn.so.X`` (after ``make``);
  5. the system loader (``libsmattn.so.X`` on the default search path, ldconfig).
_smattn_conform.so (the checker: judge and battery)
  1. SMATTN_SHIM; 2. next to this file; 3. ``<dir of SMATTN_LIBRARY>/python/``;
  4. ``<repo>/build/python/`` .
"""
import ctypes
import os

from ._version import SONAME

_HERE = os.path.dirname(os.path.abspath(__file__))
_REPO = os.path.dirname(os.path.dirname(_HERE))  # python/smattn -> the source tree

try:
    from . import _paths  # written by make install-python
except ImportError:  # the source tree, or a pip install
    _paths = None

c_i64 = ctypes.c_int64
c_dbl = ctypes.c_double


class Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int), ("stride", c_i64 * 4)]


class OutTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int), ("stride", c_i64 * 4)]


class Problem(ctypes.Structure):
    _fields_ = [("op", ctypes.c_int), ("B", c_i64), ("S", c_i64), ("T", c_i64), ("Hq", c_i64),
                ("Hkv", c_i64), ("D", c_i64), ("Dv", c_i64), ("scale", c_dbl),
                ("softcap", c_dbl), ("causal", ctypes.c_int), ("window_left", c_i64),
                ("window_right", c_i64), ("kv_lens", ctypes.POINTER(c_i64)),
                ("q_lens", ctypes.POINTER(c_i64)), ("empty_rows", ctypes.c_int),
                ("empty_lse", ctypes.c_int),
                ("layout", ctypes.c_void_p),
                ("alibi_mode", ctypes.c_int), ("alibi_slopes", ctypes.POINTER(ctypes.c_float)),
                ("alibi_slopes_per_batch", ctypes.c_int),
                ("descale", ctypes.c_void_p)]


class Descale(ctypes.Structure):
    """smattn_descale (smattn.h, SPEC 2.9): per-tensor factors, or [B][Hkv] arrays;
    Problem.descale points at one (ctypes.addressof) or is None."""
    _fields_ = [("q", c_dbl), ("k", c_dbl), ("v", c_dbl),
                ("q_head", ctypes.POINTER(c_dbl)), ("k_head", ctypes.POINTER(c_dbl)),
                ("v_head", ctypes.POINTER(c_dbl))]


class Layout(ctypes.Structure):
    """smattn_layout (smattn.h, SPEC 2.7): ragged (cu_seqlens) and paged (block table)
    layouts; Problem.layout points at one (ctypes.addressof) or is None."""
    _fields_ = [("cu_seqlens_q", ctypes.POINTER(c_i64)), ("cu_seqlens_k", ctypes.POINTER(c_i64)),
                ("seqused_k", ctypes.POINTER(c_i64)),
                ("block_table", ctypes.POINTER(ctypes.c_int32)), ("bt_stride", c_i64),
                ("max_pages", c_i64), ("num_pages", c_i64), ("page_size", c_i64)]


class Inputs(ctypes.Structure):
    _fields_ = [("q", Tensor), ("k", Tensor), ("v", Tensor), ("x", Tensor), ("bias", Tensor),
                ("mask", Tensor), ("sinks", Tensor)]


class Outputs(ctypes.Structure):
    _fields_ = [("o", OutTensor), ("lse", OutTensor), ("p", OutTensor)]


class GradInputs(ctypes.Structure):
    """smattn_grad_inputs (smattn.h, SPEC 10.1): dO and the optional dLSE."""
    _fields_ = [("dout", Tensor), ("dlse", Tensor)]


class GradOutputs(ctypes.Structure):
    """smattn_grad_outputs: dQ, dK, dV, the optional dBias (full shape) and dSinks."""
    _fields_ = [("dq", OutTensor), ("dk", OutTensor), ("dv", OutTensor), ("dbias", OutTensor),
                ("dsinks", OutTensor)]


class Precision(ctypes.Structure):
    """The kernel model of SPEC 6.1 (smattn_precision in smattn.h)."""
    _fields_ = [("u_score", c_dbl), ("u_acc", c_dbl), ("exp_ulps", c_dbl), ("u_p", c_dbl),
                ("blocks", c_i64), ("acc_len", c_i64), ("tiny", c_dbl)]

    def __repr__(self):
        return "Precision(%s)" % ", ".join("%s=%r" % (f, getattr(self, f)) for f, _ in self._fields_)


class BackwardPrecision(ctypes.Structure):
    """The backward kernel model of SPEC 10.7 (smattn_backward_precision in smattn.h): the
    forward that stored O and LSE, their dtypes, and the backward's own arithmetic."""
    _fields_ = [("fwd", Precision), ("o_dtype", ctypes.c_int), ("lse_dtype", ctypes.c_int),
                ("bwd", Precision)]

    def __repr__(self):
        return ("BackwardPrecision(fwd=%r, o_dtype=%d, lse_dtype=%d, bwd=%r)"
                % (self.fwd, self.o_dtype, self.lse_dtype, self.bwd))


class ForwardSaved(ctypes.Structure):
    """smattn_forward_saved: the O and LSE the forward stored (smattn_attention_backward)."""
    _fields_ = [("o", Tensor), ("lse", Tensor)]


class RefConfig(ctypes.Structure):
    _fields_ = [("threads", ctypes.c_int), ("max_prec", ctypes.c_long),
                ("no_fast_phase", ctypes.c_int), ("fixed_prec", ctypes.c_long)]


class OptConfig(ctypes.Structure):
    _fields_ = [("threads", ctypes.c_int), ("isa", ctypes.c_char_p)]


class PyResult(ctypes.Structure):  # smattn_py_result, python/_smattn_shim.c
    _fields_ = [("status", ctypes.c_int), ("worst_out", ctypes.c_int), ("max_ratio", c_dbl),
                ("max_ulp", c_dbl), ("unbounded", c_i64), ("nonfinite", c_i64),
                ("elements", c_i64), ("mismatched", c_i64), ("worst_ix", c_i64 * 4),
                ("worst_got", c_dbl), ("worst_exact", c_dbl), ("worst_bound", c_dbl),
                ("reason", ctypes.c_char * 512), ("rows_judged", c_i64), ("rows_total", c_i64)]


class PyCase(ctypes.Structure):  # smattn_py_case, python/_smattn_shim.c
    _fields_ = [("name", ctypes.c_char_p), ("category", ctypes.c_char_p), ("prob", Problem),
                ("in_", Inputs), ("count", c_i64 * 7), ("kv_dtype", ctypes.c_int),
                ("q_dtype", ctypes.c_int), ("out_dtype", ctypes.c_int),
                ("garbage", ctypes.c_int), ("strided", ctypes.c_int), ("caps", ctypes.c_uint32),
                ("layout", ctypes.POINTER(Layout)), ("kv_hnd", ctypes.c_int)]


_SHIM_ABI = 4
_P = ctypes.POINTER


def _candidates_lib():
    env = os.environ.get("SMATTN_LIBRARY")
    if env:
        return [env]  # named explicitly: nothing else is tried
    c = [os.path.join(_HERE, SONAME)]
    if _paths is not None:
        c.append(_paths.LIBRARY)
    c.append(os.path.join(_REPO, "build", SONAME))
    return [p for p in c if os.path.exists(p)] + [SONAME]


def _load_lib():
    tried = []
    for path in _candidates_lib():
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
    raise ImportError("smattn: cannot load %s; tried: %s. Build it with `make` in "
                      "the source tree, install it with `make install`, or name it with "
                      "SMATTN_LIBRARY=/path/to/%s" % (SONAME, "; ".join(tried), SONAME))


lib, LIBRARY_PATH = _load_lib()


def _proto(name, res, *args):
    f = getattr(lib, name)
    f.restype = res
    f.argtypes = list(args)
    return f


status_str = _proto("smattn_status_str", ctypes.c_char_p, ctypes.c_int)
status_name = _proto("smattn_status_name", ctypes.c_char_p, ctypes.c_int)
default_scale = _proto("smattn_default_scale", c_dbl, c_i64)
problem_default = _proto("smattn_problem_default", Problem)
validate = _proto("smattn_validate", ctypes.c_int, _P(Problem), _P(Inputs), _P(Outputs))
validate_explain = _proto("smattn_validate_explain", ctypes.c_int, _P(Problem), _P(Inputs),
                          _P(Outputs), ctypes.c_char_p, ctypes.c_size_t)
ref = _proto("smattn_ref", ctypes.c_int, _P(Problem), _P(Inputs), _P(Outputs), _P(RefConfig),
             ctypes.c_void_p)
# smattn_progress_fn: (done, total, arg), called from the thread that called smattn_ref_progress
ProgressFn = ctypes.CFUNCTYPE(None, c_i64, c_i64, ctypes.c_void_p)
ref_progress = _proto("smattn_ref_progress", ctypes.c_int, _P(Problem), _P(Inputs), _P(Outputs),
                      _P(RefConfig), ctypes.c_void_p, ProgressFn, ctypes.c_void_p)
ref_backward = _proto("smattn_ref_backward", ctypes.c_int, _P(Problem), _P(Inputs),
                      _P(GradInputs), _P(GradOutputs), _P(RefConfig), ctypes.c_void_p)
attention_backward = _proto("smattn_attention_backward", ctypes.c_int, _P(Problem), _P(Inputs),
                            _P(ForwardSaved), _P(GradInputs), _P(GradOutputs), _P(OptConfig))
backward_bound = _proto("smattn_backward_bound", ctypes.c_int, _P(Problem), _P(Inputs),
                        _P(GradInputs), _P(BackwardPrecision), _P(GradOutputs), _P(GradOutputs))
backward_precision_of = _proto("smattn_backward_precision_of", BackwardPrecision, ctypes.c_int)
opt_backward_precision = _proto("smattn_opt_backward_precision", BackwardPrecision, _P(Problem))
visible = _proto("smattn_visible", ctypes.c_int, _P(Problem), _P(Inputs), c_i64, c_i64, c_i64,
                 c_i64)
attention = _proto("smattn_attention", ctypes.c_int, _P(Problem), _P(Inputs), _P(Outputs),
                   _P(OptConfig))
precision_of = _proto("smattn_precision_of", Precision, ctypes.c_int)
opt_precision = _proto("smattn_opt_precision", Precision, _P(Problem))
opt_isa = _proto("smattn_opt_isa", ctypes.c_char_p)
opt_isa_available = _proto("smattn_opt_isa_available", ctypes.c_int, ctypes.c_char_p)
contiguous_strides = _proto("smattn_contiguous_strides", None, _P(Problem), ctypes.c_char,
                            _P(c_i64 * 4))

_shim = None
SHIM_PATH = None


def _candidates_shim():
    env = os.environ.get("SMATTN_SHIM")
    if env:
        return [env]
    c = [os.path.join(_HERE, "_smattn_conform.so")]
    if os.environ.get("SMATTN_LIBRARY"):
        c.append(os.path.join(os.path.dirname(os.environ["SMATTN_LIBRARY"]), "python",
                              "_smattn_conform.so"))
    c.append(os.path.join(_REPO, "build", "python", "_smattn_conform.so"))
    return c


def shim():
    """The private checker library, loaded on first use (check, assert_close, cases)."""
    global _shim, SHIM_PATH
    if _shim is not None:
        return _shim
    tried = []
    for path in _candidates_shim():
        if not os.path.exists(path):
            tried.append(path + " (absent)")
            continue
        try:
            s = ctypes.CDLL(path)
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
            continue
        s.smattn_py_abi.restype = ctypes.c_int
        s.smattn_py_abi.argtypes = [_P(c_i64 * 8)]
        sizes = (c_i64 * 8)()
        abi = s.smattn_py_abi(ctypes.byref(sizes))
        want = [ctypes.sizeof(t) for t in (Problem, Inputs, Outputs, Precision, PyResult,
                                           PyCase, Tensor, OutTensor)]
        if abi != _SHIM_ABI or list(sizes) != want:
            raise ImportError("smattn: %s does not match this package (ABI %d, struct sizes %s; "
                              "want %d, %s): rebuild it with `make`"
                              % (path, abi, list(sizes), _SHIM_ABI, want))
        s.smattn_py_judge.restype = None
        s.smattn_py_judge.argtypes = [_P(Problem), _P(Inputs), _P(Outputs), _P(Precision),
                                      ctypes.c_int, _P(PyResult)]
        s.smattn_py_judge_rows.restype = None
        s.smattn_py_judge_rows.argtypes = [_P(Problem), _P(Inputs), _P(Outputs), _P(Precision),
                                           ctypes.c_int, c_i64, ctypes.c_uint64, _P(PyResult)]
        s.smattn_py_judge_stored.restype = None
        s.smattn_py_judge_stored.argtypes = [_P(Problem), _P(Inputs), _P(Outputs),
                                             _P(Precision), ctypes.c_int, c_i64, ctypes.c_uint64,
                                             ctypes.c_void_p, _P(PyResult)]
        s.smattn_py_battery_new.restype = ctypes.c_void_p
        s.smattn_py_battery_new.argtypes = [ctypes.c_char_p, ctypes.c_uint64, ctypes.c_char_p,
                                            ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
        s.smattn_py_battery_size.restype = c_i64
        s.smattn_py_battery_size.argtypes = [ctypes.c_void_p]
        s.smattn_py_battery_case.restype = ctypes.c_int
        s.smattn_py_battery_case.argtypes = [ctypes.c_void_p, c_i64, _P(PyCase)]
        s.smattn_py_battery_case_quant.restype = c_i64
        s.smattn_py_battery_case_quant.argtypes = [ctypes.c_void_p, c_i64, ctypes.c_int,
                                                   ctypes.c_void_p, ctypes.c_size_t]
        s.smattn_py_battery_free.restype = None
        s.smattn_py_battery_free.argtypes = [ctypes.c_void_p]
        s.smattn_py_merge_battery_new.restype = ctypes.c_void_p
        s.smattn_py_merge_battery_new.argtypes = [ctypes.c_uint64, ctypes.c_char_p]
        s.smattn_py_merge_battery_size.restype = c_i64
        s.smattn_py_merge_battery_size.argtypes = [ctypes.c_void_p]
        s.smattn_py_merge_battery_case.restype = ctypes.c_int
        # the problem is smattn._merge.MergeProblem, passed by address (no import cycle)
        s.smattn_py_merge_battery_case.argtypes = [ctypes.c_void_p, c_i64,
                                                   _P(ctypes.c_char_p), ctypes.c_void_p,
                                                   _P(_P(c_dbl)), _P(_P(c_dbl))]
        s.smattn_py_merge_battery_free.restype = None
        s.smattn_py_merge_battery_free.argtypes = [ctypes.c_void_p]
        _shim, SHIM_PATH = s, path
        return s
    raise ImportError("smattn: cannot load the checker _smattn_conform.so; tried: %s. Build it "
                      "with `make` in the source tree, or name it with SMATTN_SHIM=/path"
                      % "; ".join(tried))


def _data_dir(env, source, bundled, recorded):
    """The first directory of: $env, $SMATTN_ROOT/source, the source tree's source, the
    wheel's bundled copy, the path make install-python recorded; None if none is."""
    if os.environ.get(env):
        return os.environ[env]
    c = []
    if os.environ.get("SMATTN_ROOT"):
        c.append(os.path.join(os.environ["SMATTN_ROOT"], source))
    c.append(os.path.join(_REPO, source))
    c.append(os.path.join(_HERE, bundled))
    if _paths is not None and getattr(_paths, recorded, None):
        c.append(getattr(_paths, recorded))
    for p in c:
        if os.path.isdir(p):
            return p
    return None


def vectors_dir():
    """The golden vectors' directory for the battery, or None (then the battery has none)."""
    return _data_dir("SMATTN_VECTORS", os.path.join("spec", "vectors"), "vectors", "VECTORS")


def regressions_dir():
    """The fuzzer finds' directory (conform/regressions), which `smattn conform` runs as the
    category "regressions", or None (then the battery has none)."""
    return _data_dir("SMATTN_REGRESSIONS", os.path.join("conform", "regressions"),
                     "regressions", "REGRESSIONS")
