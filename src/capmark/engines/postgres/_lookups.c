/* The client-side hot loop of a PostgreSQL lookup by one key, in C.

   One prepared execution through psycopg's libpq layer costs the Python driver 17,500-19,100 instructions, more than
   pgbench's whole client per query, and capmark's per-unit Python work comes on top. This module runs a batch of
   executions of a statement the session has already prepared, on the session's own connection (psycopg hands out
   its PGconn pointer), through the very libpq psycopg loaded (opened by its path, never loaded anew): a uniform key
   per execution, each timed on CLOCK_MONOTONIC (the clock of time.perf_counter), the interpreter's lock released.
   Python folds the timings and handles errors as for any unit.

   Nothing here includes libpq's headers: the few functions are declared by their documented signatures and looked
   up in the loaded library, so the build needs no libpq development files. */

#include "../lookup_loop.h"
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

typedef struct pg_conn PGconn;
typedef struct pg_result PGresult;

enum { PGRES_COMMAND_OK = 1, PGRES_TUPLES_OK = 2 }; /* libpq's ExecStatusType values */
enum { PG_DIAG_SQLSTATE = 'C' };

typedef PGresult *(*exec_prepared_fn)(PGconn *, const char *, int, const char *const *, const int *, const int *,
                                      int);
typedef int (*result_status_fn)(const PGresult *);
typedef void (*clear_fn)(PGresult *);
typedef char *(*result_error_field_fn)(const PGresult *, int);
typedef char *(*result_error_message_fn)(const PGresult *);
typedef char *(*error_message_fn)(const PGconn *);
typedef int (*lib_version_fn)(void);

static struct {
    exec_prepared_fn exec_prepared;
    result_status_fn result_status;
    clear_fn clear;
    result_error_field_fn result_error_field;
    result_error_message_fn result_error_message;
    error_message_fn error_message;
    lib_version_fn lib_version;
    void *handle;
} libpq;

typedef struct {
    PyObject_HEAD
    PyObject *pgconn; /* psycopg's PGconn, whose pointer is read at each batch: 0 once the connection is closed */
    char *name;
    uint64_t rng;
} Lookup;

/* bind(path) -> libpq's version: resolve the functions in the already loaded library at `path` */
static PyObject *bind(PyObject *module, PyObject *args) {
    (void)module;
    const char *path;
    if (!PyArg_ParseTuple(args, "s", &path))
        return NULL;
    void *handle = dlopen(path, RTLD_LAZY | RTLD_NOLOAD);
    if (handle == NULL) {
        PyErr_Format(PyExc_ImportError, "libpq is not loaded from %s", path);
        return NULL;
    }
    libpq.exec_prepared = (exec_prepared_fn)dlsym(handle, "PQexecPrepared");
    libpq.result_status = (result_status_fn)dlsym(handle, "PQresultStatus");
    libpq.clear = (clear_fn)dlsym(handle, "PQclear");
    libpq.result_error_field = (result_error_field_fn)dlsym(handle, "PQresultErrorField");
    libpq.result_error_message = (result_error_message_fn)dlsym(handle, "PQresultErrorMessage");
    libpq.error_message = (error_message_fn)dlsym(handle, "PQerrorMessage");
    libpq.lib_version = (lib_version_fn)dlsym(handle, "PQlibVersion");
    if (!libpq.exec_prepared || !libpq.result_status || !libpq.clear || !libpq.result_error_field ||
        !libpq.result_error_message || !libpq.error_message || !libpq.lib_version) {
        memset(&libpq, 0, sizeof(libpq));
        dlclose(handle);
        PyErr_Format(PyExc_ImportError, "%s lacks a libpq function the lookup loop needs", path);
        return NULL;
    }
    libpq.handle = handle;
    return PyLong_FromLong(libpq.lib_version());
}

static int Lookup_init(Lookup *self, PyObject *args, PyObject *kwds) {
    static char *keywords[] = {"pgconn", "name", "seed", NULL};
    PyObject *pgconn;
    unsigned long long seed;
    const char *name;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OyK", keywords, &pgconn, &name, &seed))
        return -1;
    if (libpq.handle == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "bind() the loaded libpq first");
        return -1;
    }
    char *copy = PyMem_Malloc(strlen(name) + 1);
    if (copy == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    strcpy(copy, name);
    PyMem_Free(self->name);
    self->name = copy;
    self->rng = seed;
    Py_INCREF(pgconn);
    Py_XSETREF(self->pgconn, pgconn);
    return 0;
}

