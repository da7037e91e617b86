"""The replication checks of tests/support/verify.py cannot silently pass.

Synthetic source records and a correct synthetic mirror of them; each test breaks the
mirror in one way and shows the report catches it (and names it).
"""

from __future__ import annotations

import dataclasses

import pytest

from crossfeed.core.provenance import stamp
from tests.support.verify import Record, Report, verify_active_active, verify_mirror

pytestmark = pytest.mark.unit

A = "clusterA_id_0000000000"
B = "clusterB_id_1111111111"
TOPICS = ("orders", "payments")


def source_records(n_per_partition: int = 8, partitions: int = 3) -> list[Record]:
    out = []
    for topic in TOPICS:
        for p in range(partitions):
            offset = 0
            for i in range(n_per_partition):
                offset += 1 + (i % 3 == 2)  # gaps, like transaction markers leave
                headers: tuple[tuple[str, bytes | None], ...] = (
                    ("dup", b"1"),
                    ("n", str(i).encode()),
                    ("dup", None),
                )
                out.append(
                    Record(
                        topic=topic,
                        partition=p,
                        offset=offset,
                        key=None if i % 4 == 0 else f"k{i}".encode(),
                        value=None if i % 5 == 4 else f"{topic}-{p}-{i}".encode(),
                        headers=headers if i % 2 else (),
                        timestamp_ms=1_700_000_000_000 + i,
                    )
                )
    return out


def mirror_of(records: list[Record], source_id: str = A) -> list[Record]:
    """What a correct replicator writes: same partition, new offsets, stamped headers."""
    out = []
    next_offset: dict[tuple[str, int], int] = {}
    for r in sorted(records, key=lambda r: (r.topic, r.partition, r.offset)):
        tp = (r.topic, r.partition)
        offset = next_offset.get(tp, 100)
        next_offset[tp] = offset + 1
        headers = stamp(
            list(r.headers),
            source_cluster_id=source_id,
            source_topic=r.topic,
            partition=r.partition,
            offset=r.offset,
        )
        out.append(dataclasses.replace(r, offset=offset, headers=tuple(headers)))
    return out


def check(source: list[Record], target: list[Record], **kwargs: object) -> Report:
    return verify_mirror(source, target, source_cluster_id=A, target_cluster_id=B, **kwargs)


def test_correct_mirror_passes() -> None:
    source = source_records()
    report = check(source, mirror_of(source))
    report.assert_ok()
    assert report.expected == report.matched == report.received == len(source)


def test_accepts_read_topic_shapes() -> None:
    source = source_records()
    target = mirror_of(source)
    by_partition: dict[int, list[Record]] = {}
    for r in target:
        by_partition.setdefault(r.partition, []).append(r)
    check({"orders": {0: source}}, by_partition).assert_ok()


def test_loss_is_caught() -> None:
    source = source_records()
    target = mirror_of(source)
    lost = target.pop(5)
    report = check(source, target)
    assert not report.ok
    assert report.missing == 1
    assert f"missing: {lost.topic}/{lost.partition}/" in report.summary()
    with pytest.raises(AssertionError, match="missing=1"):
        report.assert_ok()


def test_nothing_replicated_is_caught() -> None:
    source = source_records()
    report = check(source, [])
    assert report.missing == len(source)
    assert "more problems" in report.summary()  # only the first 20 are listed
    assert len(report.problems) == 20


def test_duplication_is_caught() -> None:
    source = source_records()
    target = mirror_of(source)
    again = dataclasses.replace(target[3], offset=999)  # re-delivered after a crash
    report = check(source, [*target, again])
    assert report.duplicated == 1
    assert report.missing == 0
    assert "duplicate:" in report.summary()
    with pytest.raises(AssertionError, match="duplicated=1"):
        report.assert_ok()


def test_duplicate_without_provenance_is_caught() -> None:
    """Matching by content when crossfeed-prov is absent must not hide a second copy."""
    source = source_records()
    target = [
        dataclasses.replace(r, headers=tuple(h for h in r.headers if h[0] != "crossfeed-prov"))
        for r in mirror_of(source)
    ]
    again = dataclasses.replace(target[2], offset=999)
    report = check(source, [*target, again])
    assert report.duplicated == 1
    assert report.mismatched == len(source)  # every copy lacks crossfeed-prov


