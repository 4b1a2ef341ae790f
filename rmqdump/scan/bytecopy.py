"""One memcpy and one prefetch for both compiled kernel sets: what numba has no words for.

numba compiles a slice assignment between byte arrays (`dst[a:b] = src[c:d]`) to
an element loop: record bodies packed for Arrow that way copied at 1.4 GB/s,
against 6.3 GB/s as one llvm.memcpy. The callers check the bounds: memcpy checks none.

A record's bytes the text kernels read (its hosts, topic and properties) were last
read by the scan many megabytes earlier, so they come from memory: the first read
of each stalled ~0.1 us, a tenth of a JSON listing's CPU. `prefetch` asks for a
line a few records ahead; it never faults, whatever the address.
"""

from __future__ import annotations

from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

AHEAD = 8  # records: how far ahead the kernels ask for a later record's lines (4, 8 and 16 ran alike in JSON Lines)


@intrinsic
def memcpy(typingctx, dst, do, src, so, n):
    """dst[do:do+n] = src[so:so+n] for uint8 arrays, as one llvm.memcpy (no index checks: the caller's)."""

    def codegen(context, builder, sig, args):
        da = context.make_array(sig.args[0])(context, builder, args[0])
        sa = context.make_array(sig.args[2])(context, builder, args[2])
        cgutils.raw_memcpy(builder, builder.gep(da.data, [args[1]]), builder.gep(sa.data, [args[3]]), args[4], 1)
        return context.get_dummy_value()

    return types.none(dst, do, src, so, n), codegen


@intrinsic
def prefetch(typingctx, arr, i):
    """A hint that arr[i] is read soon (llvm.prefetch, for reading, into every cache level)."""

    def codegen(context, builder, sig, args):
        a = context.make_array(sig.args[0])(context, builder, args[0])
        p = builder.bitcast(builder.gep(a.data, [args[1]]), ir.IntType(8).as_pointer())
        i32 = ir.IntType(32)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [p.type, i32, i32, i32]), "llvm.prefetch.p0")
        builder.call(fn, [p, i32(0), i32(3), i32(1)])  # read, keep in all levels, data
        return context.get_dummy_value()

    return types.none(arr, i), codegen


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def prefetch_lines(arr, s, e):
    """Prefetch each 64-byte line of arr[s:e] (lines counted from the array's start: a mapped file starts on a page)."""
    for p in range(s - (s & 63), e, 64):
        prefetch(arr, p)