static void Lookup_dealloc(Lookup *self) {
    PyMem_Free(self->name);
    Py_XDECREF(self->pgconn);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* (sqlstate or None, message) of a failed execution; a message in another encoding keeps its readable part */
static PyObject *execution_error(const char *sqlstate, const char *message) {
    PyObject *text = PyUnicode_DecodeUTF8(message, (Py_ssize_t)strlen(message), "replace");
    if (text == NULL)
        return NULL;
    if (sqlstate == NULL)
        return Py_BuildValue("(ON)", Py_None, text);
    return Py_BuildValue("(sN)", sqlstate, text);
}

/* run(key_max, end, durations, ends, start, limit[, arrivals]) -> (done, error, failed_at)
   As the MySQL loop: up to `limit` executions until perf_counter passes `end` before one starts; the i-th one's
   duration and end time go to durations[start + i] and ends[start + i] (float64 buffers). error is None, or
   (sqlstate, message) of the execution that failed (not counted in done); failed_at is when it started.
   With arrivals, each execution waits for its own and its duration counts from it (lookup_loop.h, batch_begin). */
static PyObject *Lookup_run(Lookup *self, PyObject *args) {
    Batch b;
    if (self->pgconn == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the lookup loop has no connection");
        return NULL;
    }
    /* the connection as it is now: psycopg gives 0 (or None) once it is closed, and its memory is then freed */
    PyObject *pointer = PyObject_GetAttrString(self->pgconn, "pgconn_ptr");
    if (pointer == NULL)
        return NULL;
    PGconn *conn = pointer == Py_None ? NULL : (PGconn *)PyLong_AsVoidPtr(pointer);
    Py_DECREF(pointer);
    if (PyErr_Occurred())
        return NULL;
    if (conn == NULL)
        return Py_BuildValue("(n(Os)d)", (Py_ssize_t)0, Py_None, "the connection is closed", monotonic_s());
    if (batch_parse(args, &b) < 0)
        return NULL;
    Py_ssize_t done = 0;
    PGresult *failed = NULL;
    int lost = 0;
    double failed_at = 0.0;
    char key[24];
    const char *values[1] = {key};
    Py_BEGIN_ALLOW_THREADS
    for (; done < b.limit; done++) {
        double origin;
        double t0 = batch_begin(&b, done, &origin);
        if (t0 >= b.end)
            break;
        /* sent as text, as the Python path sends it */
        long long k = next_key(&self->rng, b.key_max);
        snprintf(key, sizeof(key), "%lld", k);
        PGresult *res = libpq.exec_prepared(conn, self->name, 1, values, NULL, NULL, 0);
        int status = res ? libpq.result_status(res) : -1;
        if (status != PGRES_TUPLES_OK && status != PGRES_COMMAND_OK) {
            failed = res;
            lost = res == NULL;
            failed_at = origin;
            break;
        }
        libpq.clear(res);
        double t1 = monotonic_s();
        b.duration_out[done] = t1 - origin;
        b.end_out[done] = t1;
    }
    Py_END_ALLOW_THREADS
    batch_release(&b);
    if (failed == NULL && !lost)
        return Py_BuildValue("(nOd)", done, Py_None, 0.0);
    PyObject *err = lost ? execution_error(NULL, libpq.error_message(conn))
                         : execution_error(libpq.result_error_field(failed, PG_DIAG_SQLSTATE),
                                           libpq.result_error_message(failed));
    if (failed != NULL)
        libpq.clear(failed);
    if (err == NULL)
        return NULL;
    return Py_BuildValue("(nNd)", done, err, failed_at);
}

static PyMethodDef Lookup_methods[] = {
    {"run", (PyCFunction)Lookup_run, METH_VARARGS,
     "run(key_max, end, durations, ends, start, limit[, arrivals]) -> (done, error, failed_at): a batch of timed "
     "lookups, paced by the arrivals when given."},
    {NULL, NULL, 0, NULL},
};

static PyMethodDef module_methods[] = {
    {"bind", bind, METH_VARARGS, "bind(path) -> version: use the libpq already loaded from path."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject LookupType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "capmark.engines.postgres._lookups.Lookup",
    .tp_doc = "Executions of a prepared one-key statement on a psycopg connection, run in timed batches in C.",
    .tp_basicsize = sizeof(Lookup),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Lookup_init,
    .tp_dealloc = (destructor)Lookup_dealloc,
    .tp_methods = Lookup_methods,
};

static struct PyModuleDef lookups_module = {
    PyModuleDef_HEAD_INIT, "_lookups",
    "Prepared one-key lookups on a psycopg connection, timed in C.", -1, module_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__lookups(void) {
    return lookup_module(&lookups_module, &LookupType);
}
