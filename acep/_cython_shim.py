"""The few names of Cython's pure-Python mode the kernel uses, for machines without Cython.

With Cython installed the real ``cython`` module is used instead; compiled, none of this
runs. Types are inert markers and decorators return the function unchanged.
"""

compiled = False


class _Type:
    def __getitem__(self, item):
        return self

    def __call__(self, value=0):
        return value


int = double = longlong = ulonglong = bint = Py_ssize_t = void = _Type()  # noqa: A001


def _passthrough(*args, **kwargs):
    if len(args) == 1 and callable(args[0]) and not kwargs:
        return args[0]
    return lambda f: f


cclass = cfunc = ccall = inline = final = _passthrough
locals = exceptval = boundscheck = wraparound = cdivision = _passthrough  # noqa: A001


def declare(type_=None, value=None, **kwargs):
    return value
