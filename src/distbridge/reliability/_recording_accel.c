/* The collective ledger's recording step in C, for CPython 3.11.

   `distbridge.reliability.recording.recorded` records every public collective of a model.
   This module does what its pure-Python wrapper does (`recording._python_wrapper`) without
   making frame objects: the caller's code position is read from the interpreter's frame
   chain (`sys._getframe` makes a frame object for each frame it returns, and through the
   facade a new one on every call). It offers two entries:

   Recorded(spec, bound)
       the method descriptor put on the model class (torch 2.13 on): called as
       `model.all_reduce(x)` it records and calls the method with no Python frame of its
       own; read as an attribute it gives `bound`, the Python wrapper below.
   record_call(spec, self, a0, a1, a2, a3, rest, kwargs)
       the step of that Python wrapper, which checks for Dynamo tracing first.
       spec: (method, op, payload: bool, payload name: str, group position: int)
       a0..a3: the wrapper's positional-only slots (the `not given` marker when absent)
       rest: the further positional arguments (a tuple), kwargs: a dict

   `recording.py` records in Python where this module is not built (another Python, no
   compiler); tests/unit/test_recording_accel.py compares the two.
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#if PY_VERSION_HEX < 0x030B0000 || PY_VERSION_HEX >= 0x030C0000
#error "the ledger accelerator reads CPython 3.11's frame layout; recording.py records in Python elsewhere"
#endif

#define Py_BUILD_CORE
#include "internal/pycore_frame.h"
#undef Py_BUILD_CORE
#include "structmember.h" /* T_OBJECT_EX */

static PyObject *NOT_GIVEN;   /* recording._NO */
static PyObject *INSIDE;      /* recording._INSIDE: file name -> whether it is distbridge's */
static PyObject *CLASSIFY;    /* recording._classify(file name) -> bool, fills INSIDE */
static PyObject *TENSOR;      /* torch.Tensor */
static PyObject *GROUP_LOG;   /* ledger.GroupLog: its __slots__ are read at their offsets */
static PyObject *S_LEDGER, *S_WORLD, *S_LOG_OF, *S_SEQ, *S_PASSED, *S_RING, *S_CAPACITY,
    *S_RAISED, *S_GROUP, *S_DTYPE, *S_SHAPE, *S_CLASS;

/* A GroupLog slot: its name and, once configured, its offset in the object. */
typedef struct {
    PyObject **name;
    Py_ssize_t offset;
} Slot;
enum { SEQ, PASSED, RING, CAPACITY, RAISED, N_SLOTS };
static Slot SLOTS[N_SLOTS] = {
    {&S_SEQ, 0}, {&S_PASSED, 0}, {&S_RING, 0}, {&S_CAPACITY, 0}, {&S_RAISED, 0},
};

/* log.<slot> (a new reference), read at its offset when log is exactly a GroupLog. */
static PyObject *
log_get(PyObject *log, int which)
{
    if ((PyObject *)Py_TYPE(log) == GROUP_LOG) {
        PyObject *value = *(PyObject **)((char *)log + SLOTS[which].offset);
        if (value != NULL) {
            return Py_NewRef(value);
        }
    }
    return PyObject_GetAttr(log, *SLOTS[which].name);
}

/* log.<slot> = value (not stolen); -1 with an exception set on failure. */
static int
log_set(PyObject *log, int which, PyObject *value)
{
    if ((PyObject *)Py_TYPE(log) == GROUP_LOG) {
        PyObject **place = (PyObject **)((char *)log + SLOTS[which].offset);
        Py_XSETREF(*place, Py_NewRef(value));
        return 0;
    }
    return PyObject_SetAttr(log, *SLOTS[which].name, value);
}

/* The previous complete frame (what f_back gives), or NULL. */
static _PyInterpreterFrame *
previous_frame(_PyInterpreterFrame *frame)
{
    frame = frame->previous;
    while (frame != NULL && _PyFrame_IsIncomplete(frame)) {
        frame = frame->previous;
    }
    return frame;
}

