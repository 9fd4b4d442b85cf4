/* phasewatch._journal_lines: the catch-up reader of `replay --unit` in C (sources/journal_source.py).
 *
 * One sd_journal, opened and matched as sources/journal_reader.py's UnitJournalReader opens its reader (the
 * unit's processes, PID 1 about the unit, journald's notices about it; data threshold 0), read in
 * batches, each in two steps:
 * - without the GIL (`collect`), the journal is walked: each entry's time and the first value of
 *   each field asked for (sd_journal_enumerate_data, one walk), copied into the object's own
 *   buffers, so that another thread runs Python meanwhile (journal_source reads ahead in a thread),
 *   and, with runs asked for, whether each entry's MESSAGE continues the one before (`continues()`);
 * - with it (the rest of `read`), each entry becomes
 *   - a whole line of the unit (_SYSTEMD_UNIT the unit, MESSAGE, _PID (decimal or empty) and
 *     _SYSTEMD_INVOCATION_ID (UTF-8) each present once, no _LINE_BREAK): a records.UnitLine
 *     (message: MESSAGE bytes, realtime: seconds float, pid: int or None, invocation_id: str), and
 *     with runs asked for, consecutive ones `continues()` joins: a records.UnitRun (messages, realtimes:
 *     lists; pid, invocation_id; shifts: the list of the indexes of its lines whose digits have other
 *     widths than the line's before; ids: of those the same as the line before only once the hex
 *     characters of their ids are masked too). Both are NamedTuples, tuple subclasses without instance fields
 *     of their own: `open()` is given the two classes and their instances are built here as tuples
 *     are (tp_alloc, PyTuple_SET_ITEM), items in the order of their fields;
 *   - any other entry: a dict of the fields asked for (the first value of each, bytes, as
 *     sd_journal_get_data gives it) plus "__REALTIME_TIMESTAMP" (int microseconds), which Python
 *     turns into a JournalRecord (or a trust rejection) exactly as before.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-journal.h>

/* The fields of a whole line, in the order `open()`'s `fields` must begin with. */
enum { F_UNIT, F_MESSAGE, F_PID, F_INVOCATION, F_LINE_BREAK, F_LINE_FIELDS };
#define MAX_FIELDS 64
#define NAME_LENGTHS 64  /* names this long or longer share the last slot */
/* A batch ends early once its fields' bytes reach this: what a batch holds (here, then as Python
 * objects, a few batches at once with the read-ahead) stays bounded whatever the lines' length. */
#define BATCH_BYTES (4 << 20)

/* A field's first value in an entry: its index among the fields asked for, where it is in `arena`. */
typedef struct {
    Py_ssize_t index;
    size_t offset, length;
} Value;

/* An entry collected: its time, its values (values[first_value .. first_value + value_count]), those
 * of the line fields (their indexes there, -1: none), whether a line field came twice or a
 * _LINE_BREAK came (then it is no whole line), and, with runs asked for, `continues()` of its MESSAGE
 * after the entry before's when both have their MESSAGE, the same _PID and _SYSTEMD_INVOCATION_ID
 * (found without the GIL; used where both are whole lines of one writer). */
typedef struct {
    uint64_t usec;
    size_t first_value, value_count;
    Py_ssize_t line_value[F_LINE_FIELDS];
    int odd;
    int joins;
} Slot;

/* Where lines of a run may differ in the head: digits at [free_start, free_end) (the engine's prefix
 * time, `Engine.run_time_digits`); free_end 0: nowhere. */
typedef struct {
    Py_ssize_t free_start, free_end;
} RunShape;

