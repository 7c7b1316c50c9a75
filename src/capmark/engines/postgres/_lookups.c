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
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

typedef struct pg_conn PGconn;
typedef struct pg_result PGresult;

enum { PGRES_COMMAND_OK = 1, PGRES_TUPLES_OK = 2 }; /* libpq's ExecStatusType values */
enum { PG_DIAG_SQLSTATE = 'C', PG_DIAG_MESSAGE_PRIMARY = 'M' };

typedef PGresult *(*exec_prepared_fn)(PGconn *, const char *, int, const char *const *, const int *, const int *,
                                      int);
typedef int (*result_status_fn)(const PGresult *);
typedef void (*clear_fn)(PGresult *);
typedef char *(*result_error_field_fn)(const PGresult *, int);
typedef char *(*result_error_message_fn)(const PGresult *);
typedef char *(*error_message_fn)(const PGconn *);
typedef int (*lib_version_fn)(void);
typedef int (*send_prepared_fn)(PGconn *, const char *, int, const char *const *, const int *, const int *, int);
typedef int (*conn_fn)(PGconn *); /* PQconsumeInput, PQisBusy, PQflush, PQsocket */
typedef PGresult *(*get_result_fn)(PGconn *);

static struct {
    exec_prepared_fn exec_prepared;
    result_status_fn result_status;
    clear_fn clear;
    result_error_field_fn result_error_field;
    result_error_message_fn result_error_message;
    error_message_fn error_message;
    lib_version_fn lib_version;
    send_prepared_fn send_prepared;
    conn_fn consume_input, is_busy, flush, socket;
    get_result_fn get_result;
    void *handle;
} libpq;

typedef struct {
    PyObject_HEAD
    PyObject *pgconn; /* psycopg's PGconn, whose pointer is read at each batch: 0 once the connection is closed */
    char *name;
    uint64_t rng;
} Lookup;

