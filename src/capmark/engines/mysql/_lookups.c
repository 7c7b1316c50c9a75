/* The client-side hot loop of a MySQL/MariaDB primary-key lookup, in C.

   A Python loop around mysqlclient's text EXECUTE ... USING costs the client about 8-9 us per lookup and the server
   about 5 us more than a binary-protocol execution (COM_STMT_EXECUTE, what sysbench sends). This module runs a batch
   of lookups on the connection mysqlclient opened (its MYSQL handle, which mysqlclient hands out as a capsule):
   one server-side prepared statement with one integer parameter, a uniform key drawn per lookup, each lookup timed
   on CLOCK_MONOTONIC (the clock of Python's time.perf_counter), the global interpreter lock released for the batch.
   Python folds the timings into its histograms and 1 s series, checks its stop flag between batches and handles
   errors as for any unit. */

#include "../lookup_loop.h"
#include <mysql.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#define CAPSULE_NAME "_mysql.connection.native_connection"

typedef struct {
    PyObject_HEAD
    PyObject *connection; /* the mysqlclient connection: kept alive as long as the statement uses its handle */
    MYSQL_STMT *stmt;
    MYSQL_BIND param;
    long long key;
    uint64_t rng;
} Lookup;

/* (code, message) of the statement's last error; a message in another encoding than UTF-8 keeps its readable part */
static PyObject *statement_error(MYSQL_STMT *stmt) {
    const char *text = mysql_stmt_error(stmt);
    PyObject *message = PyUnicode_DecodeUTF8(text, (Py_ssize_t)strlen(text), "replace");
    if (message == NULL)
        return NULL;
    return Py_BuildValue("(IN)", mysql_stmt_errno(stmt), message);
}

static void close_statement(Lookup *self) {
    if (self->stmt != NULL) {
        mysql_stmt_close(self->stmt);
        self->stmt = NULL;
    }
}

/* a failed prepare: RuntimeError(code, message), which the Python side turns into the driver's error */
static int prepare_failed(Lookup *self) {
    PyObject *err = statement_error(self->stmt);
    close_statement(self);
    if (err != NULL) {
        PyErr_SetObject(PyExc_RuntimeError, err);
        Py_DECREF(err);
    }
    return -1;
}

static int Lookup_init(Lookup *self, PyObject *args, PyObject *kwds) {
    static char *keywords[] = {"connection", "sql", "seed", NULL};
    PyObject *connection, *capsule;
    const char *sql;
    Py_ssize_t sql_len;
    unsigned long long seed;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "Os#K", keywords, &connection, &sql, &sql_len, &seed))
        return -1;
    capsule = PyObject_CallMethod(connection, "_get_native_connection", NULL);
    if (capsule == NULL)
        return -1;
    MYSQL *mysql = (MYSQL *)PyCapsule_GetPointer(capsule, CAPSULE_NAME);
    Py_DECREF(capsule);
    if (mysql == NULL)
        return -1;
    close_statement(self);  /* __init__ called again: the earlier statement is not leaked */
    self->stmt = mysql_stmt_init(mysql);
    if (self->stmt == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    int failed;
    Py_BEGIN_ALLOW_THREADS  /* a round trip to the server: the process's other jobs go on meanwhile */
    failed = mysql_stmt_prepare(self->stmt, sql, (unsigned long)sql_len) != 0;
    Py_END_ALLOW_THREADS
    if (failed)
        return prepare_failed(self);
    if (mysql_stmt_param_count(self->stmt) != 1) {
        close_statement(self);
        PyErr_SetString(PyExc_ValueError, "the lookup statement must take exactly one parameter");
        return -1;
    }
    memset(&self->param, 0, sizeof(self->param));
    self->param.buffer_type = MYSQL_TYPE_LONGLONG;
    self->param.buffer = &self->key;
    if (mysql_stmt_bind_param(self->stmt, &self->param) != 0)
        return prepare_failed(self);
    self->rng = seed;
    Py_INCREF(connection);
    Py_XSETREF(self->connection, connection);
    return 0;
}