typedef struct {
    PyObject_HEAD
    sd_journal *journal;
    int busy;               /* a read is walking the journal without the GIL */
    char *unit;
    size_t unit_len;
    Py_ssize_t field_count;
    PyObject *names;        /* tuple of str: the field names, for the dicts */
    char **field_names;     /* their bytes */
    size_t *field_lens;
    /* the fields asked for by name length (field_index's lookup): the first of each length, then
     * the next of the same length; -1 ends */
    Py_ssize_t first_of_length[NAME_LENGTHS];
    Py_ssize_t next_of_length[MAX_FIELDS];
    PyObject *last_invocation_bytes;  /* the previous line's invocation, and its str (reused while equal) */
    PyObject *last_invocation;
    PyObject *last_pid;
    long last_pid_value;
    PyTypeObject *line_type;  /* records.UnitLine and records.UnitRun (open()'s) */
    PyTypeObject *run_type;
    /* what `collect` gathered (raw memory: it runs without the GIL) */
    Slot *slots;
    size_t slots_cap;
    Value *values;
    size_t values_len, values_cap;
    char *arena;
    size_t arena_len, arena_cap;
    /* `continues()`'s rests with their ids masked: [0] that of the slot `canon_of` - 1 (0: none;
     * reset at each read), [1] the next line's */
    unsigned char *canon[2];
    size_t canon_cap[2];
    size_t canon_of;
} Lines;

static int continues(Lines *self, size_t previous, size_t message, const RunShape *shape);

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
    Py_XDECREF(self->line_type);
    Py_XDECREF(self->run_type);
    PyMem_RawFree(self->slots);
    PyMem_RawFree(self->values);
    PyMem_RawFree(self->arena);
    PyMem_RawFree(self->canon[0]);
    PyMem_RawFree(self->canon[1]);
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
    for (Py_ssize_t i = self->first_of_length[name_len < NAME_LENGTHS ? name_len : NAME_LENGTHS - 1]; i >= 0;
         i = self->next_of_length[i]) {
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

/* `*buffer` (of `*capacity` items of `size` bytes) with room for `needed` items; -ENOMEM if none. */
static int reserve(void **buffer, size_t *capacity, size_t needed, size_t size) {
    if (needed <= *capacity) return 0;
    size_t grown = *capacity ? *capacity : 64;
    while (grown < needed) {
        if (grown > SIZE_MAX / 2) return -ENOMEM;
        grown *= 2;
    }
    if (grown > SIZE_MAX / size) return -ENOMEM;
    void *moved = PyMem_RawRealloc(*buffer, grown * size);
    if (moved == NULL) return -ENOMEM;
    *buffer = moved;
    *capacity = grown;
    return 0;
}

/* Whether two collected entries have a MESSAGE and the same _PID and _SYSTEMD_INVOCATION_ID bytes. */
static int same_writer(const Lines *self, const Slot *a, const Slot *b) {
    if (a->line_value[F_MESSAGE] < 0 || b->line_value[F_MESSAGE] < 0) return 0;
    for (int f = F_PID; f <= F_INVOCATION; f++) {
        if (a->line_value[f] < 0 || b->line_value[f] < 0) return 0;
        const Value *x = &self->values[a->line_value[f]], *y = &self->values[b->line_value[f]];
        if (x->length != y->length || memcmp(self->arena + x->offset, self->arena + y->offset, x->length) != 0)
            return 0;
    }
    return 1;
}

/* Up to `limit` entries walked and kept in the object's buffers (runs without the GIL); *count of
 * them; 0 or a negative errno. */
static int collect(Lines *self, Py_ssize_t limit, size_t *count, const RunShape *runs) {
    int r;
    *count = 0;
    self->values_len = self->arena_len = 0;
    self->canon_of = 0;
    for (Py_ssize_t n = 0; n < limit; n++) {
        r = sd_journal_next(self->journal);
        if (r <= 0) return r;
        if ((r = reserve((void **)&self->slots, &self->slots_cap, (size_t)n + 1, sizeof(Slot))) < 0) return r;
        Slot *slot = &self->slots[n];
        if ((r = sd_journal_get_realtime_usec(self->journal, &slot->usec)) < 0) return r;
        slot->first_value = self->values_len;
        slot->odd = slot->joins = 0;
        for (int f = 0; f < F_LINE_FIELDS; f++) slot->line_value[f] = -1;
        uint64_t seen = 0;
        const void *data;
        size_t length;
        sd_journal_restart_data(self->journal);
        while ((r = sd_journal_enumerate_data(self->journal, &data, &length)) > 0) {
            const char *value;
            size_t value_len;
            Py_ssize_t index = field_index(self, data, length, &value, &value_len);
            if (index < 0) continue;
            if (index == F_LINE_BREAK) slot->odd = 1;
            if (seen >> index & 1) {
                if (index < F_LINE_FIELDS) slot->odd = 1;
                continue;
            }
            seen |= (uint64_t)1 << index;
            if (index < F_LINE_FIELDS) slot->line_value[index] = (Py_ssize_t)self->values_len;
            if ((r = reserve((void **)&self->values, &self->values_cap, self->values_len + 1, sizeof(Value))) < 0
                    || (r = reserve((void **)&self->arena, &self->arena_cap, self->arena_len + value_len, 1)) < 0)
                return r;
            if (value_len > 0) memcpy(self->arena + self->arena_len, value, value_len);
            self->values[self->values_len++] = (Value){index, self->arena_len, value_len};
            self->arena_len += value_len;
        }
        if (r < 0) return r;
        slot->value_count = self->values_len - slot->first_value;
        if (runs != NULL && n > 0 && same_writer(self, slot - 1, slot))
            slot->joins = continues(self, (size_t)n - 1, (size_t)n, runs);
        *count = (size_t)n + 1;
        if (self->arena_len >= BATCH_BYTES) break;  /* long lines: a shorter batch */
    }
    return 0;
}

/* An instance of `type` (a UnitLine: a tuple of four, or a UnitRun: of five) holding the `n` items,
 * references stolen (each released if it cannot be built); NULL on error. */
static PyObject *built(PyTypeObject *type, PyObject **items, Py_ssize_t n) {
    PyObject *tuple = type->tp_alloc(type, n);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (tuple == NULL) Py_DECREF(items[i]);
        else PyTuple_SET_ITEM(tuple, i, items[i]);
    }
    return tuple;
}

