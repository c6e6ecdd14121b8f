/* One pass over a float32 buffer: min, max, sum, sum of squares and the bit-pattern fingerprint that the tracer
 * records for every module output (engine/stats.py has the same values in numpy and torch, and the definitions).
 *
 * Why C: a traced output of a small model is a few thousand floats, and six numpy reductions on it cost ~7 µs, most
 * of it per-call overhead and code that torch's kernels have pushed out of the caches between two hooks; this pass
 * costs ~2 µs and made block-depth tracing of the demo ~6 % cheaper (8-float AVX2 vectors halved it again). The
 * module is optional: without a C compiler the package installs without it and stats.py takes the numpy path.
 *
 * f32_stats(address, count, fingerprint) -> (min, max, sum, sumsq, fp) or None
 *   address, count: `count` contiguous float32 values in this process's memory (a contiguous CPU tensor's
 *   data_ptr() and numel(), checked by the caller, stats.py: the one caller; a raw address saves the ~1 µs a
 *   numpy view and a buffer request cost on every hook). fp is None unless asked for.
 *   None when any element is NaN or ±Inf (or the sums overflow): the caller then takes the torch path, which
 *   counts them.
 * f32_finished(address, count, fingerprint) -> ((min, max, mean, std, absmax, 0, 0), fp) or None
 *   the same pass, finished as stats.finish_columns would (the tracer's hooks: nothing left to do per output).
 * vector_width(width) -> the width in use: tests compare the 4- and 8-float versions with it.
 * Sums are accumulated in 32 float32 lanes (as a BLAS dot does); the fingerprint wraps at 32 bits like torch's.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <math.h>
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
#define STRIDE 32
/* 32 lanes: element i goes to lane i % 32, and the lanes are summed in order at the end, so the 4-float and the
 * 8-float versions below give the same sums (and the same sums as the scalar build for count < 32).
 * The whole vectors are not checked element by element: a NaN makes the sum NaN, an infinity the min or the max
 * infinite (a NaN at x[0] leaves them NaN), and sums that overflow are refused as well. */
