# The shared stack machine of the compiled cores (_core.py's Machine), declared here so
# that _postpone.py can cimport it: Cython reads this file with _core.py (pure-Python mode).

cdef class Machine:
    cdef int ncol
    cdef int[:] code
    cdef double[:] consts
    cdef double[:] stack
    cdef int[:] up_start  # updates of component j: up_start[2j+b] .. up_start[2j+b+1]
    cdef int[:] up_col
    cdef int[:] up_op
    cdef int[:] up_slot
    cdef double[:] E
    cdef Py_ssize_t erow
    cdef double[:] V

    cdef double _eval(self, int pc, Py_ssize_t vrow) noexcept

    cdef void _updates(self, Py_ssize_t vrow, int which) noexcept
