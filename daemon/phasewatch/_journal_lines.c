/* phasewatch._journal_lines: the catch-up reader of `replay --unit` in C (sources/journal_source.py).
 *
 * One sd_journal, opened and matched as sources/follow.py's JournalFollower opens its reader (the
 * unit's processes, PID 1 about the unit, journald's notices about it; data threshold 0), read in
 * batches. Each entry's fields are walked once (sd_journal_enumerate_data):
 * - a whole line of the unit (_SYSTEMD_UNIT the unit, MESSAGE, _PID (decimal or empty) and
 *   _SYSTEMD_INVOCATION_ID (UTF-8) each present once, no _LINE_BREAK) becomes the tuple
 *   (MESSAGE bytes, seconds float, pid int or None, invocation str) that journal_source.UnitLine is;
 * - any other entry becomes a dict of the fields asked for (the first value of each, bytes, as
 *   sd_journal_get_data gives it) plus "__REALTIME_TIMESTAMP" (int microseconds), which Python turns
 *   into a JournalRecord (or a trust rejection) exactly as before.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <string.h>
#include <systemd/sd-journal.h>

/* The fields of a whole line, in the order `open()`'s `fields` must begin with. */
enum { F_UNIT, F_MESSAGE, F_PID, F_INVOCATION, F_LINE_BREAK, F_LINE_FIELDS };
#define MAX_FIELDS 64

typedef struct {
    PyObject_HEAD
    sd_journal *journal;
    char *unit;
    size_t unit_len;
    Py_ssize_t field_count;
    PyObject *names;        /* tuple of str: the field names, for the dicts */
    char **field_names;     /* their bytes */
    size_t *field_lens;
    PyObject *last_invocation_bytes;  /* the previous line's invocation, and its str (reused while equal) */
    PyObject *last_invocation;
    PyObject *last_pid;
    long last_pid_value;
} Lines;

static void lines_close_journal(Lines *self) {
    if (self->journal != NULL) {
        sd_journal_close(self->journal);
        self->journal = NULL;
    }
}