#define DEFINE_REDUCE(NAME, W, ATTRIBUTE)                                                                      \
    typedef float NAME##_f __attribute__((vector_size(4 * W)));                                               \
    typedef int32_t NAME##_i __attribute__((vector_size(4 * W)));                                             \
    typedef uint32_t NAME##_u __attribute__((vector_size(4 * W)));                                            \
    ATTRIBUTE static int NAME(const float *x, Py_ssize_t n, int with_fp, double *out, uint32_t *fp_out) {      \
        enum { U = STRIDE / W };                                                                               \
        NAME##_f lo[U], hi[U], s[U], q[U], first;                                                              \
        NAME##_u fp[U], weight[U], step;                                                                       \
        for (int j = 0; j < W; j++) {                                                                          \
            step[j] = 2 * STRIDE;                                                                              \
            first[j] = x[0];                                                                                   \
        }                                                                                                      \
        for (int k = 0; k < U; k++) {                                                                          \
            lo[k] = hi[k] = first;                                                                             \
            s[k] = q[k] = first - first;                                                                       \
            fp[k] = step - step;                                                                               \
            for (int j = 0; j < W; j++) weight[k][j] = (uint32_t)(2 * (W * k + j) + 1); /* 2i + 1 */           \
        }                                                                                                      \
        Py_ssize_t i = 0, whole = n - n % STRIDE;                                                              \
        for (; i < whole; i += STRIDE) {                                                                       \
            for (int k = 0; k < U; k++) {                                                                      \
                NAME##_f v;                                                                                    \
                memcpy(&v, x + i + W * k, sizeof v);                                                           \
                NAME##_i below = v < lo[k], above = v > hi[k];                                                 \
                lo[k] = (NAME##_f)((below & (NAME##_i)v) | (~below & (NAME##_i)lo[k]));                        \
                hi[k] = (NAME##_f)((above & (NAME##_i)v) | (~above & (NAME##_i)hi[k]));                        \
                s[k] += v;                                                                                     \
                q[k] += v * v;                                                                                 \
                if (with_fp) {                                                                                 \
                    fp[k] += (NAME##_u)v * weight[k];                                                          \
                    weight[k] += step;                                                                         \
                }                                                                                              \
            }                                                                                                  \
        }                                                                                                      \
        float mn = x[0], mx = x[0], sum = 0.0f, sumsq = 0.0f;                                                  \
        uint32_t f = 0, bad;                                                                                   \
        for (int k = 0; k < U; k++) {                                                                          \
            for (int j = 0; j < W; j++) {                                                                      \
                mn = lo[k][j] < mn ? lo[k][j] : mn;                                                            \
                mx = hi[k][j] > mx ? hi[k][j] : mx;                                                            \
                sum += s[k][j];                                                                                \
                sumsq += q[k][j];                                                                              \
                f += fp[k][j];                                                                                 \
            }                                                                                                  \
        }                                                                                                      \
        bad = !(isfinite(mn) && isfinite(mx) && isfinite(sum) && isfinite(sumsq));                            \
        scalar_tail(x, i, n, with_fp, &mn, &mx, &sum, &sumsq, &f, &bad);                                       \
        out[0] = mn, out[1] = mx, out[2] = sum, out[3] = sumsq;                                                \
        *fp_out = f;                                                                                           \
        return bad != 0;                                                                                       \
    }

DEFINE_REDUCE(reduce4, 4, )

#if defined(__x86_64__) && !defined(_MSC_VER)
/* 8-float vectors where the CPU has AVX2 (twice as fast), checked once; 4-float ones (SSE2, NEON) elsewhere:
 * without AVX, an 8-float vector is split into slow scalar code. */
DEFINE_REDUCE(reduce8, 8, __attribute__((target("avx2"))))
static int (*reduce)(const float *, Py_ssize_t, int, double *, uint32_t *) = reduce4;
static int have_avx2 = 0;
static void pick_reduce(void) {
    __builtin_cpu_init();
    have_avx2 = __builtin_cpu_supports("avx2");
    if (have_avx2) reduce = reduce8;
}
static int set_width(int width) {  /* tests: 4 or 8 floats a vector (8 only with AVX2); the width now in use */
    if (width == 4) reduce = reduce4;
    if (width == 8 && have_avx2) reduce = reduce8;
    return reduce == reduce8 ? 8 : 4;
}
#else
#define reduce reduce4
static void pick_reduce(void) {}
static int set_width(int width) { (void)width; return 4; }
#endif
#else
static int reduce(const float *x, Py_ssize_t n, int with_fp, double *out, uint32_t *fp_out) {
    float mn = x[0], mx = x[0], sum = 0.0f, sumsq = 0.0f;
    uint32_t f = 0, bad = 0;
    scalar_tail(x, 0, n, with_fp, &mn, &mx, &sum, &sumsq, &f, &bad);
    out[0] = mn, out[1] = mx, out[2] = sum, out[3] = sumsq;
    *fp_out = f;
    return bad != 0;
}
static void pick_reduce(void) {}
static int set_width(int width) { (void)width; return 1; }
#endif

/* The pass itself, shared by both entry points: 0 and `out`, `fp` filled; 1 when an element is not finite;
 * -1 with a Python error set. */
static int checked_reduce(const char *name, PyObject *const *args, Py_ssize_t nargs, double *out, uint32_t *fp,
                          Py_ssize_t *count, int *with_fp) {
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "%s(address, count, fingerprint) takes 3 arguments", name);
        return -1;
    }
    const float *x = (const float *)PyLong_AsVoidPtr(args[0]);
    Py_ssize_t n = PyLong_AsSsize_t(args[1]);
    *with_fp = PyObject_IsTrue(args[2]);
    if (PyErr_Occurred() || *with_fp < 0) return -1;
    if (x == NULL || n <= 0) {
        PyErr_Format(PyExc_ValueError, "%s needs the address of at least one float32", name);
        return -1;
    }
    *count = n;
    int bad;
    if (n < (1 << 16)) {  /* microseconds: not worth handing the interpreter over */
        bad = reduce(x, n, *with_fp, out, fp);
    } else {
        Py_BEGIN_ALLOW_THREADS
        bad = reduce(x, n, *with_fp, out, fp);
        Py_END_ALLOW_THREADS
    }
    return bad != 0;
}

static PyObject *fingerprint_or_none(int with_fp, uint32_t fp) {
    return with_fp ? PyLong_FromLong((long)(int32_t)fp) : Py_NewRef(Py_None);
}

static PyObject *f32_stats(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    double out[4];
    uint32_t fp = 0;
    Py_ssize_t n;
    int with_fp, status = checked_reduce("f32_stats", args, nargs, out, &fp, &n, &with_fp);
    if (status < 0) return NULL;
    if (status > 0) Py_RETURN_NONE;
    PyObject *fingerprint = fingerprint_or_none(with_fp, fp);
    if (fingerprint == NULL) return NULL;
    return Py_BuildValue("(ddddN)", out[0], out[1], out[2], out[3], fingerprint);
}

/* What stats.finish_columns makes of the raw sums, operation for operation in float64 (IEEE, no contraction:
 * setup.py), so the values are the same to the last bit: the tracer's hooks then queue finished statistics. */
static PyObject *f32_finished(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    double out[4];
    uint32_t fp = 0;
    Py_ssize_t count;
    int with_fp, status = checked_reduce("f32_finished", args, nargs, out, &fp, &count, &with_fp);
    if (status < 0) return NULL;
    if (status > 0) Py_RETURN_NONE;
    double n = (double)count, lo = out[0], hi = out[1], total = out[2], sumsq = out[3];
    double mean = total / n;
    double spread = sumsq / n - mean * mean;
    spread = (spread > 0.0 ? spread : 0.0) * n / (n > 1.0 ? n - 1.0 : 1.0);
    double std = n > 1.0 ? sqrt(spread) : 0.0;  /* the sums are finite here */
    double absmax = fabs(lo) > fabs(hi) ? fabs(lo) : fabs(hi);
    PyObject *fingerprint = fingerprint_or_none(with_fp, fp);
    if (fingerprint == NULL) return NULL;
    return Py_BuildValue("((dddddii)N)", lo, hi, mean, std, absmax, 0, 0, fingerprint);
}

static PyObject *vector_width(PyObject *self, PyObject *arg) {
    (void)self;
    long width = PyLong_AsLong(arg);
    if (width == -1 && PyErr_Occurred()) return NULL;
    return PyLong_FromLong(set_width((int)width));
}

static PyMethodDef methods[] = {
    {"f32_stats", (PyCFunction)(void (*)(void))f32_stats, METH_FASTCALL,
     "f32_stats(address, count, fingerprint) -> (min, max, sum, sumsq, fp) or None when any element is not finite"},
    {"f32_finished", (PyCFunction)(void (*)(void))f32_finished, METH_FASTCALL,
     "f32_finished(address, count, fingerprint) -> ((min, max, mean, std, absmax, 0, 0), fp) or None when any "
     "element is not finite"},
    {"vector_width", vector_width, METH_O,
     "vector_width(width) -> the width in use, after asking for 4- or 8-float vectors (8 needs AVX2; 0 only "
     "reads it). For tests: every width gives the same values"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fast_stats", NULL, -1, methods};

PyMODINIT_FUNC PyInit__fast_stats(void) {
    pick_reduce();
    return PyModule_Create(&module);
}
