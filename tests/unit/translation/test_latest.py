"""Which known commit a translation starts from (crossfeed/translation/latest.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crossfeed.translation.latest import (
    COMMIT_LOG,
    LISTED,
    ON_DESTINATION,
    SOURCE_TIMESTAMPS,
    Known,
    latest,
)

pytestmark = pytest.mark.unit


def logged(offset: int, at: int) -> Known:
    return Known(offset, at, at, COMMIT_LOG)


def on_destination(offset: int, at: int) -> Known:
    return Known(offset, at, at, ON_DESTINATION)


def test_while_the_source_answers_what_it_says_wins() -> None:
    listed = Known(5, 1000, via=LISTED)
    assert latest(listed, [on_destination(9, 2000)], source_up=True) == listed
    assert latest(None, [on_destination(9, 2000)], source_up=True) is None


def test_a_commit_recorded_on_the_destination_after_the_last_one_read_wins() -> None:
    # kill -9: the commit log was read up to offset 5; the client recorded 7 and 9 later.
    chosen = latest(
        logged(5, 1000), [on_destination(7, 1100), on_destination(9, 1200)], source_up=False
    )
    assert chosen == on_destination(9, 1200)


def test_an_older_recorded_commit_does_not_replace_a_newer_one() -> None:
    listed = Known(12, 1500, via=LISTED)  # listed at 1500: the commit was made by then
    chosen = latest(listed, [on_destination(9, 1200)], source_up=False)
    assert chosen == replace(listed, past_recorded=True)  # rule 4: past every recorded one


def test_a_logged_commit_whose_answer_was_lost_is_past_every_recorded_one() -> None:
    # dc-a wrote the commit of offset 11 and was killed before the client had its answer:
    # the client never recorded it on the destination (its last recorded commit is 9).
    chosen = latest(
        logged(11, 1300), [on_destination(7, 1100), on_destination(9, 1200)], source_up=False
    )
    assert chosen == replace(logged(11, 1300), past_recorded=True)


def test_without_recorded_commits_nothing_is_past_them() -> None:
    assert latest(logged(11, 1300), [], source_up=False) == logged(11, 1300)
    stamped = Known(10, 1250, 1250, SOURCE_TIMESTAMPS)
    chosen = latest(logged(11, 1300), [stamped], source_up=False)
    assert chosen == logged(11, 1300) and not chosen.past_recorded


def test_the_same_commit_recorded_on_the_destination_confirms_it_despite_clock_skew() -> None:
    # The broker's commit time is 3 ms after the client's clock for the same commit.
    chosen = latest(logged(9, 1203), [on_destination(9, 1200)], source_up=False)
    assert chosen is not None and chosen.offset == 9 and chosen.via == ON_DESTINATION


def test_nothing_known_is_none() -> None:
    assert latest(None, [], source_up=False) is None


times = st.integers(0, 10_000)
offsets = st.integers(0, 1_000)
vias = st.sampled_from([SOURCE_TIMESTAMPS, ON_DESTINATION])


@st.composite
def recorded_commits(draw: st.DrawFn) -> list[Known]:
    out = []
    for at, offset, via in draw(st.lists(st.tuples(times, offsets, vias), max_size=8)):
        out.append(Known(offset, at, at, via))
    return out


@given(
    st.none() | st.builds(Known, offsets, times, times, st.sampled_from([LISTED, COMMIT_LOG])),
    recorded_commits(),
)
def test_the_offset_chosen_is_one_of_the_newest(
    from_source: Known | None, recorded: list[Known]
) -> None:
    chosen = latest(from_source, recorded, source_up=False)
    inputs = ([(from_source.seen_at_ms, from_source)] if from_source else []) + [
        (k.committed_at_ms, k) for k in recorded
    ]
    if not inputs:
        assert chosen is None
        return
    assert chosen is not None
    newest = max(at for at, _ in inputs)
    assert chosen.offset in {k.offset for at, k in inputs if at == newest}
    assert replace(chosen, past_recorded=False) in [from_source, *recorded]
    # Marked past the recorded commits only when it is past every one on the destination.
    on_b = [k.offset for k in recorded if k.via == ON_DESTINATION]
    assert chosen.past_recorded == (
        chosen.via != ON_DESTINATION and bool(on_b) and chosen.offset > max(on_b)
    )
    # A copy of that offset on the destination is reported: the last commit, confirmed.
    if any(k.via == ON_DESTINATION and k.offset == chosen.offset for k in recorded):
        assert chosen.via == ON_DESTINATION


@given(
    st.lists(st.integers(0, 50), min_size=1, max_size=30),
    st.data(),
)
def test_one_client_committing_with_the_opt_in_resumes_at_its_last_commit(
    steps: list[int], data: st.DataObject
) -> None:
    """A client commits n times, 10 ms apart, offsets never going back; each commit is on
    the destination before the next (the opt-in's wait). The source's commit log was
    read up to some commit, and its clock is off by less than the time between commits."""
    commits = []
    offset = 0
    for n, step in enumerate(steps):
        offset += step
        commits.append((1000 + 10 * n, offset))
    read_up_to = data.draw(st.integers(-1, len(commits) - 1))
    skew = data.draw(st.integers(-9, 9))
    from_source = (
        logged(commits[read_up_to][1], commits[read_up_to][0] + skew) if read_up_to >= 0 else None
    )
    recorded = [on_destination(o, at) for at, o in commits]
    chosen = latest(from_source, recorded, source_up=False)
    assert chosen is not None
    assert chosen.offset == commits[-1][1]
    assert chosen.via == ON_DESTINATION
