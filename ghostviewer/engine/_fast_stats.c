/* One pass over a float32 buffer: min, max, sum, sum of squares and the bit-pattern fingerprint that the tracer
 * records for every module output (engine/stats.py has the same values in numpy and torch, and the definitions).
 *
 * Why C: a traced output of a small model is a few thousand floats, and six numpy reductions on it cost ~7 µs, most
 * of it per-call overhead and code that torch's kernels have pushed out of the caches between two hooks; this pass
 * costs ~2 µs and made block-depth tracing of the demo ~6 % cheaper. The module is optional: without a C compiler
 * the package installs without it and stats.py takes the numpy path.
 *
 * f32_stats(address, count, fingerprint) -> (min, max, sum, sumsq, fp) or None
 *   address, count: `count` contiguous float32 values in this process's memory (a contiguous CPU tensor's
 *   data_ptr() and numel(), checked by the caller, stats.py: the one caller; a raw address saves the ~1 µs a
 *   numpy view and a buffer request cost on every hook). fp is None unless asked for.
 *   None when any element is NaN or ±Inf: the caller then takes the torch path, which counts them.
 * Sums are accumulated in 32 float32 lanes (as a BLAS dot does); the fingerprint wraps at 32 bits like torch's.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define EXPONENT 0x7f800000u

static void scalar_tail(const float *x, Py_ssize_t start, Py_ssize_t n, int with_fp, float *lo, float *hi,
                        float *sum, float *sumsq, uint32_t *fp, uint32_t *bad) {
    const uint32_t *bits = (const uint32_t *)x;
    for (Py_ssize_t i = start; i < n; i++) {
        float v = x[i];
        *lo = v < *lo ? v : *lo;
        *hi = v > *hi ? v : *hi;
        *sum += v;
        *sumsq += v * v;
        *bad |= (bits[i] & EXPONENT) == EXPONENT;
        if (with_fp) *fp += bits[i] * (uint32_t)(2 * (uint64_t)i + 1);
    }
}

#if defined(__GNUC__) || defined(__clang__)
typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));
typedef uint32_t v4u __attribute__((vector_size(16)));

static inline v4f vmin(v4f a, v4f b) { v4i m = a < b; return (v4f)((m & (v4i)a) | (~m & (v4i)b)); }
static inline v4f vmax(v4f a, v4f b) { v4i m = a > b; return (v4f)((m & (v4i)a) | (~m & (v4i)b)); }

#if defined(__x86_64__) && defined(__linux__) && !defined(__clang__)
/* AVX2 where the CPU has it (picked once at load time), SSE2 otherwise: the build stays portable. */
__attribute__((target_clones("avx2", "default")))
#endif
static int reduce(const float *x, Py_ssize_t n, int with_fp, double *out, uint32_t *fp_out) {
    enum { U = 8, STRIDE = 4 * U };  /* 8 vectors of 4 lanes per iteration */
    v4f lo[U], hi[U], s[U], q[U];
    v4u fp[U], bad[U], weight[U];
    const v4u exponent = {EXPONENT, EXPONENT, EXPONENT, EXPONENT};
    const v4u step = {2 * STRIDE, 2 * STRIDE, 2 * STRIDE, 2 * STRIDE};
    const v4f first = {x[0], x[0], x[0], x[0]};
    for (int k = 0; k < U; k++) {
        lo[k] = first;
        hi[k] = first;
        s[k] = (v4f){0, 0, 0, 0};
        q[k] = s[k];
        fp[k] = (v4u){0, 0, 0, 0};
        bad[k] = fp[k];
        for (int j = 0; j < 4; j++) weight[k][j] = (uint32_t)(2 * (4 * k + j) + 1);  /* 2i + 1 */
    }
    Py_ssize_t i = 0, whole = n - n % STRIDE;
    for (; i < whole; i += STRIDE) {
        for (int k = 0; k < U; k++) {
            v4f v;
            memcpy(&v, x + i + 4 * k, sizeof v);
            v4u b = (v4u)v;
            lo[k] = vmin(v, lo[k]);
            hi[k] = vmax(v, hi[k]);
            s[k] += v;
            q[k] += v * v;
            bad[k] |= (v4u)((b & exponent) == exponent);
            if (with_fp) {
                fp[k] += b * weight[k];
                weight[k] += step;
            }
        }
    }
    float mn = x[0], mx = x[0], sum = 0.0f, sumsq = 0.0f;
    uint32_t f = 0, any_bad = 0;
    for (int k = 0; k < U; k++) {
        for (int j = 0; j < 4; j++) {
            mn = lo[k][j] < mn ? lo[k][j] : mn;
            mx = hi[k][j] > mx ? hi[k][j] : mx;
            sum += s[k][j];
            sumsq += q[k][j];
            f += fp[k][j];
            any_bad |= bad[k][j];
        }
    }
    scalar_tail(x, i, n, with_fp, &mn, &mx, &sum, &sumsq, &f, &any_bad);
    out[0] = mn, out[1] = mx, out[2] = sum, out[3] = sumsq;
    *fp_out = f;
    return any_bad != 0;
}
#else
static int reduce(const float *x, Py_ssize_t n, int with_fp, double *out, uint32_t *fp_out) {
    float mn = x[0], mx = x[0], sum = 0.0f, sumsq = 0.0f;
    uint32_t f = 0, bad = 0;
    scalar_tail(x, 0, n, with_fp, &mn, &mx, &sum, &sumsq, &f, &bad);
    out[0] = mn, out[1] = mx, out[2] = sum, out[3] = sumsq;
    *fp_out = f;
    return bad != 0;
}
#endif

static PyObject *f32_stats(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "f32_stats(address, count, fingerprint) takes 3 arguments");
        return NULL;
    }
    const float *x = (const float *)PyLong_AsVoidPtr(args[0]);
    Py_ssize_t n = PyLong_AsSsize_t(args[1]);
    int with_fp = PyObject_IsTrue(args[2]);
    if (PyErr_Occurred() || with_fp < 0) return NULL;
    if (x == NULL || n <= 0) {
        PyErr_SetString(PyExc_ValueError, "f32_stats needs the address of at least one float32");
        return NULL;
    }
    double out[4];
    uint32_t fp = 0;
    int bad;
    if (n < (1 << 16)) {  /* microseconds: not worth handing the interpreter over */
        bad = reduce(x, n, with_fp, out, &fp);
    } else {
        Py_BEGIN_ALLOW_THREADS
        bad = reduce(x, n, with_fp, out, &fp);
        Py_END_ALLOW_THREADS
    }
    if (bad) Py_RETURN_NONE;
    PyObject *fingerprint = with_fp ? PyLong_FromLong((long)(int32_t)fp) : Py_NewRef(Py_None);
    if (fingerprint == NULL) return NULL;
    return Py_BuildValue("(ddddN)", out[0], out[1], out[2], out[3], fingerprint);
}

static PyMethodDef methods[] = {
    {"f32_stats", (PyCFunction)(void (*)(void))f32_stats, METH_FASTCALL,
     "f32_stats(address, count, fingerprint) -> (min, max, sum, sumsq, fp) or None when any element is not finite"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fast_stats", NULL, -1, methods};

PyMODINIT_FUNC PyInit__fast_stats(void) { return PyModule_Create(&module); }
