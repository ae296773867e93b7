"""JSON pointers (constrained/json_pointer.py) against RFC 6901's own examples (section 5,
its URI fragment forms), and what a missing step gives."""

from minisglang.constrained.json_pointer import pointer_token, resolve_pointer, step

DOC = {"foo": ["bar", "baz"], "": 0, "a/b": 1, "c%d": 2, "e^f": 3, "g|h": 4, "i\\j": 5, 'k"l': 6, " ": 7, "m~n": 8}


def test_rfc_6901_fragment_examples():
    cases = {
        "#": DOC,
        "#/foo": ["bar", "baz"],
        "#/foo/0": "bar",
        "#/": 0,
        "#/a~1b": 1,
        "#/c%25d": 2,
        "#/e%5Ef": 3,
        "#/g%7Ch": 4,
        "#/i%5Cj": 5,
        "#/k%22l": 6,
        "#/%20": 7,
        "#/m~0n": 8,
    }
    for pointer, want in cases.items():
        assert resolve_pointer(DOC, pointer) == want, pointer


def test_a_missing_step_is_none_and_keys_escape_back():
    for pointer in ("#/nope", "#/foo/2", "#/foo/x", "#/foo/0/deeper", "#/a/b"):
        assert resolve_pointer(DOC, pointer) is None, pointer
    assert step(["x"], "0") == "x" and step("text", "0") is None
    for key in DOC:
        assert step(DOC, pointer_token(key)) == DOC[key]