/* Whether a file is distbridge's own: the cache, else recording._classify; -1 on error. */
static int
is_inside(PyObject *filename)
{
    PyObject *known = PyDict_GetItemWithError(INSIDE, filename); /* borrowed */
    if (known == NULL) {
        if (PyErr_Occurred()) {
            return -1;
        }
        known = PyObject_CallOneArg(CLASSIFY, filename);
        if (known == NULL) {
            return -1;
        }
        int inside = PyObject_IsTrue(known);
        Py_DECREF(known);
        return inside;
    }
    return known == Py_True;
}

/* The first frame outside distbridge from the caller back (the last one reached if all are
   inside), as recording._outside finds it from sys._getframe(1) in the Python wrapper. The
   caller is the current Python frame, or the one before it when the current one is the
   Python wrapper (``skip_current``). */
static _PyInterpreterFrame *
caller_outside(int skip_current)
{
    _PyInterpreterFrame *frame = PyThreadState_Get()->cframe->current_frame;
    if (frame != NULL && (skip_current || _PyFrame_IsIncomplete(frame))) {
        frame = previous_frame(frame);
    }
    while (frame != NULL) {
        int inside = is_inside(frame->f_code->co_filename);
        if (inside < 0) {
            return NULL;
        }
        _PyInterpreterFrame *back = previous_frame(frame);
        if (!inside || back == NULL) {
            return frame;
        }
        frame = back;
    }
    return NULL;
}

static Py_ssize_t
log_get_ssize(PyObject *log, int which)
{
    PyObject *number = log_get(log, which);
    if (number == NULL) {
        return -1;
    }
    Py_ssize_t value = PyLong_AsSsize_t(number);
    Py_DECREF(number);
    return value;
}

/* The collective ended (returned or raised): log.passed = log.seq; if it raised, also
   log.raised[seq % capacity] = seq. -1 with an exception set if that failed. */
static int
mark_passed(PyObject *log, PyObject *seq, Py_ssize_t slot, int raised)
{
    PyObject *last = log_get(log, SEQ);
    if (last == NULL) {
        return -1;
    }
    int failed = log_set(log, PASSED, last);
    Py_DECREF(last);
    if (failed || !raised) {
        return failed;
    }
    PyObject *marks = log_get(log, RAISED);
    PyObject *index = PyLong_FromSsize_t(slot);
    failed = -1;
    if (marks != NULL && index != NULL) {
        failed = PyObject_SetItem(marks, index, seq);
    }
    Py_XDECREF(marks);
    Py_XDECREF(index);
    return failed;
}

/* method(self, <the given slots>, *rest, **kwargs) */
static PyObject *
forward(PyObject *method, PyObject *self, PyObject *const *slots, PyObject *rest,
        PyObject *kwargs)
{
    PyObject *stack[5];
    Py_ssize_t given = 0;
    stack[0] = self;
    while (given < 4 && slots[given] != NOT_GIVEN) {
        stack[1 + given] = slots[given];
        given++;
    }
    Py_ssize_t extra = PyTuple_GET_SIZE(rest);
    int has_kwargs = PyDict_GET_SIZE(kwargs) > 0;
    if (extra == 0 && !has_kwargs) {
        return PyObject_Vectorcall(method, stack, 1 + given, NULL);
    }
    PyObject *args = PyTuple_New(1 + given + extra);
    if (args == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < 1 + given; i++) {
        Py_INCREF(stack[i]);
        PyTuple_SET_ITEM(args, i, stack[i]);
    }
    for (Py_ssize_t i = 0; i < extra; i++) {
        PyObject *item = PyTuple_GET_ITEM(rest, i);
        Py_INCREF(item);
        PyTuple_SET_ITEM(args, 1 + given + i, item);
    }
    PyObject *result = PyObject_Call(method, args, has_kwargs ? kwargs : NULL);
    Py_DECREF(args);
    return result;
}

/* Start the entry of a call of ``spec`` on ``self`` with this group and payload: returns
   its log (a new reference) and sets *seq (a new reference) and *slot; returns None (a new
   reference) when nothing is recorded (not a member, not a group); NULL on error (an entry
   already started stays started, as in the Python wrapper). */
