"""The scheduler both CPU decode engines share: batches in order, whole where other batches
run beside them, and in parts over the workers that would otherwise sit idle."""

import pytest

from t2tcli.decode import side_by_side


def _scheduled(batches: int, workers: int, in_flight: int) -> tuple[list[int], list[int]]:
    """(the parts each batch was handed over in, the rows that came back)."""
    handed: list[int] = []

    def submit(batch: int, parts: int) -> int:
        handed.append(parts)
        return batch

    def finish(batch: int):
        yield {"batch": batch}

    rows = [r["batch"] for r in side_by_side.run(range(batches), submit, finish, in_flight, workers)]
    return handed, rows


@pytest.mark.parametrize(
    ("workers", "last"),
    [(2, [2, 1, 2, 1, 2]), (3, [3, 2, 1, 3, 2, 1]), (1, [1, 1, 1])],
)
def test_the_last_batch_is_split_over_the_workers_its_round_leaves_idle(workers, last):
    """Batches run in rounds of one a worker: the last batch shares its round with the
    batches before it that did not fill one, and takes the workers left over."""
    for count, parts in enumerate(last, start=1):
        handed, rows = _scheduled(count, workers, in_flight=workers + 1)
        assert handed == [1] * (count - 1) + [parts], count
        assert rows == list(range(count))


def test_with_one_batch_in_flight_every_batch_is_split_over_every_worker():
    handed, rows = _scheduled(4, workers=3, in_flight=1)
    assert handed == [3] * 4 and rows == [0, 1, 2, 3]


def test_no_batches_hand_nothing_over():
    assert _scheduled(0, workers=2, in_flight=3) == ([], [])
