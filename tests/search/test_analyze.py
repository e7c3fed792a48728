import re
import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from compactor.search import analyze
from compactor.search.analyze import QUERY_STOPWORDS, query_terms, tokenize
from tests.support.old_tokenizer import tokenizer_version


def test_camel_case_with_acronym_gives_parts_and_whole():
    assert tokenize("parseHTTPResponse") == ["parsehttpresponse", "parse", "http", "response"]


def test_error_names_split_into_kind_and_error():
    assert set(tokenize("KeyError")) == {"keyerror", "key", "error"}
    assert set(tokenize("raise ValueError(x)")) >= {"valueerror", "value", "error", "raise"}


def test_snake_case():
    assert tokenize("max_items") == ["max_items", "max", "items"]


def test_kebab_case():
    assert tokenize("rank-bm25") == ["rank-bm25", "rank", "bm25"]


def test_dotted_name_keeps_whole_and_parts():
    toks = tokenize("os.path.join")
    assert toks[0] == "os.path.join"
    assert {"os", "path", "join"} <= set(toks)


def test_relative_path_gives_whole_basename_stem_and_directories():
    toks = tokenize("django/db/models/query.py")
    assert toks[0] == "django/db/models/query.py"
    tails = {"db/models/query.py", "models/query.py"}
    assert {*tails, "query.py", "query", "django", "db", "models", "py"} == set(toks[1:])


def test_a_path_matches_however_it_was_rooted():
    absolute = set(tokenize("/testbed/django/db/models/query.py"))
    relative = set(tokenize("./django/db/models/query.py"))
    tail = set(tokenize("see models/query.py"))
    assert "django/db/models/query.py" in absolute & relative
    assert "models/query.py" in absolute & relative & tail
    assert "db/models" not in absolute  # tails only, not every sub-path


def test_absolute_path_is_kept_as_written_with_its_parts():
    toks = set(tokenize("File /testbed/django/db/models/Query.py, line 3"))
    assert {"/testbed/django/db/models/query.py", "testbed", "django", "models", "query.py", "query"} <= toks


def test_dot_slash_prefix_is_kept_on_the_whole():
    assert set(tokenize("./setup.py")) == {"./setup.py", "setup.py", "setup", "py"}


def test_sentence_punctuation_is_not_part_of_a_token():
    assert tokenize("see query.py.") == ["see", "query.py", "query", "py"]
    assert tokenize("--verbose") == ["verbose"]


def test_numbers_of_two_or_more_chars_are_tokens_and_single_chars_are_dropped():
    assert tokenize("port 8080 gave 404 x 1 y") == ["port", "8080", "gave", "404"]


def test_blob_is_not_a_term_but_its_parts_are():
    blob = "x" * 200
    assert tokenize(blob) == []
    assert tokenize(f"{blob}/setup.py") == ["setup.py", "setup", "py"]


def test_lowercases_and_keeps_document_order_and_duplicates():
    assert tokenize("Foo bar FOO") == ["foo", "bar", "foo"]


def test_non_ascii_words_are_lowercased_not_mangled():
    assert tokenize("Größe Straße") == ["größe", "straße"]


def test_query_terms_drop_duplicates_keeping_first_order():
    assert query_terms("error KeyError error key") == ["error", "keyerror", "key"]


_TEXT = (
    st.text(alphabet=st.sampled_from("aZ9_-./ ~:é\n"), max_size=60)
    | st.text(alphabet=st.sampled_from("a9_./ 数据库连接池ユーザー認証데이터。\uff0cडेटाबेसฐานข้อมูลe\u0301"), max_size=40)
    | st.text(max_size=60)
)


@given(_TEXT)
def test_tokens_are_lowercase_and_at_least_two_chars(text):
    for tok in tokenize(text):
        assert 2 <= len(tok) <= 128 or analyze._UNSPACED_RUN.fullmatch(tok)
        assert tok == tok.lower()
        assert not re.search(r"\s", tok)


@given(_TEXT, _TEXT)
def test_tokenization_is_local_to_whitespace_separated_chunks(a, b):
    assert tokenize(f"{a} {b}") == tokenize(a) + tokenize(b)


def test_query_terms_leave_out_stop_words():
    terms = query_terms("Now I will check the file `django/db/models/query.py` and its QuerySet again")
    assert not {"now", "the", "its", "will", "again"} & set(terms)
    assert {"check", "file", "django/db/models/query.py", "queryset", "query", "set"} <= set(terms)