/* A whole line's items, in a UnitLine's order (message, realtime, pid, invocation_id). */
enum { I_MESSAGE, I_REALTIME, I_PID, I_INVOCATION };
/* A UnitRun's (messages, realtimes, pid, invocation_id, shifts, ids): its pid and invocation_id where
 * a line's are. */
enum { I_MESSAGES, I_REALTIMES, I_SHIFTS = 4, I_IDS = 5 };

/* Whether a collected entry is a whole line: 1 with its four items in `items` (new references), 0 if
 * not, -1 on error. */
static int whole_line(Lines *self, const Slot *slot, PyObject *items[4]) {
    const Value *line[F_LINE_FIELDS];
    for (int f = 0; f < F_LINE_FIELDS; f++) line[f] = slot->line_value[f] < 0 ? NULL : &self->values[slot->line_value[f]];
    const Value *unit = line[F_UNIT], *text = line[F_MESSAGE], *pid_text = line[F_PID], *inv = line[F_INVOCATION];
    if (slot->odd || unit == NULL || text == NULL || pid_text == NULL || inv == NULL
            || unit->length != self->unit_len || memcmp(self->arena + unit->offset, self->unit, self->unit_len) != 0)
        return 0;
    PyObject *pid = pid_object(self, self->arena + pid_text->offset, pid_text->length);
    if (pid == NULL) return PyErr_Occurred() ? -1 : 0;
    PyObject *invocation = invocation_object(self, self->arena + inv->offset, inv->length);
    if (invocation == NULL) {
        Py_DECREF(pid);
        return PyErr_Occurred() ? -1 : 0;
    }
    PyObject *message = PyBytes_FromStringAndSize(self->arena + text->offset, (Py_ssize_t)text->length);
    PyObject *seconds = message == NULL ? NULL : PyFloat_FromDouble((double)slot->usec / 1e6);
    if (seconds == NULL) {
        Py_XDECREF(message);
        Py_DECREF(pid);
        Py_DECREF(invocation);
        return -1;
    }
    items[I_MESSAGE] = message;
    items[I_REALTIME] = seconds;
    items[I_PID] = pid;
    items[I_INVOCATION] = invocation;
    return 1;
}