static void lines_dealloc(Lines *self) {
    lines_close_journal(self);
    PyMem_Free(self->unit);
    if (self->field_names != NULL) {
        for (Py_ssize_t i = 0; i < self->field_count; i++) PyMem_Free(self->field_names[i]);
        PyMem_Free(self->field_names);
    }
    PyMem_Free(self->field_lens);
    Py_XDECREF(self->names);
    Py_XDECREF(self->last_invocation_bytes);
    Py_XDECREF(self->last_invocation);
    Py_XDECREF(self->last_pid);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *os_error(int negative_errno) {
    errno = -negative_errno;
    return PyErr_SetFromErrno(PyExc_OSError);
}

static int add_match(sd_journal *journal, const char *field, const char *value) {
    char *match = PyMem_Malloc(strlen(field) + strlen(value) + 2);
    if (match == NULL) return -ENOMEM;
    strcpy(match, field);
    strcat(match, "=");
    strcat(match, value);
    int r = sd_journal_add_match(journal, match, 0);
    PyMem_Free(match);
    return r;
}

/* The field `data` ("NAME=value") names: its index among the fields asked for, or -1. */
static Py_ssize_t field_index(const Lines *self, const char *data, size_t length, const char **value,
                              size_t *value_len) {
    const char *eq = memchr(data, '=', length);
    if (eq == NULL) return -1;
    size_t name_len = (size_t)(eq - data);
    for (Py_ssize_t i = 0; i < self->field_count; i++) {
        if (self->field_lens[i] == name_len && memcmp(self->field_names[i], data, name_len) == 0) {
            *value = eq + 1;
            *value_len = length - name_len - 1;
            return i;
        }
    }
    return -1;
}

/* pid bytes -> int; empty -> None; anything but plain decimal -> NULL without an error set. */
static PyObject *pid_object(Lines *self, const char *text, size_t length) {
    if (length == 0) Py_RETURN_NONE;
    long value = 0;
    for (size_t i = 0; i < length; i++) {
        if (text[i] < '0' || text[i] > '9') return NULL;
        value = value * 10 + (text[i] - '0');
        if (i == 8 && length > 9) {  /* past what a C long holds anywhere: Python's int of the text */
            char *copy = PyMem_Malloc(length + 1);
            if (copy == NULL) return PyErr_NoMemory();
            memcpy(copy, text, length);
            copy[length] = '\0';
            for (size_t k = 0; k < length; k++) {
                if (copy[k] < '0' || copy[k] > '9') {
                    PyMem_Free(copy);
                    return NULL;
                }
            }
            PyObject *big = PyLong_FromString(copy, NULL, 10);
            PyMem_Free(copy);
            return big;
        }
    }
    if (self->last_pid == NULL || self->last_pid_value != value) {
        PyObject *pid = PyLong_FromLong(value);
        if (pid == NULL) return NULL;
        Py_XSETREF(self->last_pid, pid);
        self->last_pid_value = value;
    }
    Py_INCREF(self->last_pid);
    return self->last_pid;
}

/* The invocation as str, the previous object while equal; NULL without an error set if not UTF-8. */
static PyObject *invocation_object(Lines *self, const char *text, size_t length) {
    PyObject *last = self->last_invocation_bytes;
    if (last != NULL && (size_t)PyBytes_GET_SIZE(last) == length && memcmp(PyBytes_AS_STRING(last), text, length) == 0) {
        Py_INCREF(self->last_invocation);
        return self->last_invocation;
    }
    PyObject *decoded = PyUnicode_DecodeUTF8(text, (Py_ssize_t)length, NULL);
    if (decoded == NULL) {
        PyErr_Clear();
        return NULL;
    }
    PyObject *raw = PyBytes_FromStringAndSize(text, (Py_ssize_t)length);
    if (raw == NULL) {
        Py_DECREF(decoded);
        return NULL;
    }
    Py_XSETREF(self->last_invocation_bytes, raw);
    Py_XSETREF(self->last_invocation, decoded);
    Py_INCREF(decoded);
    return decoded;
}

/* The current entry as a whole line's tuple; Py_None (borrowed) when it is not one; NULL on error. */
static PyObject *whole_line(Lines *self, uint64_t usec) {
    const void *data;
    size_t length;
    int counts[F_LINE_FIELDS] = {0};
    PyObject *message = NULL, *pid = NULL, *invocation = NULL;
    int unit_ok = 0, odd = 0;
    sd_journal_restart_data(self->journal);
    int r;
    while ((r = sd_journal_enumerate_data(self->journal, &data, &length)) > 0) {
        const char *value;
        size_t value_len;
        Py_ssize_t index = field_index(self, data, length, &value, &value_len);
        if (index < 0 || index >= F_LINE_FIELDS) continue;
        if (++counts[index] > 1 || index == F_LINE_BREAK) {
            odd = 1;
            break;
        }
        if (index == F_UNIT) {
            unit_ok = value_len == self->unit_len && memcmp(value, self->unit, value_len) == 0;
            if (!unit_ok) break;
        } else if (index == F_MESSAGE) {
            message = PyBytes_FromStringAndSize(value, (Py_ssize_t)value_len);
            if (message == NULL) goto error;
        } else if (index == F_PID) {
            pid = pid_object(self, value, value_len);
            if (pid == NULL) {
                if (PyErr_Occurred()) goto error;
                odd = 1;
                break;
            }
        } else {
            invocation = invocation_object(self, value, value_len);
            if (invocation == NULL) {
                if (PyErr_Occurred()) goto error;
                odd = 1;
                break;
            }
        }
    }
    if (r < 0) {
        os_error(r);
        goto error;
    }
    if (odd || !unit_ok || message == NULL || pid == NULL || invocation == NULL) {
        Py_XDECREF(message);
        Py_XDECREF(pid);
        Py_XDECREF(invocation);
        return Py_None;
    }
    PyObject *seconds = PyFloat_FromDouble((double)usec / 1e6);
    if (seconds == NULL) goto error;
    PyObject *line = PyTuple_New(4);
    if (line == NULL) {
        Py_DECREF(seconds);
        goto error;
    }
    PyTuple_SET_ITEM(line, 0, message);
    PyTuple_SET_ITEM(line, 1, seconds);
    PyTuple_SET_ITEM(line, 2, pid);
    PyTuple_SET_ITEM(line, 3, invocation);
    return line;
error:
    Py_XDECREF(message);
    Py_XDECREF(pid);
    Py_XDECREF(invocation);
    return NULL;
}

/* The current entry as a dict of the fields asked for (first value of each) and its time. */
static PyObject *entry_fields(Lines *self, uint64_t usec) {
    const void *data;
    size_t length;
    PyObject *fields = PyDict_New();
    if (fields == NULL) return NULL;
    sd_journal_restart_data(self->journal);
    int r;
    while ((r = sd_journal_enumerate_data(self->journal, &data, &length)) > 0) {
        const char *value;
        size_t value_len;
        Py_ssize_t index = field_index(self, data, length, &value, &value_len);
        if (index < 0) continue;
        PyObject *name = PyTuple_GET_ITEM(self->names, index);
        int present = PyDict_Contains(fields, name);
        if (present < 0) goto error;
        if (present) continue;
        PyObject *bytes = PyBytes_FromStringAndSize(value, (Py_ssize_t)value_len);
        if (bytes == NULL) goto error;
        int failed = PyDict_SetItem(fields, name, bytes);
        Py_DECREF(bytes);
        if (failed) goto error;
    }
    if (r < 0) {
        os_error(r);
        goto error;
    }
    PyObject *stamp = PyLong_FromUnsignedLongLong(usec);
    if (stamp == NULL) goto error;
    int failed = PyDict_SetItemString(fields, "__REALTIME_TIMESTAMP", stamp);
    Py_DECREF(stamp);
    if (failed) goto error;
    return fields;
error:
    Py_DECREF(fields);
    return NULL;
}

/* Whether `message` may join a run that ends with `previous` (both lines of one writer): the
 * same length, the same bytes up to the first ']' and the two after it, the same bytes after that
 * but for digits (which may differ from one to the other). */
static int continues(PyObject *previous, PyObject *message) {
    Py_ssize_t length = PyBytes_GET_SIZE(message);
    if (PyBytes_GET_SIZE(previous) != length) return 0;
    const unsigned char *a = (const unsigned char *)PyBytes_AS_STRING(previous);
    const unsigned char *b = (const unsigned char *)PyBytes_AS_STRING(message);
    const unsigned char *bracket = memchr(b, ']', (size_t)length);
    Py_ssize_t head = bracket == NULL ? length : (bracket - b) + 3;
    if (head > length) head = length;
    if (memcmp(a, b, (size_t)head) != 0) return 0;
    for (Py_ssize_t i = head; i < length; i++) {
        if (a[i] != b[i] && !(a[i] >= '0' && a[i] <= '9' && b[i] >= '0' && b[i] <= '9')) return 0;
    }
    return 1;
}

/* `line` (a whole line's tuple) appended to `out`, or to the run its last item is, if it continues it. */
static int add_line(PyObject *out, PyObject *line, int runs) {
    Py_ssize_t size = PyList_GET_SIZE(out);
    PyObject *last = size > 0 ? PyList_GET_ITEM(out, size - 1) : NULL;
    if (!runs || last == NULL || !PyTuple_CheckExact(last)
            || PyTuple_GET_ITEM(last, 2) != PyTuple_GET_ITEM(line, 2)     /* the pid and invocation objects */
            || PyTuple_GET_ITEM(last, 3) != PyTuple_GET_ITEM(line, 3)) { /* are reused while equal */
        return PyList_Append(out, line);
    }
    PyObject *messages = PyTuple_GET_ITEM(last, 0), *stamps = PyTuple_GET_ITEM(last, 1);
    int is_run = PyList_CheckExact(messages);
    PyObject *previous = is_run ? PyList_GET_ITEM(messages, PyList_GET_SIZE(messages) - 1) : messages;
    if (!continues(previous, PyTuple_GET_ITEM(line, 0))) return PyList_Append(out, line);
    if (is_run) {
        if (PyList_Append(messages, PyTuple_GET_ITEM(line, 0)) < 0) return -1;
        return PyList_Append(stamps, PyTuple_GET_ITEM(line, 1));
    }
    PyObject *run = Py_BuildValue("([OO][OO]OO)", messages, PyTuple_GET_ITEM(line, 0), stamps,
                                  PyTuple_GET_ITEM(line, 1), PyTuple_GET_ITEM(last, 2), PyTuple_GET_ITEM(last, 3));
    if (run == NULL) return -1;
    return PyList_SetItem(out, size - 1, run);  /* steals run */
}

PyDoc_STRVAR(lines_read_doc,
"read(limit, runs) -> (entries, others): up to `limit` entries (an empty list: the end), and how\n"
"many of them are dicts (not whole lines). With `runs`, consecutive whole lines of one writer that\n"
"`continues()` joins come as one tuple ([MESSAGE, ...], [seconds, ...], pid, invocation).");

static PyObject *lines_read(Lines *self, PyObject *args) {
    Py_ssize_t limit;
    int runs;
    if (!PyArg_ParseTuple(args, "np", &limit, &runs)) return NULL;
    if (self->journal == NULL) {
        PyErr_SetString(PyExc_ValueError, "the journal is closed");
        return NULL;
    }
    PyObject *out = PyList_New(0);
    if (out == NULL) return NULL;
    Py_ssize_t others = 0;
    for (Py_ssize_t n = 0; n < limit; n++) {
        int r = sd_journal_next(self->journal);
        if (r < 0) {
            os_error(r);
            goto error;
        }
        if (r == 0) break;
        uint64_t usec;
        r = sd_journal_get_realtime_usec(self->journal, &usec);
        if (r < 0) {
            os_error(r);
            goto error;
        }
        PyObject *entry = whole_line(self, usec);
        if (entry == NULL) goto error;
        int failed;
        if (entry == Py_None) {
            entry = entry_fields(self, usec);
            if (entry == NULL) goto error;
            others++;
            failed = PyList_Append(out, entry);
        } else {
            failed = add_line(out, entry, runs);
        }
        Py_DECREF(entry);
        if (failed) goto error;
    }
    return Py_BuildValue("(Nn)", out, others);
error:
    Py_DECREF(out);
    return NULL;
}

static PyObject *lines_close(Lines *self, PyObject *Py_UNUSED(ignored)) {
    lines_close_journal(self);
    Py_RETURN_NONE;
}

static PyMethodDef lines_methods[] = {
    {"read", (PyCFunction)lines_read, METH_VARARGS, lines_read_doc},
    {"close", (PyCFunction)lines_close, METH_NOARGS, "Close the journal."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject LinesType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "phasewatch._journal_lines.Lines",
    .tp_basicsize = sizeof(Lines),
    .tp_dealloc = (destructor)lines_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A unit's entries of a journal, read in batches (open()).",
    .tp_methods = lines_methods,
};

PyDoc_STRVAR(open_doc,
"open(unit, directory, since_usec, fields) -> Lines\n"
"The local journal (directory None) or the journal files of a directory, matched for `unit`, at its\n"
"head or at `since_usec` (realtime). `fields`: the field names the dicts hold, beginning with\n"
"_SYSTEMD_UNIT, MESSAGE, _PID, _SYSTEMD_INVOCATION_ID, _LINE_BREAK. OSError if it cannot be opened.");

static PyObject *lines_open(PyObject *Py_UNUSED(module), PyObject *args) {
    const char *unit, *directory;
    PyObject *since, *names;
    if (!PyArg_ParseTuple(args, "szOO!", &unit, &directory, &since, &PyTuple_Type, &names)) return NULL;
    Py_ssize_t count = PyTuple_GET_SIZE(names);
    static const char *line_fields[F_LINE_FIELDS] = {"_SYSTEMD_UNIT", "MESSAGE", "_PID", "_SYSTEMD_INVOCATION_ID",
                                                     "_LINE_BREAK"};
    if (count < F_LINE_FIELDS || count > MAX_FIELDS) {
        PyErr_SetString(PyExc_ValueError, "fields: the five line fields first, at most 64 in all");
        return NULL;
    }
    Lines *self = PyObject_New(Lines, &LinesType);
    if (self == NULL) return NULL;
    self->journal = NULL;
    self->unit = NULL;
    self->field_count = 0;
    self->field_names = NULL;
    self->field_lens = NULL;
    self->last_invocation_bytes = self->last_invocation = self->last_pid = NULL;
    self->last_pid_value = 0;
    Py_INCREF(names);
    self->names = names;
    self->unit_len = strlen(unit);
    self->unit = PyMem_Malloc(self->unit_len + 1);
    self->field_names = PyMem_Calloc((size_t)count, sizeof(char *));
    self->field_lens = PyMem_Calloc((size_t)count, sizeof(size_t));
    if (self->unit == NULL || self->field_names == NULL || self->field_lens == NULL) {
        PyErr_NoMemory();
        goto error;
    }
    memcpy(self->unit, unit, self->unit_len + 1);
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t len;
        const char *name = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(names, i), &len);
        if (name == NULL) goto error;
        if (i < F_LINE_FIELDS && strcmp(name, line_fields[i]) != 0) {
            PyErr_Format(PyExc_ValueError, "fields[%zd] must be %s", i, line_fields[i]);
            goto error;
        }
        self->field_names[i] = PyMem_Malloc((size_t)len + 1);
        if (self->field_names[i] == NULL) {
            PyErr_NoMemory();
            goto error;
        }
        memcpy(self->field_names[i], name, (size_t)len + 1);
        self->field_lens[i] = (size_t)len;
        self->field_count = i + 1;
    }
    int r;
    Py_BEGIN_ALLOW_THREADS
    r = directory ? sd_journal_open_directory(&self->journal, directory, 0)
                  : sd_journal_open(&self->journal, SD_JOURNAL_LOCAL_ONLY);
    Py_END_ALLOW_THREADS
    if (r < 0) {
        self->journal = NULL;
        os_error(r);
        goto error;
    }
    if ((r = sd_journal_set_data_threshold(self->journal, 0)) < 0
            || (r = add_match(self->journal, "_SYSTEMD_UNIT", unit)) < 0
            || (r = sd_journal_add_disjunction(self->journal)) < 0
            || (r = add_match(self->journal, "UNIT", unit)) < 0
            || (r = sd_journal_add_match(self->journal, "_PID=1", 0)) < 0
            || (r = sd_journal_add_match(self->journal, "_UID=0", 0)) < 0
            || (r = sd_journal_add_disjunction(self->journal)) < 0
            || (r = add_match(self->journal, "OBJECT_SYSTEMD_UNIT", unit)) < 0) {
        os_error(r);
        goto error;
    }
    if (since == Py_None) {
        r = sd_journal_seek_head(self->journal);
    } else {
        /* modulo 2**64, as systemd-python's seek_realtime takes it */
        unsigned long long usec = PyLong_AsUnsignedLongLongMask(since);
        if (usec == (unsigned long long)-1 && PyErr_Occurred()) goto error;
        r = sd_journal_seek_realtime_usec(self->journal, usec);
    }
    if (r < 0) {
        os_error(r);
        goto error;
    }
    return (PyObject *)self;
error:
    Py_DECREF(self);
    return NULL;
}

static PyMethodDef module_methods[] = {
    {"open", lines_open, METH_VARARGS, open_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "phasewatch._journal_lines",
    "A unit's journal entries in batches, read in C (the catch-up reader of replay --unit).", -1, module_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__journal_lines(void) {
    if (PyType_Ready(&LinesType) < 0) return NULL;
    return PyModule_Create(&module);
}
