"""The small TOML writer: what it writes, tomllib reads back unchanged."""

from __future__ import annotations

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

from hypothesis import given, settings
from hypothesis import strategies as st

from fitcheck.profiles.toml_writer import dumps

keys = st.text(min_size=1, max_size=8)
scalars = st.one_of(st.booleans(), st.integers(-(2**63), 2**63 - 1), st.text(max_size=12),
                    st.floats(allow_nan=False))
values = st.one_of(scalars, st.lists(st.text(max_size=5), max_size=3))


def tables(depth: int):
    children = st.dictionaries(keys, values, max_size=4)
    if depth == 0:
        return children
    inner = tables(depth - 1)
    return st.builds(
        lambda plain, subs, arrays: {**plain, **subs, **arrays},
        children,
        st.dictionaries(keys.map(lambda k: "t_" + k), inner, max_size=2),
        st.dictionaries(keys.map(lambda k: "a_" + k), st.lists(inner, min_size=1, max_size=2), max_size=2),
    )


@settings(max_examples=80, deadline=None)
@given(tables(2))
def test_dumps_reads_back_unchanged(document):
    assert tomllib.loads(dumps(document)) == document


def test_layout_keys_then_tables_then_arrays_and_nones_skipped():
    text = dumps({"gpus": [{"name": "A", "unknown": {"uuid": "r"}}], "memory": {"total_bytes": 1},
                  "schema": "s", "skipped": None}, header="hello")
    assert text.splitlines() == [
        "# hello", 'schema = "s"', "", "[memory]", "total_bytes = 1", "", "[[gpus]]", 'name = "A"', "",
        "[gpus.unknown]", 'uuid = "r"',
    ]


def test_strings_are_escaped():
    document = {"s": 'quote " backslash \\ newline \n tab \t bell \x07 del \x7f é'}
    assert tomllib.loads(dumps(document)) == document