/* A collected entry as a dict of the fields asked for (first value of each) and its time. */
static PyObject *entry_fields(Lines *self, const Slot *slot) {
    PyObject *fields = PyDict_New();
    if (fields == NULL) return NULL;
    for (size_t i = 0; i < slot->value_count; i++) {
        const Value *v = &self->values[slot->first_value + i];
        PyObject *bytes = PyBytes_FromStringAndSize(self->arena + v->offset, (Py_ssize_t)v->length);
        if (bytes == NULL) goto error;
        int failed = PyDict_SetItem(fields, PyTuple_GET_ITEM(self->names, v->index), bytes);
        Py_DECREF(bytes);
        if (failed) goto error;
    }
    PyObject *stamp = PyLong_FromUnsignedLongLong(slot->usec);
    if (stamp == NULL) goto error;
    int failed = PyDict_SetItemString(fields, "__REALTIME_TIMESTAMP", stamp);
    Py_DECREF(stamp);
    if (failed) goto error;
    return fields;
error:
    Py_DECREF(fields);
    return NULL;
}

static int is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

/* How many bytes `a` and `b` have the same from their start, of the first `n` (eight at a time). */
static Py_ssize_t common_length(const unsigned char *a, const unsigned char *b, Py_ssize_t n) {
    Py_ssize_t k = 0;
#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    for (; k + 8 <= n; k += 8) {
        uint64_t x, y;
        memcpy(&x, a + k, 8);
        memcpy(&y, b + k, 8);
        if (x != y) return k + (__builtin_ctzll(x ^ y) >> 3);
    }
#endif
    while (k < n && a[k] == b[k]) k++;
    return k;
}

/* [0-9a-f]: 1 (digits 2), anything else 0 */
static const unsigned char HEX_KIND[256] = {
    ['0'] = 2, ['1'] = 2, ['2'] = 2, ['3'] = 2, ['4'] = 2, ['5'] = 2, ['6'] = 2, ['7'] = 2, ['8'] = 2, ['9'] = 2,
    ['a'] = 1, ['b'] = 1, ['c'] = 1, ['d'] = 1, ['e'] = 1, ['f'] = 1,
};

static int is_hex(unsigned char c) { return HEX_KIND[c] != 0; }

static Py_ssize_t hex_end(const unsigned char *text, Py_ssize_t from, Py_ssize_t n) {
    while (from < n && HEX_KIND[text[from]]) from++;
    return from;
}

/* Whether the rests `a` and `b` are alike: 0 if not, 1 if they are the same bytes but for digits,
 * each run of digits as wide in both, 2 if the same but for runs of digits of any width (a busy
 * server's numbers grow and shrink: `#token: 9813` then `#token: 112406`). With `hex`, runs of
 * [0-9a-f] instead of digits: alike so whenever they are once their ids are masked (`mask_ids`
 * writes '0' for hex characters only), and far cheaper to find not alike. */
static int rests_alike(const unsigned char *a, Py_ssize_t la, const unsigned char *b, Py_ssize_t lb, int hex) {
#define IN_RUN(c) (hex ? is_hex(c) : is_digit(c))
    Py_ssize_t i = 0, j = 0;
    int widths = 1;
    for (;;) {
        Py_ssize_t synced = i, same = common_length(a + i, b + j, la - i < lb - j ? la - i : lb - j);
        i += same;
        j += same;
        if (i == la && j == lb) return widths;
        /* where they differ (or one ends): inside a run of digits of both, or they differ */
        while (i > synced && IN_RUN(a[i - 1])) {
            i--;
            j--;
        }
        if (i == la || j == lb || !IN_RUN(a[i]) || !IN_RUN(b[j])) return 0;
        Py_ssize_t from_i = i, from_j = j;
        while (i < la && IN_RUN(a[i])) i++;
        while (j < lb && IN_RUN(b[j])) j++;
        if (i - from_i != j - from_j) widths = 2;
    }
#undef IN_RUN
}

