"""Commands over a fleet of stores: `-s` repeated or a glob names several brokers, searched side by side."""

from __future__ import annotations

FLEET_HELP = (
    "Store root (default: .). Repeat it, or give a glob such as 'brokers/*/store' (NAME=DIR names a broker): the stores are searched "
    "in parallel and every hit names its broker."
)


def fleet(values: list[str] | None):
    """The stores of a fleet (StoreRefs), or None when one plain store root was given (the single-store output)."""
    import glob

    from rmqdump.scan.splits import resolve_stores

    if not values or (len(values) == 1 and "=" not in values[0] and not glob.has_magic(values[0])):
        return None
    return resolve_stores(values)


def fleet_answers(refs, one):
    """(ref, one(ref)) for every store of the fleet, side by side: the local engine, one thread per store, as many as
    the cores. A store one() cannot read (InputError) has that error as its answer, named beside the others'."""
    from rmqdump.common.problems import InputError
    from rmqdump.engines.local import LocalMap, usable_cores

    def answer(ref):
        try:
            return one(ref)
        except InputError as e:
            return e

    return zip(refs, LocalMap(min(len(refs), usable_cores()))(answer, refs), strict=True)