static PyObject *
begin(PyObject *spec, PyObject *self, PyObject *group, PyObject *x, int skip_current,
      PyObject **seq, Py_ssize_t *slot)
{
    PyObject *ledger = PyObject_GetAttr(self, S_LEDGER);
    if (ledger == NULL) {
        return NULL;
    }
    PyObject *log = group == Py_None ? PyObject_GetAttr(ledger, S_WORLD)
                                     : PyObject_CallMethodOneArg(ledger, S_LOG_OF, group);
    Py_DECREF(ledger);
    if (log == NULL || log == Py_None) { /* None: the collective says why itself */
        return log;
    }
    _PyInterpreterFrame *frame = caller_outside(skip_current);
    if (frame == NULL) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_ValueError, "call stack is not deep enough");
        }
        Py_DECREF(log);
        return NULL;
    }
    PyObject *code = (PyObject *)frame->f_code;
    int lasti = _PyInterpreterFrame_LASTI(frame);
    long offset = lasti < 0 ? -1 : (long)lasti * (long)sizeof(_Py_CODEUNIT); /* as f_lasti */

    Py_ssize_t count = log_get_ssize(log, SEQ);
    Py_ssize_t capacity = count < 0 ? -1 : log_get_ssize(log, CAPACITY);
    if (count < 0 || capacity <= 0) {
        if (!PyErr_Occurred()) {
            PyErr_Format(PyExc_ValueError,
                         "a group log's seq (%zd) and capacity (%zd) must be positive", count,
                         capacity);
        }
        Py_DECREF(log);
        return NULL;
    }
    *slot = (count + 1) % capacity;
    *seq = PyLong_FromSsize_t(count + 1);
    if (*seq == NULL || log_set(log, SEQ, *seq) < 0) {
        goto failed;
    }
    /* entry: (seq, op, dtype or type, shape or None, code, instruction offset) */
    PyObject *entry = PyTuple_New(6);
    if (entry == NULL) {
        goto failed;
    }
    PyTuple_SET_ITEM(entry, 0, Py_NewRef(*seq));
    PyTuple_SET_ITEM(entry, 1, Py_NewRef(PyTuple_GET_ITEM(spec, 1)));
    PyTuple_SET_ITEM(entry, 4, Py_NewRef(code));
    PyObject *kind, *shape;
    if ((PyObject *)Py_TYPE(x) == TENSOR) {
        kind = PyObject_GetAttr(x, S_DTYPE);
        shape = kind == NULL ? NULL : PyObject_GetAttr(x, S_SHAPE);
    }
    else {
        kind = PyObject_GetAttr(x, S_CLASS);
        shape = Py_NewRef(Py_None);
    }
    PyObject *where = PyLong_FromLong(offset);
    /* unset items are NULL until now: the tuple is freed whole if one is missing */
    PyTuple_SET_ITEM(entry, 2, kind);
    PyTuple_SET_ITEM(entry, 3, shape);
    PyTuple_SET_ITEM(entry, 5, where);
    if (kind == NULL || shape == NULL || where == NULL) {
        Py_DECREF(entry);
        goto failed;
    }
    PyObject *ring = log_get(log, RING);
    int stored = -1;
    if (ring != NULL) {
        if (PyList_CheckExact(ring) && *slot < PyList_GET_SIZE(ring)) {
            PyList_SetItem(ring, *slot, Py_NewRef(entry)); /* steals the new reference */
            stored = 0;
        }
        else {
            PyObject *index = PyLong_FromSsize_t(*slot);
            stored = index == NULL ? -1 : PyObject_SetItem(ring, index, entry);
            Py_XDECREF(index);
        }
        Py_DECREF(ring);
    }
    Py_DECREF(entry);
    if (stored == 0) {
        return log;
    }
failed:
    Py_CLEAR(*seq);
    Py_DECREF(log);
    return NULL;
}

/* The call returned ``result`` (NULL: it raised): mark the entry passed (or raised), release
   ``log`` and ``seq``, and give the result on (or the collective's own exception). */
static PyObject *
finish(PyObject *log, PyObject *seq, Py_ssize_t slot, PyObject *result)
{
    if (result == NULL) {
        PyObject *type, *value, *traceback;
        PyErr_Fetch(&type, &value, &traceback);
        if (mark_passed(log, seq, slot, 1) < 0) {
            PyErr_Clear();
        }
        PyErr_Restore(type, value, traceback);
    }
    else if (mark_passed(log, seq, slot, 0) < 0) {
        Py_CLEAR(result);
    }
    Py_DECREF(seq);
    Py_DECREF(log);
    return result;
}