/* `src`'s `n` bytes into `dst` as pattern_needles.mask_ids(digit-masked src) gives them: every digit
 * as '0', then every hex character of an id as '0': a run of 8 or more of [0-9a-f] followed by any
 * '-' and 4 or more of them, or a run of 4 or more followed by two or more such (its `_ID_RUN`,
 * taken left to right as re.sub takes it: a run only matches from its first character). */
static void mask_ids(const unsigned char *src, Py_ssize_t n, unsigned char *dst) {
    Py_ssize_t i = 0;
    while (i < n) {
        unsigned char kind = HEX_KIND[src[i]];
        if (!kind) {
            dst[i] = src[i];
            i++;
            continue;
        }
        Py_ssize_t run_end = hex_end(src, i, n), end = run_end, groups = 0;
        while (end < n && src[end] == '-') {
            Py_ssize_t group_end = hex_end(src, end + 1, n);
            if (group_end - (end + 1) < 4) break;
            groups++;
            end = group_end;
        }
        if (run_end - i >= 8 || (run_end - i >= 4 && groups >= 2)) {
            for (; i < end; i++) dst[i] = src[i] == '-' ? '-' : '0';
        } else {
            for (; i < run_end; i++) dst[i] = HEX_KIND[src[i]] == 2 ? '0' : src[i];
        }
    }
}

/* Whether `message` may join a run that ends with `previous` (both lines of one writer): 0 if not,
 * 1 if it may and each of its runs of digits has the width of `previous`'s, 2 if some has another,
 * 3 if their rests are not the same but for digits and are once the hex characters of their ids are
 * masked too (`mask_ids`; each run of digits as wide: the same text there). The same bytes up to the
 * first ']' and the two after it but for digits in the shape's free span (a line without ']', or that
 * ends there, is all head: the same length too), and after that, the rests alike (`rests_alike`),
 * as they are or with their ids masked. Which of a run's lines the fast path takes is its own to
 * say (each line's plan is looked up there, where it can differ: `shifts` and `ids`); a run only
 * says which lines may be alike. */
static int continues(Lines *self, size_t previous, size_t message, const RunShape *shape) {
    const Value *va = &self->values[self->slots[previous].line_value[F_MESSAGE]];
    const Value *vb = &self->values[self->slots[message].line_value[F_MESSAGE]];
    Py_ssize_t la = (Py_ssize_t)va->length, lb = (Py_ssize_t)vb->length;
    const unsigned char *a = (const unsigned char *)self->arena + va->offset;
    const unsigned char *b = (const unsigned char *)self->arena + vb->offset;
    const unsigned char *bracket = memchr(b, ']', (size_t)lb);
    Py_ssize_t head = bracket == NULL ? lb : (bracket - b) + 3;
    if (head > lb) head = lb;
    if (la < head || (head == lb && la != lb)) return 0;
    if (memcmp(a, b, (size_t)head) != 0) {
        for (Py_ssize_t i = 0; i < head; i++) {
            if (a[i] != b[i] && !(i >= shape->free_start && i < shape->free_end && is_digit(a[i]) && is_digit(b[i])))
                return 0;
        }
    }
    int alike = rests_alike(a + head, la - head, b + head, lb - head, 0);
    if (alike) return alike;
    /* (masked already when it was the line that came: a line of ids, very likely the same once masked) */
    int masked = self->canon_of == previous + 1;
    if (!masked && !rests_alike(a + head, la - head, b + head, lb - head, 1)) return 0;
    if (reserve((void **)&self->canon[1], &self->canon_cap[1], (size_t)lb, 1) < 0
            || (!masked && reserve((void **)&self->canon[0], &self->canon_cap[0], (size_t)la, 1) < 0)) {
        self->canon_of = 0;
        return 0;
    }
    if (!masked) mask_ids(a + head, la - head, self->canon[0]);
    mask_ids(b + head, lb - head, self->canon[1]);
    alike = la == lb && memcmp(self->canon[0], self->canon[1], (size_t)(la - head)) == 0
        ? 1 : rests_alike(self->canon[0], la - head, self->canon[1], lb - head, 0);
    /* `message` ends the batch now, joined or not: the line the next one is compared with */
    unsigned char *kept = self->canon[1];
    size_t kept_cap = self->canon_cap[1];
    self->canon[1] = self->canon[0];
    self->canon_cap[1] = self->canon_cap[0];
    self->canon[0] = kept;
    self->canon_cap[0] = kept_cap;
    self->canon_of = message + 1;
    return alike == 1 ? 3 : alike;
}