static PyTypeObject LookupType;

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
    libpq.send_prepared = (send_prepared_fn)dlsym(handle, "PQsendQueryPrepared");
    libpq.consume_input = (conn_fn)dlsym(handle, "PQconsumeInput");
    libpq.is_busy = (conn_fn)dlsym(handle, "PQisBusy");
    libpq.flush = (conn_fn)dlsym(handle, "PQflush");
    libpq.socket = (conn_fn)dlsym(handle, "PQsocket");
    libpq.get_result = (get_result_fn)dlsym(handle, "PQgetResult");
    if (!libpq.exec_prepared || !libpq.result_status || !libpq.clear || !libpq.result_error_field ||
        !libpq.result_error_message || !libpq.error_message || !libpq.lib_version || !libpq.send_prepared ||
        !libpq.consume_input || !libpq.is_busy || !libpq.flush || !libpq.socket || !libpq.get_result) {
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

/* A failed result's message as psycopg words it: the primary message, without libpq's "ERROR:  " */
static const char *result_message(const PGresult *res) {
    const char *primary = libpq.result_error_field(res, PG_DIAG_MESSAGE_PRIMARY);
    return primary != NULL && *primary ? primary : libpq.result_error_message(res);
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

/* The Lookup's connection as it is now, in *conn: psycopg gives 0 (or None) once it is closed, and its memory is
   then freed. 0, or -1 with an exception set. */
static int current_conn(Lookup *self, PGconn **conn) {
    if (self->pgconn == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the lookup loop has no connection");
        return -1;
    }
    PyObject *pointer = PyObject_GetAttrString(self->pgconn, "pgconn_ptr");
    if (pointer == NULL)
        return -1;
    *conn = pointer == Py_None ? NULL : (PGconn *)PyLong_AsVoidPtr(pointer);
    Py_DECREF(pointer);
    return PyErr_Occurred() ? -1 : 0;
}

/* run(key_max, end, durations, ends, start, limit[, arrivals]) -> (done, error, failed_at)
   As the MySQL loop: up to `limit` executions until perf_counter passes `end` before one starts; the i-th one's
   duration and end time go to durations[start + i] and ends[start + i] (float64 buffers). error is None, or
   (sqlstate, message) of the execution that failed (not counted in done); failed_at is when it started.
   With arrivals, each execution waits for its own and its duration counts from it (lookup_loop.h, batch_begin). */
static PyObject *Lookup_run(Lookup *self, PyObject *args) {
    Batch b;
    PGconn *conn;
    if (current_conn(self, &conn) < 0)
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
                                           result_message(failed));
    if (failed != NULL)
        libpq.clear(failed);
    if (err == NULL)
        return NULL;
    return Py_BuildValue("(nNd)", done, err, failed_at);
}


/* One connection's part in run_together: its executions go to its own buffers, one at a time in flight. */
typedef struct {
    Lookup *lookup;
    PGconn *conn;
    int fd;
    Py_buffer durations, ends;
    int held; /* both buffers are held */
    double *duration_out, *end_out;
    Py_ssize_t limit, done;
    double origin;    /* when the execution in flight was sent */
    PGresult *failed; /* the failed execution's result, kept for its SQLSTATE and message */
    int lost;         /* the connection failed: its message is libpq's PQerrorMessage */
    int active;       /* an execution is in flight */
    char key[24];
} Member;

/* The member's next execution, sent without waiting for it, or none: its limit is reached, or `end` has passed */
static void member_send(Member *m, long long key_max, double end) {
    double t0 = monotonic_s();
    m->active = 0;
    if (m->done >= m->limit || t0 >= end)
        return;
    snprintf(m->key, sizeof(m->key), "%lld", next_key(&m->lookup->rng, key_max));
    const char *values[1] = {m->key};
    m->origin = t0;
    if (!libpq.send_prepared(m->conn, m->lookup->name, 1, values, NULL, NULL, 0)) {
        m->lost = 1;
        return;
    }
    /* psycopg's connections are non-blocking: what the socket did not take at once is flushed here */
    int pending;
    while ((pending = libpq.flush(m->conn)) == 1) {
        struct pollfd ready = {m->fd, POLLIN | POLLOUT, 0};
        if (poll(&ready, 1, -1) < 0 && errno != EINTR)
            break;
        if ((ready.revents & POLLIN) && !libpq.consume_input(m->conn))
            break;
    }
    if (pending != 0) {
        m->lost = 1;
        return;
    }
    m->active = 1;
}

/* The member's socket is readable: read what came, and once its execution is complete time it and send the next */
static void member_receive(Member *m, long long key_max, double end) {
    if (!libpq.consume_input(m->conn)) {
        m->lost = 1;
        m->active = 0;
        return;
    }
    while (!libpq.is_busy(m->conn)) {
        PGresult *res = libpq.get_result(m->conn);
        if (res != NULL) {
            int status = libpq.result_status(res);
            if (status != PGRES_TUPLES_OK && status != PGRES_COMMAND_OK && m->failed == NULL)
                m->failed = res;
            else
                libpq.clear(res);
            continue;
        }
        /* no more results: the execution is complete */
        if (m->failed != NULL) {
            m->active = 0;
            return;
        }
        double t1 = monotonic_s();
        m->duration_out[m->done] = t1 - m->origin;
        m->end_out[m->done] = t1;
        m->done++;
        member_send(m, key_max, end);
        return;
    }
}

static void members_release(Member *members, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        if (members[i].held) {
            PyBuffer_Release(&members[i].durations);
            PyBuffer_Release(&members[i].ends);
        }
        if (members[i].failed != NULL)
            libpq.clear(members[i].failed);
    }
    PyMem_Free(members);
}

/* One member's (sequence item's) Lookup, connection and buffers; 0, or -1 with an exception set */
static int member_parse(PyObject *item, Member *m) {
    PyObject *lookup, *durations, *ends;
    Py_ssize_t start, limit;
    if (!PyArg_ParseTuple(item, "O!OOnn", &LookupType, &lookup, &durations, &ends, &start, &limit))
        return -1;
    m->lookup = (Lookup *)lookup;
    if (current_conn(m->lookup, &m->conn) < 0)
        return -1;
    if (PyObject_GetBuffer(durations, &m->durations, PyBUF_WRITABLE) < 0)
        return -1;
    if (PyObject_GetBuffer(ends, &m->ends, PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&m->durations);
        return -1;
    }
    m->held = 1;
    Py_ssize_t capacity = doubles_in(&m->durations);
    if (doubles_in(&m->ends) < capacity)
        capacity = doubles_in(&m->ends);
    if (start < 0 || limit < 0 || start > capacity || limit > capacity - start) {
        PyErr_SetString(PyExc_ValueError, "start + limit must be within the buffers");
        return -1;
    }
    m->duration_out = (double *)m->durations.buf + start;
    m->end_out = (double *)m->ends.buf + start;
    m->limit = limit;
    m->fd = m->conn != NULL ? libpq.socket(m->conn) : -1;
    return 0;
}