def test_reordering_is_caught() -> None:
    source = source_records()
    target = mirror_of(source)
    # Swap the contents of two copies in the same partition (offsets stay).
    i, j = 1, 4
    assert (target[i].topic, target[i].partition) == (target[j].topic, target[j].partition)
    target[i], target[j] = (
        dataclasses.replace(target[j], offset=target[i].offset),
        dataclasses.replace(target[i], offset=target[j].offset),
    )
    report = check(source, target)
    assert report.out_of_order >= 1
    assert report.missing == 0 and report.duplicated == 0
    assert "out of order" in report.summary()
    with pytest.raises(AssertionError):
        report.assert_ok()


def test_wrong_partition_is_caught() -> None:
    source = source_records()
    target = mirror_of(source)
    target[0] = dataclasses.replace(target[0], partition=target[0].partition + 1, offset=555)
    report = check(source, target)
    assert report.mismatched == 1
    assert "partition" in report.summary()


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda r: dataclasses.replace(r, key=b"other"), "key"),
        (lambda r: dataclasses.replace(r, value=b"other"), "value"),
        (lambda r: dataclasses.replace(r, timestamp_ms=r.timestamp_ms + 1), "timestamp"),
    ],
    ids=["key", "value", "timestamp"],
)
def test_content_mismatch_is_caught(change, words) -> None:
    source = source_records()
    target = mirror_of(source)
    target[7] = change(target[7])
    report = check(source, target)
    assert report.mismatched == 1, report.summary()
    assert words in report.summary()
    assert report.missing == 0 and report.unexpected == 0


def _with_user_headers(r: Record, user: list[tuple[str, bytes | None]]) -> Record:
    crossfeed = [h for h in r.headers if h[0].startswith("crossfeed-")]
    return dataclasses.replace(r, headers=tuple(user + crossfeed))


@pytest.mark.parametrize(
    "edit",
    [
        lambda hs: list(reversed(hs)),  # order
        lambda hs: hs[:-1],  # one dropped
        lambda hs: [(k, b"" if v is None else v) for k, v in hs],  # None became empty
        lambda hs: [*hs, ("extra", b"x")],  # one added
    ],
    ids=["reordered", "dropped", "none-to-empty", "added"],
)
def test_header_mismatch_is_caught(edit) -> None:
    source = source_records()
    target = mirror_of(source)
    index = next(i for i, r in enumerate(target) if r.user_headers)
    target[index] = _with_user_headers(target[index], edit(list(target[index].user_headers)))
    report = check(source, target)
    assert report.mismatched == 1, report.summary()
    assert "user headers" in report.summary()


def test_kept_crossfeed_headers_are_checked() -> None:
    source = [
        dataclasses.replace(r, headers=(*r.headers, ("crossfeed-commit-ts", b"123")))
        for r in source_records()
    ]
    target = mirror_of(source)
    check(source, target).assert_ok()
    target[0] = dataclasses.replace(
        target[0], headers=tuple(h for h in target[0].headers if h[0] != "crossfeed-commit-ts")
    )
    assert check(source, target).mismatched == 1


@pytest.mark.parametrize(
    "bad",
    [
        f"{B}/orders/0/1".encode(),  # another hop list
        f"{A},{A}/orders/0/1".encode(),
        f"{A}/orders/0/12345".encode(),  # another source record
        f"{A}/orders/0/1/elsewhere".encode(),  # another origin topic
        b"garbage",
    ],
)
def test_wrong_provenance_is_caught(bad: bytes) -> None:
    source = source_records()
    target = mirror_of(source)
    r = target[4]
    target[4] = dataclasses.replace(
        r, headers=tuple((k, bad if k == "crossfeed-prov" else v) for k, v in r.headers)
    )
    report = check(source, target)
    assert report.mismatched == 1, report.summary()
    assert "crossfeed-prov" in report.summary()
    assert report.missing == 0 and report.duplicated == 0


def test_missing_doubled_or_legacy_provenance_is_caught() -> None:
    source = source_records()
    target = mirror_of(source)
    target[0] = dataclasses.replace(
        target[0], headers=tuple(h for h in target[0].headers if h[0] != "crossfeed-prov")
    )
    target[1] = dataclasses.replace(
        target[1], headers=(*target[1].headers, *target[1].headers[-1:])
    )
    target[2] = dataclasses.replace(
        target[2], headers=(*target[2].headers, ("crossfeed-hops", A.encode()))
    )
    report = check(source, target)
    assert report.mismatched == 3
    assert "crossfeed-prov absent" in report.summary()
    assert "crossfeed-hops present on a copy" in report.summary()


