"""The stop-string matcher holds back text that may start a stop string, and cuts at it."""

from cera.generation.stop_strings import StopStrings


def run(stops, chunks):
    m = StopStrings(tuple(stops))
    out, hit = [], False
    for c in chunks:
        text, hit = m.feed(c)
        out.append(text)
        if hit:
            break
    if not hit:
        out.append(m.flush())
    return "".join(out), hit


def test_stop_string_split_across_chunks_is_found_and_cut():
    assert run(["</s>"], ["Hello </", "s> tail"]) == ("Hello ", True)


def test_text_that_only_looked_like_a_stop_prefix_is_released():
    assert run(["STOP"], ["ST", "ART"]) == ("START", False)


def test_earliest_of_several_stop_strings_wins():
    assert run(["b", "a"], ["xxabyy"]) == ("xx", True)


def test_no_stop_strings_passes_text_through_unchanged():
    m = StopStrings(())
    assert m.feed("abc") == ("abc", False)


def test_held_text_is_not_emitted_early():
    m = StopStrings(("\n\n",))
    assert m.feed("line\n") == ("line", False)
    assert m.feed("\n") == ("", True)