def test_stop_words_inside_an_identifier_leave_only_the_part_out():
    assert query_terms("get_for_model") == ["get_for_model", "get", "model"]


def test_a_query_of_stop_words_only_keeps_them():
    assert query_terms("what is this") == ["what", "is", "this"]


def test_stop_words_are_lowercase_tokens():
    for word in QUERY_STOPWORDS:
        assert tokenize(word) == [word]


@given(_TEXT)
def test_query_terms_are_the_distinct_tokens_less_stop_words(text):
    terms = query_terms(text)
    tokens = set(tokenize(text))
    # A CJK run of two or more characters is searched by its pairs, not its single characters
    # (runs as the composed text's words have them: composing puts a mark typed out of order
    # back, and a code point no script has yet is no part of a word).
    runs = [run for raw in analyze.compounds(analyze.composed(text)) for run in analyze._UNSPACED_RUN.findall(raw)]
    tokens -= {t for t in tokens if len(t) == 1} - {r for r in runs if len(r) == 1}
    assert len(terms) == len(set(terms))
    assert set(terms) == (tokens - QUERY_STOPWORDS or tokens)


def test_the_expansion_cache_is_bounded_and_changes_no_result():
    from compactor.search import analyze

    text = " ".join(f"fooBar{i}.py mod_{i}/x.ts" for i in range(analyze._CACHE_MAX))
    analyze._cache.clear()
    first = tokenize(text)
    assert 0 < len(analyze._cache) <= analyze._CACHE_MAX
    assert tokenize(text) == first  # from a cache that was cleared on the way, partly refilled
    analyze._cache.clear()
    assert tokenize(text) == first


def _expand_every_tail(raw: str) -> tuple[str, ...]:
    """The expansion as first written: every tail of a path made, then the long ones dropped."""
    from compactor.search import analyze as A

    if A._SIMPLE.fullmatch(raw):
        return (raw,) if 2 <= len(raw) <= 128 else ()
    out: dict[str, None] = {}
    if "/" in raw:
        out[raw.lower()] = None
        parts = [p for p in A._PATH_SEP.split(raw) if p and p not in (".", "..", "~")]
        for i in range(len(parts) - 1):
            out["/".join(parts[i:]).lower()] = None
        for part in parts:
            A._dotted_parts(part, out)
    else:
        A._dotted_parts(raw, out)
    return tuple(t for t in out if 2 <= len(t) <= 128)


_PARTS = st.one_of(st.text("aZ9_.-İ", min_size=1, max_size=40), st.sampled_from([".", "..", "~", ""]))
_PATHS = st.lists(_PARTS, min_size=1, max_size=12).map("/".join)


@given(_PATHS)
def test_a_path_gives_only_the_tails_short_enough_to_be_terms(path: str) -> None:
    from compactor.search import analyze as A

    for raw in A._COMPOUND.findall(path):
        assert A._expand(raw) == _expand_every_tail(raw)


def test_a_path_of_a_million_characters_is_tokenized_in_linear_time() -> None:
    """Every tail of it was made before the long ones were dropped: ~250 GB for this one."""
    import time

    started = time.perf_counter()
    terms = tokenize("a/" * 500_000 + "end")
    assert time.perf_counter() - started < 5
    # The whole and the longer tails are too long to be terms; the parts "a" too short.
    assert terms == ["a/" * k + "end" for k in range(62, 0, -1)] + ["end"]


def test_a_cjk_run_is_indexed_by_its_character_pairs_and_characters():
    assert tokenize("连接池") == ["连接", "接池", "连", "接", "池"]
    assert tokenize("配置config.py错误") == ["配置", "配", "置", "config.py", "config", "py", "错误", "错", "误"]
    pairs = ["데이", "이터", "터베", "베이", "이스"]
    assert tokenize("데이터베이스 오류") == [*pairs, *"데이터베이스", "오류", "오", "류"]


def test_a_cjk_query_is_searched_by_its_pairs_or_its_one_character():
    assert query_terms("连接池") == ["连接", "接池"]
    assert query_terms("池") == ["池"]
    assert query_terms("トークン the KeyError") == ["トー", "ーク", "クン", "keyerror", "key", "error"]


_CJK = "数据库连接池配置错误最大导致超时ユーザー認証トークン"
_CJK_TEXT = st.text(alphabet=st.sampled_from(_CJK), min_size=1, max_size=30)