static int
check_spec(PyObject *spec)
{
    if (!PyTuple_CheckExact(spec) || PyTuple_GET_SIZE(spec) != 5 ||
        !PyLong_CheckExact(PyTuple_GET_ITEM(spec, 4))) {
        PyErr_Format(PyExc_TypeError,
                     "spec must be (method, op, payload, payload name, group position), got %R",
                     spec);
        return -1;
    }
    return 0;
}

/* record_call(spec, self, a0, a1, a2, a3, rest, kwargs): the Python wrapper's step */
static PyObject *
record_call(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 8 || check_spec(args[0]) < 0 || !PyTuple_CheckExact(args[6]) ||
        !PyDict_CheckExact(args[7])) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_TypeError,
                            "record_call(spec, self, a0, a1, a2, a3, rest: tuple, kwargs: dict)");
        }
        return NULL;
    }
    PyObject *spec = args[0], *self = args[1], *rest = args[6], *kwargs = args[7];
    PyObject *const *slots = args + 2;
    PyObject *method = PyTuple_GET_ITEM(spec, 0);
    long group_at = PyLong_AsLong(PyTuple_GET_ITEM(spec, 4));
    int has_kwargs = PyDict_GET_SIZE(kwargs) > 0;

    PyObject *group = (group_at >= 0 && group_at < 4) ? slots[group_at] : NOT_GIVEN;
    if (group == NOT_GIVEN) {
        group = has_kwargs ? PyDict_GetItemWithError(kwargs, S_GROUP) : NULL;
        if (group == NULL && PyErr_Occurred()) {
            return NULL;
        }
        group = group == NULL ? Py_None : group;
    }
    PyObject *x = PyTuple_GET_ITEM(spec, 2) == Py_True ? slots[0] : Py_None;
    if (x == NOT_GIVEN) {
        x = has_kwargs ? PyDict_GetItemWithError(kwargs, PyTuple_GET_ITEM(spec, 3)) : NULL;
        if (x == NULL && PyErr_Occurred()) {
            return NULL;
        }
        x = x == NULL ? Py_None : x;
    }
    PyObject *seq = NULL;
    Py_ssize_t slot = 0;
    PyObject *log = begin(spec, self, group, x, 1, &seq, &slot);
    if (log == NULL) {
        return NULL;
    }
    PyObject *result = forward(method, self, slots, rest, kwargs);
    if (log == Py_None) {
        Py_DECREF(log);
        return result;
    }
    return finish(log, seq, slot, result);
}

/* ---- Recorded: the method descriptor put on the model class --------------------------

   ``model.all_reduce(x)`` (the facade's call) finds a Recorded on the class and calls it with
   the model first and the arguments as they came (a method descriptor's fast path: no bound
   method, no Python frame of a wrapper, no argument packing). Any other access to the
   attribute (``getattr``, ``super()``, Dynamo while it traces) binds the Python wrapper,
   ``bound``, instead, which records through record_call or, under Dynamo, not at all.
   Instance attributes shadow it (it is a non-data descriptor), as the testing layers need. */

typedef struct {
    PyObject_HEAD
    PyObject *spec;  /* (method, op, payload, payload name, group position) */
    PyObject *bound; /* the Python wrapper: what the attribute gives when it is read */
    PyObject *dict;  /* __wrapped__, __doc__, __name__, recording, ... (functools.wraps) */
    PyObject *name;  /* the attribute's name (the method's __name__) */
    vectorcallfunc vectorcall;
} Recorded;

/* The value of keyword ``name`` in a vectorcall (borrowed), or NULL. */
static PyObject *
keyword(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, PyObject *name)
{
    if (kwnames == NULL) {
        return NULL;
    }
    Py_ssize_t count = PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t i = 0; i < count; i++) {
        if (PyTuple_GET_ITEM(kwnames, i) == name) {
            return args[nargs + i];
        }
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        if (PyUnicode_Compare(PyTuple_GET_ITEM(kwnames, i), name) == 0) {
            return args[nargs + i];
        }
    }
    return NULL;
}