/* run_together(members, key_max, end) -> [(done, error, failed_at), ...]
   The batches of several Lookups on their own connections at once, from one thread, as pgbench's threads drive
   their clients: each connection has one execution in flight, sent without waiting, and the thread sleeps in one
   poll over all the sockets until any answers. With one thread a connection, each thread sleeps and wakes for
   each of its executions (2.8 context switches a query at 8 jobs against pgbench's 1.4). `members` is a sequence
   of (lookup, durations, ends, start, limit); each member's batch is as run()'s without arrivals, and the list
   says, member by member, what run() would have. */
static PyObject *run_together(PyObject *module, PyObject *args) {
    (void)module;
    PyObject *sequence;
    long long key_max;
    double end;
    if (!PyArg_ParseTuple(args, "OLd", &sequence, &key_max, &end))
        return NULL;
    if (libpq.handle == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "bind() the loaded libpq first");
        return NULL;
    }
    if (key_max < 1) {
        PyErr_SetString(PyExc_ValueError, "key_max must be positive");
        return NULL;
    }
    PyObject *items = PySequence_Fast(sequence, "run_together() takes a sequence of members");
    if (items == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(items);
    Member *members = PyMem_Calloc(n > 0 ? (size_t)n : 1, sizeof(Member));
    struct pollfd *fds = PyMem_Calloc(n > 0 ? (size_t)n : 1, sizeof(struct pollfd));
    Py_ssize_t *which = PyMem_Calloc(n > 0 ? (size_t)n : 1, sizeof(Py_ssize_t));
    if (members == NULL || fds == NULL || which == NULL) {
        PyMem_Free(members);
        PyMem_Free(fds);
        PyMem_Free(which);
        Py_DECREF(items);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (member_parse(PySequence_Fast_GET_ITEM(items, i), &members[i]) < 0) {
            members_release(members, n);
            PyMem_Free(fds);
            PyMem_Free(which);
            Py_DECREF(items);
            return NULL;
        }
    }
    /* items holds the members' Lookups (borrowed by members[i].lookup) until the batches are over */
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++)
        if (members[i].conn != NULL)
            member_send(&members[i], key_max, end);
    for (;;) {
        nfds_t waiting = 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            if (members[i].active) {
                fds[waiting].fd = members[i].fd;
                fds[waiting].events = POLLIN;
                fds[waiting].revents = 0;
                which[waiting++] = i;
            }
        }
        if (waiting == 0)
            break;
        if (poll(fds, waiting, -1) < 0) {
            if (errno == EINTR)
                continue;
            for (nfds_t j = 0; j < waiting; j++) { /* cannot wait on the sockets: every execution in flight is lost */
                members[which[j]].lost = 1;
                members[which[j]].active = 0;
            }
            break;
        }
        for (nfds_t j = 0; j < waiting; j++)
            if (fds[j].revents)
                member_receive(&members[which[j]], key_max, end);
    }
    Py_END_ALLOW_THREADS
    PyMem_Free(fds);
    PyMem_Free(which);
    PyObject *outcome = PyList_New(n);
    for (Py_ssize_t i = 0; outcome != NULL && i < n; i++) {
        Member *m = &members[i];
        PyObject *entry;
        if (m->conn == NULL)
            entry = Py_BuildValue("(n(Os)d)", (Py_ssize_t)0, Py_None, "the connection is closed", monotonic_s());
        else if (m->failed == NULL && !m->lost)
            entry = Py_BuildValue("(nOd)", m->done, Py_None, 0.0);
        else {
            PyObject *err = m->failed != NULL ? execution_error(libpq.result_error_field(m->failed, PG_DIAG_SQLSTATE),
                                                                result_message(m->failed))
                                              : execution_error(NULL, libpq.error_message(m->conn));
            entry = err == NULL ? NULL : Py_BuildValue("(nNd)", m->done, err, m->origin);
        }
        if (entry == NULL)
            Py_CLEAR(outcome);
        else
            PyList_SET_ITEM(outcome, i, entry);
    }
    members_release(members, n);
    Py_DECREF(items);
    return outcome;
}

static PyMethodDef Lookup_methods[] = {
    {"run", (PyCFunction)Lookup_run, METH_VARARGS,
     "run(key_max, end, durations, ends, start, limit[, arrivals]) -> (done, error, failed_at): a batch of timed "
     "lookups, paced by the arrivals when given."},
    {NULL, NULL, 0, NULL},
};

static PyMethodDef module_methods[] = {
    {"bind", bind, METH_VARARGS, "bind(path) -> version: use the libpq already loaded from path."},
    {"run_together", run_together, METH_VARARGS,
     "run_together(members, key_max, end) -> [(done, error, failed_at), ...]: the batches of several Lookups "
     "(members: (lookup, durations, ends, start, limit)) at once from one thread, over their own connections."},
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