/* A whole line's `items` (references stolen) appended to `out` as a UnitLine, or, with `runs`, to
 * the line or run (a UnitRun) that ends `out` if the line continues it: a line and a line that
 * continues it become a run. (A line that joins a run is no UnitLine of its own.)
 * A UnitLine holds bytes, a float, an int or None and a str: it can be in no reference cycle, and is
 * left untracked by the garbage collector (which untracks a plain tuple of such items at its first
 * collection, but not a tuple subclass's instance); a UnitRun's lists stay tracked, and the UnitRun
 * with them, as a plain tuple holding lists would. */
static int add_line(Lines *self, PyObject *out, PyObject *items[4], int runs, int joins) {
    Py_ssize_t size = PyList_GET_SIZE(out);
    PyObject *last = runs && size > 0 ? PyList_GET_ITEM(out, size - 1) : NULL;
    int is_run = last != NULL && Py_IS_TYPE(last, self->run_type);
    /* (the pid and invocation objects are reused while equal: one writer's lines share them) */
    if (last != NULL && (is_run || Py_IS_TYPE(last, self->line_type))
            && PyTuple_GET_ITEM(last, I_PID) == items[I_PID]
            && PyTuple_GET_ITEM(last, I_INVOCATION) == items[I_INVOCATION]) {
        PyObject *message = items[I_MESSAGE], *seconds = items[I_REALTIME];
        if (is_run) {
            PyObject *messages = PyTuple_GET_ITEM(last, I_MESSAGES), *stamps = PyTuple_GET_ITEM(last, I_REALTIMES);
            Py_ssize_t index = PyList_GET_SIZE(messages);
            if (joins) {
                int failed = PyList_Append(messages, message) < 0 || PyList_Append(stamps, seconds) < 0;
                if (!failed && joins >= 2) {
                    PyObject *shift = PyLong_FromSsize_t(index);
                    failed = shift == NULL
                        || PyList_Append(PyTuple_GET_ITEM(last, joins == 2 ? I_SHIFTS : I_IDS), shift) < 0;
                    Py_XDECREF(shift);
                }
                for (int i = 0; i < 4; i++) Py_DECREF(items[i]);
                return failed ? -1 : 0;
            }
        } else if (joins) {
            PyObject *messages = PyList_New(2), *stamps = messages == NULL ? NULL : PyList_New(2);
            PyObject *shifts = stamps == NULL ? NULL : joins == 2 ? Py_BuildValue("[i]", 1) : PyList_New(0);
            PyObject *ids = shifts == NULL ? NULL : joins == 3 ? Py_BuildValue("[i]", 1) : PyList_New(0);
            if (ids == NULL) {
                Py_XDECREF(messages);
                Py_XDECREF(stamps);
                Py_XDECREF(shifts);
                for (int i = 0; i < 4; i++) Py_DECREF(items[i]);
                return -1;
            }
            PyObject *first = PyTuple_GET_ITEM(last, I_MESSAGE), *first_seconds = PyTuple_GET_ITEM(last, I_REALTIME);
            Py_INCREF(first);
            PyList_SET_ITEM(messages, 0, first);
            PyList_SET_ITEM(messages, 1, message);  /* (the items' references, stolen) */
            Py_INCREF(first_seconds);
            PyList_SET_ITEM(stamps, 0, first_seconds);
            PyList_SET_ITEM(stamps, 1, seconds);
            PyObject *run_items[6] = {messages, stamps, items[I_PID], items[I_INVOCATION], shifts, ids};
            PyObject *run = built(self->run_type, run_items, 6);
            if (run == NULL) return -1;
            return PyList_SetItem(out, size - 1, run);  /* steals run, releases the line it replaces */
        }
    }
    PyObject *line = built(self->line_type, items, 4);
    if (line == NULL) return -1;
    PyObject_GC_UnTrack(line);
    int failed = PyList_Append(out, line);
    Py_DECREF(line);
    return failed;
}

