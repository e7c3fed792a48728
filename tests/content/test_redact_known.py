"""A server's own tokens, known only by their SHA-256, are found wherever text holds them."""

from __future__ import annotations

import hashlib

from hypothesis import given
from hypothesis import strategies as st

from compactor.content.redact import redact_known

TOKEN = "Zx9-k2_Lq8Rw4Tn7Vb3Mc6Hd1Jf5Gs0Pq"
DIGESTS = frozenset({hashlib.sha256(TOKEN.encode()).digest()})
FILLER = st.text(alphabet=st.sampled_from(list("abc xyz.\n=:'\"()")), max_size=40)


@given(FILLER, FILLER)
def test_a_known_token_is_replaced_in_any_surrounding(before: str, after: str):
    text, count = redact_known(f"{before} {TOKEN} {after}", DIGESTS)
    assert TOKEN not in text
    assert count == 1


def test_forms_a_token_is_written_in_are_all_found():
    text = f"TOKEN={TOKEN}\nAuthorization: Bearer {TOKEN}\n'{TOKEN}', ({TOKEN}). {TOKEN}!"
    out, count = redact_known(text, DIGESTS)
    assert TOKEN not in out and count == 5


def test_text_without_the_token_is_unchanged():
    text = f"{TOKEN[:-1]} and {TOKEN}x are other strings"
    assert redact_known(text, DIGESTS) == (text, 0)
