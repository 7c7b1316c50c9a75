/* What the engines' compiled lookup loops share (the _lookups.c of each engine): the clock, the key, the output
   buffers and the module's one type. Each loop runs a batch of executions of one statement with a key drawn uniformly over
   1..key_max, timing each on CLOCK_MONOTONIC (the clock of Python's time.perf_counter) and writing its duration and
   end time into two float64 buffers from index `start`. */

#ifndef CAPMARK_LOOKUP_LOOP_H
#define CAPMARK_LOOKUP_LOOP_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <stdint.h>
#include <time.h>

static inline double monotonic_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* splitmix64: a fast generator of well-mixed 64-bit values; the key's uniformity is all a lookup needs */
static inline uint64_t next_random(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* the next key as Python's int(random() * n) + 1: 53 random bits scaled to [1, key_max] */
static inline long long next_key(uint64_t *state, long long key_max) {
    return (long long)((double)(next_random(state) >> 11) * 0x1.0p-53 * (double)key_max) + 1;
}

/* A batch's arguments, parsed from run(key_max, end, durations, ends, start, limit[, arrivals]) */
typedef struct {
    long long key_max;
    double end;
    Py_buffer durations, ends, arrivals;
    Py_ssize_t start, limit;
    double *duration_out, *end_out; /* the buffers from index start */
    double *arrival_io;             /* paced: the arrivals from index 0, each replaced by when its lookup started */
    int arrivals_held;              /* the arrivals' buffer is held (released by batch_release) */
} Batch;

static inline Py_ssize_t doubles_in(const Py_buffer *buffer) {
    return buffer->len / (Py_ssize_t)sizeof(double);
}

static inline void batch_release(Batch *b) {
    PyBuffer_Release(&b->durations);
    PyBuffer_Release(&b->ends);
    if (b->arrivals_held)
        PyBuffer_Release(&b->arrivals);
    b->arrivals_held = 0;
}

/* Parse and check a batch's arguments; 0 with the buffers held (release them with batch_release), or -1 with an
   exception set and nothing held. */
static inline int batch_parse(PyObject *args, Batch *b) {
    PyObject *arrivals = Py_None;
    b->arrival_io = NULL;
    b->arrivals_held = 0;
    if (!PyArg_ParseTuple(args, "Ldw*w*nn|O", &b->key_max, &b->end, &b->durations, &b->ends, &b->start, &b->limit,
                          &arrivals))
        return -1;
    if (arrivals != Py_None) {
        if (PyObject_GetBuffer(arrivals, &b->arrivals, PyBUF_WRITABLE) < 0) {
            PyBuffer_Release(&b->durations);
            PyBuffer_Release(&b->ends);
            return -1;
        }
        b->arrivals_held = 1;
        b->arrival_io = (double *)b->arrivals.buf;
    }
    Py_ssize_t capacity = doubles_in(&b->durations);
    if (doubles_in(&b->ends) < capacity)
        capacity = doubles_in(&b->ends);
    if (b->key_max < 1 || b->start < 0 || b->limit < 0 || b->start > capacity || b->limit > capacity - b->start ||
        (b->arrivals_held && b->limit > doubles_in(&b->arrivals))) {
        batch_release(b);
        PyErr_SetString(PyExc_ValueError, "key_max must be positive, start + limit within the buffers and limit "
                                          "within the arrivals");
        return -1;
    }
    b->duration_out = (double *)b->durations.buf + b->start;
    b->end_out = (double *)b->ends.buf + b->start;
    return 0;
}

/* The batch's i-th lookup begins: the time the caller judges against the batch's end (at or past it, the lookup
   is not run), and in *origin the time its duration counts from (and its failure is dated by). Unpaced: now, for
   both. Paced: its arrival. An arrival at or after the end ends the batch; a lookup already behind schedule at the
   end does too (the caller counts it as backlog). Otherwise it waits for its arrival asleep (an absolute sleep on
   CLOCK_MONOTONIC, so no drift accumulates) and runs, however late the wake-up, as the Python loop does; its
   duration counts from the arrival, so a late start shows in its latency (no coordinated omission), and the start
   as it happened replaces the arrival in the buffer (the caller's schedule lag). Called without the interpreter's
   lock. */
static inline double batch_begin(Batch *b, Py_ssize_t i, double *origin) {
    double now = monotonic_s();
    if (b->arrival_io == NULL) {
        *origin = now;
        return now;
    }
    double due = b->arrival_io[i];
    *origin = due;
    if (due >= b->end)
        return due;
    if (now >= b->end)
        return now;
    if (now < due) {
        struct timespec until;
        until.tv_sec = (time_t)due;
        until.tv_nsec = (long)((due - (double)until.tv_sec) * 1e9);
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) == EINTR) {
        }
        now = monotonic_s();
    }
    b->arrival_io[i] = now;
    return due;
}

/* The module with its one type, named Lookup */
static inline PyObject *lookup_module(struct PyModuleDef *definition, PyTypeObject *type) {
    if (PyType_Ready(type) < 0)
        return NULL;
    PyObject *module = PyModule_Create(definition);
    if (module == NULL)
        return NULL;
    Py_INCREF(type);
    if (PyModule_AddObject(module, "Lookup", (PyObject *)type) < 0) {
        Py_DECREF(type);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}

#endif