PyDoc_STRVAR(lines_read_doc,
"read(limit, runs, free_start=0, free_end=0) -> (entries, others): up to `limit` entries (fewer once\n"
"their fields hold BATCH_BYTES; an empty list: the end), and how many of them are dicts (not whole lines). With `runs`, consecutive whole\n"
"lines of one writer that `continues()` joins come as one UnitRun ([MESSAGE, ...], [seconds, ...], pid,\n"
"invocation, shifts, ids); their heads may differ in digits at [free_start, free_end) (the prefix's time).");

/* Whether the journal can be read now; if not, the error is set (closed, or in another thread's read). */
static int usable(Lines *self) {
    if (self->journal == NULL) {
        PyErr_SetString(PyExc_ValueError, "the journal is closed");
        return 0;
    }
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "another thread is reading this journal");
        return 0;
    }
    return 1;
}

static PyObject *lines_read(Lines *self, PyObject *args) {
    Py_ssize_t limit;
    int runs;
    RunShape shape = {0, 0};
    if (!PyArg_ParseTuple(args, "np|nn", &limit, &runs, &shape.free_start, &shape.free_end)) return NULL;
    if (!usable(self)) return NULL;
    if (limit < 0) limit = 0;
    size_t count;
    int r;
    /* busy until the buffers are read: building objects may run other threads' Python (a GC) */
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    r = collect(self, limit, &count, runs ? &shape : NULL);
    Py_END_ALLOW_THREADS
    if (r < 0) {
        self->busy = 0;
        return os_error(r);
    }
    PyObject *out = PyList_New(0);
    if (out == NULL) {
        self->busy = 0;
        return NULL;
    }
    Py_ssize_t others = 0;
    for (size_t n = 0; n < count; n++) {
        const Slot *slot = &self->slots[n];
        PyObject *items[4];
        int line = whole_line(self, slot, items);
        if (line < 0) goto error;
        if (line) {
            if (add_line(self, out, items, runs, slot->joins) < 0) goto error;
            continue;
        }
        PyObject *entry = entry_fields(self, slot);
        if (entry == NULL) goto error;
        others++;
        int failed = PyList_Append(out, entry);
        Py_DECREF(entry);
        if (failed) goto error;
    }
    self->busy = 0;
    return Py_BuildValue("(Nn)", out, others);
error:
    self->busy = 0;
    Py_DECREF(out);
    return NULL;
}

static PyObject *lines_close(Lines *self, PyObject *Py_UNUSED(ignored)) {
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "another thread is reading this journal");
        return NULL;
    }
    lines_close_journal(self);
    Py_RETURN_NONE;
}

static PyObject *lines_cursor(Lines *self, PyObject *Py_UNUSED(ignored)) {
    if (!usable(self)) return NULL;
    char *cursor = NULL;
    int r = sd_journal_get_cursor(self->journal, &cursor);
    if (r == -EADDRNOTAVAIL) Py_RETURN_NONE;  /* no entry read yet */
    if (r < 0) return os_error(r);
    PyObject *text = PyUnicode_FromString(cursor);
    free(cursor);
    return text;
}

