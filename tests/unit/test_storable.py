"""The one rule for text no store keeps (nw/jobs/core/storable.py)."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from nw.jobs.core.storable import REPLACED_FIELD, REPLACEMENT, storable, storable_finish
from tests.helpers import json_values


def _has_bad(value) -> bool:
    text = json.dumps(value)
    return "\\u0000" in text or any(
        0xD800 <= ord(c) <= 0xDFFF for c in json.dumps(value, ensure_ascii=False)
    )


@given(json_values())
def test_a_value_with_nothing_to_replace_is_returned_as_it_is(value):
    if _has_bad(value):
        return
    kept, changed = storable(value)
    assert kept is value and not changed


texts = st.text(alphabet=st.characters(codec=None, min_codepoint=0, max_codepoint=0xFFFF))


@given(
    st.recursive(
        texts,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
        max_leaves=8,
    )
)
def test_every_nul_and_lone_surrogate_is_replaced_at_any_depth_and_nothing_else(value):
    kept, changed = storable(value)
    assert not _has_bad(kept)
    assert changed == _has_bad(value)
    json.dumps(kept, ensure_ascii=False).encode("utf-8")  # every character has a UTF-8 form


def test_keys_and_values_are_replaced_and_the_parts_recorded():
    result, error, fields, parts = storable_finish(
        {"a\x00": ["ok", "x\ud800y"], "n": 1.5},
        "boom\x00",
        {"error": "boom\x00", "finished_at": 2.0, "attempts": [{"error": "boom\x00"}]},
    )
    assert result == {f"a{REPLACEMENT}": ["ok", f"x{REPLACEMENT}y"], "n": 1.5}
    assert error == f"boom{REPLACEMENT}"
    assert fields["attempts"] == [{"error": f"boom{REPLACEMENT}"}]
    assert parts == ["attempts", "error", "result"] == fields[REPLACED_FIELD]


def test_an_emoji_and_a_backslash_u_are_kept():
    for value in ({"e": "a \U0001f600 b"}, {"t": "\\u0000 and \\ud800 typed"}):
        kept, changed = storable(value)
        assert kept is value and not changed
    assert storable_finish({"ok": 1}, None, {"finished_at": 1.0})[3] == []