@given(_CJK_TEXT, st.data())
def test_every_piece_of_a_cjk_text_finds_it(text: str, data: st.DataObject) -> None:
    start = data.draw(st.integers(0, len(text) - 1))
    piece = text[start : data.draw(st.integers(start + 1, len(text)))]
    assert set(query_terms(piece)) <= set(tokenize(text))


def test_a_word_with_combining_marks_is_one_term():
    assert tokenize("डेटाबेस कनेक्शन विफल") == ["डेटाबेस", "कनेक्शन", "विफल"]
    assert tokenize("ডাটাবেস সংযোগ") == ["ডাটাবেস", "সংযোগ"]
    assert tokenize("cafe\u0301 au lait") == ["caf\u00e9", "au", "lait"]  # composed: see below


def test_a_thai_run_is_indexed_by_its_pairs_like_a_cjk_one():
    text = "การเชื่อมต่อฐานข้อมูลล้มเหลว"
    assert set(query_terms("ฐานข้อมูล")) <= set(tokenize(text))
    assert query_terms("ฐานข้อมูล")[:2] == ["ฐา", "าน"]


def test_a_word_is_one_term_however_its_accents_were_typed():
    """An accent typed as its own character, or a name from macOS (which decomposes them),
    finds the composed word and is found by it."""
    composed, decomposed = "R\u00e9sum\u00e9 na\u00efve", "Re\u0301sume\u0301 nai\u0308ve"
    assert tokenize(decomposed) == tokenize(composed) == ["r\u00e9sum\u00e9", "na\u00efve"]
    assert query_terms(decomposed) == query_terms(composed)
    hangul = "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8"  # Korean, as macOS names a file: jamo by jamo
    assert tokenize(unicodedata.normalize("NFD", hangul)) == tokenize(hangul)
    pair = "\ud55c\uad6d"
    assert pair in tokenize(hangul) and query_terms(unicodedata.normalize("NFD", pair)) == [pair]


# Accents composed and apart, Hangul syllables and jamo, a composition exclusion (क़), the
# Angstrom sign (NFC makes it Å), a dot below stacked with an acute.
_CANONICAL = st.text(alphabet=st.sampled_from("abc_./ 0é\u0301e\u0308ñÅ\u212b\uac00\u1100\u1161\u11a8क़ḱ\u0323ệ"))


@given(_CANONICAL, st.sampled_from(["NFD", "NFC"]))
def test_canonically_equivalent_texts_make_the_same_terms(text: str, form: str) -> None:
    other = unicodedata.normalize(form, text)
    assert tokenize(other) == tokenize(text)
    assert query_terms(other) == query_terms(text)


@given(
    st.text(alphabet=st.sampled_from("abc_./ 数据库डेटाबेสฐานข้อมูลe\u0301\u0964\u00e9\uac00\u1100\u1161"), max_size=40),
    st.sampled_from([1, 2]),
)
def test_terms_change_only_for_texts_terms_changed_names(text: str, version: int) -> None:
    with tokenizer_version(version):
        before = tokenize(text)
    assert tokenize(text) == before or analyze.terms_changed(version, text)


def test_terms_changed_knows_versions_1_to_5_only():
    assert analyze.terms_changed(2, "cafe\u0301") and not analyze.terms_changed(2, "caf\u00e9 donn\u00e9es")
    assert analyze.terms_changed(1, "caf\u00e9 连接池") and not analyze.terms_changed(1, "plain ascii")
    # Version 3 made no stem terms: a text holding a word whose stem is another changed.
    assert analyze.terms_changed(3, "the pools") and analyze.terms_changed(1, "Running")
    # Before version 5 a field's length counted a compound's parts and an unspaced run's
    # characters: a text holding one has another length now, a text of plain words does not.
    for version in (1, 2, 3, 4):
        assert analyze.terms_changed(version, "src/pools.py") and analyze.terms_changed(version, "poolSizes")
        assert analyze.terms_changed(version, "pool_sizes") and analyze.terms_changed(version, "caf\u00e9 连接池")
        assert not analyze.terms_changed(version, "pool size of one")
    # Before version 6 an irregular form was not indexed by its base's stem ("went": "^go").
    for version in (1, 2, 3, 4, 5):
        assert analyze.terms_changed(version, "we went home") and analyze.terms_changed(version, "Children")
    assert not analyze.terms_changed(5, "we go home") and not analyze.terms_changed(5, "src/pools.py poolSizes")
    with pytest.raises(ValueError, match="tokenizer version 6 is not one this one can bring up to date"):
        analyze.terms_changed(6, "text")