static PyObject *
recorded_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    PyObject *spec = ((Recorded *)callable)->spec;
    PyObject *method = PyTuple_GET_ITEM(spec, 0);
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs < 1) { /* no self: the method's own TypeError */
        return PyObject_Vectorcall(method, args, nargsf, kwnames);
    }
    long group_at = PyLong_AsLong(PyTuple_GET_ITEM(spec, 4));
    PyObject *group = NULL;
    if (group_at >= 0 && 1 + group_at < nargs) {
        group = args[1 + group_at];
    }
    else {
        group = keyword(args, nargs, kwnames, S_GROUP);
    }
    group = group == NULL ? Py_None : group;
    PyObject *x = Py_None;
    if (PyTuple_GET_ITEM(spec, 2) == Py_True) {
        x = nargs > 1 ? args[1] : keyword(args, nargs, kwnames, PyTuple_GET_ITEM(spec, 3));
        x = x == NULL ? Py_None : x;
    }
    PyObject *seq = NULL;
    Py_ssize_t slot = 0;
    PyObject *log = begin(spec, args[0], group, x, 0, &seq, &slot);
    if (log == NULL) {
        return NULL;
    }
    PyObject *result = PyObject_Vectorcall(method, args, nargsf, kwnames);
    if (log == Py_None) {
        Py_DECREF(log);
        return result;
    }
    return finish(log, seq, slot, result);
}

static PyObject *
recorded_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *spec, *bound;
    static char *names[] = {"spec", "bound", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO:Recorded", names, &spec, &bound) ||
        check_spec(spec) < 0) {
        return NULL;
    }
    Recorded *self = (Recorded *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->spec = Py_NewRef(spec);
    self->bound = Py_NewRef(bound);
    self->dict = NULL;
    self->name = PyObject_GetAttrString(PyTuple_GET_ITEM(spec, 0), "__name__");
    if (self->name == NULL || !PyUnicode_Check(self->name)) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_TypeError, "the method's __name__ must be a str");
        }
        Py_DECREF(self);
        return NULL;
    }
    self->vectorcall = recorded_vectorcall;
    return (PyObject *)self;
}

static int
recorded_traverse(Recorded *self, visitproc visit, void *arg)
{
    Py_VISIT(self->spec);
    Py_VISIT(self->bound);
    Py_VISIT(self->dict);
    Py_VISIT(self->name);
    return 0;
}

static int
recorded_clear(Recorded *self)
{
    Py_CLEAR(self->spec);
    Py_CLEAR(self->bound);
    Py_CLEAR(self->dict);
    Py_CLEAR(self->name);
    return 0;
}