static PyMethodDef lines_methods[] = {
    {"read", (PyCFunction)lines_read, METH_VARARGS, lines_read_doc},
    {"cursor", (PyCFunction)lines_cursor, METH_NOARGS,
     "The cursor of the last entry read (after the end: the journal's last matching one); None before any."},
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
"open(unit, directory, since_usec, fields, line_type, run_type) -> Lines\n"
"The local journal (directory None) or the journal files of a directory, matched for `unit`, at its\n"
"head or at `since_usec` (realtime). `fields`: the field names the dicts hold, beginning with\n"
"_SYSTEMD_UNIT, MESSAGE, _PID, _SYSTEMD_INVOCATION_ID, _LINE_BREAK. `line_type`, `run_type`: the classes\n"
"whole lines and runs are built as (records.UnitLine, records.UnitRun: NamedTuples of four and six fields).\n"
"OSError if it cannot be opened.");

/* Whether `type` can be built as a tuple of `n` (a NamedTuple of `n` fields: a tuple subclass with
 * no instance fields of its own); if not, TypeError is set. */
static int has_fields(PyTypeObject *type, Py_ssize_t n, const char *what) {
    if (PyType_IsSubtype(type, &PyTuple_Type) && type->tp_basicsize == PyTuple_Type.tp_basicsize
            && type->tp_itemsize == PyTuple_Type.tp_itemsize) {
        PyObject *fields = PyObject_GetAttrString((PyObject *)type, "_fields");
        int ok = fields != NULL && PyTuple_Check(fields) && PyTuple_GET_SIZE(fields) == n;
        Py_XDECREF(fields);
        PyErr_Clear();
        if (ok) return 1;
    }
    PyErr_Format(PyExc_TypeError, "%s: a NamedTuple of %zd fields, not %.200s", what, n, type->tp_name);
    return 0;
}

static PyObject *lines_open(PyObject *Py_UNUSED(module), PyObject *args) {
    const char *unit, *directory;
    PyObject *since, *names;
    PyTypeObject *line_type, *run_type;
    if (!PyArg_ParseTuple(args, "szOO!O!O!", &unit, &directory, &since, &PyTuple_Type, &names, &PyType_Type,
                          &line_type, &PyType_Type, &run_type))
        return NULL;
    if (!has_fields(line_type, 4, "line_type") || !has_fields(run_type, 6, "run_type")) return NULL;
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
    self->busy = 0;
    self->slots = NULL;
    self->values = NULL;
    self->arena = NULL;
    self->canon[0] = self->canon[1] = NULL;
    self->canon_cap[0] = self->canon_cap[1] = 0;
    self->canon_of = 0;
    self->slots_cap = self->values_len = self->values_cap = self->arena_len = self->arena_cap = 0;
    self->unit = NULL;
    self->field_count = 0;
    self->field_names = NULL;
    self->field_lens = NULL;
    self->last_invocation_bytes = self->last_invocation = self->last_pid = NULL;
    self->last_pid_value = 0;
    Py_INCREF(line_type);
    self->line_type = line_type;
    Py_INCREF(run_type);
    self->run_type = run_type;
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
    for (Py_ssize_t k = 0; k < NAME_LENGTHS; k++) self->first_of_length[k] = -1;
    for (Py_ssize_t i = count - 1; i >= 0; i--) {  /* each length's list in the order asked */
        size_t slot = self->field_lens[i] < NAME_LENGTHS ? self->field_lens[i] : NAME_LENGTHS - 1;
        self->next_of_length[i] = self->first_of_length[slot];
        self->first_of_length[slot] = i;
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

static int module_exec_constants(PyObject *m) {
    return PyModule_AddIntConstant(m, "BATCH_BYTES", BATCH_BYTES);
}

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "phasewatch._journal_lines",
    "A unit's journal entries in batches, read in C (the catch-up reader of replay --unit).", -1, module_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__journal_lines(void) {
    if (PyType_Ready(&LinesType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && module_exec_constants(m) < 0) Py_CLEAR(m);
    return m;
}