static void Lookup_dealloc(Lookup *self) {
    /* the connection outlives the statement (a reference is held); if it was closed, the client library detached
       the statement from it, and closing the statement then only frees its memory */
    close_statement(self);
    Py_XDECREF(self->connection);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* run(key_max, end, durations, ends, start, limit[, arrivals]) -> (done, error, failed_at)
   Runs lookups until `limit` are done or the clock passes `end` (perf_counter seconds) before one starts. The i-th
   lookup's duration and end time go to durations[start + i] and ends[start + i] (float64 buffers). error is None,
   or (code, message) of the lookup that failed, which is not counted in done; failed_at is when it started.
   With arrivals, each lookup waits for its own and its duration counts from it (lookup_loop.h, batch_begin). */
static PyObject *Lookup_run(Lookup *self, PyObject *args) {
    Batch b;
    if (self->stmt == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the lookup statement was not prepared");
        return NULL;
    }
    if (batch_parse(args, &b) < 0)
        return NULL;
    Py_ssize_t done = 0;
    int failed = 0;
    double failed_at = 0.0;
    Py_BEGIN_ALLOW_THREADS
    for (; done < b.limit; done++) {
        double origin;
        double t0 = batch_begin(&b, done, &origin);
        if (t0 >= b.end)
            break;
        self->key = next_key(&self->rng, b.key_max);
        if (mysql_stmt_execute(self->stmt) != 0 || mysql_stmt_store_result(self->stmt) != 0) {
            failed = 1;
            failed_at = origin;
            break;
        }
        mysql_stmt_free_result(self->stmt);
        double t1 = monotonic_s();
        b.duration_out[done] = t1 - origin;
        b.end_out[done] = t1;
    }
    Py_END_ALLOW_THREADS
    batch_release(&b);
    if (failed) {
        PyObject *err = statement_error(self->stmt);
        /* an error that came after the result's header (a query stopped while producing rows) leaves the statement
           mid-result: without a reset its next execution waits for rows that never come */
        Py_BEGIN_ALLOW_THREADS
        mysql_stmt_free_result(self->stmt);
        mysql_stmt_reset(self->stmt);
        Py_END_ALLOW_THREADS
        if (err == NULL)
            return NULL;
        return Py_BuildValue("(nNd)", done, err, failed_at);
    }
    return Py_BuildValue("(nOd)", done, Py_None, 0.0);
}

static PyObject *client_info(PyObject *module, PyObject *unused) {
    (void)module;
    (void)unused;
    return PyUnicode_FromString(mysql_get_client_info());
}

static PyMethodDef module_methods[] = {
    {"client_info", client_info, METH_NOARGS,
     "The version of the client library this module was built with: it must be mysqlclient's, whose handle it uses."},
    {NULL, NULL, 0, NULL},
};

static PyMethodDef Lookup_methods[] = {
    {"run", (PyCFunction)Lookup_run, METH_VARARGS,
     "run(key_max, end, durations, ends, start, limit[, arrivals]) -> (done, error, failed_at): a batch of timed "
     "lookups, paced by the arrivals when given."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject LookupType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "capmark.engines.mysql._lookups.Lookup",
    .tp_doc = "A primary-key lookup prepared on a mysqlclient connection and run in timed batches in C.",
    .tp_basicsize = sizeof(Lookup),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Lookup_init,
    .tp_dealloc = (destructor)Lookup_dealloc,
    .tp_methods = Lookup_methods,
};

static struct PyModuleDef lookups_module = {
    PyModuleDef_HEAD_INIT, "_lookups",
    "Binary-protocol primary-key lookups on a mysqlclient connection, timed in C.", -1, module_methods, NULL, NULL, NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__lookups(void) {
    return lookup_module(&lookups_module, &LookupType);
}