def test_second_hop_provenance() -> None:
    """A record that went C -> A is copied A -> B with hops C,A."""
    c = "clusterC_id_2222222222"
    first_hop = mirror_of(source_records(), source_id=c)
    target = mirror_of(first_hop, source_id=A)
    report = check(first_hop, target)
    report.assert_ok()
    prov = dict(target[0].headers)["crossfeed-prov"]
    assert prov is not None and prov.startswith(f"{c},{A}/".encode())
    # hops_before applies to source records that carry no provenance themselves
    plain = source_records()
    wrong = mirror_of(plain, source_id=A)  # hops = A only
    assert not check(plain, wrong, hops_before=(c,)).ok


def test_a_legacy_first_hop_is_folded() -> None:
    """A record an older puller copied C -> A (four headers) is copied A -> B with one
    crossfeed-prov naming C, A and the origin topic."""
    c = "clusterC_id_2222222222"
    legacy = [
        dataclasses.replace(
            r,
            topic=f"c.{r.topic}",
            headers=(
                *r.headers,
                ("crossfeed-origin-cluster", c.encode()),
                ("crossfeed-origin-topic", r.topic.encode()),
                ("crossfeed-hops", c.encode()),
                ("crossfeed-src", f"{c}/{r.topic}/{r.partition}/{r.offset}".encode()),
            ),
        )
        for r in source_records()
    ]
    target = mirror_of(legacy, source_id=A)
    check(legacy, target).assert_ok()
    prov = dict(target[0].headers)["crossfeed-prov"]
    topic = source_records()[0].topic
    assert prov is not None and prov.startswith(f"{c},{A}/c.{topic}/".encode())
    assert prov.endswith(f"/{topic}".encode())


def test_unexpected_and_looped_records_are_caught() -> None:
    source = source_records()
    target = mirror_of(source)
    stranger = Record("orders", 0, 777, b"who", b"me", (), 1)
    report = check(source, [*target, stranger])
    assert report.unexpected == 1

    # A record that came from B must not be copied back into B.
    from_b = mirror_of(source_records(2, 1), source_id=B)
    back = mirror_of(from_b, source_id=A)
    report = check([*source, *from_b], [*target, *back])
    assert report.looped == len(back)
    assert report.expected == len(source)


def test_active_active() -> None:
    produced_a = source_records(5, 2)
    produced_b = [
        dataclasses.replace(r, value=(r.value or b"") + b"@B", offset=r.offset + 1000)
        for r in source_records(5, 2)
    ]
    on_a = [
        *produced_a,
        *(dataclasses.replace(r, offset=r.offset + 5000) for r in mirror_of(produced_b, B)),
    ]
    on_b = [
        *produced_b,
        *(dataclasses.replace(r, offset=r.offset + 5000) for r in mirror_of(produced_a, A)),
    ]
    verify_active_active(produced_a, produced_b, on_a, on_b, A, B).assert_ok()

    # a record that went A -> B -> A
    looped = mirror_of(mirror_of(produced_a[:1], A), B)[0]
    report = verify_active_active(
        produced_a, produced_b, [*on_a, dataclasses.replace(looped, offset=9999)], on_b, A, B
    )
    assert report.looped >= 1 and "loop" in report.summary()

    # a local record lost, a copy duplicated
    report = verify_active_active(produced_a, produced_b, on_a[1:], [*on_b, on_b[-1]], A, B)
    assert report.missing == 1 and report.duplicated == 1
    with pytest.raises(AssertionError, match="active-active: FAILED"):
        report.assert_ok()


def test_renamed_topics() -> None:
    source = source_records()
    target = [dataclasses.replace(r, topic=f"dc-a.{r.topic}") for r in mirror_of(source)]
    report = check(source, target)  # the target topic name is checked
    assert report.mismatched == len(source)
    assert "topic 'dc-a.orders' != 'orders'" in report.summary()
    check(source, target, rename=lambda t: f"dc-a.{t}").assert_ok()
    check(source, target, rename={t: f"dc-a.{t}" for t in TOPICS}).assert_ok()
