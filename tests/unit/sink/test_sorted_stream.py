"""Unit and property tests for crossfeed.services.sink.sorted_stream
(docs/ordered-feeds.md §3-§4)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crossfeed.services.sink.sorted_stream import (
    DATA_MARKER,
    NOTHING,
    ONLY_APPLY,
    Applied,
    BadMarker,
    Kind,
    Marker,
    Position,
    Sequencer,
    Step,
    classify,
    resume_position,
    split_order,
    split_txn,
    written_position,
)
from crossfeed.wire import headers

pytestmark = pytest.mark.unit


def _hdrs(kind: str, ts: int, txn: str | None = None, count: int = 0):
    out = [(headers.TYPE, kind.encode()), (headers.COMMIT_TS, str(ts).encode())]
    if txn is not None:
        out.append((headers.TXN, f"{txn}/0/{count}".encode()))
    return out


class TestClassify:
    def test_data_without_type(self) -> None:
        assert classify(None) is DATA_MARKER
        assert classify([("u", b"x"), (headers.COMMIT_TS, b"5")]) is DATA_MARKER

    def test_markers(self) -> None:
        assert classify(_hdrs("begin", 7, "a:b:0:1", 3)) == Marker(Kind.BEGIN, 7, "a:b:0:1", 3)
        assert classify(_hdrs("commit", 7, "t", 3)) == Marker(Kind.COMMIT, 7, "t", 3)
        assert classify(_hdrs("resolved", 9)) == Marker(Kind.RESOLVED, 9)

    @pytest.mark.parametrize(
        "hdrs",
        [
            _hdrs("begun", 7, "t", 1),
            [(headers.TYPE, b"begin"), (headers.TXN, b"t/0/1")],
            _hdrs("begin", 7),
            [(headers.TYPE, b"begin"), (headers.COMMIT_TS, b"7"), (headers.TXN, b"t/1/1")],
            [(headers.TYPE, b"resolved"), (headers.COMMIT_TS, b"x")],
        ],
    )
    def test_bad_markers(self, hdrs) -> None:
        with pytest.raises(BadMarker):
            classify(hdrs)

    def test_inline_data(self) -> None:
        hdrs = [("u", b"x"), (headers.COMMIT_TS, b"7"), (headers.ORDER, b"2/3/7/c:t:0:1")]
        assert classify(hdrs) == Marker(Kind.INLINE, 7, "c:t:0:1", 3, 2)
        assert classify(hdrs).starts is False
        assert classify([(headers.ORDER, b"1/1/0/t")]).starts is True
        assert B(5, "a", 1).starts and not C(5, "a", 1).starts and not D.starts

    def test_split_order_by_the_grammar(self) -> None:
        # crossfeed/wire/grammar.py: ORDER; the txn id last, so it may hold anything but '/'
        assert split_order(b"1/2/1700000000000000/c1:topic:0:17") == Marker(
            Kind.INLINE, 1700000000000000, "c1:topic:0:17", 2, 1
        )
        assert split_order(b"999999999/999999999/9223372036854775807/x").count == 999999999
        assert split_order(b"000000001/000000001/0/x").seq == 1
        bad_values = ["0/1/5/t", "2/1/5/t", "1/1/5/", "1/1/5", "1/1/x/t", "a/1/5/t", "/1/5/t"]
        bad_values += ["1/1000000000/5/t", "1/1/9223372036854775808/t", "1/1/" + "9" * 20 + "/t"]
        bad_values += ["1/\u00b2/5/t", "\u0665/1/5/t", "1/1/-5/t", " 1/1/5/t", "1/1/5 /t", ""]
        for bad in bad_values:
            with pytest.raises(BadMarker, match="crossfeed-order"):
                split_order(bad.encode())
        with pytest.raises(BadMarker):
            split_order(None)
        with pytest.raises(BadMarker):
            classify([(headers.ORDER, b"1/0/5/t")])

    def test_split_txn_by_the_grammar(self) -> None:
        # either form of txn id (crossfeed/wire/grammar.py: SORTED_TXN), count of 9 digits
        assert split_txn(b"c1:topic:0:17/2/5") == ("c1:topic:0:17", 2, 5)
        assert split_txn(b":t:0:1/0/1") == (":t:0:1", 0, 1)
        assert split_txn(b"tx/0/999999999") == ("tx", 0, 999999999)
        assert split_txn(b"tx/000000000/000000001") == ("tx", 0, 1)
        with pytest.raises(BadMarker):
            split_txn(b"nope")
        # Digits outside ASCII pass str.isdigit() but not int(): a bad marker all the same.
        bad_values = ["t/\u00b2/5", "t/2/\u0665", "t/\uff12/5", "t/2/" + "9" * 5000, "/0/1"]
        bad_values += ["t/0/1000000000", "t/0000000000/1", "a/b/0/1", "t/0/1\n", "t/0"]
        for bad in bad_values:
            with pytest.raises(BadMarker):
                split_txn(bad.encode())
        with pytest.raises(BadMarker):
            split_txn(None)


class TestApplied:
    def test_round_trip(self) -> None:
        applied = Applied(Position(123, "c:t:0:9"), 120)
        assert Applied.decode(applied.encode()) == applied
        assert len(applied.encode()) < 200

    def test_empty_is_nothing(self) -> None:
        assert Applied.decode(None) == Applied()
        assert Applied.decode("") == Applied(NOTHING, 0)

    def test_foreign_metadata_refused(self) -> None:
        with pytest.raises(ValueError, match="not a sink position"):
            Applied.decode("hello")

    def test_position_order_is_commit_ts_then_txn(self) -> None:
        assert Position(5, "b") > Position(5, "a") > Position(4, "z") > NOTHING


def B(ts: int, txn: str, count: int) -> Marker:
    return Marker(Kind.BEGIN, ts, txn, count)


def C(ts: int, txn: str, count: int) -> Marker:
    return Marker(Kind.COMMIT, ts, txn, count)


def R(ts: int) -> Marker:
    return Marker(Kind.RESOLVED, ts)


D = DATA_MARKER


def I(ts: int, txn: str, seq: int, count: int) -> Marker:  # noqa: E743 (the letter of inline)
    return Marker(Kind.INLINE, ts, txn, count, seq)


class TestSequencer:
    def test_whole_transaction(self) -> None:
        seq = Sequencer()
        steps = [seq.step(i, m) for i, m in enumerate([B(5, "a", 2), D, D, C(5, "a", 2), R(6)])]
        assert steps == [
            (Step.OPEN,),
            (Step.APPLY,),
            (Step.APPLY,),
            (Step.COMPLETE,),
            (Step.RESOLVED,),
        ]
        assert seq.applied == Position(5, "a") and seq.resolved == 6

    def test_replay_at_or_below_position_dropped(self) -> None:
        seq = Sequencer(Position(5, "b"))
        stream = [B(5, "a", 1), D, C(5, "a", 1), B(5, "b", 1), D, C(5, "b", 1), B(5, "c", 1)]
        steps = [seq.step(i, m) for i, m in enumerate(stream)]
        assert steps[:6] == [(Step.DROP,)] * 6
        assert steps[6] == (Step.OPEN,)

    def test_cut_short_by_begin(self) -> None:
        seq = Sequencer()
        assert seq.step(0, B(5, "a", 3)) == (Step.OPEN,)
        assert seq.step(1, D) == (Step.APPLY,)
        assert seq.step(2, B(5, "a", 3)) == (Step.CUT_SHORT, Step.OPEN)
        assert seq.cut is not None and seq.cut.begin_offset == 0
        assert "cut short" in (seq.problem or "")

    def test_known_cut_is_skipped(self) -> None:
        seq = Sequencer(known_cut=[0])
        assert seq.step(0, B(5, "a", 3)) == (Step.SKIP_CUT,)
        assert seq.step(1, D) == (Step.DROP,)
        assert seq.step(2, B(5, "a", 1)) == (Step.OPEN,)

    def test_commit_not_matching_throws_the_open_one_away(self) -> None:
        seq = Sequencer()
        seq.step(0, B(5, "a", 2))
        seq.step(1, D)
        assert seq.step(2, C(5, "a", 2)) == (Step.CUT_SHORT, Step.DROP)  # one record short
        assert seq.applied == NOTHING

    def test_resolved_after_a_cut_short_is_not_trusted(self) -> None:
        seq = Sequencer()
        seq.step(0, B(5, "a", 2))
        assert seq.step(1, R(9)) == (Step.CUT_SHORT, Step.DROP)
        assert seq.resolved == 0
        seq2 = Sequencer(known_cut=[0])
        seq2.step(0, B(5, "a", 2))
        assert seq2.step(1, R(9)) == (Step.DROP,)
        assert seq2.resolved == 0

    def test_records_outside_transactions_dropped(self) -> None:
        seq = Sequencer()
        assert seq.step(0, D) == (Step.DROP,)
        assert seq.step(1, C(1, "x", 0)) == (Step.DROP,)

    def test_inline_whole_transactions(self) -> None:
        seq = Sequencer()
        stream = [I(5, "a", 1, 3), I(5, "a", 2, 3), I(5, "a", 3, 3), I(6, "b", 1, 1), R(6)]
        steps = [seq.step(i, m) for i, m in enumerate(stream)]
        assert steps == [
            (Step.OPEN, Step.APPLY),
            (Step.APPLY,),
            (Step.APPLY, Step.COMPLETE),
            (Step.OPEN, Step.APPLY, Step.COMPLETE),
            (Step.RESOLVED,),
        ]
        assert steps[1] is ONLY_APPLY  # the sinks' fast path tests it by identity
        assert seq.applied == Position(6, "b") and seq.resolved == 6 and seq.open is None

    def test_inline_replay_dropped_whole(self) -> None:
        seq = Sequencer(Position(5, "b"))
        stream = [I(5, "a", 1, 2), I(5, "a", 2, 2), I(5, "b", 1, 1), I(5, "c", 1, 2)]
        steps = [seq.step(i, m) for i, m in enumerate(stream)]
        assert steps == [(Step.DROP,), (Step.DROP,), (Step.DROP,), (Step.OPEN, Step.APPLY)]

    def test_inline_cut_short_by_the_next_start_or_a_mark(self) -> None:
        seq = Sequencer()
        seq.step(0, I(5, "a", 1, 3))
        seq.step(1, I(5, "a", 2, 3))
        assert seq.step(2, I(5, "a", 1, 3)) == (Step.CUT_SHORT, Step.OPEN, Step.APPLY)
        assert seq.cut is not None and seq.cut.begin_offset == 0
        assert "cut short by inline change 1 of 5/a at offset 2" in (seq.problem or "")
        assert seq.step(3, R(9)) == (Step.CUT_SHORT, Step.DROP)
        assert seq.resolved == 0 and seq.applied == NOTHING
        # a framed begin cuts an inline one short too, and an inline start a framed one
        seq.step(4, I(6, "b", 1, 2))
        assert seq.step(5, B(7, "c", 1)) == (Step.CUT_SHORT, Step.OPEN)
        assert seq.step(6, I(8, "d", 1, 1)) == (
            Step.CUT_SHORT,
            Step.OPEN,
            Step.APPLY,
            Step.COMPLETE,
        )
        assert seq.applied == Position(8, "d")

    @pytest.mark.parametrize(
        "wrong",
        [I(5, "a", 3, 3), I(5, "a", 2, 4), I(6, "a", 2, 3), I(5, "b", 2, 3)],
        ids=["a record missing", "another count", "another commit_ts", "another txn"],
    )
    def test_inline_record_out_of_sequence_cuts_the_open_one_short(self, wrong) -> None:
        seq = Sequencer()
        seq.step(0, I(5, "a", 1, 3))
        assert seq.step(1, wrong) == (Step.CUT_SHORT, Step.DROP)
        assert "does not follow the open transaction 5/a (1 of 3 records read)" in (
            seq.problem or ""
        )
        assert seq.step(2, I(5, "a", 3, 3)) == (Step.DROP,)  # its rest: nothing is open
        assert seq.applied == NOTHING

    def test_inline_known_cut_is_skipped_to_the_next_start(self) -> None:
        seq = Sequencer(known_cut=[0])
        assert seq.step(0, I(5, "a", 1, 3)) == (Step.SKIP_CUT,)
        assert seq.step(1, I(5, "a", 2, 3)) == (Step.DROP,)
        assert seq.step(2, R(6)) == (Step.DROP,)  # not trusted after a skipped one
        assert seq.step(3, I(5, "a", 1, 1)) == (Step.OPEN, Step.APPLY, Step.COMPLETE)

    def test_forget_cut_below(self) -> None:
        seq = Sequencer(known_cut=[3, 10])
        seq.forget_cut_below(5)
        assert seq.known_cut == {10}


# -- property: any stream the contract allows -> each transaction applied once, in order --


@dataclass(frozen=True)
class T:
    ts: int
    txn: str
    count: int


def _stream(draw_ops, txns: list[T]) -> list[tuple[Marker, str | None]]:
    """The sorted stream: (marker, label of a data record) in order; each transaction
    framed (``begin``, data, ``commit``) or inline (data records with their places) as its
    op says."""
    out: list[tuple[Marker, str | None]] = []
    for op, t, arg, inline in draw_ops:
        if op == "resolved":
            out.append((R(t.ts), None))
            continue
        written = t.count if op == "whole" else min(arg, t.count)
        if inline:
            out += [(I(t.ts, t.txn, s, t.count), f"{t.txn}/{s}") for s in range(1, written + 1)]
            continue
        out.append((B(t.ts, t.txn, t.count), None))
        out += [(D, f"{t.txn}/{s}") for s in range(1, written + 1)]
        if op == "whole":
            out.append((C(t.ts, t.txn, t.count), None))
    return out


FORMS = ("framed", "inline", "mixed")


@st.composite
def streams(draw, form: str = "mixed"):
    n = draw(st.integers(1, 25))
    # (an inline transaction of no change would be no record at all: the sorter has none)
    least = 0 if form == "framed" else 1
    txns = [T(10 * (i + 1), f"t{i:03d}", draw(st.integers(least, 4))) for i in range(n)]
    ops = []
    i = 0

    def inline() -> bool:  # a sorter upgraded mid-stream writes both forms
        return form == "inline" or (form == "mixed" and draw(st.booleans()))

    while i < n:
        choice = draw(st.sampled_from(["whole", "whole", "cut", "replay", "resolved"]))
        if choice == "cut":
            ops.append(("cut", txns[i], draw(st.integers(0, 4)), inline()))
            ops.append(("whole", txns[i], 0, inline()))  # its complete copy follows
            i += 1
        elif choice == "replay" and i > 0:
            back = draw(st.integers(1, i))
            ops += [("whole", t, 0, inline()) for t in txns[i - back : i]]
        elif choice == "resolved" and i > 0:
            ops.append(("resolved", txns[i - 1], 0, False))
        else:
            ops.append(("whole", txns[i], 0, inline()))
            i += 1
    return txns, _stream(ops, txns)


class KafkaModel:
    """The Kafka sink's policy on a list: produce as read, commit at boundaries now and
    then, abort + rewind to the committed offset on a cut short with records produced,
    commit at a known cut-short begin; crash (lose everything uncommitted) anywhere."""

    def __init__(self, stream, commit_every: int, crash_at: set[int]) -> None:
        self.stream = stream
        self.commit_every = commit_every
        self.crash_at = crash_at
        self.target: list[str] = []  # committed

    def run(self) -> list[str]:
        committed_offset, applied, known = 0, NOTHING, set()
        seq = Sequencer()
        pending: list[str] = []
        open_produced = 0
        pos = 0
        reads = 0
        guard = 0
        while pos < len(self.stream):
            guard += 1
            assert guard < 100_000, "no progress"
            marker, label = self.stream[pos]
            reads += 1
            if reads in self.crash_at:  # kill -9: the uncommitted is gone, memory too
                seq = Sequencer(applied)
                pending, open_produced, pos = [], 0, committed_offset
                continue
            rewound = False
            for step in seq.step(pos, marker):
                if step is Step.APPLY:
                    pending.append(label)  # type: ignore[arg-type]
                    open_produced += 1
                elif step in (Step.OPEN, Step.COMPLETE):
                    open_produced = 0
                elif step is Step.CUT_SHORT and open_produced:
                    known.add(seq.cut.begin_offset)  # type: ignore[union-attr]
                    seq.reset(applied, known)
                    pending, open_produced, pos = [], 0, committed_offset
                    rewound = True
                    break
                elif step is Step.SKIP_CUT and pending:
                    self.target += pending
                    pending, committed_offset, applied = [], pos, seq.applied
            if rewound:
                continue
            pos += 1
            if seq.open is None and pos % self.commit_every == 0:
                self.target += pending
                pending, committed_offset, applied = [], pos, seq.applied
                seq.forget_cut_below(pos)
        if seq.open is None:
            self.target += pending
        return self.target


@pytest.mark.parametrize("form", FORMS)
@settings(max_examples=300, deadline=None)
@given(
    data=st.data(),
    commit_every=st.integers(1, 7),
    crash_at=st.sets(st.integers(1, 200), max_size=3),
)
def test_every_transaction_applied_once_in_order(form, data, commit_every, crash_at) -> None:
    txns, stream = data.draw(streams(form))
    got = KafkaModel(stream, commit_every, crash_at).run()
    want = [f"{t.txn}/{s}" for t in txns for s in range(1, t.count + 1)]
    assert got == want


@pytest.mark.parametrize("form", FORMS)
@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_resolved_never_ahead_of_what_completed(form, data) -> None:
    """When a resolved mark R is taken, every transaction with commit_ts <= R is complete."""
    txns, stream = data.draw(streams(form))
    seq = Sequencer()
    done: set[str] = set()
    for offset, (marker, _) in enumerate(stream):
        for step in seq.step(offset, marker):
            if step is Step.COMPLETE:
                done.add(seq.applied.txn)
            if step is Step.RESOLVED:
                assert all(t.txn in done for t in txns if t.ts <= marker.commit_ts)


def test_source_timestamp_comes_back_from_the_sorter_header_which_is_dropped() -> None:
    from crossfeed.services.sink.kafka.sink import source_timestamp

    hdrs = [("a", b"1"), ("crossfeed-timestamp", b"1700000000123"), ("b", None)]
    assert source_timestamp(42, hdrs) == (1_700_000_000_123, [("a", b"1"), ("b", None)])
    assert source_timestamp(42, [("a", b"1")]) == (42, [("a", b"1")])
    assert source_timestamp(42, None) == (42, None)
    # An unreadable value keeps the sorted record's own timestamp, and is still dropped.
    assert source_timestamp(42, [("crossfeed-timestamp", b"x")]) == (42, [])


# -- the target checked before resuming ---------------------------------------------------


def _pos(i: int) -> Position:
    return Position(1_000 + i, f"t{i:03d}")


def test_written_position_reads_the_headers_an_applied_record_keeps() -> None:
    hdrs = [("user", b"x"), (headers.COMMIT_TS, b"1700000000000123"), (headers.TXN, b"a.b/2/3")]
    assert written_position(hdrs) == Position(1700000000000123, "a.b")
    hdrs[2] = (headers.TXN, b"a/b/2/3")  # no '/' in a txn id: not a record this sink wrote
    assert written_position(hdrs) is None
    assert written_position([("user", b"x")]) is None
    assert written_position(None) is None
    assert written_position([(headers.COMMIT_TS, b"x"), (headers.TXN, b"t/1/1")]) is None
    marker = [(headers.TYPE, b"begin"), (headers.COMMIT_TS, b"1"), (headers.TXN, b"t/0/1")]
    assert written_position(marker) is None


def test_resume_position_trusts_the_target_where_it_says_more() -> None:
    # agreeing: the applied position
    assert resume_position(_pos(5), _pos(5), [_pos(6)]) == _pos(5)
    # the target committed past the applied position: never apply those again
    assert resume_position(_pos(5), _pos(7), []) == _pos(7)
    # transactions the position covers were aborted in the target: apply them again
    assert resume_position(_pos(7), _pos(4), [_pos(5), _pos(6), _pos(7), _pos(8)]) == _pos(4)
    assert resume_position(_pos(7), None, [_pos(2)]) == NOTHING
    # the newest ones went to the dead-letter topic (no record in the target): the position
    assert resume_position(_pos(7), _pos(4), []) == _pos(7)


@given(st.integers(0, 12), st.integers(0, 12), st.integers(0, 12))
def test_resume_position_applies_each_transaction_once(
    applied_upto: int, committed_upto: int, txns: int
) -> None:
    """Transactions 0..txns-1; the target committed the first ``committed_upto`` (the
    rest aborted), the position says ``applied_upto``: from the position returned, each
    transaction ends up in the target once."""
    committed_upto, applied_upto = min(committed_upto, txns), min(applied_upto, txns)
    committed = [_pos(i) for i in range(committed_upto)]
    aborted = [_pos(i) for i in range(committed_upto, txns)]
    applied = _pos(applied_upto - 1) if applied_upto else NOTHING
    resumed = resume_position(applied, committed[-1] if committed else None, aborted)
    again = [_pos(i) for i in range(txns) if _pos(i) > resumed]
    assert not set(again) & set(committed)
    assert set(again) | set(committed) == {_pos(i) for i in range(txns)}