static void
recorded_dealloc(Recorded *self)
{
    PyObject_GC_UnTrack(self);
    recorded_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* model.<name> read as an attribute: the instance's own attribute of that name (a testing
   layer's), else the Python wrapper bound to the model; the descriptor itself on the class. */
static PyObject *
recorded_get(PyObject *self, PyObject *obj, PyObject *Py_UNUSED(type))
{
    if (obj == NULL || obj == Py_None) {
        return Py_NewRef(self);
    }
    Recorded *recorded = (Recorded *)self;
    if (_PyObject_GetDictPtr(obj) != NULL) {
        PyObject *dict = PyObject_GenericGetDict(obj, NULL);
        if (dict == NULL) {
            return NULL;
        }
        PyObject *own = PyDict_GetItemWithError(dict, recorded->name);
        Py_XINCREF(own);
        Py_DECREF(dict);
        if (own != NULL || PyErr_Occurred()) {
            return own;
        }
    }
    return PyMethod_New(recorded->bound, obj);
}

/* model.<name> = value / del model.<name>: in the instance's dict, as for a method (the
   descriptor is a data descriptor only so that Dynamo resolves it through recorded_get). */
static int
recorded_set(PyObject *self, PyObject *obj, PyObject *value)
{
    PyObject *name = ((Recorded *)self)->name;
    PyObject *dict = PyObject_GenericGetDict(obj, NULL);
    if (dict == NULL) {
        return -1;
    }
    int failed;
    if (value != NULL) {
        failed = PyDict_SetItem(dict, name, value);
    }
    else {
        failed = PyDict_DelItem(dict, name);
        if (failed && PyErr_ExceptionMatches(PyExc_KeyError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_AttributeError, "%R has no attribute %R of its own", obj, name);
        }
    }
    Py_DECREF(dict);
    return failed;
}

static PyObject *
recorded_repr(Recorded *self)
{
    return PyUnicode_FromFormat("<recorded %R>", PyTuple_GET_ITEM(self->spec, 0));
}

static PyGetSetDef recorded_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef recorded_members[] = {
    {"spec", T_OBJECT, offsetof(Recorded, spec), READONLY, "what is recorded, and how"},
    {"bound", T_OBJECT, offsetof(Recorded, bound), READONLY, "the wrapper an attribute read binds"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject RecordedType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "distbridge.reliability._recording_accel.Recorded",
    .tp_doc = "A model's public collective, recorded in its ledger (a method descriptor).",
    .tp_basicsize = sizeof(Recorded),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_METHOD_DESCRIPTOR |
                Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = recorded_new,
    .tp_dealloc = (destructor)recorded_dealloc,
    .tp_traverse = (traverseproc)recorded_traverse,
    .tp_clear = (inquiry)recorded_clear,
    .tp_descr_get = recorded_get,
    .tp_descr_set = recorded_set,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Recorded, vectorcall),
    .tp_dictoffset = offsetof(Recorded, dict),
    .tp_getattro = PyObject_GenericGetAttr,
    .tp_setattro = PyObject_GenericSetAttr,
    .tp_repr = (reprfunc)recorded_repr,
    .tp_getset = recorded_getset,
    .tp_members = recorded_members,
};

static PyObject *
configure(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5 || !PyDict_CheckExact(args[1]) || !PyCallable_Check(args[2]) ||
        !PyType_Check(args[3]) || !PyType_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError, "configure(not_given, inside: dict, classify: "
                                         "callable, tensor: type, group_log: type)");
        return NULL;
    }
    Py_ssize_t offsets[N_SLOTS];
    for (int i = 0; i < N_SLOTS; i++) { /* each a __slots__ member of GroupLog */
        PyObject *member = PyObject_GetAttr(args[4], *SLOTS[i].name);
        if (member == NULL) {
            return NULL;
        }
        int usable = Py_IS_TYPE(member, &PyMemberDescr_Type) &&
                     ((PyMemberDescrObject *)member)->d_member->type == T_OBJECT_EX;
        offsets[i] = usable ? ((PyMemberDescrObject *)member)->d_member->offset : 0;
        Py_DECREF(member);
        if (!usable) {
            PyErr_Format(PyExc_TypeError, "%R.%U is not a __slots__ member", args[4],
                         *SLOTS[i].name);
            return NULL;
        }
    }
    for (int i = 0; i < N_SLOTS; i++) {
        SLOTS[i].offset = offsets[i];
    }
    Py_XSETREF(GROUP_LOG, Py_NewRef(args[4]));
    Py_XSETREF(NOT_GIVEN, Py_NewRef(args[0]));
    Py_XSETREF(INSIDE, Py_NewRef(args[1]));
    Py_XSETREF(CLASSIFY, Py_NewRef(args[2]));
    Py_XSETREF(TENSOR, Py_NewRef(args[3]));
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"record_call", (PyCFunction)(void (*)(void))record_call, METH_FASTCALL,
     "Record one collective in its group's log, call it, mark it passed."},
    {"configure", (PyCFunction)(void (*)(void))configure, METH_FASTCALL,
     "Give the module recording.py's marker, file cache, classifier and torch.Tensor."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_recording_accel",
    "The collective ledger's recording step in C (CPython 3.11).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__recording_accel(void)
{
    PyObject **names[] = {&S_LEDGER, &S_WORLD, &S_LOG_OF, &S_SEQ,   &S_PASSED, &S_RING,
                          &S_CAPACITY, &S_RAISED, &S_GROUP, &S_DTYPE, &S_SHAPE, &S_CLASS};
    const char *texts[] = {"ledger", "world", "log_of", "seq",   "passed", "ring",
                           "capacity", "raised", "group", "dtype", "shape", "__class__"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        *names[i] = PyUnicode_InternFromString(texts[i]);
        if (*names[i] == NULL) {
            return NULL;
        }
    }
    if (PyType_Ready(&RecordedType) < 0) {
        return NULL;
    }
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL) {
        return NULL;
    }
    if (PyModule_AddObjectRef(module, "Recorded", (PyObject *)&RecordedType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
